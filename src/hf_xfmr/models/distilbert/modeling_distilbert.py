"""DistilBERT: BERT with half the layers, no token types and no pooler, trained by distillation.

Paper: Sanh et al., 2019, "DistilBERT, a distilled version of BERT: smaller, faster, cheaper and lighter",
https://arxiv.org/abs/1910.01108. Parity reference: transformers' `DistilBertModel` and heads, through
`convert_distilbert.py`. The distillation recipe itself is `hf_xfmr.training.distill`.

The layer is BERT's post-LN block with two differences kept from the reference: the attention output
gets no dropout before its residual add, and every LayerNorm uses eps 1e-12. There are no token type
embeddings (sec. 3: "the token-type embeddings and the pooler are removed"): passing `token_type_ids`
is an error. Sequence classification reads the [CLS] state through pre_classifier -> ReLU -> dropout
-> classifier (one `classifier` module here, its layers named `dense` and `out_proj`, so PEFT's default
`modules_to_save` covers it).

Deliberate deviations from the reference (outputs are unchanged):
- with `config.sparse_prediction` in training mode with labels, the MLM head projects only labelled
  positions onto the vocabulary (`logits` is then (N, V)); the loss is the same number;
- module names are the ones shared by every hf_xfmr model (`q_proj`, ..., `up_proj`, `down_proj`,
  `lm_head.decoder`); a student initialised from a BERT teacher therefore finds its weights by name;
- unpadding (`config.unpad_inputs`, on by default), as in BERT: a right-padded batch runs on its N real
  tokens only (attention per sequence); outputs at real positions are unchanged, hidden states at padding
  positions are zeros, and question answering masks padding (`heads.QuestionAnsweringHead`).

Shapes: B batch, T sequence length, C hidden size (`dim`), H heads, D head size (C / H), V vocabulary
size, N number of real (unpadded) tokens or of labelled (masked) positions.
"""


import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput

from ...layers.dropout import Dropout
from ...layers.init import normal_init_
from ..encoder import (
    EncoderSelfAttention,
    EncoderStack,
    MaskedLMPredictionHead,
    PostNormEncoderLayer,
    default_position_ids,
)
from ..heads import (
    DropoutLinear,
    MaskedLMHead,
    MultipleChoiceHead,
    QuestionAnsweringHead,
    SequenceClassificationHead,
    TokenClassificationHead,
)
from ..input_checks import check_encoder_inputs
from ..pretrained import XfmrPreTrainedModel
from .configuration_distilbert import XfmrDistilBertConfig

LAYER_NORM_EPS = 1e-12  # fixed in DistilBERT (not a config field)


def sinusoidal_positions(num_positions: int, dim: int) -> torch.Tensor:
    """(num_positions, dim) table: sin(p / 10000^(2k/dim)) in even columns 2k, cos(...) in odd columns 2k+1.

    Vaswani et al., 2017, sec. 3.5. Computed in float64, returned as float32.
    """
    positions = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    pair = torch.arange(dim, dtype=torch.float64) // 2  # (dim,): k for columns 2k and 2k+1
    angles = positions / torch.pow(10000.0, 2 * pair / dim)  # (P, dim)
    table = torch.empty(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles[:, 0::2])
    table[:, 1::2] = torch.cos(angles[:, 1::2])
    return table.float()


class XfmrDistilBertEmbeddings(nn.Module):
    """Token + absolute position embeddings, then LayerNorm and dropout (no token types)."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.position_embeddings.sinusoidal_init = config.sinusoidal_pos_embds  # read by _init_weights
        self.norm = nn.LayerNorm(config.dim, eps=LAYER_NORM_EPS)
        self.dropout = Dropout(config.dropout)

    default_position_ids = staticmethod(default_position_ids)  # (1, T)
    first_position = 0  # what a packed sequence's first token is numbered

    def forward(self, input_ids=None, position_ids=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, C)
        if position_ids is None:
            position_ids = self.default_position_ids(input_ids, inputs_embeds.shape[1], inputs_embeds.device)
        return self.dropout(self.norm(inputs_embeds + self.position_embeddings(position_ids)))


class XfmrDistilBertAttention(EncoderSelfAttention):
    """Multi-head self-attention (`models.encoder.EncoderSelfAttention`, shared by the BERT family)."""

    def __init__(self, config, layer_idx: int):
        super().__init__(config, config.dim, config.n_heads, config.attention_dropout)
        self.layer_idx = layer_idx


class XfmrDistilBertLayer(PostNormEncoderLayer):
    """Post-LN block: x = LN(x + Attn(x)); x = LN(x + dropout(MLP(x))): no dropout on the attention output."""

    def __init__(self, config, layer_idx: int):
        super().__init__(XfmrDistilBertAttention(config, layer_idx), config.dim, config.hidden_dim, config.activation,
                         LAYER_NORM_EPS, mlp_dropout=config.dropout)


class XfmrDistilBertPreTrainedModel(XfmrPreTrainedModel):
    config_class = XfmrDistilBertConfig
    _no_split_modules = ["XfmrDistilBertLayer"]

    def _init_weights(self, module):
        normal_init_(module, self.config.initializer_range)
        if getattr(module, "sinusoidal_init", False):
            init.copy_(module.weight, sinusoidal_positions(*module.weight.shape).to(module.weight.dtype))


class XfmrDistilBertModel(EncoderStack, XfmrDistilBertPreTrainedModel):
    """The encoder: embeddings and `n_layers` post-LN layers; no pooler."""

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = XfmrDistilBertEmbeddings(config)
        self.layers = nn.ModuleList(XfmrDistilBertLayer(config, i) for i in range(config.n_layers))
        self.post_init()

    def get_position_embeddings(self):
        return self.embeddings.position_embeddings

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
        """As `XfmrBertModel.forward` without token types: a (B, T) or ready-made (B, 1, T, T) mask, and the
        boundaries of packed sequences (`models.packing`)."""
        shape = check_encoder_inputs(
            input_ids, inputs_embeds, attention_mask, None, position_ids,
            vocab_size=self.config.vocab_size, type_vocab_size=None,
            max_positions=self.config.max_position_embeddings,
        )
        output_attentions, output_hidden_states, return_dict = self.output_flags(
            output_attentions, output_hidden_states, return_dict)

        inputs = {"input_ids": input_ids, "position_ids": position_ids, "inputs_embeds": inputs_embeds}
        hidden_states, all_hidden_states, all_attentions = self.run_encoder(
            self.layers, inputs, attention_mask, shape, output_attentions, output_hidden_states, packed)

        output = BaseModelOutput(last_hidden_state=hidden_states, hidden_states=all_hidden_states,
                                 attentions=all_attentions)
        return output if return_dict else output.to_tuple()


class XfmrDistilBertLMHead(MaskedLMPredictionHead):
    """MLM head: dense -> activation -> LayerNorm -> decoder onto the vocabulary (tied to the input embeddings)."""

    def __init__(self, config):
        super().__init__(config.dim, config.dim, config.vocab_size, config.activation, LAYER_NORM_EPS)


class XfmrDistilBertClassificationHead(nn.Module):
    """[CLS] state -> dense -> ReLU -> dropout -> out_proj (transformers' `pre_classifier` and
    `classifier`)."""

    def __init__(self, config, num_outputs: int):
        super().__init__()
        self.dense = nn.Linear(config.dim, config.dim)
        self.dropout = Dropout(config.seq_classif_dropout)
        self.out_proj = nn.Linear(config.dim, num_outputs)

    def forward(self, pooled):
        return self.out_proj(self.dropout(torch.relu(self.dense(pooled))))  # (B, num_outputs)


# -- task heads (shared machinery in models/heads.py; DistilBERT states its backbone and pooling) ----
class XfmrDistilBertForMaskedLM(MaskedLMHead, XfmrDistilBertPreTrainedModel):
    base_model_class = XfmrDistilBertModel
    lm_head_class = XfmrDistilBertLMHead
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embeddings.word_embeddings.weight"}


class XfmrDistilBertForSequenceClassification(SequenceClassificationHead, XfmrDistilBertPreTrainedModel):
    """[CLS] -> dense -> ReLU -> dropout (`seq_classif_dropout`) -> linear. Regression when `num_labels == 1`."""

    base_model_class = XfmrDistilBertModel
    pooling = "first"

    def build_classifier(self, config, num_outputs):
        return XfmrDistilBertClassificationHead(config, num_outputs)


class XfmrDistilBertForTokenClassification(TokenClassificationHead, XfmrDistilBertPreTrainedModel):
    """dropout (`dropout`) -> linear on every token."""

    base_model_class = XfmrDistilBertModel


class XfmrDistilBertForQuestionAnswering(QuestionAnsweringHead, XfmrDistilBertPreTrainedModel):
    """dropout (`qa_dropout`) -> `qa_outputs` on every token."""

    base_model_class = XfmrDistilBertModel

    def build_qa_outputs(self, config):
        return DropoutLinear(config.dim, 2, config.qa_dropout)


class XfmrDistilBertForMultipleChoice(MultipleChoiceHead, XfmrDistilBertPreTrainedModel):
    """Each (context, choice) pair is encoded separately; [CLS] -> the classification head -> one score."""

    base_model_class = XfmrDistilBertModel
    pooling = "first"

    def build_classifier(self, config, num_outputs):
        return XfmrDistilBertClassificationHead(config, num_outputs)


__all__ = [
    "XfmrDistilBertPreTrainedModel",
    "XfmrDistilBertModel",
    "XfmrDistilBertForMaskedLM",
    "XfmrDistilBertForSequenceClassification",
    "XfmrDistilBertForTokenClassification",
    "XfmrDistilBertForQuestionAnswering",
    "XfmrDistilBertForMultipleChoice",
]
