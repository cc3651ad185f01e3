"""ModernBERT <-> transformers `ModernBert*`: the only place that knows transformers' ModernBERT layout.

Besides renaming keys, configs translate between our three scalars (`global_attn_every_n_layers`,
`global_rope_theta`, `local_rope_theta`) and transformers' `layer_types` list and per-layer-type
`rope_parameters`; a transformers config whose layer pattern or RoPE type we cannot express is refused.
"""

from dataclasses import dataclass

import torch

from ..conversion import ENCODER_TASKS, Conversion, TensorRule, task_classes
from . import modeling_modernbert

# (ours, transformers) key prefixes inside the encoder.
ENCODER_RULES = (
    ("embeddings.word_embeddings.", "embeddings.tok_embeddings."),
    ("embeddings.norm.", "embeddings.norm."),
    ("layers.{i}.attn_norm.", "layers.{i}.attn_norm."),
    ("layers.{i}.attn.o_proj.", "layers.{i}.attn.Wo."),
    ("layers.{i}.mlp_norm.", "layers.{i}.mlp_norm."),
    ("layers.{i}.mlp.up_proj.", "layers.{i}.mlp.Wi."),
    ("layers.{i}.mlp.down_proj.", "layers.{i}.mlp.Wo."),
    ("final_norm.", "final_norm."),
)

# transformers fuses the query, key and value projections into one `Wqkv` (rows: q, then k, then v).
TENSOR_RULES = tuple(
    TensorRule(
        ours=tuple(f"layers.{{i}}.attn.{name}_proj.{kind}" for name in "qkv"),
        theirs=f"layers.{{i}}.attn.Wqkv.{kind}",
        to_hf=lambda q, k, v: torch.cat([q, k, v], dim=0),
        from_hf=lambda qkv: tuple(t.clone() for t in qkv.chunk(3, dim=0)),
    )
    for kind in ("weight", "bias")
)

# Task heads: transformers keeps the prediction head as `head` and the last layer as `classifier`
# (`decoder` for MLM); ours nests both in the task's module.
HEAD_RULES = (
    ("classifier.dense.", "head.dense."),
    ("classifier.norm.", "head.norm."),
    ("classifier.out_proj.", "classifier."),
)
TASK_HEAD_RULES = {
    "masked-lm": (
        ("lm_head.dense.", "head.dense."),
        ("lm_head.norm.", "head.norm."),
        ("lm_head.decoder.", "decoder."),
    ),
    "question-answering": (
        ("qa_outputs.dense.", "head.dense."),
        ("qa_outputs.norm.", "head.norm."),
        ("qa_outputs.out_proj.", "classifier."),
    ),
}
GLOBAL, LOCAL = "full_attention", "sliding_attention"


def _every_n(layer_types) -> int:
    """The n of a layer pattern "global every n-th layer, starting with the first"; ValueError otherwise."""
    globals_ = [i for i, kind in enumerate(layer_types) if kind == GLOBAL]
    unknown = sorted(set(layer_types) - {GLOBAL, LOCAL})
    if unknown:
        raise ValueError(f"ModernBERT layer types {unknown} are not supported; only {GLOBAL!r} and {LOCAL!r}.")
    if not globals_ or globals_[0] != 0:
        raise ValueError(f"hf_xfmr's ModernBERT needs the first layer global; got layer_types={layer_types}.")
    n = globals_[1] - globals_[0] if len(globals_) > 1 else len(layer_types)
    expected = [GLOBAL if i % n == 0 else LOCAL for i in range(len(layer_types))]
    if list(layer_types) != expected:
        raise ValueError(
            f"layer_types={layer_types} is not a 'global every n-th layer' pattern, which is all hf_xfmr's "
            f"ModernBERT (`global_attn_every_n_layers`) can express."
        )
    return n


def _theta(hf_config, kind) -> float:
    params = (hf_config.rope_parameters or {}).get(kind) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"RoPE type {rope_type!r} ({kind} layers) is not supported; only 'default'.")
    return float(params["rope_theta"])


def check_hf_config(hf_config) -> None:
    if hf_config.local_attention % 2:
        raise ValueError(f"local_attention={hf_config.local_attention} is odd; ModernBERT windows are even.")


@dataclass(frozen=True)
class ModernBertConversion(Conversion):
    """The generic `Conversion` plus the translation between our three layer-pattern / RoPE scalars and
    transformers' `layer_types` and `rope_parameters` (see the module docstring)."""

    def config_kwargs_from_transformers(self, hf_config):
        kwargs = super().config_kwargs_from_transformers(hf_config)
        kwargs.update(global_attn_every_n_layers=_every_n(hf_config.layer_types),
                      global_rope_theta=_theta(hf_config, GLOBAL), local_rope_theta=_theta(hf_config, LOCAL))
        return kwargs

    def config_kwargs_to_transformers(self, config):
        kwargs = super().config_kwargs_to_transformers(config)
        kwargs["layer_types"] = [GLOBAL if config.is_global_layer(i) else LOCAL
                                 for i in range(config.num_hidden_layers)]
        kwargs["rope_parameters"] = {GLOBAL: {"rope_type": "default", "rope_theta": config.global_rope_theta},
                                     LOCAL: {"rope_type": "default", "rope_theta": config.local_rope_theta}}
        return kwargs

CONVERSION = ModernBertConversion(
    hf_model_type="modernbert",
    tasks=task_classes(modeling_modernbert, ENCODER_TASKS, ours="ModernBert"),
    hf_base_prefix="model",
    body_rules=ENCODER_RULES,
    head_rules=HEAD_RULES,
    task_head_rules=TASK_HEAD_RULES,
    tensor_rules=TENSOR_RULES,
    check_hf_config=check_hf_config,
)
