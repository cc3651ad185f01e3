"""The Llama family: a pre-RMSNorm causal decoder with rotary positions, grouped-query attention and a SwiGLU
feed-forward block, for Llama 2/3, Mistral and Qwen2 checkpoints.

Papers: Touvron et al., 2023, "LLaMA: Open and Efficient Foundation Language Models" (RMSNorm, SwiGLU, RoPE);
Ainslie et al., 2023, "GQA"; Jiang et al., 2023, "Mistral 7B" (sliding-window attention). Parity references:
transformers' `LlamaModel`, `LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM` and their heads,
through `convert_llama.py`.

Deliberate deviations from the reference (outputs are unchanged where the reference is right):
- module names are hf_xfmr's (`attn_norm`, `attn`, `mlp_norm`, `mlp`); the projections keep the names every
  model uses (`q_proj` ... `o_proj`, `gate_proj`, `up_proj`, `down_proj`) and the embedding is `embed_tokens`,
  so LoRA target lists and `modules_to_save=["embed_tokens", "lm_head"]` written for Llama work unchanged.
- without `position_ids`, positions are counted over the real tokens of a 2-D `attention_mask` (a left-padded
  row gets the positions it has alone). RoPE depends on position differences only, so outputs are the same.
- packed sequences (`models.packing`: restarting `position_ids`, transformers' `cu_seq_lens_*` / `seq_idx`,
  hf_xfmr's `cu_seqlens` / `doc_ids`) attend causally within their own sequence, on every kernel (the
  reference keeps them apart only under FlashAttention; `config.packed_position_ids=False` restores its SDPA
  and eager behaviour for restarting positions). Mistral's sliding window applies within each sequence.
- unpadding (`config.unpad_inputs`, on by default): a padded batch (a 2-D mask, no cache given by the caller)
  runs every layer on its N real tokens only, causal attention within each row, and the (B, T, C) shape is
  restored after the final norm: zeros at padding positions (LM logits there are zeros, the token
  classifier's are its bias; QA masks padding, see `heads.py`). Right padding and left padding alike (a decoder
  reads no fixed position; Llama tokenizers often pad left). A cache built for the call keeps the padded
  layout, zeros at padding. The padded path runs with `unpad_inputs=False`, `output_attentions=True`, a cache
  passed in (`generate()` passes its own), a 4-D mask, a row without any real token and under torch.compile.
- a padding query that sees no key at all (a left-padded row's pads, a window past a row's end) gets zeros on
  every kernel; the reference's eager kernel averages the masked values uniformly there (its SDPA gives zeros).
- the sliding window is applied by the mask, and the cache keeps every key (transformers trims Mistral's
  cache to the window); generation returns the same tokens.
- RoPE is applied in float32 and cast back (the reference rotates in the input dtype: identical in fp32).
- in training mode with labels the LM loss is computed chunk by chunk without the (B, T, V) logits
  (`config.chunked_lm_loss`); the classifier is named `classifier` (transformers: `score`) so PEFT's default
  `modules_to_save` trains it; sequence classification reads the last token the attention mask marks as real.
- no position limit in `generate()`: RoPE has no table to run out of (as transformers).

Reuse (Mixtral builds on this file): `XfmrLlamaLayer.build_mlp(config)` builds the feed-forward block,
`XfmrLlamaLayer.attention_class` the attention, and `XfmrLlamaModel.layer_class` the layer.

Shapes: B batch, T new tokens, P cached tokens, C hidden size, H query heads, K key/value heads, D head size,
V vocabulary size, N real (unpadded) tokens.
"""

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast

from ...layers.attention import causal_window_kernel, repeat_kv_heads, resolve_kernel, self_attention
from ...layers.masks import (
    causal_window_mask,
    decoder_attention_mask,
    document_ids_from_starts,
    positions_in_sequences,
    restrict_mask,
)
from ...layers.mlp import GatedMLP
from ...layers.norms import RMSNorm
from ...layers.padding import encoder_padding
from ...layers.rope import apply_rope, rope_cos_sin, scaled_rope_inv_freq
from ..causal_lm import CausalLMHead
from ..generation import (
    cached_length,
    check_decoder_mask,
    decoder_position_ids,
    prepare_cache,
    replayed_by_checkpointing,
)
from ..heads import (
    DecoderTokenClassificationHead,
    LastTokenClassificationHead,
    QuestionAnsweringHead,
)
from ..input_checks import check_encoder_inputs
from ..packing import packed_sequence_starts
from ..pretrained import XfmrPreTrainedModel, collect
from .configuration_llama import XfmrLlamaConfig


class XfmrLlamaRotaryEmbedding(nn.Module):
    """Integer positions -> (cos, sin), each (..., 1, D) to broadcast over the heads. The inverse frequencies
    are computed from the config at each call (D/2 numbers): no buffer to lose on meta-device loading."""

    def __init__(self, config):
        super().__init__()
        self.head_dim = config.head_dim
        self.rope_parameters = dict(config.rope_parameters)

    def forward(self, position_ids):
        inv_freq, factor = scaled_rope_inv_freq(self.head_dim, self.rope_parameters, device=position_ids.device)
        cos, sin = rope_cos_sin(position_ids, inv_freq)  # (..., D) float32
        if factor != 1.0:
            cos, sin = cos * factor, sin * factor
        return cos.unsqueeze(-2), sin.unsqueeze(-2)  # (..., 1, D)


class XfmrLlamaAttention(nn.Module):
    """Causal grouped-query self-attention with RoPE and a key/value cache; the kernel is picked by
    `config._attn_implementation`. The cache holds the K key/value heads; they are repeated to H for the kernel."""

    is_causal = True  # read by transformers' kernels when no mask is given

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        self.groups = self.num_heads // self.num_kv_heads
        self.scaling = self.head_dim**-0.5
        self.sliding_window = config.sliding_window
        qkv_bias = config.attention_bias or config.qkv_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=config.attention_bias)

    def forward(self, hidden_states, cos, sin, attention_mask=None, is_causal=False, past_key_values=None,
                output_attentions=False, varlen=None):
        """Padded (B, T, C) with a mask (or `is_causal`), or unpadded (N, C) with `varlen` (a VarlenBatch):
        causal attention within each sequence. `cos`, `sin`: (B | 1, T, 1, D) or (N, 1, D)."""
        tokens = hidden_states.shape[:-1]  # (B, T) or (N,)
        q = self.q_proj(hidden_states).view(*tokens, self.num_heads, self.head_dim)  # (..., H, D)
        k = self.k_proj(hidden_states).view(*tokens, self.num_kv_heads, self.head_dim)  # (..., K, D)
        v = self.v_proj(hidden_states).view(*tokens, self.num_kv_heads, self.head_dim)  # (..., K, D)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        attention = resolve_kernel(self.config._attn_implementation, output_attentions)
        dropout = self.config.attention_dropout if self.training else 0.0
        if varlen is not None:
            if past_key_values is not None:  # a cache built for this call keeps the padded layout, zeros at padding
                past_key_values.update(*(varlen.pad(t).transpose(1, 2) for t in (k, v)), self.layer_idx)
            k, v = (repeat_kv_heads(t, self.groups, dim=-2) for t in (k, v))  # (N, H, D)
            kernel = causal_window_kernel(attention, self.sliding_window)
            out, weights = self_attention(self, kernel, q, k, v, varlen=varlen, scaling=self.scaling,
                                          dropout=dropout)  # (N, H, D)
        else:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H | K, T, D)
            if past_key_values is not None:
                k, v = past_key_values.update(k, v, self.layer_idx)  # (B, K, P + T, D) each
            k, v = (repeat_kv_heads(t, self.groups, dim=1) for t in (k, v))  # (B, H, P + T, D)
            out, weights = attention(self, q, k, v, attention_mask, scaling=self.scaling, dropout=dropout,
                                     is_causal=is_causal)  # (B, T, H, D)
        out = out.reshape(*tokens, self.num_heads * self.head_dim)  # (..., H * D)
        return self.o_proj(out), weights


class XfmrLlamaLayer(GradientCheckpointingLayer):
    """Pre-norm block: x = x + Attn(RMSNorm(x)); x = x + MLP(RMSNorm(x))."""

    attention_class = XfmrLlamaAttention

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.attn = self.attention_class(config, layer_idx)
        self.mlp_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = self.build_mlp(config)

    def build_mlp(self, config) -> nn.Module:
        """The feed-forward block, (..., C) -> (..., C): SwiGLU here (Mixtral overrides it with its experts)."""
        return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act, bias=config.mlp_bias)

    def forward(self, hidden_states, cos, sin, attention_mask=None, is_causal=False, past_key_values=None,
                output_attentions=False, varlen=None):
        attn_out, weights = self.attn(self.attn_norm(hidden_states), cos, sin, attention_mask, is_causal,
                                      past_key_values, output_attentions, varlen)
        hidden_states = hidden_states + attn_out
        hidden_states = hidden_states + self.mlp(self.mlp_norm(hidden_states))
        return hidden_states, weights


class XfmrLlamaPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrLlamaConfig
    _no_split_modules = ["XfmrLlamaLayer"]
    _skip_keys_device_placement = ["past_key_values"]


def window_mask(mask, is_causal, window, q_len, k_len, device):
    """The padded layout's `(mask, is_causal)` with a sliding window ANDed in (`causal_window_mask`), unchanged
    when every key lies within the window of every query."""
    if window is None or k_len <= window:
        return mask, is_causal
    band = causal_window_mask(q_len, k_len, window, device=device)[None, None]  # (1, 1, T, P + T)
    return (band if mask is None else restrict_mask(mask, band)), False


class XfmrLlamaModel(XfmrLlamaPreTrainedModel):
    """The decoder: token embeddings, `num_hidden_layers` pre-norm blocks (`layer_class`) and a final RMSNorm."""

    layer_class = XfmrLlamaLayer

    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.rotary = XfmrLlamaRotaryEmbedding(config)
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **packed,
    ):
        """`attention_mask`: (B, P + T) 0/1 over cached and new tokens, or a ready (B, 1, T, P + T) mask.
        `past_key_values`: a transformers `Cache` from an earlier call (or None). `packed`: the boundaries of
        packed sequences (`models.packing`; restarting `position_ids` mark them too)."""
        config = self.config
        batch, seq_len = check_encoder_inputs(input_ids, inputs_embeds, None, None, None, vocab_size=config.vocab_size,
                                              type_vocab_size=None, max_positions=None)
        if use_cache is None:
            use_cache = config.use_cache and not self.training
        cache_given = past_key_values is not None  # generation passes its own: it keeps the padded layout
        if replayed_by_checkpointing(self.layers):  # the replay would write a cache twice: train without one
            use_cache, past_key_values = False, None
        past_key_values = prepare_cache(past_key_values, use_cache, config)
        past_length = cached_length(past_key_values)
        check_decoder_mask(attention_mask, batch, past_length, seq_len)
        device = (input_ids if input_ids is not None else inputs_embeds).device
        starts = packed_sequence_starts(self, batch, seq_len, attention_mask, position_ids, past_length, packed)
        keep = attention_mask.bool() if attention_mask is not None and attention_mask.dim() == 2 else None
        if position_ids is None and starts is not None:  # each packed sequence numbered from its start
            position_ids = positions_in_sequences(starts, keep)  # (B, T)
        elif position_ids is None:
            position_ids = decoder_position_ids(attention_mask, past_length, seq_len, device)  # (1 or B, T)
        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)

        varlen, mask, is_causal = self.layout(attention_mask, keep, starts, seq_len, past_length, device,
                                              unpad=config.unpad_inputs and not output_attentions and not cache_given)
        if varlen is not None:  # the real tokens as one (1, N) row, with their positions
            input_ids, position_ids, inputs_embeds = varlen.unpad_inputs(input_ids, position_ids, inputs_embeds)
        hidden_states = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds  # (B | 1, T | N, C)
        cos, sin = self.rotary(position_ids)  # (B | 1, T | N, 1, D) float32
        if varlen is not None:
            hidden_states, cos, sin = hidden_states.squeeze(0), cos.squeeze(0), sin.squeeze(0)  # (N, C), (N, 1, D)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, weights = layer(hidden_states, cos, sin, mask, is_causal, past_key_values=past_key_values,
                                           output_attentions=output_attentions, varlen=varlen)
            all_hidden_states = collect(all_hidden_states, hidden_states)
            all_attentions = collect(all_attentions, weights)
        hidden_states = self.norm(hidden_states)
        if output_hidden_states:  # the last entry is the final (normalised) output, as in transformers
            all_hidden_states = all_hidden_states[:-1] + (hidden_states,)
        if varlen is not None:  # back to (B, T, C), zeros at padding
            hidden_states, all_hidden_states = varlen.pad_outputs(hidden_states, all_hidden_states)

        output = BaseModelOutputWithPast(
            last_hidden_state=hidden_states, cache=past_key_values if use_cache else None,
            hidden_states=all_hidden_states, attentions=all_attentions,
        )
        return output if return_dict else output.to_tuple()

    def layout(self, attention_mask, keep, starts, seq_len, past_length, device, unpad):
        """One decision per forward (one host read, none when compiling): `(varlen, mask, is_causal)`. The real
        tokens only (one causal sequence per row, or per packed sequence: `varlen`), or the padded layout with a
        mask, or without one (a 2-D mask of all ones is dropped so SDPA takes its causal kernel)."""
        varlen = None
        if (keep is not None or (starts is not None and unpad)) and not torch.compiler.is_compiling():
            # (packed sequences kept padded take `documents` below, not encoder_padding's bidirectional mask)
            varlen, padded = encoder_padding(attention_mask, unpad=unpad, starts=starts if unpad else None,
                                             any_side=True)
            if varlen is None and padded is None:
                attention_mask = None
        if varlen is not None:
            return varlen, None, True
        # packed sequences on the padded layout: a block-diagonal causal mask
        documents = document_ids_from_starts(starts, keep) if starts is not None else None
        mask, is_causal = decoder_attention_mask(attention_mask, seq_len, past_length + seq_len, documents,
                                                 device=device)
        mask, is_causal = window_mask(mask, is_causal, self.config.sliding_window, seq_len, past_length + seq_len,
                                      device)
        return None, mask, is_causal


# -- heads (shared machinery in models/heads.py and models/causal_lm.py) -----------------------------
class XfmrLlamaForCausalLM(CausalLMHead, XfmrLlamaPreTrainedModel):
    """Language model: `lm_head` (tied to `embed_tokens` when `tie_word_embeddings`); `generate()` with a cache."""

    base_model_class = XfmrLlamaModel
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def generation_position_limit(self):
        return None  # rotary positions: no table to run out of


class XfmrLlamaForSequenceClassification(LastTokenClassificationHead, XfmrLlamaPreTrainedModel):
    base_model_class = XfmrLlamaModel


class XfmrLlamaForTokenClassification(DecoderTokenClassificationHead, XfmrLlamaPreTrainedModel):
    base_model_class = XfmrLlamaModel


class XfmrLlamaForQuestionAnswering(QuestionAnsweringHead, XfmrLlamaPreTrainedModel):
    base_model_class = XfmrLlamaModel


__all__ = [
    "XfmrLlamaPreTrainedModel",
    "XfmrLlamaModel",
    "XfmrLlamaForCausalLM",
    "XfmrLlamaForSequenceClassification",
    "XfmrLlamaForTokenClassification",
    "XfmrLlamaForQuestionAnswering",
]
