"""BERT <-> transformers `Bert*`: the only place that knows transformers' BERT key layout."""

from ..conversion import ENCODER_TASKS, Conversion, pooler_init_kwargs, task_classes
from . import modeling_bert

# (ours, transformers) key prefixes inside the encoder.
ENCODER_RULES = (
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("embeddings.", "embeddings."),
    ("layers.{i}.attn.q_proj.", "encoder.layer.{i}.attention.self.query."),
    ("layers.{i}.attn.k_proj.", "encoder.layer.{i}.attention.self.key."),
    ("layers.{i}.attn.v_proj.", "encoder.layer.{i}.attention.self.value."),
    ("layers.{i}.attn.o_proj.", "encoder.layer.{i}.attention.output.dense."),
    ("layers.{i}.attn_norm.", "encoder.layer.{i}.attention.output.LayerNorm."),
    ("layers.{i}.mlp.up_proj.", "encoder.layer.{i}.intermediate.dense."),
    ("layers.{i}.mlp.down_proj.", "encoder.layer.{i}.output.dense."),
    ("layers.{i}.mlp_norm.", "encoder.layer.{i}.output.LayerNorm."),
    ("pooler.dense.", "pooler.dense."),
)

# The encoder's heads, and pretraining: MLM + next-sentence prediction.
TASKS = ("base", "pretraining", *ENCODER_TASKS[1:])

HEAD_RULES = (
    ("lm_head.dense.", "cls.predictions.transform.dense."),
    ("lm_head.norm.", "cls.predictions.transform.LayerNorm."),
    ("lm_head.decoder.", "cls.predictions.decoder."),
    ("nsp_head.", "cls.seq_relationship."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)


def check_hf_config(config) -> None:
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ValueError("hf_xfmr's BERT is an encoder: decoder / cross-attention BERT checkpoints are not supported.")
    position_type = getattr(config, "position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"position_embedding_type={position_type!r} is not supported; only 'absolute'.")


CONVERSION = Conversion(
    hf_model_type="bert",
    tasks=task_classes(modeling_bert, TASKS, ours="Bert"),
    hf_base_prefix="bert",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    aliases={"cls.predictions.bias": "cls.predictions.decoder.bias"},
    check_hf_config=check_hf_config,
    base_init_kwargs=pooler_init_kwargs,
)
