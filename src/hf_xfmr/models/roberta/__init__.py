"""RoBERTa (xfmr-roberta): BERT's encoder with RoBERTa's positions and heads."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_roberta import XfmrRobertaConfig
from .convert_roberta import CONVERSION
from .modeling_roberta import *  # noqa: F403
from .modeling_roberta import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="roberta",
    config_class=XfmrRobertaConfig,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("mlm", "wwm"),
))
register_conversion(CONVERSION)

__all__ = ["XfmrRobertaConfig", *_modeling_all]
