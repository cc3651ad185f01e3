"""ALBERT <-> transformers `Albert*`: the only place that knows transformers' ALBERT key layout."""

from ..conversion import ENCODER_TASKS, Conversion, pooler_init_kwargs, task_classes
from . import modeling_albert

# (ours, transformers) key prefixes inside the encoder; {i} is the group, {j} the layer inside it.
_LAYER = "layer_groups.{i}.layers.{j}."
_HF_LAYER = "encoder.albert_layer_groups.{i}.albert_layers.{j}."
ENCODER_RULES = (
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("embeddings.hidden_proj.", "encoder.embedding_hidden_mapping_in."),
    ("embeddings.", "embeddings."),
    (_LAYER + "attn.q_proj.", _HF_LAYER + "attention.query."),
    (_LAYER + "attn.k_proj.", _HF_LAYER + "attention.key."),
    (_LAYER + "attn.v_proj.", _HF_LAYER + "attention.value."),
    (_LAYER + "attn.o_proj.", _HF_LAYER + "attention.dense."),
    (_LAYER + "attn_norm.", _HF_LAYER + "attention.LayerNorm."),
    (_LAYER + "mlp.up_proj.", _HF_LAYER + "ffn."),
    (_LAYER + "mlp.down_proj.", _HF_LAYER + "ffn_output."),
    (_LAYER + "mlp_norm.", _HF_LAYER + "full_layer_layer_norm."),
    ("pooler.dense.", "pooler."),
)

HEAD_RULES = (
    ("lm_head.dense.", "predictions.dense."),
    ("lm_head.norm.", "predictions.LayerNorm."),
    ("lm_head.decoder.", "predictions.decoder."),
    ("sop_head.", "sop_classifier.classifier."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
)


def check_hf_config(config) -> None:
    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    if layers % groups != 0:
        raise ValueError(
            f"This ALBERT checkpoint has num_hidden_groups={groups}, which does not divide "
            f"num_hidden_layers={layers}; hf_xfmr's ALBERT needs groups of equal size."
        )


CONVERSION = Conversion(
    hf_model_type="albert",
    tasks=task_classes(modeling_albert, ("base", "pretraining", *ENCODER_TASKS[1:]), ours="Albert"),
    hf_base_prefix="albert",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    # transformers keeps the MLM output bias twice: `predictions.bias` is `predictions.decoder.bias`.
    aliases={"predictions.bias": "predictions.decoder.bias"},
    check_hf_config=check_hf_config,
    base_init_kwargs=pooler_init_kwargs,
)
