"""ELECTRA <-> transformers `Electra*`: the only place that knows transformers' ELECTRA key layout."""

from ..conversion import ENCODER_TASKS, Conversion, task_classes
from . import modeling_electra

# (ours, transformers) key prefixes inside the encoder.
ENCODER_RULES = (
    ("embeddings.hidden_proj.", "embeddings_project."),
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
)

# The encoder's heads, and pretraining: the discriminator (`ForPreTraining`); the generator is `ForMaskedLM`.
TASKS = ("base", "pretraining", *ENCODER_TASKS[1:])

HEAD_RULES = (
    ("lm_head.dense.", "generator_predictions.dense."),
    ("lm_head.norm.", "generator_predictions.LayerNorm."),
    ("lm_head.decoder.", "generator_lm_head."),
    ("discriminator_head.dense.", "discriminator_predictions.dense."),
    ("discriminator_head.out_proj.", "discriminator_predictions.dense_prediction."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)

# Multiple choice: transformers keeps the summary apart from the one-score `classifier`; ours is one module.
TASK_HEAD_RULES = {
    "multiple-choice": (
        ("classifier.summary.", "sequence_summary.summary."),
        ("classifier.out_proj.", "classifier."),
    ),
}


def check_hf_config(config) -> None:
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ValueError("hf_xfmr's ELECTRA is an encoder: decoder / cross-attention ELECTRA checkpoints "
                         "(transformers' `ElectraForCausalLM`) are not supported.")
    summary_type = getattr(config, "summary_type", "first")
    if summary_type != "first":
        raise ValueError(f"summary_type={summary_type!r} is not supported; ELECTRA's multiple-choice head reads the "
                         f"first token ('first').")


CONVERSION = Conversion(
    hf_model_type="electra",
    tasks=task_classes(modeling_electra, TASKS, ours="Electra"),
    hf_base_prefix="electra",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    task_head_rules=TASK_HEAD_RULES,
    check_hf_config=check_hf_config,
)
