"""Mixtral <-> transformers: the only place that knows transformers' key layout of Mixtral.

transformers 5 keeps the experts stacked, as we do (`mlp.gate.weight` (E, C), `mlp.experts.gate_up_proj`
(E, 2I, C), `mlp.experts.down_proj` (E, C, I)), so every key is only renamed, with the Llama family's rules
(`models/llama/convert_llama.py`). Checkpoints on the Hub in the older per-expert layout
(`block_sparse_moe.experts.{j}.w1` ...) are stacked by transformers' own loader before conversion.
"""

from ..conversion import Conversion, task_classes
from ..llama.convert_llama import BODY_RULES, HEAD_RULES
from . import modeling_mixtral

TASKS = ("base", "causal-lm", "sequence-classification", "token-classification", "question-answering")


class MixtralConversion(Conversion):
    """The generic `Conversion`, with `rope_parameters` copied rather than shared between the two configs."""

    def config_kwargs_from_transformers(self, hf_config):
        kwargs = super().config_kwargs_from_transformers(hf_config)
        kwargs["rope_parameters"] = dict(hf_config.rope_parameters)
        return kwargs

    def config_kwargs_to_transformers(self, config):
        kwargs = super().config_kwargs_to_transformers(config)
        kwargs["rope_parameters"] = dict(config.rope_parameters)
        return kwargs


def check_hf_config(config) -> None:
    rope = getattr(config, "rope_parameters", None) or {}
    if any(isinstance(value, dict) for value in rope.values()):
        raise ValueError(f"Per-layer RoPE parameters ({sorted(rope)}) are not supported; one rope_parameters dict is.")
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        raise ValueError(f"eos_token_id={eos!r}: hf_xfmr's Mixtral takes a single end-of-sequence id in the model "
                         f"config; set one (the generation config may still list several).")


CONVERSION = MixtralConversion(
    hf_model_type="mixtral",
    tasks=task_classes(modeling_mixtral, TASKS, ours="Mixtral", theirs="Mixtral"),
    hf_base_prefix="model",
    body_rules=BODY_RULES,
    head_rules=HEAD_RULES,
    config_extras=("classifier_dropout",),
    check_hf_config=check_hf_config,
)
