"""BigBird <-> transformers `BigBird*`: the only place that knows transformers' BigBird key layout."""

from ..bert.convert_bert import ENCODER_RULES as BERT_ENCODER_RULES
from ..bert.convert_bert import HEAD_RULES as BERT_HEAD_RULES
from ..conversion import ENCODER_TASKS, Conversion, pooler_init_kwargs, task_classes
from . import modeling_bigbird

# (ours, transformers) key prefixes inside the encoder: BERT's, with the pooler a bare linear layer there.
ENCODER_RULES = (
    *(rule for rule in BERT_ENCODER_RULES if not rule[0].startswith("pooler.")),
    ("pooler.dense.", "pooler."),
)

# The encoder's heads, and pretraining: MLM + next-sentence prediction.
TASKS = ("base", "pretraining", *ENCODER_TASKS[1:])

HEAD_RULES = (
    ("qa_outputs.mlp.up_proj.", "qa_classifier.intermediate.dense."),
    ("qa_outputs.mlp.down_proj.", "qa_classifier.output.dense."),
    ("qa_outputs.norm.", "qa_classifier.output.LayerNorm."),
    ("qa_outputs.out_proj.", "qa_classifier.qa_outputs."),
    *BERT_HEAD_RULES,
)


def check_hf_config(config) -> None:
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ValueError("hf_xfmr's BigBird is an encoder: decoder / cross-attention BigBird checkpoints "
                         "(transformers' `BigBirdForCausalLM`) are not supported.")


CONVERSION = Conversion(
    hf_model_type="big_bird",
    tasks=task_classes(modeling_bigbird, TASKS, ours="BigBird"),
    hf_base_prefix="bert",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    aliases={"cls.predictions.bias": "cls.predictions.decoder.bias"},
    check_hf_config=check_hf_config,
    base_init_kwargs=pooler_init_kwargs,
)
