"""The architectures. `register_auto_classes()` (run by `import hf_xfmr`) registers each one with
the transformers Auto classes under its own `xfmr-*` model type, never replacing a built-in mapping."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

# Head-class suffix -> the Auto class that should resolve it.
AUTO_CLASS_BY_SUFFIX = {
    "Model": AutoModel,
    "ForPreTraining": AutoModelForPreTraining,
    "ForMaskedLM": AutoModelForMaskedLM,
    "ForSequenceClassification": AutoModelForSequenceClassification,
    "ForTokenClassification": AutoModelForTokenClassification,
    "ForQuestionAnswering": AutoModelForQuestionAnswering,
    "ForMultipleChoice": AutoModelForMultipleChoice,
}


def architectures():
    """(config_class, [model classes]) for every architecture hf_xfmr provides."""
    from . import bert, roberta

    return [bert.ARCHITECTURE, roberta.ARCHITECTURE]


def auto_class_for(model_class):
    """The transformers Auto class that loads `model_class` (chosen by its name's suffix)."""
    name = model_class.__name__
    for suffix in sorted(AUTO_CLASS_BY_SUFFIX, key=len, reverse=True):
        if name.endswith(suffix):
            return AUTO_CLASS_BY_SUFFIX[suffix]
    raise ValueError(f"{name} has no matching Auto class; known suffixes: {', '.join(AUTO_CLASS_BY_SUFFIX)}.")


def register_auto_classes() -> None:
    for config_class, model_classes in architectures():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        for model_class in model_classes:
            # exist_ok only tolerates re-registering *our* classes (e.g. after importlib.reload);
            # our model types never collide with built-in ones.
            auto_class_for(model_class).register(config_class, model_class, exist_ok=True)
