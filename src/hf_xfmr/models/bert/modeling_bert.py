"""BERT: a post-LayerNorm bidirectional Transformer encoder.

Paper: Devlin et al., 2018, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", https://arxiv.org/abs/1810.04805. Parity reference: transformers' `BertModel` and heads,
through `convert_bert.py`.

Deliberate deviations from the reference (outputs are unchanged):
- with `config.sparse_prediction` and labels given in training mode, the MLM head projects only
  labelled positions onto the vocabulary (`logits` is then (N, V)); the loss is the same number.
- projections use the names shared by every hf_xfmr model (`q_proj`, `k_proj`, `v_proj`, `o_proj`,
  `up_proj`, `down_proj`), so one LoRA target list fits all architectures.
- unpadding (`config.unpad_inputs`, on by default): a right-padded batch runs on its real tokens only.
  The embeddings' inputs are gathered once, every layer runs on the N real tokens, attention runs per
  sequence (`varlen_attention`) and the (B, T, C) shape is restored once at the end. Outputs at real
  positions are unchanged; at padding positions the hidden states are zeros (the reference computes
  values there from pad tokens attending to the sequence, which nothing should read), so per-token heads
  hold their output for a zero vector there, and question answering masks padding (see `heads.py`).
  The padded path runs with `unpad_inputs=False`, `output_attentions=True`, under torch.compile and for
  a batch where some row starts with padding (see `layers.padding.encoder_padding`).
- packed sequences (`models.packing`: transformers' `DataCollatorWithFlattening` output, hf_xfmr's
  `collate_packed`, restarting `position_ids`) attend to themselves only on every attention backend; the
  reference keeps them apart only under FlashAttention (`config.packed_position_ids=False` restores its
  SDPA behaviour for restarting positions). A 4-D `attention_mask` is used as given (padded path), a bool one
  meaning attend / hidden on every backend (the reference's eager kernel adds it to the scores as 0 / 1).

Shapes: B batch, T sequence length, C hidden size, H heads, D head size (C / H), V vocabulary size,
K number of choices, N number of real (unpadded) tokens or of labelled (masked) positions.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import ModelOutput

from ...layers.dropout import Dropout
from ..encoder import (
    EncoderSelfAttention,
    MaskedLMPredictionHead,
    PooledEncoderStack,
    PostNormEncoderLayer,
    TanhPooler,
    default_position_ids,
)
from ..heads import (
    MaskedLMHead,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TaskHead,
    TiedDecoderHead,
    TokenClassificationHead,
    input_shape,
    masked_lm_logits_and_loss,
)
from ..input_checks import check_labels_shape
from ..losses import token_loss
from ..pretrained import XfmrPreTrainedModel
from .configuration_bert import XfmrBertConfig


class XfmrBertEmbeddings(nn.Module):
    """Token + learned absolute position + token type embeddings, then LayerNorm and dropout."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.max_length = config.max_position_embeddings  # longest input with default positions

    default_position_ids = staticmethod(default_position_ids)  # (1, T); RoBERTa numbers from its padding
    first_position = 0  # what a packed sequence's first token is numbered

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, C)
        seq_len = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = self.default_position_ids(input_ids, seq_len, inputs_embeds.device)
        embeddings = inputs_embeds + self.position_embeddings(position_ids)
        if token_type_ids is None:  # every token is segment A: one (1, 1, C) row, broadcast
            token_type_ids = torch.zeros(1, 1, dtype=torch.long, device=embeddings.device)
        # Always through the module, never by reading its weight: a forward must call the same modules
        # whatever the batch holds (ZeRO-3 gathers parameters in module hooks; see XfmrBertModel).
        embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(embeddings))


class XfmrBertAttention(EncoderSelfAttention):
    """Multi-head self-attention (`models.encoder.EncoderSelfAttention`, shared by the BERT family)."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, config.hidden_size, config.num_attention_heads, config.attention_probs_dropout_prob)
        self.layer_idx = layer_idx


class XfmrBertLayer(PostNormEncoderLayer):
    """Post-LN block: x = LN(x + dropout(Attn(x))); x = LN(x + MLP(x))."""

    def __init__(self, config, layer_idx: int):
        super().__init__(XfmrBertAttention(config, layer_idx), config.hidden_size, config.intermediate_size,
                         config.hidden_act, config.layer_norm_eps, mlp_dropout=config.hidden_dropout_prob,
                         attn_dropout=config.hidden_dropout_prob)


class XfmrBertPooler(TanhPooler):
    """tanh(W h_[CLS] + b): the sentence representation used by NSP and sequence-level heads."""

    def __init__(self, config):
        super().__init__(config.hidden_size)


class XfmrBertPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrBertConfig
    _no_split_modules = ["XfmrBertLayer"]


class XfmrBertModel(PooledEncoderStack, XfmrBertPreTrainedModel):
    """The encoder: embeddings, `num_hidden_layers` post-LN layers and an optional [CLS] pooler.

    With `config.unpad_inputs` (the default) right-padded batches run on their real tokens only and the
    outputs at padding positions are zeros. The forward is `models.encoder.PooledEncoderStack.forward`.
    """

    embeddings_class = XfmrBertEmbeddings

    def __init__(self, config, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = self.embeddings_class(config)
        self.layers = nn.ModuleList(XfmrBertLayer(config, i) for i in range(config.num_hidden_layers))
        self.pooler = XfmrBertPooler(config) if add_pooling_layer else None
        self.post_init()

    @property
    def use_unpadding(self) -> bool:
        """`config.unpad_inputs` under its former name (setting it sets the config field)."""
        return self.config.unpad_inputs

    @use_unpadding.setter
    def use_unpadding(self, value: bool):
        self.config.unpad_inputs = bool(value)

    def position_limits(self) -> dict:
        """RoBERTa's positions start past its padding index: fewer tokens fit than the table has rows."""
        return {"max_positions": self.embeddings.max_length,
                "position_table_size": self.config.max_position_embeddings}


class XfmrBertLMHead(MaskedLMPredictionHead):
    """MLM head: dense -> activation -> LayerNorm -> decoder onto the vocabulary (tied to the input embeddings)."""

    def __init__(self, config):
        super().__init__(config.hidden_size, config.hidden_size, config.vocab_size, config.hidden_act,
                         config.layer_norm_eps)


# -- task heads (shared machinery in models/heads.py; BERT states its backbone and pooling) ----------
class XfmrBertForMaskedLM(MaskedLMHead, XfmrBertPreTrainedModel):
    base_model_class = XfmrBertModel
    base_model_kwargs = {"add_pooling_layer": False}
    lm_head_class = XfmrBertLMHead
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}


@dataclass
class XfmrBertForPreTrainingOutput(ModelOutput):
    """Output of `XfmrBertForPreTraining`: MLM logits, NSP logits and their summed loss."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class XfmrBertForPreTraining(TiedDecoderHead, TaskHead, XfmrBertPreTrainedModel):
    """MLM + next-sentence prediction (NSP), the original BERT pretraining objective."""

    base_model_class = XfmrBertModel
    base_model_kwargs = {"add_pooling_layer": True}
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.lm_head = XfmrBertLMHead(config)
        self.nsp_head = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, next_sentence_label=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        """`labels` (B, T) as for MLM; `next_sentence_label` (B,): 0 = B follows A, 1 = B is random."""
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds, token_labels=labels,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        sparse = self.config.sparse_prediction and self.training
        logits, loss = masked_lm_logits_and_loss(self.lm_head, out.last_hidden_state, labels, sparse)
        nsp_logits = self.nsp_head(out.pooler_output)  # (B, 2)
        if loss is not None and next_sentence_label is not None:
            loss = loss + token_loss(nsp_logits, next_sentence_label)
        return self.finish(XfmrBertForPreTrainingOutput(
            loss=loss, prediction_logits=logits, seq_relationship_logits=nsp_logits,
            hidden_states=out.hidden_states, attentions=out.attentions), return_dict)


class XfmrBertForSequenceClassification(SequenceClassificationHead, XfmrBertPreTrainedModel):
    """Pooled [CLS] (tanh pooler) -> dropout -> linear. Regression when `num_labels == 1`."""

    base_model_class = XfmrBertModel
    base_model_kwargs = {"add_pooling_layer": True}
    pooling = "pooler"


class XfmrBertForTokenClassification(TokenClassificationHead, XfmrBertPreTrainedModel):
    base_model_class = XfmrBertModel
    base_model_kwargs = {"add_pooling_layer": False}


class XfmrBertForQuestionAnswering(QuestionAnsweringHead, XfmrBertPreTrainedModel):
    base_model_class = XfmrBertModel
    base_model_kwargs = {"add_pooling_layer": False}


class XfmrBertForMultipleChoice(MultipleChoiceHead, XfmrBertPreTrainedModel):
    """Each (context, choice) pair is encoded separately; pooled [CLS] -> one score per choice."""

    base_model_class = XfmrBertModel
    base_model_kwargs = {"add_pooling_layer": True}
    pooling = "pooler"


__all__ = [
    "XfmrBertPreTrainedModel",
    "XfmrBertModel",
    "XfmrBertForPreTraining",
    "XfmrBertForMaskedLM",
    "XfmrBertForSequenceClassification",
    "XfmrBertForTokenClassification",
    "XfmrBertForQuestionAnswering",
    "XfmrBertForMultipleChoice",
]
