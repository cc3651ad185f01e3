"""The architecture registry: each architecture package describes itself here when it is imported.

An architecture is one `Architecture` record: its `--arch` name, its config class, its model classes
by task, and the pretraining objectives it trains with. Registering it also registers the config and
every model class with the matching transformers Auto class, under our own `xfmr-*` model type, so
built-in mappings are never touched. This module imports no architecture; `hf_xfmr.models` imports
each architecture package, and each package registers itself in one statement, `register_from_conversion`.
"""

from dataclasses import dataclass, field
from typing import Mapping

import transformers

from ..family import Family
from .conversion import Conversion, register_conversion

# Every task a model class can serve, with the transformers Auto class that loads it (None: none does,
# e.g. T5's encoder-only model). The order is the one shown to users.
TASK_AUTO_CLASSES = {
    "base": "AutoModel",
    "pretraining": "AutoModelForPreTraining",
    "masked-lm": "AutoModelForMaskedLM",
    "causal-lm": "AutoModelForCausalLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "encoder": None,
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "multiple-choice": "AutoModelForMultipleChoice",
}
TASKS = tuple(TASK_AUTO_CLASSES)

# Pretraining objectives (`hf-xfmr pretrain --objective`); each architecture lists those it supports.
OBJECTIVES = {
    "mlm": "masked language modelling (BERT, RoBERTa, ...)",
    "wwm": "whole-word masked language modelling",
    "mlm+nsp": "MLM + next-sentence prediction (BERT's original recipe)",
    "mlm+sop": "MLM + sentence-order prediction (ALBERT)",
    "plm": "permutation language modelling (XLNet)",
    "plm-mem": "permutation language modelling with memory over contiguous text (XLNet's recipe)",
    "clm": "causal (left-to-right) language modelling",
    "span-corruption": "T5 span corruption",
    "text-infilling": "BART text infilling",
    "rtd": "replaced-token detection (ELECTRA: a small generator fills masked positions, the discriminator finds them)",
}


@dataclass(frozen=True)
class Architecture:
    """What hf_xfmr knows about one architecture.

    Args:
        name: the short name used on the command line (`--arch bert`).
        config_class: its `PretrainedConfig` subclass (carries `model_type` and `from_preset`).
        classes: task (a key of `TASK_AUTO_CLASSES`) -> model class; several tasks may share a class.
        objectives: pretraining objectives (keys of `OBJECTIVES`) it supports, the default first.
    """

    name: str
    config_class: type
    classes: Mapping[str, type]
    objectives: tuple[str, ...] = field(default=())
    family: Family | None = None  # its record (`hf_xfmr.family`): tokenizer recipe, objective defaults, names

    def __post_init__(self):
        unknown = [t for t in self.classes if t not in TASK_AUTO_CLASSES]
        if unknown:
            raise ValueError(f"{self.name}: unknown task(s) {unknown}; known tasks: {', '.join(TASKS)}.")
        unknown = [o for o in self.objectives if o not in OBJECTIVES]
        if unknown:
            raise ValueError(f"{self.name}: unknown objective(s) {unknown}; known: {', '.join(OBJECTIVES)}.")

    @property
    def model_type(self) -> str:
        return self.config_class.model_type

    def model_class(self, task: str) -> type:
        """The model class serving `task`, or a ValueError listing the tasks this architecture has."""
        if task not in self.classes:
            raise ValueError(
                f"{self.name} has no {task!r} model; its tasks are: {', '.join(self.classes)}."
            )
        return self.classes[task]

    def task_of(self, model_class) -> str:
        """The first task served by `model_class` (a class or an instance)."""
        cls = model_class if isinstance(model_class, type) else type(model_class)
        for task, candidate in self.classes.items():
            if candidate.__name__ == cls.__name__:
                return task
        raise ValueError(f"{cls.__name__} is not a {self.name} model class of hf_xfmr.")


_ARCHITECTURES: dict[str, Architecture] = {}


def register_architecture(arch: Architecture) -> Architecture:
    """Record `arch` and register its config and model classes with the transformers Auto classes."""
    _ARCHITECTURES[arch.name] = arch
    # exist_ok only tolerates re-registering *our* classes (e.g. after importlib.reload): our model
    # types never collide with built-in ones, so no built-in mapping is ever replaced.
    transformers.AutoConfig.register(arch.model_type, arch.config_class, exist_ok=True)
    registered = set()
    for task, model_class in arch.classes.items():
        auto_name = TASK_AUTO_CLASSES[task]
        if auto_name is None or (auto_name, model_class) in registered:
            continue
        getattr(transformers, auto_name).register(arch.config_class, model_class, exist_ok=True)
        registered.add((auto_name, model_class))
    return arch


def register_from_conversion(family: Family, conversion: Conversion) -> Architecture:
    """Register an architecture package in one statement, from its family record and its `Conversion` (the one
    table of its config and model classes by task): its `Architecture` with the Auto classes
    (`register_architecture`), and the conversion with `from_transformers` / `to_transformers`
    (`conversion.register_conversion`).

    Args:
        family: the package's `family.FAMILY` (`hf_xfmr.family.Family`): its `--arch` name, model type and
            pretraining objectives (keys of `OBJECTIVES`, the default first).
        conversion: the package's `convert_<arch>.CONVERSION`.
    """
    if family.model_type != conversion.config_class.model_type:
        raise ValueError(f"The {family.name!r} family record names model type {family.model_type!r}, but its "
                         f"config class is {conversion.config_class.model_type!r}.")
    arch = register_architecture(Architecture(
        name=family.name,
        config_class=conversion.config_class,
        classes={task: cls for task, (_, cls) in conversion.tasks.items()},
        objectives=tuple(family.objectives),
        family=family,
    ))
    register_conversion(conversion)
    return arch


def architectures() -> list[Architecture]:
    """Every registered architecture, in registration order."""
    return list(_ARCHITECTURES.values())


def get_architecture(key) -> Architecture:
    """The architecture for a name (`"bert"`), a model type (`"xfmr-bert"`), a config or a model."""
    config = getattr(key, "config", key)
    model_type = getattr(config, "model_type", None)
    for arch in _ARCHITECTURES.values():
        if key == arch.name or key == arch.model_type or model_type == arch.model_type:
            return arch
    known = ", ".join(f"{a.name} ({a.model_type})" for a in _ARCHITECTURES.values())
    shown = model_type if model_type is not None else key
    raise ValueError(f"Unknown hf_xfmr architecture {shown!r}; known architectures: {known}.")


def supported_tasks() -> list[str]:
    """Tasks served by at least one registered architecture, in `TASKS` order."""
    present = {task for arch in _ARCHITECTURES.values() for task in arch.classes}
    return [task for task in TASKS if task in present]
