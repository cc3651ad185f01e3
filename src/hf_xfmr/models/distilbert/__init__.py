"""DistilBERT (xfmr-distilbert)."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_distilbert import XfmrDistilBertConfig
from .convert_distilbert import CONVERSION
from .modeling_distilbert import *  # noqa: F403
from .modeling_distilbert import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="distilbert",
    config_class=XfmrDistilBertConfig,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("mlm",),
))
register_conversion(CONVERSION)

__all__ = ["XfmrDistilBertConfig", *_modeling_all]
