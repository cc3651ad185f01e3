"""ELECTRA <-> transformers `Electra*`: the only place that knows transformers' ELECTRA key layout."""

from ..bert.convert_bert import ENCODER_RULES as BERT_ENCODER_RULES
from ..conversion import ENCODER_TASKS, Conversion, task_classes
from . import modeling_electra

# (ours, transformers) key prefixes inside the encoder: BERT's, with the E -> C projection and no pooler.
ENCODER_RULES = (
    ("embeddings.hidden_proj.", "embeddings_project."),
    *(rule for rule in BERT_ENCODER_RULES if not rule[0].startswith("pooler.")),
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
