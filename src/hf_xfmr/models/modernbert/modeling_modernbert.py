"""ModernBERT: a pre-norm encoder with RoPE, GeGLU and alternating global / sliding-window attention.

Paper: Warner et al., 2024, "Smarter, Better, Faster, Longer: A Modern Bidirectional Encoder for Fast,
Memory Efficient, and Long Context Finetuning and Inference", https://arxiv.org/abs/2412.13663.
Parity reference: transformers' `ModernBertModel` and heads, through `convert_modernbert.py`.

Unpadding (paper sec. 2.1.3): padding is removed once at the encoder boundary. Embeddings, projections,
MLPs and norms run on the N real tokens (N, C); attention runs per document (`varlen_attention` on CPU
kernels, flash-attn's varlen kernel with `flash_attention_2`), never across documents; the (B, T, C)
shape is restored once at the end. Packed rows (several documents per row, `cu_seqlens` from the
packer's collators) go through the same path. Local layers use window-blocked attention, O(T * window).

Deliberate deviations from the reference:
- outputs at padding positions are zeros (`last_hidden_state`, `hidden_states`): the reference computes
  values there from pad tokens attending to the sequence, which nothing should read. Question answering
  masks the start/end logits of padding positions to the dtype's minimum, so its loss and predictions
  only ever consider real tokens (the reference's softmax also covers the pad positions).
- with `output_attentions=True` (or `config.unpad_inputs = False`) the padded path runs instead: dense
  (B, 1, T, T) masks through the eager/sdpa kernel, as in the reference.
- projections use hf_xfmr's shared names: `q_proj`, `k_proj`, `v_proj` (the converter splits transformers'
  fused `Wqkv`), `o_proj`, `up_proj`, `down_proj`.

Shapes: B batch, T sequence length, N real (unpadded) tokens, C hidden size, H heads, D head size (C / H),
V vocabulary size, K number of choices.
"""

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput

from ...layers.attention import resolve_varlen_kernel, varlen_attention
from ...layers.cross_entropy import linear_cross_entropy
from ...layers.dropout import Dropout
from ...layers.init import truncated_normal_init_
from ...layers.masks import (
    block_diagonal_mask,
    cu_seqlens_from_starts,
    document_ids_from_starts,
    padding_mask,
    positions_in_sequences,
    ready_mask,
    restrict_mask,
    sliding_window_mask,
)
from ...layers.mlp import GLU, get_activation
from ...layers.padding import pad_input, varlen_batch
from ...layers.rope import apply_rope, rope_cos_sin, rope_inv_freq
from ..encoder import EncoderSelfAttention
from ..heads import (
    MaskedLMHead,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TokenClassificationHead,
    input_shape,
    pool_first,
    pool_mean,
)
from ..input_checks import check_encoder_inputs, check_labels_shape
from ..losses import IGNORE_INDEX, mean_over_items
from ..packing import packed_sequence_starts
from ..pretrained import XfmrPreTrainedModel
from .configuration_modernbert import XfmrModernBertConfig


class XfmrModernBertEmbeddings(nn.Module):
    """Token embeddings -> LayerNorm -> dropout; positions come later, as RoPE inside attention."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.dropout = Dropout(config.embedding_dropout)

    def forward(self, input_ids=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (..., C)
        return self.dropout(self.norm(inputs_embeds))


class XfmrModernBertAttention(EncoderSelfAttention):
    """Multi-head self-attention with RoPE, global or within a sliding window of `local_attention` tokens.
    The projections and the kernel choice are BERT's (`models.encoder.EncoderSelfAttention`)."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, config.hidden_size, config.num_attention_heads, config.attention_dropout,
                         bias=config.attention_bias)
        self.layer_idx = layer_idx
        self.is_global = config.is_global_layer(layer_idx)
        self.window = None if self.is_global else config.local_attention  # total width; None = global
        self.o_proj.init_std = config.initializer_range / (2.0 * config.num_hidden_layers) ** 0.5
        self.out_dropout = Dropout(config.attention_dropout)

    def forward(self, hidden_states, cos, sin, varlen=None, attention_mask=None, output_attentions=False):
        """Unpadded: hidden_states (N, C) with `varlen` (a VarlenBatch). Padded: (B, T, C) with a bool mask."""
        shape = hidden_states.shape[:-1]  # (N,) or (B, T)
        q, k, v = self.queries_keys_values(hidden_states)  # (..., H, D)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        dropout = self.dropout_p if self.training else 0.0
        weights = None
        if varlen is not None:
            flash = resolve_varlen_kernel(self.config._attn_implementation)
            if flash is not None:
                out = flash(q, k, v, varlen.cu_seqlens, varlen.max_seqlen, dropout=dropout, scaling=self.scaling,
                            window=self.window)  # (N, H, D)
            else:
                out = varlen_attention(self, self.kernel(), q, k, v, varlen.bounds, scaling=self.scaling,
                                       window=self.window, dropout=dropout)  # (N, H, D)
        else:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
            out, weights = self.kernel(output_attentions)(self, q, k, v, attention_mask, scaling=self.scaling,
                                                          dropout=dropout)  # (B, T, H, D)
        out = out.reshape(*shape, -1)  # (..., H, D) -> (..., C)
        return self.out_dropout(self.o_proj(out)), weights


class XfmrModernBertLayer(GradientCheckpointingLayer):
    """Pre-LN block: x = x + Attn(LN(x)); x = x + GeGLU(LN(x)). The first layer has no attention norm
    (the embedding norm just ran)."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.attn_norm = (nn.Identity() if layer_idx == 0 else
                          nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias))
        self.attn = XfmrModernBertAttention(config, layer_idx)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = GLU(config.hidden_size, config.intermediate_size, config.hidden_activation,
                       bias=config.mlp_bias, dropout=config.mlp_dropout)
        self.mlp.down_proj.init_std = config.initializer_range / (2.0 * config.num_hidden_layers) ** 0.5

    def forward(self, hidden_states, cos, sin, varlen=None, attention_mask=None, output_attentions=False):
        attn_out, weights = self.attn(self.attn_norm(hidden_states), cos, sin, varlen, attention_mask,
                                      output_attentions)
        hidden_states = hidden_states + attn_out
        hidden_states = hidden_states + self.mlp(self.mlp_norm(hidden_states))
        return hidden_states, weights


class XfmrModernBertPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrModernBertConfig
    _no_split_modules = ["XfmrModernBertEmbeddings", "XfmrModernBertLayer"]
    _supports_flash_attn = True  # unpadded: flash-attn's varlen kernel, with its sliding window

    def _init_weights(self, module):
        """Truncated normal (+-cutoff * std); output projections scaled by 1 / sqrt(2 * layers), task
        classifiers by C^-0.5 (each tagged with `init_std`)."""
        std = getattr(module, "init_std", self.config.initializer_range)
        truncated_normal_init_(module, std, self.config.initializer_cutoff_factor)


class XfmrModernBertModel(XfmrModernBertPreTrainedModel):
    """The encoder: embeddings, `num_hidden_layers` pre-LN layers and a final LayerNorm.

    Besides the usual inputs, `forward` takes the boundaries of packed sequences in every form the ecosystem
    sends them (`models.packing`: `cu_seqlens`, `cu_seq_lens_q` / `_k`, `doc_ids`, `seq_idx`, or restarting
    `position_ids`). Each sequence then attends only to itself, and without explicit `position_ids` its
    positions restart at 0.
    """

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = XfmrModernBertEmbeddings(config)
        self.layers = nn.ModuleList(XfmrModernBertLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.post_init()

    @property
    def use_unpadding(self) -> bool:
        """`config.unpad_inputs` under its former name (setting it sets the config field)."""
        return self.config.unpad_inputs

    @use_unpadding.setter
    def use_unpadding(self, value: bool):
        self.config.unpad_inputs = bool(value)

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def rope(self, position_ids, dtype):
        """(cos, sin) per layer kind ("global", "local"), each (..., 1, D) for positions (...)."""
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        tables = {}
        for kind, theta in (("global", self.config.global_rope_theta), ("local", self.config.local_rope_theta)):
            cos, sin = rope_cos_sin(position_ids, rope_inv_freq(head_dim, theta, position_ids.device), dtype)
            tables[kind] = (cos[..., None, :], sin[..., None, :])  # (..., 1, D): broadcast over heads
        return tables

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **packed,
    ):
        """`attention_mask` (B, T) 0/1, or a ready-made (B, 1, T, T) mask (bool or additive; the local layers
        add their window to it). `packed`: the boundaries of packed sequences (`models.packing`)."""
        batch, seq_len = check_encoder_inputs(
            input_ids, inputs_embeds, attention_mask, None, position_ids,
            vocab_size=self.config.vocab_size, type_vocab_size=None,
            max_positions=self.config.max_position_embeddings,  # explicit position_ids: also the RoPE range
        )
        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)
        device = (input_ids if input_ids is not None else inputs_embeds).device
        four_d = attention_mask is not None and attention_mask.dim() == 4
        padding = None if four_d else attention_mask  # (B, T) 0/1 or None
        keep = None if padding is None else padding.bool()
        starts = packed_sequence_starts(self, batch, seq_len, attention_mask, position_ids, packed=packed)
        cu_seqlens = None if starts is None else cu_seqlens_from_starts(starts, keep)
        varlen = varlen_batch(padding, batch, seq_len, cu_seqlens, device=device)

        if position_ids is None:  # 0..T-1 on every row (as the reference), or restarting per packed sequence
            position_ids = torch.arange(seq_len, device=device).expand(batch, seq_len) if starts is None else \
                positions_in_sequences(starts, keep)  # (B, T)
        else:
            position_ids = position_ids.expand(batch, seq_len)

        if output_attentions or not self.config.unpad_inputs or four_d:
            hidden, all_hidden, all_attentions = self._forward_padded(
                input_ids, inputs_embeds, position_ids, attention_mask, starts, output_attentions, output_hidden_states)
        else:
            hidden, all_hidden = self._forward_unpadded(
                input_ids, inputs_embeds, position_ids, varlen, batch, seq_len, output_hidden_states)
            all_attentions = None
        output = BaseModelOutput(last_hidden_state=hidden, hidden_states=all_hidden, attentions=all_attentions)
        return output if return_dict else output.to_tuple()

    def _forward_unpadded(self, input_ids, inputs_embeds, position_ids, varlen, batch, seq_len,
                          output_hidden_states):
        def unpad(x):  # (B, T, ...) -> (N, ...)
            flat = x.reshape(batch * seq_len, *x.shape[2:])
            return flat if varlen.indices is None else flat.index_select(0, varlen.indices)

        def pad(x):  # (N, ...) -> (B, T, ...), zeros at padding
            if varlen.indices is None:
                return x.view(batch, seq_len, *x.shape[1:])
            return pad_input(x, varlen.indices, batch, seq_len)

        positions = unpad(position_ids)  # (N,)
        if input_ids is not None:
            hidden = self.embeddings(input_ids=unpad(input_ids))  # (N, C): real tokens only
        else:
            hidden = self.embeddings(inputs_embeds=unpad(inputs_embeds))
        rope = self.rope(positions, hidden.dtype)  # (N, 1, D) tables
        all_hidden = [hidden] if output_hidden_states else None
        for layer in self.layers:
            cos, sin = rope["global" if layer.attn.is_global else "local"]
            hidden, _ = layer(hidden, cos, sin, varlen)
            if output_hidden_states:
                all_hidden.append(hidden)
        hidden = self.final_norm(hidden)
        if output_hidden_states:  # as the reference: the last entry is the normed output
            all_hidden[-1] = hidden
            all_hidden = tuple(pad(h) for h in all_hidden)
        return pad(hidden), all_hidden

    def _forward_padded(self, input_ids, inputs_embeds, position_ids, attention_mask, starts, output_attentions,
                        output_hidden_states):
        seq_len = position_ids.shape[1]
        hidden = self.embeddings(input_ids=input_ids, inputs_embeds=inputs_embeds)  # (B, T, C)
        device = hidden.device
        if attention_mask is not None and attention_mask.dim() == 4:  # ready-made: used as given
            global_mask, attention_mask = ready_mask(attention_mask), None
        elif starts is not None:  # packed sequences: attention stays within each (ids -1 at padding)
            keep = None if attention_mask is None else attention_mask.bool()
            global_mask = block_diagonal_mask(document_ids_from_starts(starts, keep))  # (B, 1, T, T)
        else:
            global_mask = None if attention_mask is None else padding_mask(attention_mask)  # (B, 1, 1, T)
        window = sliding_window_mask(seq_len, self.config.local_attention, device=device)  # (T, T)
        local_mask = restrict_mask(global_mask, window)
        rope = self.rope(position_ids, hidden.dtype)  # (B, T, 1, D) tables
        all_hidden = [hidden] if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            kind = "global" if layer.attn.is_global else "local"
            mask = global_mask if kind == "global" else local_mask
            hidden, weights = layer(hidden, *rope[kind], None, mask, output_attentions)
            if output_hidden_states:
                all_hidden.append(hidden)
            if output_attentions:
                all_attentions += (weights,)
        hidden = self.final_norm(hidden)
        if attention_mask is not None:  # zeros at padding, as on the unpadded path
            hidden = hidden * attention_mask[..., None].to(hidden.dtype)
        if output_hidden_states:
            all_hidden[-1] = hidden
            if attention_mask is not None:
                all_hidden = [h * attention_mask[..., None].to(h.dtype) for h in all_hidden]
            all_hidden = tuple(all_hidden)
        return hidden, all_hidden, all_attentions


class XfmrModernBertPredictionHead(nn.Module):
    """dense -> activation -> LayerNorm: the transform shared by the MLM head and the task heads."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.dense.init_std = config.initializer_range / (2.0 * config.num_hidden_layers) ** 0.5
        self.act = get_activation(config.classifier_activation)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, hidden_states):
        return self.norm(self.act(self.dense(hidden_states)))


class XfmrModernBertLMHead(XfmrModernBertPredictionHead):
    """The prediction head, then the decoder onto the vocabulary (tied to the input embeddings)."""

    def __init__(self, config):
        super().__init__(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        self.decoder.init_std = config.initializer_range / (2.0 * config.num_hidden_layers) ** 0.5

    def transform(self, hidden_states):
        """The prediction head alone, before the vocabulary projection."""
        return super().forward(hidden_states)

    def forward(self, hidden_states):
        return self.decoder(self.transform(hidden_states))  # (..., V)


class XfmrModernBertClassifier(XfmrModernBertPredictionHead):
    """The prediction head, dropout, then `out_proj` onto the task's outputs (per sequence or per token)."""

    def __init__(self, config, num_outputs: int):
        super().__init__(config)
        self.dropout = Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(config.hidden_size, num_outputs)
        self.out_proj.init_std = config.hidden_size**-0.5

    def forward(self, hidden_states):
        return self.out_proj(self.dropout(super().forward(hidden_states)))


class _ModernBertTaskHead:
    """ModernBERT's task classifier and its pooling: the first token ("cls") or the mean over real tokens."""

    base_model_class = XfmrModernBertModel

    def build_classifier(self, config, num_outputs):
        return XfmrModernBertClassifier(config, num_outputs)

    def pool(self, output, input_ids=None, attention_mask=None):
        if self.config.classifier_pooling == "mean":
            return pool_mean(output.last_hidden_state, attention_mask=attention_mask)
        return pool_first(output.last_hidden_state)


# -- task heads (shared machinery in models/heads.py) --------------------------------------------------
class XfmrModernBertForMaskedLM(MaskedLMHead, XfmrModernBertPreTrainedModel):
    """MLM; with `config.sparse_prediction` in training the head runs only on labelled positions."""

    base_model_class = XfmrModernBertModel
    lm_head_class = XfmrModernBertLMHead
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, num_items_in_batch=None, **kwargs):
        """`labels` (B, T): target ids at masked positions, -100 elsewhere. With `config.chunked_lm_loss`
        in training, the loss comes from `linear_cross_entropy` over the labelled positions and `logits`
        is None."""
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                      position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
                      output_hidden_states=output_hidden_states, **kwargs)
        if not (self.config.chunked_lm_loss and self.training and labels is not None):
            return super().forward(labels=labels, return_dict=return_dict, num_items_in_batch=num_items_in_batch,
                                   **inputs)
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
        out = self.encode(**inputs)
        labels = labels.reshape(-1)
        keep = (labels != IGNORE_INDEX).nonzero().squeeze(1)  # (N,) labelled positions
        hidden = out.last_hidden_state.reshape(-1, out.last_hidden_state.shape[-1]).index_select(0, keep)  # (N, C)
        decoder = self.lm_head.decoder
        labels = labels.index_select(0, keep)
        total = linear_cross_entropy(self.lm_head.transform(hidden), decoder.weight, decoder.bias, labels)
        loss = mean_over_items(total, labels, num_items_in_batch)
        return self.finish(MaskedLMOutput(loss=loss, logits=None, hidden_states=out.hidden_states,
                                          attentions=out.attentions), return_dict)


class XfmrModernBertForSequenceClassification(_ModernBertTaskHead, SequenceClassificationHead,
                                              XfmrModernBertPreTrainedModel):
    """Pooled ("cls" or "mean") -> prediction head -> dropout -> out_proj. Regression when `num_labels == 1`."""


class XfmrModernBertForTokenClassification(_ModernBertTaskHead, TokenClassificationHead,
                                           XfmrModernBertPreTrainedModel):
    """Prediction head -> dropout -> out_proj on every token."""


class XfmrModernBertForQuestionAnswering(_ModernBertTaskHead, QuestionAnsweringHead, XfmrModernBertPreTrainedModel):
    """Prediction head -> dropout -> out_proj (start, end) on every token; padding positions never win."""

    mask_padding = True

    def build_qa_outputs(self, config):
        return XfmrModernBertClassifier(config, 2)


class XfmrModernBertForMultipleChoice(_ModernBertTaskHead, MultipleChoiceHead, XfmrModernBertPreTrainedModel):
    """Each (context, choice) pair is encoded separately; pooled -> one score per choice. "cls" pooling
    reads the first real token, so left padding works."""

    def pool(self, output, input_ids=None, attention_mask=None):
        if self.config.classifier_pooling == "cls" and attention_mask is not None:
            hidden = output.last_hidden_state
            first = attention_mask.argmax(dim=-1)  # (B*K,) first real token
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), first]  # (B*K, C)
        return super().pool(output, input_ids, attention_mask)


__all__ = [
    "XfmrModernBertPreTrainedModel",
    "XfmrModernBertModel",
    "XfmrModernBertForMaskedLM",
    "XfmrModernBertForSequenceClassification",
    "XfmrModernBertForTokenClassification",
    "XfmrModernBertForQuestionAnswering",
    "XfmrModernBertForMultipleChoice",
]
