"""RoBERTa <-> transformers `Roberta*`: the only place that knows transformers' RoBERTa key layout."""

import dataclasses

from ..bert.convert_bert import CONVERSION as BERT_CONVERSION
from ..conversion import ENCODER_TASKS, task_classes
from . import modeling_roberta

HEAD_RULES = (
    ("lm_head.dense.", "lm_head.dense."),
    ("lm_head.norm.", "lm_head.layer_norm."),
    ("lm_head.decoder.", "lm_head.decoder."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)

# BERT's encoder layout, config checks and optional pooler, with RoBERTa's own heads and no pretraining task.
CONVERSION = dataclasses.replace(
    BERT_CONVERSION,
    hf_model_type="roberta",
    tasks=task_classes(modeling_roberta, ENCODER_TASKS, ours="Roberta"),
    hf_base_prefix="roberta",
    hf_config_class=None,  # None: derived again, RoBERTa's (see `Conversion`)
    config_class=None,
    head_rules=HEAD_RULES,
    aliases={"lm_head.bias": "lm_head.decoder.bias"},
)
