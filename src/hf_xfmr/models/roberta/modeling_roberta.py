"""RoBERTa: BERT's encoder trained longer, on more data, with dynamic masking and without NSP.

Paper: Liu et al., 2019, "RoBERTa: A Robustly Optimized BERT Pretraining Approach",
https://arxiv.org/abs/1907.11692. Parity reference: transformers' `RobertaModel` and heads, through
`convert_roberta.py`.

The network is BERT's (see `modeling_bert.py`); only these parts differ, so only these are new:
- positions are numbered from `pad_token_id + 1` and padding tokens keep position `pad_token_id`;
- the MLM head always uses exact GELU;
- sequence classification reads the <s> state through dense -> tanh -> out_proj instead of BERT's pooler;
- there is no NSP head (hence no `ForPreTraining`).

Shapes: B batch, T sequence length, C hidden size.
"""

import torch
from torch import nn

from ...layers.dropout import Dropout
from ...layers.mlp import get_activation
from ..bert.modeling_bert import (
    XfmrBertEmbeddings,
    XfmrBertForMaskedLM,
    XfmrBertForMultipleChoice,
    XfmrBertForQuestionAnswering,
    XfmrBertForTokenClassification,
    XfmrBertLMHead,
    XfmrBertModel,
    XfmrBertPreTrainedModel,
)
from ..heads import SequenceClassificationHead
from .configuration_roberta import XfmrRobertaConfig


class XfmrRobertaEmbeddings(XfmrBertEmbeddings):
    """BERT embeddings with RoBERTa's position numbering, and padding_idx on the position table."""

    def __init__(self, config):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=config.pad_token_id
        )
        # Positions start at pad_token_id + 1, so that many table entries are never used by real tokens.
        self.max_length = config.max_position_embeddings - self.padding_idx - 1
        self.first_position = self.padding_idx + 1

    def default_position_ids(self, input_ids, seq_len, device):
        if input_ids is None:  # embeddings given directly: no way to tell padding, number every token
            return torch.arange(self.padding_idx + 1, seq_len + self.padding_idx + 1, device=device).unsqueeze(0)
        not_pad = input_ids.ne(self.padding_idx).long()  # (B, T)
        return torch.cumsum(not_pad, dim=1) * not_pad + self.padding_idx  # (B, T); pads stay at padding_idx


class XfmrRobertaPreTrainedModel(XfmrBertPreTrainedModel):
    config_class = XfmrRobertaConfig


class XfmrRobertaModel(XfmrRobertaPreTrainedModel, XfmrBertModel):
    embeddings_class = XfmrRobertaEmbeddings


class XfmrRobertaLMHead(XfmrBertLMHead):
    def __init__(self, config):
        super().__init__(config)
        self.act = get_activation("gelu")  # RoBERTa's head ignores `hidden_act`


class XfmrRobertaClassificationHead(nn.Module):
    """<s> state -> dropout -> dense -> tanh -> dropout -> out_proj."""

    def __init__(self, config, num_labels: int, dropout: float):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = Dropout(dropout)
        self.out_proj = nn.Linear(config.hidden_size, num_labels)

    def forward(self, pooled):
        x = self.dropout(torch.tanh(self.dense(self.dropout(pooled))))  # (B, C)
        return self.out_proj(x)  # (B, num_labels)


class XfmrRobertaForMaskedLM(XfmrRobertaPreTrainedModel, XfmrBertForMaskedLM):
    base_model_class = XfmrRobertaModel
    lm_head_class = XfmrRobertaLMHead


class XfmrRobertaForSequenceClassification(SequenceClassificationHead, XfmrRobertaPreTrainedModel):
    base_model_class = XfmrRobertaModel
    base_model_kwargs = {"add_pooling_layer": False}
    pooling = "first"

    def build_classifier(self, config, num_outputs):
        return XfmrRobertaClassificationHead(config, num_outputs, self.classifier_dropout_prob())


class XfmrRobertaForTokenClassification(XfmrRobertaPreTrainedModel, XfmrBertForTokenClassification):
    base_model_class = XfmrRobertaModel


class XfmrRobertaForQuestionAnswering(XfmrRobertaPreTrainedModel, XfmrBertForQuestionAnswering):
    base_model_class = XfmrRobertaModel


class XfmrRobertaForMultipleChoice(XfmrRobertaPreTrainedModel, XfmrBertForMultipleChoice):
    base_model_class = XfmrRobertaModel


__all__ = [
    "XfmrRobertaPreTrainedModel",
    "XfmrRobertaModel",
    "XfmrRobertaForMaskedLM",
    "XfmrRobertaForSequenceClassification",
    "XfmrRobertaForTokenClassification",
    "XfmrRobertaForQuestionAnswering",
    "XfmrRobertaForMultipleChoice",
]
