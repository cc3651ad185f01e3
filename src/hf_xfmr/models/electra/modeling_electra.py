"""ELECTRA: a BERT-style encoder pretrained as a discriminator of replaced tokens.

Paper: Clark et al., 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than Generators",
https://arxiv.org/abs/2003.10555. Parity reference: transformers' `ElectraModel` and heads, through
`convert_electra.py`.

What differs from BERT:
- embeddings of width E (`embedding_size`), followed by a projection E -> C when E differs from the hidden
  size C (transformers' `embeddings_project`; ours `embeddings.hidden_proj`, ALBERT's name for the same map).
  Keeping it inside the embeddings module lets a generator and a discriminator share the token, position
  and type embeddings (and their LayerNorm, as the official code does) while each has its own projection;
- no pooler: sequence-level heads read the first token;
- `ForPreTraining` is the discriminator (sec. 2): dense -> activation -> dense(1), one "was this token
  replaced?" logit per token, binary cross-entropy over the real tokens; `ForMaskedLM` is the generator,
  whose head is dense C -> E -> GELU -> LayerNorm -> decoder E -> V tied to the word embeddings;
- sequence classification: first token -> dropout -> dense -> GELU -> dropout -> linear (the reference's
  `ElectraClassificationHead`; GELU whatever `hidden_act`, as there); multiple choice: the sequence summary
  (first token -> dense C -> C -> `summary_activation` -> dropout) -> linear(1).
Training both together (replaced-token detection) is `XfmrElectraForReplacedTokenDetection` in `rtd.py`.

Deliberate deviations from the reference (outputs are unchanged):
- module names are the ones shared by every hf_xfmr model (`q_proj`, ..., `up_proj`, `down_proj`, `norm`);
- unpadding (`config.unpad_inputs`, on by default), as in BERT: a right-padded batch runs on its N real
  tokens only; outputs at real positions are unchanged, hidden states at padding positions are zeros (so
  per-token heads hold their output for a zero vector there), and question answering masks padding;
- packed sequences (`models.packing`) attend to themselves only on every attention backend;
- with `config.sparse_prediction` in training mode with labels, the generator's head projects only labelled
  positions onto the vocabulary (`logits` is then (N, V)); the loss is the same number;
- the discriminator's loss averages over real tokens as the reference's does, written without boolean
  indexing (a weighted mean), so it compiles without graph breaks.

Shapes: B batch, T sequence length, E embedding size, C hidden size, H heads, D head size (C / H),
V vocabulary size, K number of choices, N number of real (unpadded) tokens or of labelled (masked) positions.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers.modeling_outputs import ModelOutput

from ...layers.dropout import Dropout
from ...layers.mlp import get_activation
from ..bert.modeling_bert import XfmrBertLayer
from ..encoder import (
    MaskedLMPredictionHead,
    PooledEncoderStack,
    default_position_ids,
)
from ..heads import (
    MaskedLMHead,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TaskHead,
    TokenClassificationHead,
    input_shape,
)
from ..input_checks import check_labels_shape
from ..pretrained import XfmrPreTrainedModel
from .configuration_electra import XfmrElectraConfig


class XfmrElectraEmbeddings(nn.Module):
    """Token + position + token type embeddings of width E, LayerNorm and dropout, then E -> C when E != C.

    The replaced-token-detection model gives its generator the discriminator's `word_embeddings`,
    `position_embeddings`, `token_type_embeddings` and `norm` (the same modules); `hidden_proj` stays each
    model's own."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.embedding_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.embedding_size)
        self.norm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        same = config.embedding_size == config.hidden_size
        self.hidden_proj = None if same else nn.Linear(config.embedding_size, config.hidden_size)

    default_position_ids = staticmethod(default_position_ids)  # (1, T)
    first_position = 0  # what a packed sequence's first token is numbered
    shared_parts = ("word_embeddings", "position_embeddings", "token_type_embeddings", "norm")

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        """`inputs_embeds` are (B, T, E): vectors of the embedding space, as `word_embeddings` gives."""
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, E)
        seq_len = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = self.default_position_ids(input_ids, seq_len, inputs_embeds.device)
        embeddings = inputs_embeds + self.position_embeddings(position_ids)
        if token_type_ids is None:  # every token is segment A: one (1, 1) id, broadcast
            token_type_ids = torch.zeros(1, 1, dtype=torch.long, device=embeddings.device)
        # Through the module, never its weight: the same modules run whatever the batch (ZeRO-3; see BERT).
        embeddings = self.dropout(self.norm(embeddings + self.token_type_embeddings(token_type_ids)))
        if self.hidden_proj is not None:
            embeddings = self.hidden_proj(embeddings)  # (B, T, E) -> (B, T, C)
        return embeddings


class XfmrElectraPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrElectraConfig
    _no_split_modules = ["XfmrBertLayer"]


class XfmrElectraModel(PooledEncoderStack, XfmrElectraPreTrainedModel):
    """The encoder: embeddings (E, projected to C), `num_hidden_layers` post-LN layers, no pooler.

    The forward is BERT's (`models.encoder.PooledEncoderStack.forward`); `inputs_embeds` is (B, T, E), and
    `hidden_states` holds the projected embeddings and every layer's output."""

    pooler = None  # ELECTRA has none: sequence-level heads read the first token

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = XfmrElectraEmbeddings(config)
        self.layers = nn.ModuleList(XfmrBertLayer(config, i) for i in range(config.num_hidden_layers))  # BERT's
        self.post_init()


class XfmrElectraGeneratorHead(MaskedLMPredictionHead):
    """The generator's MLM head: dense C -> E, GELU (whatever `hidden_act`, as the reference), LayerNorm, then
    the decoder E -> V (tied to the input embeddings)."""

    def __init__(self, config):
        super().__init__(config.hidden_size, config.embedding_size, config.vocab_size, "gelu", config.layer_norm_eps)


class XfmrElectraDiscriminatorHead(nn.Module):
    """dense C -> C, `hidden_act`, dense C -> 1: one logit per token, > 0 meaning "replaced"."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = get_activation(config.hidden_act)
        self.out_proj = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states):
        return self.out_proj(self.act(self.dense(hidden_states))).squeeze(-1)  # (..., C) -> (...)


class XfmrElectraClassificationHead(nn.Module):
    """Sequence classification on the first token: dropout -> dense -> GELU -> dropout -> linear."""

    def __init__(self, config, num_outputs: int, dropout: float):
        super().__init__()
        self.dropout = Dropout(dropout)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = get_activation("gelu")  # the reference's choice (BERT's pooler uses tanh)
        self.out_proj = nn.Linear(config.hidden_size, num_outputs)

    def forward(self, pooled):
        return self.out_proj(self.dropout(self.act(self.dense(self.dropout(pooled)))))  # (B, C) -> (B, outputs)


class XfmrElectraSequenceSummary(nn.Module):
    """Multiple choice on the first token: dense C -> C (`summary_use_proj`), `summary_activation`, dropout
    (`summary_last_dropout`), then `out_proj` C -> 1 (the reference's summary, then its `classifier`)."""

    def __init__(self, config, num_outputs: int):
        super().__init__()
        self.summary = nn.Linear(config.hidden_size, config.hidden_size) if config.summary_use_proj else None
        activation = config.summary_activation
        self.act = None if activation is None else nn.Tanh() if activation == "tanh" else get_activation(activation)
        self.dropout = Dropout(config.summary_last_dropout)
        self.out_proj = nn.Linear(config.hidden_size, num_outputs)

    def forward(self, pooled):
        if self.summary is not None:
            pooled = self.summary(pooled)  # (B, C)
        if self.act is not None:
            pooled = self.act(pooled)
        return self.out_proj(self.dropout(pooled))  # (B, C) -> (B, 1)


# -- task heads (shared machinery in models/heads.py; ELECTRA states its backbone and classifiers) ---
class XfmrElectraForMaskedLM(MaskedLMHead, XfmrElectraPreTrainedModel):
    """The generator: MLM on the masked positions (`labels` (B, T), -100 where nothing is predicted)."""

    base_model_class = XfmrElectraModel
    lm_head_class = XfmrElectraGeneratorHead
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}


@dataclass
class XfmrElectraForPreTrainingOutput(ModelOutput):
    """Output of `XfmrElectraForPreTraining`: one replaced-token logit per token and the binary loss."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def replaced_token_loss(logits, labels, attention_mask=None) -> torch.Tensor:
    """Binary cross-entropy of (B, T) replaced-token `logits` against `labels` (1 = replaced, 0 = original),
    averaged over the real tokens (`attention_mask` == 1; every token without a 2-D mask)."""
    per_token = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none")  # (B, T)
    if attention_mask is None or attention_mask.dim() != 2:
        return per_token.mean()
    weights = (attention_mask == 1).float()
    return (per_token * weights).sum() / weights.sum()


class XfmrElectraForPreTraining(TaskHead, XfmrElectraPreTrainedModel):
    """The discriminator: was each token replaced (1) or is it the original (0)?"""

    base_model_class = XfmrElectraModel

    def __init__(self, config):
        super().__init__(config)
        self.discriminator_head = XfmrElectraDiscriminatorHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        """`labels` (B, T): 1 where the token was replaced, 0 where it is the original; the loss covers the
        real tokens (`attention_mask` == 1)."""
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        logits = self.discriminator_head(out.last_hidden_state)  # (B, T)
        loss = replaced_token_loss(logits, labels, attention_mask) if labels is not None else None
        return self.finish(XfmrElectraForPreTrainingOutput(
            loss=loss, logits=logits, hidden_states=out.hidden_states, attentions=out.attentions), return_dict)


class XfmrElectraForSequenceClassification(SequenceClassificationHead, XfmrElectraPreTrainedModel):
    """First token -> dropout -> dense -> GELU -> dropout -> linear. Regression when `num_labels == 1`."""

    base_model_class = XfmrElectraModel
    pooling = "first"

    def build_classifier(self, config, num_outputs: int) -> nn.Module:
        return XfmrElectraClassificationHead(config, num_outputs, self.classifier_dropout_prob())


class XfmrElectraForTokenClassification(TokenClassificationHead, XfmrElectraPreTrainedModel):
    base_model_class = XfmrElectraModel


class XfmrElectraForQuestionAnswering(QuestionAnsweringHead, XfmrElectraPreTrainedModel):
    base_model_class = XfmrElectraModel


class XfmrElectraForMultipleChoice(MultipleChoiceHead, XfmrElectraPreTrainedModel):
    """Each (context, choice) pair is encoded separately; sequence summary of the first token -> one score."""

    base_model_class = XfmrElectraModel
    pooling = "first"

    def build_classifier(self, config, num_outputs: int) -> nn.Module:
        return XfmrElectraSequenceSummary(config, num_outputs)


__all__ = [
    "XfmrElectraPreTrainedModel",
    "XfmrElectraModel",
    "XfmrElectraForPreTraining",
    "XfmrElectraForMaskedLM",
    "XfmrElectraForSequenceClassification",
    "XfmrElectraForTokenClassification",
    "XfmrElectraForQuestionAnswering",
    "XfmrElectraForMultipleChoice",
]
