"""DistilBERT <-> transformers `DistilBert*`: the only place that knows transformers' DistilBERT key layout."""

from ..conversion import ENCODER_TASKS, Conversion, task_classes
from . import modeling_distilbert

# (ours, transformers) key prefixes inside the encoder.
ENCODER_RULES = (
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("embeddings.", "embeddings."),
    ("layers.{i}.attn.q_proj.", "transformer.layer.{i}.attention.q_lin."),
    ("layers.{i}.attn.k_proj.", "transformer.layer.{i}.attention.k_lin."),
    ("layers.{i}.attn.v_proj.", "transformer.layer.{i}.attention.v_lin."),
    ("layers.{i}.attn.o_proj.", "transformer.layer.{i}.attention.out_lin."),
    ("layers.{i}.attn_norm.", "transformer.layer.{i}.sa_layer_norm."),
    ("layers.{i}.mlp.up_proj.", "transformer.layer.{i}.ffn.lin1."),
    ("layers.{i}.mlp.down_proj.", "transformer.layer.{i}.ffn.lin2."),
    ("layers.{i}.mlp_norm.", "transformer.layer.{i}.output_layer_norm."),
)

HEAD_RULES = (
    ("lm_head.dense.", "vocab_transform."),
    ("lm_head.norm.", "vocab_layer_norm."),
    ("lm_head.decoder.", "vocab_projector."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)

# Sequence classification and multiple choice: transformers' `pre_classifier` and `classifier` are the two
# layers of our one `classifier` module (in token classification `classifier` is a plain linear layer).
_TWO_LAYER_CLASSIFIER = (
    ("classifier.dense.", "pre_classifier."),
    ("classifier.out_proj.", "classifier."),
)


CONVERSION = Conversion(
    hf_model_type="distilbert",
    tasks=task_classes(modeling_distilbert, ENCODER_TASKS, ours="DistilBert"),
    hf_base_prefix="distilbert",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    task_head_rules={"sequence-classification": _TWO_LAYER_CLASSIFIER, "multiple-choice": _TWO_LAYER_CLASSIFIER},
)
