"""ALBERT: a BERT-style encoder with factorised embeddings and parameters shared across layers.

Paper: Lan et al., 2020, "ALBERT: A Lite BERT for Self-supervised Learning of Language Representations",
https://arxiv.org/abs/1909.11942. Parity reference: transformers' `AlbertModel` and heads, through
`convert_albert.py`.

What differs from BERT (paper sec. 3.1):
- factorised embeddings: tokens are embedded in a small space E (V x E) and projected to the hidden
  width C by one linear map (E -> C), so the vocabulary costs V*E + E*C instead of V*C parameters;
  the MLM head projects back down to E and decodes with the (tied) V x E matrix;
- cross-layer sharing: the `num_hidden_layers` layer applications draw their weights from
  `num_hidden_groups` groups, each holding `inner_group_num` distinct layers. With one group of one
  layer (every published ALBERT) the same layer is applied `num_hidden_layers` times:

      embeddings (V x E) -> hidden_proj (E -> C) -> [group g(i)] x num_hidden_layers -> pooler
      group g(i) = layer_groups[i // (num_hidden_layers / num_hidden_groups)] = inner layers 0..inner_group_num-1

- sentence-order prediction (SOP, sec. 4.2) replaces NSP in `ForPreTraining`.

Deliberate deviations from the reference (outputs are unchanged):
- gradient checkpointing works (each layer application is checkpointed; transformers' ALBERT lacks it);
- `num_hidden_groups` must divide `num_hidden_layers` (the reference silently accepts uneven groups);
- with `config.sparse_prediction` in training mode with labels, the MLM head projects only labelled
  positions onto the vocabulary (`logits` is then (N, V)); the loss is the same number;
- module names are the ones shared by every hf_xfmr model (`q_proj`, ..., `up_proj`, `down_proj`);
- unpadding (`config.unpad_inputs`, on by default), as in BERT: a right-padded batch runs on its N real
  tokens only (attention per sequence); outputs at real positions are unchanged, hidden states at padding
  positions are zeros, and question answering masks padding (`heads.QuestionAnsweringHead`).
As in the reference (and unlike Google's TF code), the feed-forward output has no dropout.

Shapes: B batch, T sequence length, E embedding size, C hidden size, H heads, D head size (C / H),
V vocabulary size, N number of real (unpadded) tokens or of labelled (masked) positions.
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
    DropoutLinear,
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
from .configuration_albert import XfmrAlbertConfig


class XfmrAlbertEmbeddings(nn.Module):
    """Token + position + token type embeddings of width E, LayerNorm and dropout, then E -> C."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.embedding_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.embedding_size)
        self.norm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.hidden_proj = nn.Linear(config.embedding_size, config.hidden_size)  # the factorisation's E -> C

    default_position_ids = staticmethod(default_position_ids)  # (1, T)
    first_position = 0  # what a packed sequence's first token is numbered

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        """`inputs_embeds` are (B, T, E): vectors of the small embedding space, as `word_embeddings` gives."""
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, E)
        seq_len = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = self.default_position_ids(input_ids, seq_len, inputs_embeds.device)
        embeddings = inputs_embeds + self.position_embeddings(position_ids)
        if token_type_ids is None:
            embeddings = embeddings + self.token_type_embeddings.weight[0]  # every token is segment A
        else:
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.hidden_proj(self.dropout(self.norm(embeddings)))  # (B, T, E) -> (B, T, C)


class XfmrAlbertAttention(EncoderSelfAttention):
    """Multi-head self-attention (`models.encoder.EncoderSelfAttention`, shared by the BERT family)."""

    def __init__(self, config):
        super().__init__(config, config.hidden_size, config.num_attention_heads, config.attention_probs_dropout_prob)


class XfmrAlbertLayer(PostNormEncoderLayer):
    """Post-LN block: x = LN(x + dropout(Attn(x))); x = LN(x + MLP(x)), no MLP dropout. One instance may run
    many times."""

    def __init__(self, config):
        super().__init__(XfmrAlbertAttention(config), config.hidden_size, config.intermediate_size,
                         config.hidden_act, config.layer_norm_eps, mlp_dropout=0.0,
                         attn_dropout=config.hidden_dropout_prob)


class XfmrAlbertLayerGroup(nn.Module):
    """`inner_group_num` distinct layers, applied in order each time the group is used."""

    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(XfmrAlbertLayer(config) for _ in range(config.inner_group_num))


# Copied from hf_xfmr.models.bert.modeling_bert.XfmrBertPooler with Bert->Albert, NSP->SOP
class XfmrAlbertPooler(TanhPooler):
    """tanh(W h_[CLS] + b): the sentence representation used by SOP and sequence-level heads."""

    def __init__(self, config):
        super().__init__(config.hidden_size)


class XfmrAlbertPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrAlbertConfig
    _no_split_modules = ["XfmrAlbertLayerGroup"]


class XfmrAlbertModel(PooledEncoderStack, XfmrAlbertPreTrainedModel):
    """The encoder: factorised embeddings, `num_hidden_layers` applications of shared layers, optional pooler.

    The forward is BERT's (`models.encoder.PooledEncoderStack.forward`); `inputs_embeds` is (B, T, E), and
    `hidden_states` holds the projected embeddings and the output of every layer application
    (1 + num_hidden_layers * inner_group_num entries)."""

    def __init__(self, config, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = XfmrAlbertEmbeddings(config)
        self.layer_groups = nn.ModuleList(XfmrAlbertLayerGroup(config) for _ in range(config.num_hidden_groups))
        self.pooler = XfmrAlbertPooler(config) if add_pooling_layer else None
        self.post_init()

    def layer_schedule(self):
        """The layers in the order they are applied: `num_hidden_layers` x `inner_group_num` entries."""
        per_group = self.config.num_hidden_layers // self.config.num_hidden_groups
        return [layer for i in range(self.config.num_hidden_layers)
                for layer in self.layer_groups[i // per_group].layers]

    def encoder_layers(self):
        return self.layer_schedule()


class XfmrAlbertLMHead(MaskedLMPredictionHead):
    """MLM head: dense C -> E, activation, LayerNorm, then the decoder E -> V (tied to the input embeddings)."""

    def __init__(self, config):
        super().__init__(config.hidden_size, config.embedding_size, config.vocab_size, config.hidden_act,
                         config.layer_norm_eps)


# -- task heads (shared machinery in models/heads.py; ALBERT states its backbone and pooling) --------
# Copied from hf_xfmr.models.bert.modeling_bert.XfmrBertForMaskedLM with Bert->Albert
class XfmrAlbertForMaskedLM(MaskedLMHead, XfmrAlbertPreTrainedModel):
    base_model_class = XfmrAlbertModel
    base_model_kwargs = {"add_pooling_layer": False}
    lm_head_class = XfmrAlbertLMHead
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}


@dataclass
class XfmrAlbertForPreTrainingOutput(ModelOutput):
    """Output of `XfmrAlbertForPreTraining`: MLM logits, SOP logits and their summed loss."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    sop_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class XfmrAlbertForPreTraining(TiedDecoderHead, TaskHead, XfmrAlbertPreTrainedModel):
    """MLM + sentence-order prediction (SOP): is segment B the continuation of A (0) or swapped (1)?"""

    base_model_class = XfmrAlbertModel
    base_model_kwargs = {"add_pooling_layer": True}
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.lm_head = XfmrAlbertLMHead(config)
        # `num_labels` outputs (2 by default), as the reference sizes its SOP classifier.
        self.sop_head = DropoutLinear(config.hidden_size, config.num_labels, self.classifier_dropout_prob())
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, sentence_order_label=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        """`labels` (B, T) as for MLM; `sentence_order_label` (B,): 0 = A then B (original order), 1 = swapped.

        The loss is the MLM loss when `labels` are given, plus the SOP loss when `sentence_order_label` is.
        """
        check_labels_shape("labels", labels, input_shape(input_ids, inputs_embeds))
        source = input_ids if input_ids is not None else inputs_embeds
        if sentence_order_label is not None and source is not None and (
                sentence_order_label.reshape(-1).shape[0] != source.shape[0]):
            raise ValueError(f"`sentence_order_label` must hold one label per sequence ({source.shape[0]}), "
                             f"got shape {tuple(sentence_order_label.shape)}.")
        out = self.encode(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, inputs_embeds=inputs_embeds, token_labels=labels,
                          output_attentions=output_attentions, output_hidden_states=output_hidden_states, **kwargs)
        sparse = self.config.sparse_prediction and self.training
        logits, loss = masked_lm_logits_and_loss(self.lm_head, out.last_hidden_state, labels, sparse)
        sop_logits = self.sop_head(out.pooler_output)  # (B, num_labels)
        if sentence_order_label is not None:
            sop_loss = token_loss(sop_logits, sentence_order_label)
            loss = sop_loss if loss is None else loss + sop_loss
        return self.finish(XfmrAlbertForPreTrainingOutput(
            loss=loss, prediction_logits=logits, sop_logits=sop_logits,
            hidden_states=out.hidden_states, attentions=out.attentions), return_dict)


class XfmrAlbertForSequenceClassification(SequenceClassificationHead, XfmrAlbertPreTrainedModel):
    """Pooled [CLS] (tanh pooler) -> dropout (`classifier_dropout_prob`) -> linear. Regression when `num_labels == 1`."""

    base_model_class = XfmrAlbertModel
    base_model_kwargs = {"add_pooling_layer": True}
    pooling = "pooler"


# Copied from hf_xfmr.models.bert.modeling_bert.XfmrBertForTokenClassification with Bert->Albert
class XfmrAlbertForTokenClassification(TokenClassificationHead, XfmrAlbertPreTrainedModel):
    base_model_class = XfmrAlbertModel
    base_model_kwargs = {"add_pooling_layer": False}


# Copied from hf_xfmr.models.bert.modeling_bert.XfmrBertForQuestionAnswering with Bert->Albert
class XfmrAlbertForQuestionAnswering(QuestionAnsweringHead, XfmrAlbertPreTrainedModel):
    base_model_class = XfmrAlbertModel
    base_model_kwargs = {"add_pooling_layer": False}


# Copied from hf_xfmr.models.bert.modeling_bert.XfmrBertForMultipleChoice with Bert->Albert
class XfmrAlbertForMultipleChoice(MultipleChoiceHead, XfmrAlbertPreTrainedModel):
    """Each (context, choice) pair is encoded separately; pooled [CLS] -> one score per choice."""

    base_model_class = XfmrAlbertModel
    base_model_kwargs = {"add_pooling_layer": True}
    pooling = "pooler"


__all__ = [
    "XfmrAlbertPreTrainedModel",
    "XfmrAlbertModel",
    "XfmrAlbertForPreTraining",
    "XfmrAlbertForMaskedLM",
    "XfmrAlbertForSequenceClassification",
    "XfmrAlbertForTokenClassification",
    "XfmrAlbertForQuestionAnswering",
    "XfmrAlbertForMultipleChoice",
]
