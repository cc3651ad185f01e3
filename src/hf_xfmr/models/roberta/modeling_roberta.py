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
from transformers.modeling_outputs import SequenceClassifierOutput

from ...layers.mlp import get_activation
from .configuration_roberta import XfmrRobertaConfig
from ..bert.modeling_bert import (
    XfmrBertEmbeddings,
    XfmrBertForMaskedLM,
    XfmrBertForMultipleChoice,
    XfmrBertForQuestionAnswering,
    XfmrBertForTokenClassification,
    XfmrBertHeadModel,
    XfmrBertLMHead,
    XfmrBertModel,
    XfmrBertPreTrainedModel,
)
from ..losses import sequence_classification_loss


class XfmrRobertaEmbeddings(XfmrBertEmbeddings):
    """BERT embeddings with RoBERTa's position numbering, and padding_idx on the position table."""

    def __init__(self, config):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, config.hidden_size, padding_idx=config.pad_token_id
        )

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

    def __init__(self, config, dropout: nn.Dropout):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = dropout
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, hidden_states):
        x = self.dropout(hidden_states[:, 0])  # (B, C)
        x = self.dropout(torch.tanh(self.dense(x)))
        return self.out_proj(x)  # (B, num_labels)


class XfmrRobertaForMaskedLM(XfmrRobertaPreTrainedModel, XfmrBertForMaskedLM):
    base_model_class = XfmrRobertaModel
    lm_head_class = XfmrRobertaLMHead


class XfmrRobertaForSequenceClassification(XfmrRobertaPreTrainedModel, XfmrBertHeadModel):
    base_model_class = XfmrRobertaModel

    def __init__(self, config):
        super().__init__(config)
        self.classifier = XfmrRobertaClassificationHead(config, self.classifier_dropout())
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None,
                return_dict=None):
        out = self.encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                          output_attentions, output_hidden_states)
        logits = self.classifier(out.last_hidden_state)  # (B, num_labels)
        loss = sequence_classification_loss(logits, labels, self.config) if labels is not None else None
        return self.finish(SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                                    attentions=out.attentions), return_dict)


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
