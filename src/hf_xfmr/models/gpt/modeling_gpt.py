"""GPT: a pre-LayerNorm causal Transformer decoder with learned absolute positions (GPT-2 layout).

Papers: Radford et al., 2018, "Improving Language Understanding by Generative Pre-Training"; Radford
et al., 2019, "Language Models are Unsupervised Multitask Learners" (pre-norm blocks, a final
LayerNorm, residual projections initialised with std / sqrt(2 * n_layer)). Parity reference:
transformers' `GPT2Model`, `GPT2LMHeadModel` and heads, through `convert_gpt.py`.

Deliberate deviations from the reference (outputs are unchanged where the reference is right):
- projections are `nn.Linear` with the names every hf_xfmr model uses (`q_proj`, `k_proj`, `v_proj`,
  `o_proj`, `up_proj`, `down_proj`): GPT-2 stores a fused, transposed Conv1D `c_attn`, which the
  converter splits and transposes, so one LoRA target list fits all architectures.
- without `position_ids`, positions are counted over the real tokens of a 2-D `attention_mask`, so a
  left-padded row gets the positions it has alone (the reference numbers it from the first pad).
  Unpadded and right-padded batches get the reference's positions.
- packed documents (`models.packing`: `position_ids` that restart inside a row, transformers' `cu_seq_lens_*` /
  `seq_idx`, hf_xfmr's `cu_seqlens` / `doc_ids`) attend causally within their document only, unpadded (one
  varlen sequence each) or with a block-diagonal causal mask (the reference attends across them on SDPA and
  eager; `config.packed_position_ids=False` restores that for restarting positions). A 4-D `attention_mask`
  (bool, True = attend, additive float, or integer 0/1) is used as given.
- in training mode with labels the LM loss is computed chunk by chunk without the (B, T, V) logits
  (`config.chunked_lm_loss`; `logits` is then None); the sequence classifier is named `classifier`
  (transformers: `score`) so PEFT's default `modules_to_save` trains it; it reads the last token the
  attention mask marks as real (the reference: the last token that is not the pad id).
- `use_cache` defaults to the config's value in eval mode and to False in training.
- unpadding (`config.unpad_inputs`, on by default): a right-padded batch (every row starting with a real
  token, a 2-D mask or none, no cache given by the caller) runs on its real tokens only:
  the embeddings' inputs are gathered once, every layer runs on the N real tokens with causal attention
  within each sequence, and the (B, T, C) shape is restored after the final LayerNorm. Positions are
  the reference's (counted over the real tokens). Outputs at real positions are unchanged; at padding
  positions the hidden states are zeros, so the LM logits there are zeros (`lm_head` has no bias) and the
  token classifier's are its bias; question answering masks padding (see `heads.py`). A cache built for
  the call (`use_cache` in eval mode) holds the reference's keys/values at real positions and zeros at
  padding. The padded path runs with `unpad_inputs=False`, `output_attentions=True`, a cache passed in
  (generation), left padding, a 4-D mask and under torch.compile.

Shapes: B batch, T new tokens, P cached tokens, C hidden size, H heads, D head size (C / H),
V vocabulary size, N real (unpadded) tokens.
"""

import functools
import math

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast

from ...layers.attention import FUSED_DROPOUT_MIN_SCORES, resolve_kernel, self_attention
from ...layers.dropout import Dropout
from ...layers.init import normal_init_
from ...layers.masks import decoder_attention_mask, document_ids_from_starts, positions_in_sequences
from ...layers.mlp import MLP
from ...layers.padding import encoder_padding
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
from .configuration_gpt import XfmrGPTConfig


class XfmrGPTEmbeddings(nn.Module):
    """Token + learned absolute position embeddings, then dropout (no LayerNorm: the blocks are pre-norm)."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.n_embd)
        self.position_embeddings = nn.Embedding(config.n_positions, config.n_embd)
        self.dropout = Dropout(config.embd_pdrop)

    def forward(self, input_ids, position_ids, inputs_embeds=None, token_type_ids=None):
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, C)
        embeddings = inputs_embeds + self.position_embeddings(position_ids)
        if token_type_ids is not None:
            # GPT-2 has no segment table: token types are looked up in the word embeddings (as transformers does).
            embeddings = embeddings + self.word_embeddings(token_type_ids)
        return self.dropout(embeddings)


class XfmrGPTAttention(nn.Module):
    """Causal multi-head self-attention with a key/value cache; the kernel is picked by `config._attn_implementation`."""

    is_causal = True  # read by transformers' kernels when no mask is given

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.scaling = self.head_dim**-0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            self.scaling /= float(layer_idx + 1)
        self.upcast = config.reorder_and_upcast_attn
        self.dropout_p = config.attn_pdrop
        self.q_proj = nn.Linear(config.n_embd, config.n_embd)
        self.k_proj = nn.Linear(config.n_embd, config.n_embd)
        self.v_proj = nn.Linear(config.n_embd, config.n_embd)
        self.o_proj = nn.Linear(config.n_embd, config.n_embd)
        self.o_proj.residual_projection = True  # GPT-2's scaled init (see _init_weights)

    def forward(self, hidden_states, attention_mask=None, is_causal=False, past_key_values=None,
                output_attentions=False, varlen=None):
        """Padded (B, T, C) with a mask (or `is_causal`), or unpadded (N, C) with `varlen` (a VarlenBatch):
        causal attention within each sequence."""
        tokens = hidden_states.shape[:-1]  # (B, T) or (N,)
        heads = (*tokens, self.num_heads, self.head_dim)
        q, k, v = (proj(hidden_states).view(heads) for proj in (self.q_proj, self.k_proj, self.v_proj))  # (..., H, D)
        if varlen is None:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
            if past_key_values is not None:
                k, v = past_key_values.update(k, v, self.layer_idx)  # (B, H, P + T, D) each
        elif past_key_values is not None:  # a cache built for this call keeps the padded layout, zeros at padding
            past_key_values.update(*(varlen.pad(t).transpose(1, 2) for t in (k, v)), self.layer_idx)  # (B, H, T, D)

        dtype = q.dtype
        if self.upcast:  # reorder_and_upcast_attn: the whole softmax(q k^T) v in float32
            q, k, v = q.float(), k.float(), v.float()
        attention = resolve_kernel(self.config._attn_implementation, output_attentions,
                                   fused_cpu_dropout_from=FUSED_DROPOUT_MIN_SCORES)
        dropout = self.dropout_p if self.training else 0.0
        if varlen is None:
            out, weights = attention(self, q, k, v, attention_mask, scaling=self.scaling, dropout=dropout,
                                     is_causal=is_causal)  # (B, T, H, D)
        else:
            out, weights = self_attention(self, functools.partial(attention, is_causal=True), q, k, v, varlen=varlen,
                                          scaling=self.scaling, dropout=dropout)  # (N, H, D)
        out = out.to(dtype).reshape(*tokens, -1)  # (..., H, D) -> (..., C)
        return self.o_proj(out), weights


class XfmrGPTLayer(GradientCheckpointingLayer):
    """Pre-LN block: x = x + Attn(LN(x)); x = x + MLP(LN(x))."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = XfmrGPTAttention(config, layer_idx)
        self.attn_dropout = Dropout(config.resid_pdrop)
        self.mlp_norm = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config.n_embd, config.intermediate_size, config.activation_function,
                       dropout=config.resid_pdrop)
        self.mlp.down_proj.residual_projection = True

    def forward(self, hidden_states, attention_mask=None, is_causal=False, past_key_values=None,
                output_attentions=False, varlen=None):
        attn_out, weights = self.attn(self.attn_norm(hidden_states), attention_mask, is_causal, past_key_values,
                                      output_attentions, varlen)
        hidden_states = hidden_states + self.attn_dropout(attn_out)
        hidden_states = hidden_states + self.mlp(self.mlp_norm(hidden_states))
        return hidden_states, weights


class XfmrGPTPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrGPTConfig
    _no_split_modules = ["XfmrGPTLayer"]
    _skip_keys_device_placement = ["past_key_values"]

    def _init_weights(self, module):
        std = self.config.initializer_range
        if getattr(module, "residual_projection", False):
            # GPT-2: each block adds two residual branches; scale their output projections by 1/sqrt(2 n_layer)
            std = std / math.sqrt(2 * self.config.n_layer)
        normal_init_(module, std)


class XfmrGPTModel(XfmrGPTPreTrainedModel):
    """The decoder: embeddings, `n_layer` pre-LN blocks and a final LayerNorm."""

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = XfmrGPTEmbeddings(config)
        self.layers = nn.ModuleList(XfmrGPTLayer(config, i) for i in range(config.n_layer))
        self.norm = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
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
        batch, seq_len = check_encoder_inputs(
            input_ids, inputs_embeds, None, token_type_ids, None, vocab_size=config.vocab_size,
            type_vocab_size=config.vocab_size, max_positions=None,
        )
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
            if past_length + seq_len > config.n_positions:
                cached = f" after {past_length} cached tokens" if past_length else ""
                raise ValueError(
                    f"{seq_len} tokens{cached} exceed the {config.n_positions} positions this model has "
                    f"(`n_positions`); truncate the inputs (tokenizer(..., truncation=True, "
                    f"max_length={config.n_positions})) or, when generating, lower `max_new_tokens`."
                )
            position_ids = decoder_position_ids(attention_mask, past_length, seq_len, device)  # (1 or B, T)
        else:
            check_encoder_inputs(input_ids, inputs_embeds, None, None, position_ids, vocab_size=config.vocab_size,
                                 type_vocab_size=None, max_positions=None, position_table_size=config.n_positions)

        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)

        # One decision per forward (one host read, none when compiling): the real tokens only (one causal
        # sequence per row, or per packed sequence), or the padded layout with a mask, or without one (a 2-D mask
        # of all ones is dropped so SDPA takes its causal kernel).
        varlen = None
        unpad = config.unpad_inputs and not output_attentions and not cache_given
        if (keep is not None or (starts is not None and unpad)) and not torch.compiler.is_compiling():
            # (packed sequences kept padded take `documents` below, not encoder_padding's bidirectional mask)
            varlen, padded = encoder_padding(attention_mask, unpad=unpad, starts=starts if unpad else None)
            if varlen is None and padded is None:
                attention_mask = None
        # packed sequences on the padded layout: a block-diagonal causal mask
        documents = document_ids_from_starts(starts, keep) if starts is not None and varlen is None else None
        if varlen is not None:  # the embeddings take the real tokens as one (1, N) row, with their positions
            input_ids, position_ids, inputs_embeds, token_type_ids = varlen.unpad_inputs(
                input_ids, position_ids, inputs_embeds, token_type_ids)
        hidden_states = self.embeddings(input_ids, position_ids, inputs_embeds, token_type_ids)  # (B | 1, T | N, C)
        if varlen is not None:
            hidden_states, mask, is_causal = hidden_states.squeeze(0), None, True  # (N, C)
        else:
            mask, is_causal = decoder_attention_mask(attention_mask, seq_len, past_length + seq_len, documents,
                                                     device=device)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, weights = layer(hidden_states, mask, is_causal, past_key_values=past_key_values,
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


# -- heads (shared machinery in models/heads.py and models/causal_lm.py) -----------------------------
class XfmrGPTForCausalLM(CausalLMHead, XfmrGPTPreTrainedModel):
    """Language model: `lm_head` tied to the token embeddings; `generate()` with a key/value cache."""

    base_model_class = XfmrGPTModel
    _tied_weights_keys = {"lm_head.weight": "model.embeddings.word_embeddings.weight"}


class XfmrGPTForSequenceClassification(LastTokenClassificationHead, XfmrGPTPreTrainedModel):
    base_model_class = XfmrGPTModel


class XfmrGPTForTokenClassification(DecoderTokenClassificationHead, XfmrGPTPreTrainedModel):
    base_model_class = XfmrGPTModel


class XfmrGPTForQuestionAnswering(QuestionAnsweringHead, XfmrGPTPreTrainedModel):
    base_model_class = XfmrGPTModel


__all__ = [
    "XfmrGPTPreTrainedModel",
    "XfmrGPTModel",
    "XfmrGPTForCausalLM",
    "XfmrGPTForSequenceClassification",
    "XfmrGPTForTokenClassification",
    "XfmrGPTForQuestionAnswering",
]
