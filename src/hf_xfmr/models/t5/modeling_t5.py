"""T5: a pre-norm Transformer encoder-decoder with a bucketed relative position bias.

Paper: Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer" (https://arxiv.org/abs/1910.10683), sec. 2.1: RMS layer norm without bias or mean
subtraction, pre-norm residual blocks, no position embeddings but a learned scalar per head and
relative-distance bucket added to the attention scores (one table per stack, shared by its layers),
no 1/sqrt(d) score scaling (folded into the initialisation), and an output layer tied to the input
embeddings with the decoder output scaled by d_model^-0.5. T5 v1.1 uses a GEGLU feed-forward block
(Shazeer 2020) and an untied output layer. Parity reference: transformers' `T5Model`,
`T5ForConditionalGeneration`, `T5EncoderModel` and heads, through `convert_t5.py`.

Deliberate deviations from the reference (outputs unchanged):
- the relative bias is computed once per stack and added to the padding / causal mask once, giving one
  additive (B, H, T, T) attention mask that every layer passes to SDPA (the reference re-adds the mask
  in every layer); the table lives on the stack (`encoder.relative_attention_bias`), not in layer 0.
- projections use the names every hf_xfmr model uses (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `up_proj`,
  `down_proj`); a gated feed-forward block has one fused `up_proj` ([wi_0; wi_1]).
- `tie_word_embeddings=False` unties the output layer (transformers 5 keeps T5's head tied whatever the
  flag says and only drops the output scaling).
- in training mode with labels the LM loss is computed chunk by chunk without the (B, T, V) logits.
- no fp16 clamping of the residual stream (train in bf16 or fp32).
- unpadding (`config.unpad_inputs`, on by default): the encoder runs a right-padded batch on its real tokens
  only (every layer on the N real tokens, attention within each sequence with the top-left (L, L) corner of
  the relative bias, which depends on key - query only) and restores (B, S, C) once at the end, zeros at
  padding positions. The decoder keeps the padded layout; its cross-attention mask hides the encoder's
  padding, so decoder outputs, logits and losses equal the reference's at every position, and the
  cross-attention cache holds the projections of those zeros at padding. The encoder's padded path runs
  with `unpad_inputs=False`, `output_attentions=True`, under torch.compile and when a row has padding
  before a real token (left padding, or inside a row: packing would shorten the relative distances; see
  `layers.padding.encoder_padding`).

Shapes: B batch, S encoder tokens, T decoder (or stack) tokens, P cached decoder tokens, C d_model,
H heads, D d_kv, F d_ff, V vocabulary, N real (unpadded) encoder tokens, L the longest sequence.
"""

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput

from ...layers.attention import resolve_kernel, self_attention
from ...layers.dropout import Dropout
from ...layers.fused_dropout import relu_dropout
from ...layers.masks import causal_mask, ready_mask
from ...layers.mlp import GLU, get_activation
from ...layers.norms import RMSNorm
from ...layers.padding import encoder_padding
from ...layers.relative_t5 import relative_position_bias
from ..generation import cached_length, prepare_cache
from ..heads import QuestionAnsweringHead, SequenceClassificationHead, TokenClassificationHead
from ..input_checks import check_4d_mask, check_attention_mask, check_encoder_inputs, check_tensor
from ..packing import packed_sequence_starts
from ..pretrained import XfmrPreTrainedModel, collect
from ..seq2seq import (
    DecoderInputsFromInputs,
    EncoderEntry,
    EosClassifier,
    Seq2SeqAttention,
    Seq2SeqLMHead,
    SharedInputEmbeddings,
    check_encoder_batch,
    cross_attention_mask,
    refuse_packed_decoder,
    run_encoder_unless_given,
    seq2seq_model_output,
)
from .configuration_t5 import XfmrT5Config


class XfmrT5Attention(Seq2SeqAttention):
    """Multi-head attention without score scaling; self-attention (with a KV cache in the decoder) or
    cross-attention over the encoder output (its keys/values cached once per generation)."""

    def __init__(self, config, layer_idx: int, is_cross_attention: bool = False):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_cross_attention = is_cross_attention
        self.num_heads = config.num_heads
        self.head_dim = config.d_kv
        self.dropout_p = config.dropout_rate
        inner = config.num_heads * config.d_kv
        factor = config.initializer_factor
        self.q_proj = nn.Linear(config.d_model, inner, bias=False)
        self.k_proj = nn.Linear(config.d_model, inner, bias=False)
        self.v_proj = nn.Linear(config.d_model, inner, bias=False)
        self.o_proj = nn.Linear(inner, config.d_model, bias=False)
        # Mesh TensorFlow init: the missing 1/sqrt(D) score scaling is folded into q's init.
        self.q_proj.init_std = factor * (config.d_model * config.d_kv) ** -0.5
        self.k_proj.init_std = self.v_proj.init_std = factor * config.d_model**-0.5
        self.o_proj.init_std = factor * inner**-0.5

    def forward(self, hidden_states, attention_mask=None, key_value_states=None, past_key_values=None,
                output_attentions=False, varlen=None):
        """`attention_mask`: bool (True = attend) or additive float, broadcastable to (B, H, T, K).
        `key_value_states` (B, S, C): the encoder output, for cross-attention. `varlen` (a VarlenBatch):
        unpadded (N, C) encoder tokens, attention within each sequence, `attention_mask` then the (1, H, L, L)
        relative bias of the longest sequence (a shorter one uses its top-left corner), or in the one-call
        layout (`varlen.dense_mask`) the (D, H, L, L) bias with the keys past each sequence's end hidden."""
        dropout = self.dropout_p if self.training else 0.0
        kernel = self.kernel(output_attentions)  # resolved once per call, not once per sequence
        if varlen is not None:
            tokens = hidden_states.shape[0]
            q, k, v = self.unpadded_queries_keys_values(hidden_states)  # (N, H, D)

            def biased(module, query, key, value, mask, scaling=None, dropout=0.0, **kwargs):  # (b, H, L, D)
                # The bias depends on key - query only: a sequence takes its corner. In the one-call layout the
                # stack has already hidden the keys past each sequence's end in it (`mask` is folded in).
                length = query.shape[-2]
                bias = attention_mask[:, :, :length, :length]  # (1 or b, H, L, L)
                return kernel(module, query, key, value, bias, scaling=1.0, dropout=dropout)

            out, _ = self_attention(self, biased, q, k, v, varlen=varlen, dropout=dropout)  # (N, H, D)
            return self.o_proj(out.reshape(tokens, -1)), None
        batch, seq_len, _ = hidden_states.shape
        q, k, v = self.queries_keys_values(hidden_states, key_value_states, past_key_values)  # (B, H, T|K, D)
        out, weights = kernel(self, q, k, v, attention_mask, scaling=1.0, dropout=dropout)  # (B, T, H, D)
        out = out.reshape(batch, seq_len, -1)  # (B, T, H, D) -> (B, T, H * D)
        return self.o_proj(out), weights

    def kernel(self, output_attentions=False):
        """The kernel of softmax(q k^T + mask) v, called with scaling=1.0 (T5 does not scale its scores):
        (b, H, T, D) -> (out (b, T, H, D), weights or None)."""
        # The stack's masks are finite (finfo.min, never -inf) and every query sees a key (its own position, or a
        # real encoder token), so torch's sdpa kernel takes them as they are, as the reference does. CPU training:
        # torch has no fused kernel with dropout; ours keeps two (B, H, T, K) tensors, not three.
        return resolve_kernel(self.config._attn_implementation, output_attentions, fused_cpu_dropout_from=0,
                              finite_masks=True)


class XfmrT5MLP(nn.Module):
    """(..., C) -> (..., C): down_proj(dropout(act(up_proj(x)))) (T5 v1.0's ReLU block)."""

    def __init__(self, config):
        super().__init__()
        factor = config.initializer_factor
        self.up_proj = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.act = get_activation(config.dense_act_fn)
        self.fuse_relu_dropout = config.dense_act_fn == "relu"
        self.dropout = Dropout(config.dropout_rate)
        self.down_proj = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.up_proj.init_std = factor * config.d_model**-0.5
        self.down_proj.init_std = factor * config.d_ff**-0.5

    def forward(self, x):
        hidden = self.up_proj(x)  # (..., F)
        if self.fuse_relu_dropout and self.training and x.device.type == "cpu":
            hidden = relu_dropout(hidden, self.dropout.p)  # keeps only its output for backward
        else:
            hidden = self.dropout(self.act(hidden))
        return self.down_proj(hidden)


def build_mlp(config) -> nn.Module:
    """T5 v1.0's block, or a gated one (v1.1's GEGLU: down(dropout(gelu(x W0) * x W1)), fused up_proj)."""
    if not config.is_gated_act:
        return XfmrT5MLP(config)
    mlp = GLU(config.d_model, config.d_ff, config.dense_act_fn, bias=False, dropout=config.dropout_rate)
    mlp.up_proj.init_std = config.initializer_factor * config.d_model**-0.5
    mlp.down_proj.init_std = config.initializer_factor * config.d_ff**-0.5
    return mlp


class XfmrT5Layer(GradientCheckpointingLayer):
    """Pre-norm block: x += Attn(norm(x)); [decoder: x += CrossAttn(norm(x), encoder)]; x += MLP(norm(x))."""

    def __init__(self, config, layer_idx: int, is_decoder: bool):
        super().__init__()
        eps = config.layer_norm_epsilon
        self.attn_norm = RMSNorm(config.d_model, eps=eps)
        self.attn = XfmrT5Attention(config, layer_idx)
        if is_decoder:
            self.cross_attn_norm = RMSNorm(config.d_model, eps=eps)
            self.cross_attn = XfmrT5Attention(config, layer_idx, is_cross_attention=True)
        self.mlp_norm = RMSNorm(config.d_model, eps=eps)
        self.mlp = build_mlp(config)
        self.dropout = Dropout(config.dropout_rate)

    def forward(self, hidden_states, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                past_key_values=None, output_attentions=False, varlen=None):
        attn_out, self_weights = self.attn(self.attn_norm(hidden_states), attention_mask,
                                           past_key_values=past_key_values, output_attentions=output_attentions,
                                           varlen=varlen)
        hidden_states = hidden_states + self.dropout(attn_out)
        cross_weights = None
        if encoder_hidden_states is not None:
            cross_out, cross_weights = self.cross_attn(
                self.cross_attn_norm(hidden_states), encoder_attention_mask, key_value_states=encoder_hidden_states,
                past_key_values=past_key_values, output_attentions=output_attentions,
            )
            hidden_states = hidden_states + self.dropout(cross_out)
        hidden_states = hidden_states + self.dropout(self.mlp(self.mlp_norm(hidden_states)))
        return hidden_states, self_weights, cross_weights


class XfmrT5Stack(nn.Module):
    """The encoder (bidirectional) or decoder (causal, cross-attending) stack over embedded tokens.

    The relative position bias is computed here once and folded, with the padding (and causal) mask,
    into a single additive mask shared by every layer. An unpadded encoder batch shares the bias of its
    longest sequence instead: each sequence's attention reads its top-left corner (in the one-call layout,
    off the CPU, the bias per sequence with the keys past its end hidden, also built once).
    """

    def __init__(self, config, is_decoder: bool):
        super().__init__()
        self.config = config
        self.is_decoder = is_decoder
        self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets, config.num_heads)
        self.relative_attention_bias.init_std = config.initializer_factor * config.d_model**-0.5
        num_layers = config.num_decoder_layers if is_decoder else config.num_layers
        self.layers = nn.ModuleList(XfmrT5Layer(config, i, is_decoder) for i in range(num_layers))
        self.norm = RMSNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = Dropout(config.dropout_rate)

    def self_attention_mask(self, attention_mask, seq_len: int, past_length: int, dtype):
        """Additive (1 or B, H, T, P + T) mask: relative bias, finfo.min where a key is hidden.

        `attention_mask`: (B, P + T) 0/1 (the decoder adds the causal part), or a ready-made (B, 1, T, P + T)
        mask used as given (bool: True = attend, or an additive float mask added to the bias)."""
        total = past_length + seq_len
        bias = relative_position_bias(
            self.relative_attention_bias.weight, seq_len, total, bidirectional=not self.is_decoder,
            max_distance=self.config.relative_attention_max_distance, past_length=past_length,
        ).to(dtype)  # (1, H, T, P + T)
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = ready_mask(attention_mask)
            if attention_mask.dtype != torch.bool:
                return (bias + attention_mask.to(dtype)).clamp(min=torch.finfo(dtype).min)  # (B, H, T, P + T)
            return bias.masked_fill(~attention_mask, torch.finfo(dtype).min)
        visible = None
        if self.is_decoder and seq_len > 1:
            visible = causal_mask(seq_len, total, device=bias.device)[None, None]  # (1, 1, T, P + T)
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise ValueError(f"T5 takes a 2-D (batch, seq_len) 0/1 attention mask or a 4-D (batch, 1, "
                                 f"seq_len, seq_len) one, got shape {tuple(attention_mask.shape)}.")
            padding = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, P + T)
            visible = padding if visible is None else visible & padding
        if visible is None:
            return bias
        return bias.masked_fill(~visible, torch.finfo(dtype).min)

    def forward(self, inputs_embeds, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None,
                past_key_values=None, output_attentions=False, output_hidden_states=False, starts=None):
        """inputs_embeds (B, T, C); attention_mask (B, P + T) 0/1 or a ready-made (B, 1, T, P + T) mask;
        encoder_attention_mask (B, S) 0/1 or the encoder's (B, 1, S, S) mask; `starts` (B, T) bool, where
        packed sequences begin (the encoder: each then attends to itself only)."""
        batch, seq_len, _ = inputs_embeds.shape
        past_length = cached_length(past_key_values.self_attention_cache) if past_key_values is not None else 0
        if attention_mask is not None and attention_mask.dim() == 2 and \
                tuple(attention_mask.shape) != (batch, past_length + seq_len):
            cached = f" ({past_length} cached + {seq_len} new)" if past_length else ""
            raise ValueError(f"The attention mask has shape {tuple(attention_mask.shape)} but must be "
                             f"({batch}, {past_length + seq_len}){cached}: one entry per token.")
        if attention_mask is not None and attention_mask.dim() == 4:
            check_4d_mask(attention_mask, batch, seq_len, past_length + seq_len)
        # One decision per forward (one host read, none when compiling): the encoder runs a right-padded batch on
        # its real tokens only; otherwise the padded layout with a mask, or without one when nothing is hidden.
        varlen = None
        two_d = attention_mask is not None and attention_mask.dim() == 2
        if starts is not None or (two_d and not torch.compiler.is_compiling()):
            unpad = not self.is_decoder and self.config.unpad_inputs and not output_attentions
            varlen, padded = encoder_padding(attention_mask, unpad=unpad, prefix_only=True,  # relative positions
                                             starts=starts)
            if varlen is None and padded is None:
                attention_mask = None  # nothing to hide: the bias stays (1, H, T, P + T), shared by the batch
            elif padded is not None and starts is not None:
                attention_mask = padded  # packed sequences: the block-diagonal (B, 1, T, T) mask
        if varlen is not None:  # the bias of the longest sequence, (1, H, L, L); each sequence takes its corner
            mask = self.self_attention_mask(None, varlen.max_seqlen, 0, inputs_embeds.dtype)
            if varlen.dense_mask is not None:  # one masked call per layer: the keys past each end hidden once here
                mask = mask.masked_fill(~varlen.dense_mask, torch.finfo(mask.dtype).min)  # (D, H, L, L)
            inputs_embeds = varlen.unpad(inputs_embeds)  # (N, C)
        else:
            mask = self.self_attention_mask(attention_mask, seq_len, past_length, inputs_embeds.dtype)
        cross_mask = cross_attention_mask(encoder_hidden_states, encoder_attention_mask)

        hidden_states = self.dropout(inputs_embeds)
        all_hidden = (hidden_states,) if output_hidden_states else None
        all_self, all_cross = ((), ()) if output_attentions else (None, None)
        for layer in self.layers:
            hidden_states, self_weights, cross_weights = layer(
                hidden_states, mask, encoder_hidden_states, cross_mask, past_key_values=past_key_values,
                output_attentions=output_attentions, varlen=varlen,
            )
            all_hidden = collect(all_hidden, hidden_states)
            all_self, all_cross = collect(all_self, self_weights), collect(all_cross, cross_weights)
        hidden_states = self.dropout(self.norm(hidden_states))
        if output_hidden_states:  # the last entry is the final (normalised) output
            all_hidden = all_hidden[:-1] + (hidden_states,)
        if varlen is not None:  # back to (B, S, C), zeros at padding
            hidden_states, all_hidden = varlen.pad_outputs(hidden_states, all_hidden)
        return hidden_states, all_hidden, all_self, all_cross


class XfmrT5PreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrT5Config
    _no_split_modules = ["XfmrT5Layer"]
    _skip_keys_device_placement = ["past_key_values", "cache"]
    _supports_flash_attn = False  # the relative bias is an additive mask

    def _init_weights(self, module):
        """T5's Mesh TensorFlow init: N(0, std) with the std each module was tagged with (`init_std`),
        embeddings and untied output layers N(0, factor), norms to one."""
        from transformers import initialization as init

        factor = self.config.initializer_factor
        if isinstance(module, (nn.Linear, nn.Embedding)):
            default = factor if isinstance(module, nn.Embedding) else factor * self.config.d_model**-0.5
            init.normal_(module.weight, mean=0.0, std=getattr(module, "init_std", default))
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, RMSNorm):
            init.ones_(module.weight)


def _embed(shared: nn.Embedding, input_ids, inputs_embeds, vocab_size: int, what: str):
    """(B, T) ids -> (B, T, C) embeddings (or the given embeddings), after the usual input checks."""
    check_encoder_inputs(input_ids, inputs_embeds, None, None, None, vocab_size=vocab_size, type_vocab_size=None,
                         max_positions=None, ids_name=what)
    return shared(input_ids) if inputs_embeds is None else inputs_embeds


def _check_mask(name, mask, embeds, values=True):
    """A 2-D padding mask: one 0/1 entry per token of `embeds` (B, T, C); `values=False` checks the shape
    alone (a mask whose values the encoder has just checked)."""
    check_tensor(name, mask)
    if mask is not None and mask.dim() == 2 and tuple(mask.shape) != tuple(embeds.shape[:2]):
        raise ValueError(f"`{name}` has shape {tuple(mask.shape)} but the inputs have shape "
                         f"{tuple(embeds.shape[:2])}; it must have one entry per token.")
    if values:
        check_attention_mask(name, mask)


class XfmrT5EncoderModel(SharedInputEmbeddings, XfmrT5PreTrainedModel):
    """The encoder alone (`T5EncoderModel`): embeddings and the bidirectional stack."""

    def __init__(self, config):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = XfmrT5Stack(config, is_decoder=False)
        self.post_init()

    def get_encoder(self, modality=None):
        return EncoderEntry(self.run_encoder)

    def run_encoder(self, input_ids=None, attention_mask=None, inputs_embeds=None, output_attentions=None,
                    output_hidden_states=None, position_ids=None, **packed):
        """The encoder over `input_ids` (B, S) with a (B, S) 0/1 or ready-made (B, 1, S, S) mask. Packed
        sequences (`models.packing`) attend to themselves only; `position_ids` only mark where they restart
        (T5's positions are relative)."""
        config = self.config
        output_attentions, output_hidden_states, _ = self.output_flags(output_attentions, output_hidden_states, None)
        embeds = _embed(self.shared, input_ids, inputs_embeds, config.vocab_size, "input_ids")  # (B, S, C)
        check_encoder_inputs(None, embeds, attention_mask, None, position_ids, vocab_size=config.vocab_size,
                             type_vocab_size=None, max_positions=None)  # the mask (2-D or 4-D), the position markers
        starts = packed_sequence_starts(self, *embeds.shape[:2], attention_mask, position_ids, packed=packed)
        hidden, all_hidden, all_attn, _ = self.encoder(embeds, attention_mask, output_attentions=output_attentions,
                                                       output_hidden_states=output_hidden_states, starts=starts)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=all_hidden, attentions=all_attn)

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, position_ids=None, **packed):
        out = self.run_encoder(input_ids, attention_mask, inputs_embeds, output_attentions, output_hidden_states,
                               position_ids, **packed)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return out if return_dict else out.to_tuple()


class XfmrT5Model(XfmrT5EncoderModel):
    """Encoder and decoder sharing one embedding matrix (`T5Model`); returns the decoder output."""

    def __init__(self, config):
        XfmrT5PreTrainedModel.__init__(self, config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = XfmrT5Stack(config, is_decoder=False)
        self.decoder = XfmrT5Stack(config, is_decoder=True)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                encoder_outputs=None, past_key_values=None, inputs_embeds=None, decoder_inputs_embeds=None,
                use_cache=None, output_attentions=None, output_hidden_states=None, return_dict=None, cache=None,
                position_ids=None, **packed):
        """Decoder inputs are required here (the task heads derive them from labels or input_ids).
        `past_key_values` (or `cache`): an `EncoderDecoderCache` from an earlier decoding step. Packed
        sequences are refused (`refuse_packed_decoder`): the encoder model takes them."""
        config = self.config
        refuse_packed_decoder(self, input_ids, inputs_embeds, attention_mask, position_ids, packed)
        past_key_values = cache if cache is not None else past_key_values
        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)
        encoder_ran = encoder_outputs is None
        encoder_outputs = run_encoder_unless_given(self, encoder_outputs, input_ids, attention_mask, inputs_embeds,
                                                   output_attentions, output_hidden_states)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "XfmrT5Model needs `decoder_input_ids` (or `decoder_inputs_embeds`): pass the targets shifted right "
                "(hf_xfmr.models.seq2seq.shift_tokens_right), or use XfmrT5ForConditionalGeneration with `labels`."
            )
        if use_cache is None:
            use_cache = config.use_cache and not self.training
        past_key_values = prepare_cache(past_key_values, use_cache, config, cross_attention=True)
        embeds = _embed(self.shared, decoder_input_ids, decoder_inputs_embeds, config.vocab_size,
                        "decoder_input_ids")  # (B, T, C)
        encoder_hidden = encoder_outputs.last_hidden_state  # (B, S, C)
        check_encoder_batch(encoder_hidden, embeds)
        _check_mask("attention_mask", attention_mask, encoder_hidden, values=not encoder_ran)
        check_attention_mask("decoder_attention_mask", decoder_attention_mask)  # (its shape: in the stack)
        decoder_outputs = self.decoder(
            embeds, decoder_attention_mask, encoder_hidden, attention_mask, past_key_values=past_key_values,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
        )
        return seq2seq_model_output(decoder_outputs, encoder_outputs, past_key_values if use_cache else None,
                                    return_dict)


# -- heads (shared machinery in models/heads.py and models/seq2seq.py) --------------------------------
class XfmrT5ForConditionalGeneration(Seq2SeqLMHead, XfmrT5PreTrainedModel):
    """Text-to-text LM: decoder output (scaled by d_model^-0.5 when tied) -> `lm_head`; `generate()`."""

    base_model_class = XfmrT5Model

    def _init_weights(self, module):
        if module is getattr(self, "lm_head", None):
            module.init_std = self.config.initializer_factor
        super()._init_weights(module)

    def decoder_output_scale(self):
        return self.config.d_model**-0.5 if self.config.tie_word_embeddings else None

    def generation_position_limit(self):
        return None  # relative positions: no table to run out of


class XfmrT5ForSequenceClassification(DecoderInputsFromInputs, SequenceClassificationHead, XfmrT5PreTrainedModel):
    """Encoder-decoder over the input; the decoder state at each row's last <eos> -> `classifier`."""

    base_model_class = XfmrT5Model
    pooling = "eos"

    def build_classifier(self, config, num_outputs):
        return EosClassifier(config.d_model, num_outputs, config.classifier_dropout)


class XfmrT5ForTokenClassification(TokenClassificationHead, XfmrT5PreTrainedModel):
    """The encoder alone, then dropout + a linear `classifier` per token."""

    base_model_class = XfmrT5EncoderModel

    def _init_weights(self, module):
        if module is getattr(self, "classifier", None):
            module.init_std = self.config.initializer_factor
        super()._init_weights(module)


class XfmrT5ForQuestionAnswering(DecoderInputsFromInputs, QuestionAnsweringHead, XfmrT5PreTrainedModel):
    """Encoder-decoder over the input; `qa_outputs` scores each decoder position as answer start / end."""

    base_model_class = XfmrT5Model
    mask_padding = False  # it reads the decoder, which is never unpadded: the reference's logits and loss


__all__ = [
    "XfmrT5PreTrainedModel",
    "XfmrT5Model",
    "XfmrT5EncoderModel",
    "XfmrT5ForConditionalGeneration",
    "XfmrT5ForSequenceClassification",
    "XfmrT5ForTokenClassification",
    "XfmrT5ForQuestionAnswering",
]
