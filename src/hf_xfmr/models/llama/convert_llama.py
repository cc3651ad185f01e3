"""Llama / Mistral / Qwen2 <-> transformers: the only place that knows transformers' key layout of the three.

The three share one layout: `model.embed_tokens`, `model.layers.{i}.input_layernorm`, `.self_attn.{q,k,v,o}_proj`,
`.post_attention_layernorm`, `.mlp.{gate,up,down}_proj`, `model.norm`, and the heads `lm_head`, `score`
(sequence and token classification) and `qa_outputs`; every key is only renamed. The question-answering
classes of Llama and Qwen2 keep their backbone under `transformer.` (transformers' backward compatibility).
One `Conversion` per transformers type, all three onto `XfmrLlamaConfig`, which records the type in
`hf_model_type` so that `to_transformers` gives back the source's type.
"""

import dataclasses

from ..conversion import Conversion, task_classes
from . import modeling_llama

TASKS = ("base", "causal-lm", "sequence-classification", "token-classification", "question-answering")

# (ours, transformers) key prefixes, relative to the base model.
BODY_RULES = (
    ("embed_tokens.", "embed_tokens."),
    ("layers.{i}.attn_norm.", "layers.{i}.input_layernorm."),
    ("layers.{i}.attn.", "layers.{i}.self_attn."),
    ("layers.{i}.mlp_norm.", "layers.{i}.post_attention_layernorm."),
    ("layers.{i}.mlp.", "layers.{i}.mlp."),
    ("norm.", "norm."),
)

HEAD_RULES = (
    ("lm_head.", "lm_head."),
    ("classifier.", "score."),
    ("qa_outputs.", "qa_outputs."),
)

QA = "question-answering"


@dataclasses.dataclass(frozen=True)
class LlamaConversion(Conversion):
    """The generic `Conversion` plus what differs between the three types: `hf_model_type` and Qwen2's q/k/v
    biases in our config, and the backbone prefix of the question-answering class (`qa_base_prefix`)."""

    qa_base_prefix: str = "model"

    def config_kwargs_from_transformers(self, hf_config):
        kwargs = super().config_kwargs_from_transformers(hf_config)
        kwargs["hf_model_type"] = self.hf_model_type
        kwargs["qkv_bias"] = self.hf_model_type == "qwen2"
        kwargs["rope_parameters"] = dict(hf_config.rope_parameters)
        return kwargs

    def config_kwargs_to_transformers(self, config):
        kwargs = super().config_kwargs_to_transformers(config)
        kwargs["rope_parameters"] = dict(config.rope_parameters)
        if self.hf_model_type == "qwen2":
            kwargs["use_sliding_window"] = False
        return kwargs

    def _qa_prefix(self, state_dict: dict, task: str, source: str, target: str) -> dict:
        if task != QA or source == target:
            return state_dict
        return {(target + key[len(source):] if key.startswith(source) else key): value
                for key, value in state_dict.items()}

    def state_dict_to_transformers(self, state_dict: dict, task: str) -> dict:
        out = super().state_dict_to_transformers(state_dict, task)
        return self._qa_prefix(out, task, f"{self.hf_base_prefix}.", f"{self.qa_base_prefix}.")

    def state_dict_from_transformers(self, state_dict: dict, task: str) -> dict:
        state_dict = self._qa_prefix(state_dict, task, f"{self.qa_base_prefix}.", f"{self.hf_base_prefix}.")
        return super().state_dict_from_transformers(state_dict, task)


def check_hf_config(config) -> None:
    if getattr(config, "use_sliding_window", False):
        raise ValueError(
            "Qwen2 checkpoints with use_sliding_window=True (a sliding window on the layers from max_window_layers "
            "on) are not supported by hf_xfmr's Llama family; the published Qwen2 checkpoints leave it off."
        )
    rope = getattr(config, "rope_parameters", None) or {}
    if any(isinstance(value, dict) for value in rope.values()):
        raise ValueError(f"Per-layer RoPE parameters ({sorted(rope)}) are not supported; one rope_parameters dict is.")
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        raise ValueError(f"pretraining_tp={config.pretraining_tp}: only 1 (no tensor-parallel emulation) is "
                         f"supported; transformers' own Llama ignores it too. Set pretraining_tp=1.")
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        raise ValueError(f"eos_token_id={eos!r}: hf_xfmr's Llama takes a single end-of-sequence id in the model "
                         f"config; set one (the generation config may still list several).")


def _conversion(hf_model_type: str, theirs: str, qa_base_prefix: str = "model") -> LlamaConversion:
    return LlamaConversion(
        hf_model_type=hf_model_type,
        tasks=task_classes(modeling_llama, TASKS, ours="Llama", theirs=theirs),
        hf_base_prefix="model",
        body_rules=BODY_RULES,
        head_rules=HEAD_RULES,
        config_extras=("classifier_dropout",),
        check_hf_config=check_hf_config,
        qa_base_prefix=qa_base_prefix,
    )


CONVERSION = _conversion("llama", "Llama", qa_base_prefix="transformer")
MISTRAL_CONVERSION = _conversion("mistral", "Mistral")
QWEN2_CONVERSION = _conversion("qwen2", "Qwen2", qa_base_prefix="transformer")
