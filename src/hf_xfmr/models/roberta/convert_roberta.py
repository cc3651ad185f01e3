"""RoBERTa <-> transformers `Roberta*`: the only place that knows transformers' RoBERTa key layout."""

from transformers import RobertaConfig

from .configuration_roberta import XfmrRobertaConfig
from ..bert.convert_bert import ENCODER_RULES, check_hf_config, pooler_kwargs
from ..conversion import Conversion
from .modeling_roberta import (
    XfmrRobertaForMaskedLM,
    XfmrRobertaForMultipleChoice,
    XfmrRobertaForQuestionAnswering,
    XfmrRobertaForSequenceClassification,
    XfmrRobertaForTokenClassification,
    XfmrRobertaModel,
)

HEAD_RULES = (
    ("lm_head.dense.", "lm_head.dense."),
    ("lm_head.norm.", "lm_head.layer_norm."),
    ("lm_head.decoder.", "lm_head.decoder."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)

CONVERSION = Conversion(
    hf_model_type="roberta",
    hf_config_class=RobertaConfig,
    config_class=XfmrRobertaConfig,
    tasks={
        "base": ("RobertaModel", XfmrRobertaModel),
        "masked-lm": ("RobertaForMaskedLM", XfmrRobertaForMaskedLM),
        "sequence-classification": ("RobertaForSequenceClassification", XfmrRobertaForSequenceClassification),
        "token-classification": ("RobertaForTokenClassification", XfmrRobertaForTokenClassification),
        "question-answering": ("RobertaForQuestionAnswering", XfmrRobertaForQuestionAnswering),
        "multiple-choice": ("RobertaForMultipleChoice", XfmrRobertaForMultipleChoice),
    },
    hf_base_prefix="roberta",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    aliases={"lm_head.bias": "lm_head.decoder.bias"},
    check_hf_config=check_hf_config,
    base_init_kwargs=pooler_kwargs,
)
