"""Conversion between transformers checkpoints and hf_xfmr models.

Each architecture describes itself once in its `convert_<arch>.py` as a `Conversion`: which transformers
classes match which of ours (by task), and the key renaming rules; its package registers it with
`register_conversion`. This module holds the machinery that applies such a description in either
direction, and the public `from_transformers` / `to_transformers` entry points; it imports no architecture.

It also installs the loader behind every hf_xfmr model's `from_pretrained` (`load_hook.ConvertsOnLoad`):
given a transformers checkpoint of the model's family, a folder or a Hub repo id, `from_pretrained`
converts it on load (`XfmrBertForSequenceClassification.from_pretrained("google-bert/bert-base-uncased",
num_labels=2)`); given another family's, it raises instead of returning random weights. Loading a folder
holds back transformers' own load report (`held_load_report`) and says what matters in it once, in a
`ConversionWarning` (new weights; weights the model has no place for).
"""

import contextlib
import dataclasses
import json
import logging
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import transformers
from transformers import PretrainedConfig, PreTrainedModel

from .config_utils import config_keyword_known, special_ids_outside_vocab_allowed, unknown_keywords_message
from .hub_loading import check_not_pickles_only, read_config, resolve_checkpoint
from .load_hook import LOADERS
from .weights import check_weight_files

# Config fields every PreTrainedConfig carries that describe the task rather than the architecture.
TASK_CONFIG_FIELDS = ("id2label", "label2id", "problem_type")


_PLACEHOLDER = re.compile(r"\\\{([a-z])\\\}")  # `{i}` as it reads after re.escape


def _rule_regex(template: str) -> re.Pattern:
    """'groups.{i}.layers.{j}.attn.' -> a regex matching that prefix and capturing each index by name."""
    return re.compile("^" + _PLACEHOLDER.sub(r"(?P<\1>\\d+)", re.escape(template)))


@dataclass(frozen=True)
class TensorRule:
    """Parameters whose tensors change layout between the two formats, not only their names.

    `ours` lists one or more of our parameter names, `theirs` the one transformers parameter they form
    together; names are relative to the base model (as in `body_rules`) and `{i}` is a layer index.
    `to_hf(*our_tensors) -> their_tensor` and `from_hf(their_tensor) -> tuple of our tensors` must be
    exact inverses (transposes, splits and concatenations are). Example, GPT-2's fused, transposed
    Conv1D attention input: ours (q_proj.weight, k_proj.weight, v_proj.weight) <-> theirs c_attn.weight.
    The same functions convert gradients (`convert_state_dict`), so they must be linear maps.
    `to_hf_shape_from` optionally names one of our parameters (same placeholders) whose shape `to_hf`
    needs: it is then called as `to_hf(*our_tensors, shape=that_parameter.shape)` (XLNet: the head count
    of a (C, H*D) projection comes from its (H, D) bias).
    """

    ours: tuple
    theirs: str
    to_hf: Callable
    from_hf: Callable
    to_hf_shape_from: str | None = None

    def __post_init__(self):
        if isinstance(self.ours, str):
            object.__setattr__(self, "ours", (self.ours,))


def transpose(tensor: torch.Tensor) -> torch.Tensor:
    """A 2-D weight transposed (Conv1D (in, out) <-> Linear (out, in)); a 1-D bias unchanged."""
    return tensor.t() if tensor.dim() == 2 else tensor


# The heads of a BERT-like encoder, in the order users see them (BERT and ALBERT add "pretraining").
ENCODER_TASKS = ("base", "masked-lm", "sequence-classification", "token-classification", "question-answering",
                 "multiple-choice")

# The ending a task's class names share on both sides: transformers' `BertForMaskedLM`, our `XfmrBertForMaskedLM`.
TASK_CLASS_SUFFIXES = {
    "base": "Model",
    "pretraining": "ForPreTraining",
    "masked-lm": "ForMaskedLM",
    "causal-lm": "ForCausalLM",
    "seq2seq-lm": "ForConditionalGeneration",
    "encoder": "EncoderModel",
    "sequence-classification": "ForSequenceClassification",
    "token-classification": "ForTokenClassification",
    "question-answering": "ForQuestionAnswering",
    "multiple-choice": "ForMultipleChoice",
}


def task_classes(module, tasks, *, ours: str, theirs: str | None = None, suffixes: dict | None = None,
                 hf_names: dict | None = None) -> dict:
    """A `Conversion.tasks` table, task -> (transformers class name, our class), for `tasks` in their order.

    Class names follow one convention: ours is `Xfmr{ours}{suffix}`, looked up in `module` (the architecture's
    modeling module), and transformers' is `{theirs}{suffix}` (`theirs` defaults to `ours`), with the suffix
    of `TASK_CLASS_SUFFIXES`. `suffixes` gives a task another suffix on both sides (XLNet's causal LM is
    `LMHeadModel`), `hf_names` another transformers name only (GPT-2's causal LM is `GPT2LMHeadModel`, ours
    `XfmrGPTForCausalLM`). A class missing from `module` is an AttributeError at import, naming it.
    """
    suffixes = {**TASK_CLASS_SUFFIXES, **(suffixes or {})}
    theirs = ours if theirs is None else theirs
    table = {}
    for task in tasks:
        our_name = f"Xfmr{ours}{suffixes[task]}"
        our_class = getattr(module, our_name, None)
        if our_class is None:
            raise AttributeError(f"{module.__name__} defines no {our_name}, the class of task {task!r}.")
        table[task] = ((hf_names or {}).get(task, f"{theirs}{suffixes[task]}"), our_class)
    return table


def pooler_init_kwargs(base_model) -> dict:
    """`Conversion.base_init_kwargs` of encoders with an optional pooler: both sides' base models have a
    `pooler` attribute that is None when built without one, and take `add_pooling_layer`."""
    return {"add_pooling_layer": base_model.pooler is not None}


@dataclass(frozen=True)
class Conversion:
    """How one transformers architecture maps onto ours.

    Rules are (our key prefix, transformers key prefix) pairs; `{i}` stands for a layer index, and
    further single-letter placeholders (`{j}`, ...) for nested indices (ALBERT's groups of layers).
    `body_rules` rename keys of the base model (relative to it); `head_rules` rename head keys of the
    full model, and `task_head_rules[task]` (tried first) those of one task only, for heads whose
    transformers names clash with another task's (GPT-2 calls the sequence classifier `score` but the
    token classifier `classifier`; DistilBERT's `classifier` is the last layer of a two-layer head in
    sequence classification, the only layer in token classification). `aliases` lists transformers
    keys that are tied copies of another transformers key (e.g. BERT's `cls.predictions.bias` is
    `cls.predictions.decoder.bias`). `tensor_rules` (`TensorRule`) convert base-model parameters whose
    layout differs (transposed, fused or split tensors) before any renaming. `config_extras` names
    fields of our config that transformers' config class does not declare but its models read when
    set (e.g. `classifier_dropout` on GPT-2): they are copied as plain attributes both ways.
    `tasks` is best built with `task_classes`. The two config classes follow from the rest unless given:
    transformers' is the one of `hf_model_type`, ours the one of our model classes.
    """

    hf_model_type: str
    tasks: dict  # task -> (transformers class name, our class)
    hf_base_prefix: str
    body_rules: tuple
    hf_config_class: type | None = None  # default: transformers.CONFIG_MAPPING[hf_model_type]
    config_class: type | None = None  # default: the `config_class` of our model classes
    head_rules: tuple = ()
    task_head_rules: dict = field(default_factory=dict)
    aliases: dict = field(default_factory=dict)
    check_hf_config: Callable | None = None  # raises for features we do not implement
    # Extra constructor arguments that mirror the source model (either side), e.g. whether a base model
    # has a pooler. Called as base_init_kwargs(source_model) for task "base" only.
    base_init_kwargs: Callable | None = None
    tensor_rules: tuple = ()  # TensorRule entries for base-model parameters
    config_extras: tuple = ()

    def __post_init__(self):
        if self.hf_config_class is None:
            object.__setattr__(self, "hf_config_class", transformers.CONFIG_MAPPING[self.hf_model_type])
        if self.config_class is None:
            config_classes = {our_class.config_class for _, our_class in self.tasks.values()}
            if len(config_classes) != 1:
                raise ValueError(f"{self.hf_model_type}: the model classes of `tasks` must share one config class "
                                 f"(or pass `config_class`); found {sorted(c.__name__ for c in config_classes)}.")
            object.__setattr__(self, "config_class", config_classes.pop())

    def config_from_model(self, source_model) -> PretrainedConfig:
        """Our config for a transformers model instance. By default from its config alone; an architecture
        whose weights tell something the config does not (T5: a tied or untied output layer) overrides it."""
        return self.config_from_transformers(source_model.config)

    def prepare_transformers_model(self, hf_model, model) -> None:
        """Adjust a freshly built transformers model before our weights are loaded into it (default: nothing;
        T5 unties `lm_head`, which transformers 5 always ties, when ours is untied)."""

    def init_kwargs(self, source_model, task: str) -> dict:
        if task != "base" or self.base_init_kwargs is None:
            return {}
        return self.base_init_kwargs(source_model)

    # -- configs ---------------------------------------------------------------------------------
    def _arch_fields(self, config_class) -> set:
        base = {f.name for f in dataclasses.fields(PretrainedConfig)}
        return {f.name for f in dataclasses.fields(config_class)} - base

    def config_from_transformers(self, hf_config) -> PretrainedConfig:
        if self.check_hf_config is not None:
            self.check_hf_config(hf_config)
        return self.config_class(**self.config_kwargs_from_transformers(hf_config))

    def config_to_transformers(self, config) -> PretrainedConfig:
        return self.hf_config_class(**self.config_kwargs_to_transformers(config))

    def config_kwargs_from_transformers(self, hf_config) -> dict:
        """Our config's keyword arguments for a transformers config: the fields both declare, the task fields
        and `config_extras`. An architecture whose fields differ in kind (ModernBERT) adds its own."""
        shared = self._arch_fields(self.config_class) & self._arch_fields(type(hf_config))
        kwargs = {name: getattr(hf_config, name) for name in (*shared, *TASK_CONFIG_FIELDS)}
        kwargs.update({name: getattr(hf_config, name) for name in self.config_extras if hasattr(hf_config, name)})
        return kwargs

    def config_kwargs_to_transformers(self, config) -> dict:
        """transformers' config keyword arguments for ours: the inverse of `config_kwargs_from_transformers`."""
        shared = self._arch_fields(self.config_class) & self._arch_fields(self.hf_config_class)
        kwargs = {name: getattr(config, name) for name in (*shared, *TASK_CONFIG_FIELDS)}
        kwargs.update({name: getattr(config, name) for name in self.config_extras
                       if getattr(config, name, None) is not None})
        return kwargs

    # -- state dicts -----------------------------------------------------------------------------
    def _rename(self, key: str, rules, to_hf: bool) -> str | None:
        for ours, theirs in rules:
            src, dst = (ours, theirs) if to_hf else (theirs, ours)
            match = _rule_regex(src).match(key)
            if match:
                return dst.format(**match.groupdict()) + key[match.end():]
        return None

    def _head_rules(self, task: str) -> tuple:
        return tuple(self.task_head_rules.get(task, ())) + tuple(self.head_rules)

    def _apply_tensor_rules(self, state_dict: dict, task: str, to_hf: bool) -> tuple[dict, dict]:
        """Convert the parameters covered by `tensor_rules`: (converted, in the target layout and
        naming; the rest of `state_dict`, still to be renamed)."""
        rest = dict(state_dict)
        done = {}
        if not self.tensor_rules:
            return done, rest
        ours_prefix = "" if task == "base" else "model."
        theirs_prefix = "" if task == "base" else f"{self.hf_base_prefix}."
        for rule in self.tensor_rules:
            src_templates = rule.ours if to_hf else (rule.theirs,)
            dst_templates = (rule.theirs,) if to_hf else rule.ours
            src_prefix, dst_prefix = (ours_prefix, theirs_prefix) if to_hf else (theirs_prefix, ours_prefix)
            first = re.compile(_rule_regex(src_prefix + src_templates[0]).pattern + "$")
            for key in list(rest):
                match = first.match(key)
                if match is None:
                    continue
                indices = match.groupdict()
                names = [src_prefix + t.format(**indices) for t in src_templates]
                missing = [name for name in names if name not in rest]
                if missing:
                    raise KeyError(f"{self.hf_model_type}: {key!r} needs {missing} as well to be converted "
                                   f"(task {task!r}); the state dict is incomplete.")
                tensors = [rest.pop(name) for name in names]
                if to_hf and rule.to_hf_shape_from is not None:
                    shape = state_dict[src_prefix + rule.to_hf_shape_from.format(**indices)].shape
                    result = rule.to_hf(*tensors, shape=shape)
                else:
                    result = rule.to_hf(*tensors) if to_hf else rule.from_hf(*tensors)
                results = (result,) if to_hf else tuple(result)
                for template, tensor in zip(dst_templates, results, strict=True):
                    done[dst_prefix + template.format(**indices)] = tensor
        return done, rest

    def state_dict_to_transformers(self, state_dict: dict, task: str) -> dict:
        out, state_dict = self._apply_tensor_rules(state_dict, task, to_hf=True)
        for key, value in state_dict.items():
            if task == "base":
                new = self._rename(key, self.body_rules, to_hf=True)
            elif key.startswith("model."):
                new = self._rename(key[len("model."):], self.body_rules, to_hf=True)
                new = None if new is None else f"{self.hf_base_prefix}.{new}"
            else:
                new = self._rename(key, self._head_rules(task), to_hf=True)
            if new is None:
                raise KeyError(f"No transformers name for parameter {key!r} ({self.hf_model_type}, task {task!r}).")
            out[new] = value
        for alias, primary in self.aliases.items():
            if primary in out:
                out[alias] = out[primary]
        return out

    def state_dict_from_transformers(self, state_dict: dict, task: str) -> dict:
        state_dict = dict(state_dict)
        for alias, primary in self.aliases.items():
            if alias in state_dict:
                value = state_dict.pop(alias)
                state_dict.setdefault(primary, value)
        out, state_dict = self._apply_tensor_rules(state_dict, task, to_hf=False)
        prefix = f"{self.hf_base_prefix}."
        for key, value in state_dict.items():
            if task == "base":
                new = self._rename(key, self.body_rules, to_hf=False)
            elif key.startswith(prefix):
                new = self._rename(key[len(prefix):], self.body_rules, to_hf=False)
                new = None if new is None else f"model.{new}"
            else:
                new = self._rename(key, self._head_rules(task), to_hf=False)
            if new is None:
                raise KeyError(
                    f"Unexpected parameter {key!r} in a {self.hf_model_type} checkpoint (task {task!r}); hf_xfmr "
                    f"does not know where it belongs."
                )
            out[new] = value
        return out

    # -- tasks -----------------------------------------------------------------------------------
    def task_of_class_name(self, name: str, *, ours: bool = False) -> str:
        """The task of a class named `name`: one of ours (`ours=True`) or of transformers."""
        for task, (hf_name, our_class) in self.tasks.items():
            if name == (our_class.__name__ if ours else hf_name):
                return task
        supported = ", ".join(our.__name__ if ours else hf for hf, our in self.tasks.values())
        raise ValueError(f"hf_xfmr cannot convert a {name}; supported {self.hf_model_type} classes: {supported}.")

    def check_task(self, task: str) -> None:
        if task not in self.tasks:
            raise ValueError(
                f"Unknown task {task!r} for {self.hf_model_type}; valid tasks: {', '.join(self.tasks)}."
            )


_CONVERSIONS: dict[str, Conversion] = {}


def register_conversion(conversion: Conversion) -> Conversion:
    """Make `conversion` available to `from_transformers` / `to_transformers` (each architecture
    package registers its own; this module imports no architecture)."""
    _CONVERSIONS[conversion.hf_model_type] = conversion
    return conversion


def conversions() -> list[Conversion]:
    """Every registered conversion, in registration order."""
    return list(_CONVERSIONS.values())


def _conversion_for(model_type: str, *, ours: bool) -> Conversion:
    for conversion in conversions():
        key = conversion.config_class.model_type if ours else conversion.hf_model_type
        if key == model_type:
            return conversion
    known = ", ".join(c.config_class.model_type if ours else c.hf_model_type for c in conversions())
    side = "hf_xfmr" if ours else "transformers"
    raise ValueError(f"hf_xfmr cannot convert {side} model type {model_type!r}; supported: {known}.")


def conversion_of_config(config) -> Conversion:
    """The conversion of one of our configs. Where several transformers model types convert to the same hf_xfmr
    family (Llama, Mistral and Qwen2 are one), the config names its own in `hf_model_type`."""
    wanted = getattr(config, "hf_model_type", None)
    for conversion in conversions():
        if conversion.config_class.model_type == config.model_type and conversion.hf_model_type == wanted:
            return conversion
    return _conversion_for(config.model_type, ours=True)


def _hf_conversion(model_type) -> Conversion | None:
    """The conversion of transformers' `model_type` (a family we convert), or None."""
    return next((c for c in conversions() if c.hf_model_type == model_type), None)


# transformers' BART-style encoder-decoders store the shared embedding three times (`shared` and each stack's tied
# `embed_tokens`) and their `...ForCausalLM` once, as `model.decoder.embed_tokens`; ours keep one `shared`.
SHARED_EMBEDDING_ALIASES = {
    f"{prefix}{stack}.embed_tokens.weight": f"{prefix}shared.weight"
    for prefix in ("", "model.") for stack in ("encoder", "decoder")
}


class SharedEmbeddingsConversion(Conversion):
    """The generic `Conversion` plus the layout of a BART-style `...ForCausalLM` (no encoder, no `model.shared`):
    BART and BigBird-Pegasus (with `aliases=SHARED_EMBEDDING_ALIASES`)."""

    def state_dict_to_transformers(self, state_dict: dict, task: str) -> dict:
        out = super().state_dict_to_transformers(state_dict, task)
        if task == "causal-lm":  # its only embedding is the decoder's
            out.pop("model.shared.weight")
            out.pop("model.encoder.embed_tokens.weight")
        return out


def _load_state(model: PreTrainedModel, state_dict: dict) -> None:
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"Checkpoint conversion mismatch: missing {missing}, unexpected {unexpected}.")


def _attn_kwargs(config, target_class=None) -> dict:
    implementation = getattr(config, "_attn_implementation", None)
    if implementation == "sdpa" and target_class is not None and not getattr(target_class, "_supports_sdpa", True):
        implementation = "eager"  # e.g. transformers' XLNet has only its eager attention
    return {"attn_implementation": implementation} if implementation in ("eager", "sdpa") else {}


class ConversionWarning(UserWarning):
    """A conversion that works but whose result the user should know about (e.g. freshly initialised weights)."""


@contextlib.contextmanager
def held_load_report():
    """Hold back the load report transformers' `from_pretrained` logs (a "LOAD REPORT" warning of
    `transformers.modeling_utils`: its MISSING, UNEXPECTED and MISMATCH keys), for a caller that reports
    those keys itself, once and in its own words. Its other messages pass. When the block raises, the held
    report is logged after all (transformers' errors point at it). A filter, not a higher level: at
    WARNING and above `from_pretrained` logs a tensor-parallel plan check of its own."""
    report = logging.getLogger("transformers.modeling_utils")
    held = []

    def keep(record) -> bool:
        if "LOAD REPORT" in record.getMessage():
            held.append(record)
            return False
        return True

    report.addFilter(keep)
    try:
        yield held
    except BaseException:
        report.removeFilter(keep)
        for record in held:
            report.handle(record)
        raise
    finally:
        report.removeFilter(keep)


def _shown_keys(keys) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:6]) + (f" (and {len(keys) - 6} more)" if len(keys) > 6 else "")


def _check_loading_info(path: Path, model: PreTrainedModel, task: str, info: dict, *, label: str | None = None,
                        mismatched_ok: bool = False, head_resized: bool = False, own_task: str | None = None) -> None:
    """What transformers' load report says, said once in our words (`_load_folder` holds the report back).
    Raise for weights whose sizes contradict config.json (unless `mismatched_ok`: the caller asked for
    `ignore_mismatched_sizes`; or `head_resized` and only task-head weights differ: keywords such as
    `num_labels` asked for another head size); warn, naming them, about parameters the checkpoint lacks (new
    heads) and about checkpoint weights the model has no parameter for, when it was built for the checkpoint's
    own task (`own_task`, the task of the class its config.json names; None when unknown)."""
    mismatched = sorted(info.get("mismatched_keys") or ())
    in_body = [entry for entry in mismatched if entry[0].startswith(f"{model.base_model_prefix}.")]
    if mismatched and not mismatched_ok and (in_body or not head_resized or task == "base"):
        shown = "; ".join(f"{key}: {tuple(saved)} in the weights, {tuple(expected)} from config.json"
                          for key, saved, expected in mismatched[:3])
        more = f" (and {len(mismatched) - 3} more)" if len(mismatched) > 3 else ""
        raise ValueError(
            f"The weights in {path} do not match the sizes in its config.json ({len(mismatched)} tensors): "
            f"{shown}{more}. config.json does not describe these weights (compare hidden_size, num_attention_heads, "
            f"intermediate_size, vocab_size, max_position_embeddings): use the config.json saved with them. (If a "
            f"keyword argument changed a size on purpose, e.g. num_labels, pass ignore_mismatched_sizes=True to "
            f"initialise those tensors afresh.)"
        )
    missing = {*(info.get("missing_keys") or ()), *(entry[0] for entry in mismatched)}
    if missing:
        warnings.warn(
            f"{path} has no weights for {len(missing)} parameter(s) of the {label or type(model).__name__} built "
            f"for task {task!r}, which are randomly initialised: {_shown_keys(missing)} (as transformers "
            f"initialises them). Outputs computed from them (e.g. a base model's pooler_output, a new head's "
            f"logits) are random until the model is trained.",
            ConversionWarning,
            stacklevel=3,
        )
    # Loading for another task than the checkpoint's own leaves parts of it out by design (an MLM head under a
    # classifier, BART's encoder under its causal LM): only a load for the checkpoint's own task has none to spare.
    unexpected = set(info.get("unexpected_keys") or ()) if own_task in (None, task) else set()
    if unexpected:
        warnings.warn(
            f"{path} holds {len(unexpected)} weight(s) that the {label or type(model).__name__} built for task "
            f"{task!r} has no parameter for, so they are not used: {_shown_keys(unexpected)}. Check that "
            f"config.json describes the model these weights were saved from.",
            ConversionWarning,
            stacklevel=3,
        )


def _load_folder(path: Path, task: str | None, *, label: str | None = None, head_resized: bool = False,
                 **load_kwargs):
    """(model, loading info) for the local checkpoint folder `path`, in its own format; `load_kwargs`
    go to the `from_pretrained` of its class (see `load_checkpoint`). transformers' load report is held
    back: `_check_loading_info` says what it would have said (`head_resized`: see there)."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"{path} is not a checkpoint: it has no config.json. Pass a directory written by "
            f"`save_pretrained` (config.json + model.safetensors)."
        )
    config = json.loads(config_file.read_text())
    model_type = config.get("model_type")
    ours = any(c.config_class.model_type == model_type for c in conversions())
    conversion = _conversion_for(model_type, ours=ours)
    architectures = config.get("architectures") or []
    own_task = None
    if task is None:  # the checkpoint's own head; a class outside the conversion table is an error
        task = own_task = conversion.task_of_class_name(architectures[0], ours=ours) if architectures else "base"
    elif architectures:
        with contextlib.suppress(ValueError):  # a class outside the table: its weights are judged as they come
            own_task = conversion.task_of_class_name(architectures[0], ours=ours)
    conversion.check_task(task)
    hf_name, our_class = conversion.tasks[task]
    model_class = our_class if ours else getattr(transformers, hf_name)
    check_not_pickles_only(path)
    check_weight_files(path)
    mismatched_ok = bool(load_kwargs.pop("ignore_mismatched_sizes", False))
    with held_load_report():
        model, info = model_class.from_pretrained(
            path, use_safetensors=True, ignore_mismatched_sizes=True, output_loading_info=True, **load_kwargs
        )
    _check_loading_info(path, model, task, info, label=label, mismatched_ok=mismatched_ok, head_resized=head_resized,
                        own_task=own_task)
    return model, info


def load_checkpoint(path, task: str | None = None) -> PreTrainedModel:
    """Load a local checkpoint folder of either format: hf_xfmr (`xfmr-*` model type) or transformers.

    `task` picks the head; by default the folder's own (its config's `architectures`), else "base".
    Weights are read from safetensors files only. A truncated or empty weights file, or weights whose
    shapes do not match config.json, raise a ValueError; parameters the checkpoint lacks (a new head,
    or the pooler when an MLM checkpoint is loaded as a base model) are randomly initialised, as
    `from_pretrained` does, and named in a `ConversionWarning`.
    """
    return _load_folder(path, task)[0]


def checkpoint_config(path) -> PretrainedConfig:
    """The hf_xfmr config of the local checkpoint folder `path`: its own, or the conversion of a transformers
    one (what `from_pretrained` converts it to). A ValueError lists the supported types for any other."""
    config = transformers.AutoConfig.from_pretrained(path)
    if any(c.config_class.model_type == config.model_type for c in conversions()):
        return config
    conversion = _conversion_for(config.model_type, ours=False)
    with special_ids_outside_vocab_allowed():
        return conversion.config_from_transformers(config)


def from_transformers(src, *, task: str | None = None, revision: str | None = None, token=None,
                      cache_dir=None, local_files_only: bool = False, **config_kwargs) -> PreTrainedModel:
    """The hf_xfmr equivalent of a transformers model.

    Args:
        src: a transformers model instance (e.g. `BertForMaskedLM`), a local directory holding a transformers
            checkpoint (config.json + safetensors weights), or the id of a Hub repo holding one
            ("google-bert/bert-base-uncased"): only its config, safetensors weights, tokenizer and generation
            config are downloaded, into the Hugging Face cache, so the next call also works offline.
        task: which head to build ("base", "masked-lm", "sequence-classification", ...). Defaults to the
            source's own head. For an instance, "base" extracts its encoder; for a directory or repo any head
            can be asked for and missing head weights are freshly initialised, as `from_pretrained` does.
        revision: branch, tag or commit of a Hub repo (default: its main branch).
        token: Hub token for a private or gated repo; by default huggingface_hub's own (`HF_TOKEN`, the
            `hf auth login` cache); False sends none.
        cache_dir, local_files_only: as in `from_pretrained` (`HF_HUB_OFFLINE=1` also keeps it offline).
        **config_kwargs: config settings, as `from_pretrained(..., num_labels=3)` takes them: `num_labels`,
            `id2label`, `label2id` (any one of them sets the others), `problem_type`, `attn_implementation`, and
            any field of transformers' or hf_xfmr's config of the family (`hidden_dropout_prob=0.0`; ours only:
            `unpad_inputs=False`). Any other keyword is a TypeError naming the closest fields. For a directory
            or repo they shape the model built: with `num_labels=3` the head has 3 outputs, freshly initialised
            (and named in a `ConversionWarning`) when the checkpoint's head has another size or none. For an
            instance they are applied to the converted model's config as long as its weights still fit (new
            label names, another dropout); one that changes a weight's size (`num_labels=3` for a 2-label
            classifier) is a ValueError: pass the checkpoint's directory or repo id instead.

    Returns the hf_xfmr model, with identical weights, dtype, device, attention implementation and
    train/eval mode. Special-token ids outside the vocabulary (`GPT2Config(vocab_size=32000)` keeps
    bos/eos=50256) are kept as they are, with a `ConversionWarning` naming them.
    """
    attn_implementation = config_kwargs.pop("attn_implementation", None)
    if isinstance(src, (str, os.PathLike)):
        path = resolve_checkpoint(src, revision=revision, token=token, cache_dir=cache_dir,
                                  local_files_only=local_files_only)
        if not path.is_dir():
            raise FileNotFoundError(f"{path} is not a directory; pass a transformers model, a checkpoint folder or "
                                    f"a Hub repo id ('org/name').")
        saved = read_config(path) or {}
        conversion = _hf_conversion(saved.get("model_type"))
        load_kwargs, overrides = {}, {}
        if conversion is not None:  # (otherwise _load_folder or _convert says what the folder is not)
            config_kwargs = _label_keywords(config_kwargs, saved.get("id2label"))
            _check_config_keywords(conversion, config_kwargs)
            load_kwargs, overrides = _split_config_keywords(conversion, config_kwargs)
        src, _ = _load_folder(path, task, head_resized="id2label" in config_kwargs, **load_kwargs)
        return _convert(src, task, attn_implementation=attn_implementation, overrides=overrides)
    if not isinstance(src, PreTrainedModel):
        raise TypeError(f"`src` must be a transformers PreTrainedModel, a directory or a Hub repo id, got "
                        f"{type(src).__name__}.")
    conversion = _conversion_for(src.config.model_type, ours=False)
    overrides = _label_keywords(config_kwargs, src.config.id2label)
    _check_config_keywords(conversion, overrides, instance=True)
    return _convert(src, task, attn_implementation=attn_implementation, overrides=overrides, asked=config_kwargs)


def _label_keywords(kwargs: dict, current: dict | None) -> dict:
    """`kwargs` with the label settings completed as a pair: `num_labels`, `id2label` or `label2id` alone gives
    both maps (transformers' `from_pretrained` would keep the checkpoint's `label2id` next to a new
    `id2label`). `num_labels` alone keeps the `current` labels (the source's id2label) when their number
    is the same (as transformers does), else names them LABEL_0, LABEL_1, ...; a `num_labels` that
    contradicts the maps given is an error."""
    kwargs = dict(kwargs)
    num_labels, id2label, label2id = (kwargs.pop(name, None) for name in ("num_labels", "id2label", "label2id"))
    if id2label is None and label2id is not None:
        id2label = {int(i): name for name, i in label2id.items()}
    if id2label is None and num_labels is not None and len(current or {}) != num_labels:
        id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
    if id2label is None:
        return kwargs
    id2label = {int(i): name for i, name in id2label.items()}
    if num_labels is not None and num_labels != len(id2label):
        raise ValueError(f"num_labels={num_labels} contradicts the {len(id2label)} labels of id2label/label2id; "
                         f"pass one of them, or both consistently.")
    kwargs.update(id2label=id2label, label2id=label2id or {name: i for i, name in id2label.items()})
    return kwargs


def _check_config_keywords(conversion: Conversion, kwargs: dict, *, instance: bool = False) -> None:
    """TypeError for a keyword of `from_transformers` that sets nothing: not a field of our config or of
    transformers' (nor a setting transformers itself takes, `config_keyword_known`); for an instance, one
    that is not a field of ours (transformers' fields apply only to a model built from its checkpoint)."""
    ours, theirs = conversion.config_class, conversion.hf_config_class
    our_fields = {f.name for f in dataclasses.fields(ours)}
    their_fields = {f.name for f in dataclasses.fields(theirs)}
    if instance:
        unknown = [name for name in kwargs if name not in our_fields]
        where = f"a field of {ours.__name__} (a model instance keeps its transformers config)"
    else:
        unknown = [name for name in kwargs if name.startswith("_") or
                   not (config_keyword_known(ours, name) or name in their_fields)]
        where = f"a setting of {ours.__name__} or {theirs.__name__}"
    if unknown:
        raise TypeError(f"from_transformers() got keyword argument(s) that are not {where}: "
                        f"{unknown_keywords_message(ours, unknown)}")


def _split_config_keywords(conversion: Conversion, kwargs: dict) -> tuple[dict, dict]:
    """(keywords for transformers' `from_pretrained`, overrides of our config) of config keywords: fields both
    configs have go to both, those only ours has to ours only, the rest to transformers'."""
    our_fields = {f.name for f in dataclasses.fields(conversion.config_class)}
    their_fields = {f.name for f in dataclasses.fields(conversion.hf_config_class)}
    overrides = {k: v for k, v in kwargs.items() if k in our_fields and k not in ("dtype", "torch_dtype")}
    theirs = {k: v for k, v in kwargs.items() if k not in our_fields or k in their_fields}
    return theirs, overrides


def _warn_outside_vocab(model_type: str, vocab_size, found) -> None:
    named = ", ".join(f"{name}={value}" for name, value in dict.fromkeys(found))
    warnings.warn(
        f"The {model_type} config has special-token ids outside its vocabulary [0, vocab_size={vocab_size}): "
        f"{named}. transformers accepts them (with a warning), and hf_xfmr keeps them as they are, so outputs and "
        f"`to_transformers` do not change; but no token has these ids, so set them to your tokenizer's ids "
        f"(e.g. model.config.eos_token_id = tokenizer.eos_token_id) before generating or finetuning with them.",
        ConversionWarning,
        stacklevel=4,
    )


def _refuse_quantized(src: PreTrainedModel) -> None:
    """A quantized source (bitsandbytes, GPTQ, ...) has packed weights the tensor rules cannot read: say so."""
    quantization = getattr(src.config, "quantization_config", None)
    if getattr(src, "hf_quantizer", None) is None and quantization is None:
        return
    method = quantization.get("quant_method") if isinstance(quantization, dict) else getattr(quantization,
                                                                                            "quant_method", None)
    raise ValueError(
        f"The {type(src).__name__} is quantized ({getattr(method, 'value', method) or 'hf_quantizer'}): hf_xfmr converts full-precision weights only. Load the "
        f"full-precision checkpoint with the hf_xfmr class's from_pretrained(..., quantization_config=...) (it "
        f"converts, then quantizes), or call `dequantize()` on the source first.")


def _convert(src: PreTrainedModel, task: str | None, *, attn_implementation: str | None = None,
             overrides: dict | None = None, asked: dict | None = None) -> PreTrainedModel:
    """`from_transformers` of a model instance; `attn_implementation` replaces the source's, and `overrides`
    are fields of our config set on top of the converted ones (from `from_pretrained` keywords; `asked`: the
    keywords as the user gave them, for the error when they do not fit the source's weights)."""
    _refuse_quantized(src)
    conversion = _conversion_for(src.config.model_type, ours=False)
    src_task = conversion.task_of_class_name(type(src).__name__)
    task = src_task if task is None else task
    conversion.check_task(task)
    if task != src_task:
        if task != "base":
            raise ValueError(
                f"The source is a {type(src).__name__} (task {src_task!r}); it cannot become task {task!r}. "
                f"Pass its checkpoint directory instead to initialise a new {task!r} head."
            )
        src = src.base_model

    # A config read from a checkpoint may carry special ids outside the vocabulary; ours built in code may not.
    with special_ids_outside_vocab_allowed() as outside:
        config = conversion.config_from_model(src)
        if overrides:
            config = dataclasses.replace(config, **overrides)
    if outside:
        _warn_outside_vocab(src.config.model_type, getattr(config, "vocab_size", None), outside)
    model_class = conversion.tasks[task][1]
    attn = {"attn_implementation": attn_implementation} if attn_implementation else _attn_kwargs(src.config)
    model = model_class._from_config(config, dtype=src.dtype, **attn, **conversion.init_kwargs(src, task))
    state_dict = conversion.state_dict_from_transformers(src.state_dict(), task)
    if overrides:
        _check_overrides_fit(model, state_dict, asked or overrides, type(src).__name__)
    _load_state(model, state_dict)
    if src.device.type != "meta":
        model.to(src.device)
    return model.train(src.training)


def _check_overrides_fit(model: PreTrainedModel, state_dict: dict, overrides: dict, source: str) -> None:
    """ValueError when config `overrides` (named in the message) change the size of weights that the
    converted `source` model provides (`from_transformers(instance, num_labels=3)` on a 2-label classifier)."""
    own = model.state_dict()
    changed = [key for key, tensor in state_dict.items() if key in own and own[key].shape != tensor.shape]
    if changed:
        settings = ", ".join(f"{key}={value!r}" for key, value in overrides.items())
        raise ValueError(
            f"{settings} change(s) the size of {_shown_keys(changed)}, which the weights of the {source} cannot "
            f"fill. To build a model with these settings (and those weights freshly initialised), pass the "
            f"checkpoint's directory or Hub repo id to from_transformers instead of the model instance."
        )


# -- Xfmr*.from_pretrained given a transformers checkpoint --------------------------------------------
# Keywords saying where the files come from: used to fetch them, then the checkpoint is a local folder.
_HUB_KWARGS = ("revision", "token", "cache_dir", "local_files_only", "subfolder")
# Keywords that do not apply once the files are local and converted.
_SOURCE_ONLY_KWARGS = ("force_download", "proxies", "trust_remote_code", "_from_auto", "_from_pipeline",
                       "_commit_hash")


def _family_message(cls, src, model_type) -> str:
    """Why `cls` cannot load the `model_type` checkpoint `src`, and what to use instead."""
    supported = ", ".join(c.hf_model_type for c in conversions())
    own = next((c.hf_model_type for c in conversions() if c.config_class.model_type == cls.config_class.model_type),
               None)
    if any(c.config_class.model_type == model_type for c in conversions()):
        return (f"{cls.__name__} cannot load {src}: it holds an hf_xfmr {model_type!r} model, not a "
                f"{cls.config_class.model_type!r} one. Load it with its own class (the one named in its config.json "
                f"'architectures', or transformers' AutoModel classes).")
    what = (f"a {model_type!r} checkpoint" if model_type in transformers.CONFIG_MAPPING else
            f"model type {model_type!r}, which transformers does not know")
    return (f"{cls.__name__} cannot load {src}: it is {what}, and {cls.__name__} converts {own!r} checkpoints "
            f"only. `hf_xfmr.from_transformers(...)` converts a checkpoint of any supported family into the "
            f"matching hf_xfmr model; supported transformers model types: {supported}.")


def _source_model_type(src, kwargs: dict) -> tuple[dict, str | None]:
    """(the Hub keywords among a `from_pretrained` call's `kwargs`, the `model_type` of `src`'s config.json or
    None): what the loaders below decide by."""
    hub = {name: kwargs[name] for name in _HUB_KWARGS if kwargs.get(name) is not None}
    return hub, (read_config(src, **hub) or {}).get("model_type")


def _from_pretrained(cls, load, src, *model_args, **kwargs):
    """The loader behind `Xfmr*.from_pretrained` (installed in `load_hook.LOADERS`).

    `load` is transformers' own `from_pretrained` of `cls`. A checkpoint of ours (or one without a
    config.json, which `load` then reports) goes to it unchanged; a transformers checkpoint of the same
    family is converted (`_from_transformers_checkpoint`); any other raises a ValueError naming
    `hf_xfmr.from_transformers`. transformers itself would load another model type's weights into `cls`,
    every key unexpected, and return random weights.
    """
    if not isinstance(src, (str, os.PathLike)):
        return load(src, *model_args, **kwargs)
    hub, model_type = _source_model_type(src, kwargs)
    if model_type is None or model_type == cls.config_class.model_type:
        return load(src, *model_args, **kwargs)
    conversion = _hf_conversion(model_type)
    if conversion is None or conversion.config_class.model_type != cls.config_class.model_type:
        raise ValueError(_family_message(cls, src, model_type))
    if model_args:
        raise TypeError(f"{cls.__name__}.from_pretrained: positional model arguments do not apply when converting "
                        f"a transformers checkpoint ({src}); pass keyword arguments.")
    folder = resolve_checkpoint(src, **hub)
    kwargs = {k: v for k, v in kwargs.items() if k not in _HUB_KWARGS + _SOURCE_ONLY_KWARGS}
    return _from_transformers_checkpoint(cls, conversion, folder, kwargs)


def _from_transformers_checkpoint(cls, conversion: Conversion, folder: Path, kwargs: dict):
    """`cls.from_pretrained(folder, **kwargs)` for the transformers checkpoint `folder`: loaded by the
    transformers class of `cls`'s task (which initialises a new head as it always does), then converted.

    Keywords transformers' `from_pretrained` knows (`num_labels`, `id2label`, config fields, `dtype`,
    `device_map`, `ignore_mismatched_sizes`, ...) go to it; fields of our config go to ours as well, and
    those only ours has (e.g. `unpad_inputs`) to ours only; `attn_implementation` is ours; a `config` of
    ours is converted to transformers' first.
    """
    task = conversion.task_of_class_name(cls.__name__, ours=True)
    if kwargs.pop("use_safetensors", None) is False:
        raise ValueError("use_safetensors=False: hf_xfmr loads safetensors weights only, never pickles.")
    attn_implementation = kwargs.pop("attn_implementation", None)
    output_loading_info = kwargs.pop("output_loading_info", False)
    our_fields = {f.name for f in dataclasses.fields(cls.config_class)}
    their_fields = {f.name for f in dataclasses.fields(conversion.hf_config_class)}
    kwargs, overrides = _split_config_keywords(conversion, kwargs)
    config = kwargs.get("config")
    if config is not None and getattr(config, "model_type", None) == cls.config_class.model_type:
        overrides.update({k: getattr(config, k) for k in our_fields - their_fields if hasattr(config, k)})
        kwargs["config"] = conversion.config_to_transformers(config)
    hf_model, info = _load_folder(folder, task, label=cls.__name__, **kwargs)
    model = _convert(hf_model, task, attn_implementation=attn_implementation, overrides=overrides)
    return (model, info) if output_loading_info else model


LOADERS["from_pretrained"] = _from_pretrained


def _config_from_pretrained(cls, load, src, **kwargs):
    """The loader behind `Xfmr*Config.from_pretrained` (installed in `load_hook.LOADERS`): the config of a
    transformers checkpoint of `cls`'s family is converted (`checkpoint_config`), with the remaining keywords
    set on it, instead of being read as ours under transformers' "model of type `bert` to instantiate a model
    of type `xfmr-bert`" warning. Anything else goes to transformers' own `load` unchanged."""
    if not isinstance(src, (str, os.PathLike)) or kwargs.get("return_unused_kwargs"):
        return load(src, **kwargs)
    try:
        hub, model_type = _source_model_type(src, kwargs)
    except (OSError, ValueError):  # not a checkpoint: transformers' own loader says what is wrong
        return load(src, **kwargs)
    conversion = _hf_conversion(model_type)
    if conversion is None or conversion.config_class.model_type != cls.model_type:
        return load(src, **kwargs)
    config = checkpoint_config(resolve_checkpoint(src, **hub))
    config.update({k: v for k, v in kwargs.items() if k not in _HUB_KWARGS + _SOURCE_ONLY_KWARGS})
    return config


LOADERS["config_from_pretrained"] = _config_from_pretrained


def to_transformers(model: PreTrainedModel) -> PreTrainedModel:
    """The transformers equivalent of an hf_xfmr model (the inverse of `from_transformers`)."""
    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"`model` must be an hf_xfmr model, got {type(model).__name__}.")
    conversion = conversion_of_config(model.config)
    task = conversion.task_of_class_name(type(model).__name__, ours=True)
    hf_config = conversion.config_to_transformers(model.config)
    hf_class = getattr(transformers, conversion.tasks[task][0])
    hf_model = hf_class._from_config(hf_config, dtype=model.dtype, **_attn_kwargs(model.config, hf_class),
                                     **conversion.init_kwargs(model, task))
    conversion.prepare_transformers_model(hf_model, model)
    _load_state(hf_model, conversion.state_dict_to_transformers(model.state_dict(), task))
    return hf_model.train(model.training)


def convert_state_dict(state_dict: dict[str, torch.Tensor], model_type: str, task: str, to_hf: bool) -> dict:
    """Rename a state dict (or a dict of gradients) between the two layouts; `model_type` is ours when
    `to_hf`, transformers' otherwise."""
    conversion = _conversion_for(model_type, ours=to_hf)
    if to_hf:
        return conversion.state_dict_to_transformers(state_dict, task)
    return conversion.state_dict_from_transformers(state_dict, task)
