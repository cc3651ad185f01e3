"""BART: a post-norm Transformer encoder-decoder with learned positions, pretrained as a denoiser.

Paper: Lewis et al., 2020, "BART: Denoising Sequence-to-Sequence Pre-training for Natural Language
Generation, Translation, and Comprehension" (https://arxiv.org/abs/1910.13461), sec. 2.1: the original
Transformer (post-norm residual blocks, scaled dot-product attention) with GELU, learned absolute
positions (fairseq reserves the first two rows of each table: BART's offset of 2), a LayerNorm on the
embeddings of each stack, one embedding matrix shared by encoder, decoder and output layer, and a
(non-trained) `final_logits_bias` added to the logits. Parity reference: transformers' `BartModel`,
`BartForConditionalGeneration`, `BartForSequenceClassification`, `BartForQuestionAnswering` and
`BartForCausalLM`, through `convert_bart.py`.

Deliberate deviations from the reference (outputs unchanged):
- projections use the names every hf_xfmr model uses (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `up_proj`,
  `down_proj`); per layer `attn`, `cross_attn`, `mlp` and their norms `attn_norm`, `cross_attn_norm`,
  `mlp_norm`; each stack's `embed_norm` is the reference's `layernorm_embedding`.
- masks stay boolean and SDPA gets `is_causal` (no mask tensor) for an unpadded decoder; with attention
  dropout on CPU in fp32 the fused-dropout kernel (`layers.fused_dropout`) keeps one attention tensor.
- in training mode with labels the LM loss is computed chunk by chunk without the (B, T, V) logits, the
  bias included (`config.chunked_lm_loss`; `logits` is then None).
- the classification / QA heads return `SequenceClassifierOutput` / `QuestionAnsweringModelOutput`
  (decoder hidden states and attentions), not the reference's Seq2Seq* variants; the classifier is named
  `classifier` (reference: `classification_head`).
- `XfmrBartForCausalLM` numbers the positions of a left-padded row from its first real token (the
  reference from the first pad); unpadded and right-padded rows get the reference's positions. As in
  the reference its labels are NOT shifted: `labels[t]` is the target of position t.
- no fp16 clamping of the residual stream (train in bf16 or fp32).
- unpadding (`config.unpad_inputs`, on by default): the encoder runs a right-padded batch on its real tokens
  only (token and position embeddings gathered once, every layer on the N real tokens, attention within each
  sequence) and restores (B, S, C) once at the end, zeros at padding positions. The decoders keep the padded
  layout; the cross-attention mask hides the encoder's padding, so decoder outputs, logits and losses equal
  the reference's at every position, and the cross-attention cache holds the projections of those zeros at
  padding. The encoder's padded path runs with `unpad_inputs=False`, `output_attentions=True`, under
  torch.compile and when a row starts with padding (see `layers.padding.encoder_padding`).

Shapes: B batch, S encoder tokens, T decoder (or stack) tokens, P cached decoder tokens, C d_model,
H heads, D head size (C / H), F ffn dim, V vocabulary, N real (unpadded) encoder tokens.
"""

import copy

import torch
from torch import nn
from transformers.cache_utils import EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput

from ...layers.attention import resolve_kernel, self_attention
from ...layers.dropout import Dropout
from ...layers.init import normal_init_
from ...layers.masks import decoder_attention_mask, document_ids_from_starts, positions_in_sequences, ready_mask
from ...layers.mlp import get_activation
from ...layers.padding import encoder_padding
from ..causal_lm import CausalLMHead
from ..generation import cached_length
from ..heads import QuestionAnsweringHead, SequenceClassificationHead
from ..input_checks import check_encoder_inputs
from ..packing import packed_sequence_starts
from ..pretrained import XfmrPreTrainedModel, collect
from ..seq2seq import (
    DecoderAloneModel,
    DecoderInputsFromInputs,
    EosClassifier,
    FinalLogitsBias,
    Seq2SeqAttention,
    Seq2SeqLMHead,
    SharedEmbeddingsEncoderDecoder,
    cross_attention_mask,
)
from .configuration_bart import XfmrBartConfig

POSITION_OFFSET = 2  # fairseq's learned position tables start at row 2 (rows 0-1 were reserved for padding)


class XfmrBartAttention(Seq2SeqAttention):
    """Multi-head attention with biases: self-attention (a KV cache in the decoder) or cross-attention over
    the encoder output (its keys/values projected once per generation and kept in the cache)."""

    def __init__(self, config, num_heads: int, layer_idx: int, is_cross_attention: bool = False, bias: bool = True):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_cross_attention = is_cross_attention
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout_p = config.attention_dropout
        self.q_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.k_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.v_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.o_proj = nn.Linear(config.d_model, config.d_model, bias=bias)

    def forward(self, hidden_states, attention_mask=None, is_causal=False, key_value_states=None,
                past_key_values=None, output_attentions=False, varlen=None):
        """`attention_mask`: bool (True = attend), broadcastable to (B, H, T, K), or None. `is_causal`: no mask
        tensor, the causal constraint alone. `key_value_states` (B, S, C): the encoder output (cross-attention).
        `varlen` (a VarlenBatch): unpadded (N, C) encoder tokens, attention within each sequence."""
        dropout = self.dropout_p if self.training else 0.0
        # The config's kernel (eager when the weights are asked for); in CPU training in fp32 with dropout the
        # fused-dropout kernel (torch has none): it keeps two (b, H, T, K) tensors, not three.
        kernel = resolve_kernel(self.config._attn_implementation, output_attentions, fused_cpu_dropout_from=0)
        if varlen is not None:
            tokens = hidden_states.shape[0]
            q, k, v = self.unpadded_queries_keys_values(hidden_states)  # (N, H, D)
            out, _ = self_attention(self, kernel, q, k, v, varlen=varlen, scaling=self.scaling,
                                    dropout=dropout)  # (N, H, D)
            return self.o_proj(out.reshape(tokens, -1)), None
        batch, seq_len, _ = hidden_states.shape
        q, k, v = self.queries_keys_values(hidden_states, key_value_states, past_key_values)  # (B, H, T|K, D)
        out, weights = kernel(self, q, k, v, attention_mask, scaling=self.scaling, dropout=dropout,
                              is_causal=is_causal)  # (B, T, H, D)
        out = out.reshape(batch, seq_len, -1)  # (B, T, H, D) -> (B, T, C)
        return self.o_proj(out), weights


class XfmrBartMLP(nn.Module):
    """(..., C) -> (..., C): down_proj(dropout(act(up_proj(x)))) (BART's fc1 / fc2 with activation dropout)."""

    def __init__(self, config, ffn_dim: int):
        super().__init__()
        self.up_proj = nn.Linear(config.d_model, ffn_dim)
        self.act = get_activation(config.activation_function)
        self.dropout = Dropout(config.activation_dropout)
        self.down_proj = nn.Linear(ffn_dim, config.d_model)

    def forward(self, x):
        return self.down_proj(self.dropout(self.act(self.up_proj(x))))


class XfmrBartLayer(GradientCheckpointingLayer):
    """Post-norm block: x = norm(x + Attn(x)); [decoder: x = norm(x + CrossAttn(x, encoder))];
    x = norm(x + MLP(x)), with dropout on each sub-layer output."""

    def __init__(self, config, layer_idx: int, is_decoder: bool):
        super().__init__()
        heads = config.decoder_attention_heads if is_decoder else config.encoder_attention_heads
        self.attn = XfmrBartAttention(config, heads, layer_idx)
        self.attn_norm = nn.LayerNorm(config.d_model)
        if is_decoder:
            self.cross_attn = XfmrBartAttention(config, heads, layer_idx, is_cross_attention=True)
            self.cross_attn_norm = nn.LayerNorm(config.d_model)
        self.mlp = XfmrBartMLP(config, config.decoder_ffn_dim if is_decoder else config.encoder_ffn_dim)
        self.mlp_norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)

    def forward(self, hidden_states, attention_mask=None, is_causal=False, encoder_hidden_states=None,
                encoder_attention_mask=None, past_key_values=None, output_attentions=False, varlen=None):
        attn_out, self_weights = self.attn(hidden_states, attention_mask, is_causal, past_key_values=past_key_values,
                                           output_attentions=output_attentions, varlen=varlen)
        hidden_states = self.attn_norm(hidden_states + self.dropout(attn_out))
        cross_weights = None
        if encoder_hidden_states is not None:
            cross_out, cross_weights = self.cross_attn(
                hidden_states, encoder_attention_mask, key_value_states=encoder_hidden_states,
                past_key_values=past_key_values, output_attentions=output_attentions,
            )
            hidden_states = self.cross_attn_norm(hidden_states + self.dropout(cross_out))
        hidden_states = self.mlp_norm(hidden_states + self.dropout(self.mlp(hidden_states)))
        return hidden_states, self_weights, cross_weights


class XfmrBartStack(nn.Module):
    """The encoder (bidirectional) or decoder (causal, cross-attending) over embedded tokens: learned
    positions (offset 2) added, `embed_norm`, dropout, then the post-norm layers."""

    def __init__(self, config, is_decoder: bool):
        super().__init__()
        self.config = config
        self.is_decoder = is_decoder
        self.embed_positions = nn.Embedding(config.max_position_embeddings + POSITION_OFFSET, config.d_model)
        self.embed_norm = nn.LayerNorm(config.d_model)
        num_layers = config.decoder_layers if is_decoder else config.encoder_layers
        self.layers = nn.ModuleList(XfmrBartLayer(config, i, is_decoder) for i in range(num_layers))
        self.layerdrop = config.decoder_layerdrop if is_decoder else config.encoder_layerdrop
        self.dropout = Dropout(config.dropout)

    def forward(self, inputs_embeds, attention_mask=None, position_ids=None, encoder_hidden_states=None,
                encoder_attention_mask=None, past_key_values=None, output_attentions=False,
                output_hidden_states=False, starts=None):
        """inputs_embeds (B, T, C) token embeddings (scaled); attention_mask (B, P + T) 0/1 (decoder: cached and
        new tokens) or a ready-made (B, 1, T, P + T) mask; position_ids (1 or B, T), default P + arange(T);
        encoder_attention_mask (B, S) 0/1 or the encoder's 4-D mask; `starts` (B, T) bool, where packed
        sequences begin: each is numbered from its start and attends to itself only (the encoder: unpadded or
        block-diagonal; a decoder: causally, on the padded layout)."""
        batch, seq_len, _ = inputs_embeds.shape
        device = inputs_embeds.device
        past_length = 0
        if past_key_values is not None:
            self_cache = (past_key_values.self_attention_cache if isinstance(past_key_values, EncoderDecoderCache)
                          else past_key_values)
            past_length = cached_length(self_cache)
        two_d = attention_mask is not None and attention_mask.dim() == 2
        if position_ids is None and starts is not None:  # each packed sequence numbered from its start
            position_ids = positions_in_sequences(starts, attention_mask.bool() if two_d else None)  # (B, T)
        elif position_ids is None:
            limit = self.config.max_position_embeddings
            if past_length + seq_len > limit:
                cached = f" after {past_length} cached tokens" if past_length else ""
                what = "decoder inputs" if self.is_decoder else "inputs"
                raise ValueError(
                    f"{seq_len} {what}{cached} exceed the {limit} positions this model has "
                    f"(`max_position_embeddings`); truncate them (tokenizer(..., truncation=True, max_length={limit}))"
                    f"{' or, when generating, lower `max_new_tokens`' if self.is_decoder else ''}."
                )
            position_ids = torch.arange(past_length, past_length + seq_len, device=device)[None]  # (1, T)
        # One decision per forward (one host read, none when compiling): the encoder runs a right-padded batch on
        # its real tokens only; otherwise the padded layout with a mask, or without one (a 2-D mask of all ones is
        # dropped: SDPA's causal / unmasked kernels).
        documents = None  # a decoder's packed sequences: ids for a block-diagonal causal mask (padded layout)
        if self.is_decoder and starts is not None:
            documents, starts = document_ids_from_starts(starts, attention_mask.bool() if two_d else None), None
        varlen = packed_mask = None
        if starts is not None or (two_d and not torch.compiler.is_compiling()):
            unpad = not self.is_decoder and self.config.unpad_inputs and not output_attentions
            varlen, padded = encoder_padding(attention_mask, unpad=unpad, starts=starts)
            if varlen is None and padded is None:
                attention_mask = None
            elif starts is not None:
                packed_mask = padded  # the block-diagonal (B, 1, T, T) mask, or None when unpadded
        if varlen is not None:  # the embeddings take the real tokens as one (1, N) row, with their positions
            inputs_embeds, position_ids = varlen.unpad_inputs(inputs_embeds, position_ids)
        hidden_states = inputs_embeds + self.embed_positions(position_ids + POSITION_OFFSET)  # (B, T, C) or (1, N, C)
        hidden_states = self.dropout(self.embed_norm(hidden_states))
        if varlen is not None:
            hidden_states, mask, is_causal = hidden_states.squeeze(0), None, False  # (N, C)
        elif self.is_decoder:
            mask, is_causal = decoder_attention_mask(attention_mask, seq_len, past_length + seq_len, documents,
                                                     device=device)
        elif packed_mask is not None or attention_mask is None:
            mask, is_causal = packed_mask, False
        else:  # (B, 1, 1, S) padding, or a ready-made 4-D mask as given
            mask, is_causal = (ready_mask(attention_mask) if attention_mask.dim() == 4
                               else attention_mask.bool()[:, None, None, :]), False
        cross_mask = cross_attention_mask(encoder_hidden_states, encoder_attention_mask)

        all_hidden = (hidden_states,) if output_hidden_states else None
        all_self, all_cross = ((), ()) if output_attentions else (None, None)
        for layer in self.layers:
            if self.training and self.layerdrop > 0.0 and torch.rand([]) < self.layerdrop:
                continue  # LayerDrop (Fan et al., 2019): skip the whole layer
            hidden_states, self_weights, cross_weights = layer(
                hidden_states, mask, is_causal, encoder_hidden_states, cross_mask, past_key_values=past_key_values,
                output_attentions=output_attentions, varlen=varlen,
            )
            all_hidden = collect(all_hidden, hidden_states)
            all_self, all_cross = collect(all_self, self_weights), collect(all_cross, cross_weights)
        if varlen is not None:  # back to (B, S, C), zeros at padding
            hidden_states, all_hidden = varlen.pad_outputs(hidden_states, all_hidden)
        return hidden_states, all_hidden, all_self, all_cross


class XfmrBartPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrBartConfig
    _no_split_modules = ["XfmrBartLayer"]
    _skip_keys_device_placement = ["past_key_values", "cache"]

    def _init_weights(self, module):
        """Linear and embedding weights ~ N(0, init_std), biases 0, the padding row 0, norms to identity."""
        normal_init_(module, self.config.init_std)


class XfmrBartModel(SharedEmbeddingsEncoderDecoder, XfmrBartPreTrainedModel):
    """Encoder and decoder sharing one embedding matrix (`BartModel`): `seq2seq.SharedEmbeddingsEncoderDecoder`
    over two `XfmrBartStack`s; returns the decoder output."""

    def build_encoder(self, config):
        return XfmrBartStack(config, is_decoder=False)

    def build_decoder(self, config):
        return XfmrBartStack(config, is_decoder=True)

    def run_encoder(self, input_ids=None, attention_mask=None, inputs_embeds=None, output_attentions=None,
                    output_hidden_states=None, position_ids=None, **packed):
        """The encoder over `input_ids` (B, S) with a (B, S) 0/1 or ready-made (B, 1, S, S) mask. Packed sequences
        (`models.packing`) attend to themselves only and are numbered from their own start (or by `position_ids`,
        counted from 0 as BART numbers a sequence; the table's offset of 2 is added here)."""
        config = self.config
        output_attentions, output_hidden_states, _ = self.output_flags(output_attentions, output_hidden_states, None)
        limit = None if position_ids is not None or packed else config.max_position_embeddings
        embeds = self.embed(input_ids, inputs_embeds, limit)  # (B, S, C)
        check_encoder_inputs(None, embeds, attention_mask, None, position_ids, vocab_size=config.vocab_size,
                             type_vocab_size=None, max_positions=None,
                             position_table_size=config.max_position_embeddings)  # the mask, the positions
        starts = packed_sequence_starts(self, *embeds.shape[:2], attention_mask, position_ids, packed=packed)
        hidden, all_hidden, all_attn, _ = self.encoder(embeds, attention_mask, position_ids,
                                                       output_attentions=output_attentions,
                                                       output_hidden_states=output_hidden_states, starts=starts)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=all_hidden, attentions=all_attn)


class XfmrBartDecoderModel(DecoderAloneModel, XfmrBartPreTrainedModel):
    """The decoder alone (`BartForCausalLM`'s backbone): `seq2seq.DecoderAloneModel` over `XfmrBartStack`."""

    def build_decoder(self, config):
        return XfmrBartStack(config, is_decoder=True)


# -- heads (shared machinery in models/heads.py, models/seq2seq.py and models/causal_lm.py) ----------
class XfmrBartForConditionalGeneration(FinalLogitsBias, Seq2SeqLMHead, XfmrBartPreTrainedModel):
    """Sequence-to-sequence LM: decoder output -> `lm_head` (tied to `shared`) + `final_logits_bias`; `generate()`."""

    base_model_class = XfmrBartModel


class XfmrBartForSequenceClassification(DecoderInputsFromInputs, SequenceClassificationHead, XfmrBartPreTrainedModel):
    """Encoder-decoder over the input; the decoder state at each row's last <eos> -> `classifier`."""

    base_model_class = XfmrBartModel
    pooling = "eos"

    def build_classifier(self, config, num_outputs):
        return EosClassifier(config.d_model, num_outputs, config.classifier_dropout)


class XfmrBartForQuestionAnswering(DecoderInputsFromInputs, QuestionAnsweringHead, XfmrBartPreTrainedModel):
    """Encoder-decoder over the input; `qa_outputs` scores each decoder position as answer start / end."""

    base_model_class = XfmrBartModel
    mask_padding = False  # it reads the decoder, which is never unpadded: the reference's logits and loss


class XfmrBartForCausalLM(CausalLMHead, XfmrBartPreTrainedModel):
    """The decoder alone as a language model (`BartForCausalLM`): `lm_head` tied to its embeddings;
    `generate()`. Labels are not shifted (`labels[t]` is the target of position t), as in the reference."""

    base_model_class = XfmrBartDecoderModel
    shift_labels = False

    def __init__(self, config):
        config = copy.deepcopy(config)  # a decoder-only view; the caller's config stays as it was
        config.is_encoder_decoder, config.is_decoder = False, True
        if config.tie_word_embeddings:
            self._tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
        super().__init__(config)

    def generation_position_limit(self):
        return self.config.max_position_embeddings


__all__ = [
    "XfmrBartPreTrainedModel",
    "XfmrBartModel",
    "XfmrBartDecoderModel",
    "XfmrBartForConditionalGeneration",
    "XfmrBartForSequenceClassification",
    "XfmrBartForQuestionAnswering",
    "XfmrBartForCausalLM",
]
