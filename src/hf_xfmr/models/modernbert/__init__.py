"""ModernBERT (xfmr-modernbert)."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_modernbert import XfmrModernBertConfig
from .convert_modernbert import CONVERSION
from .modeling_modernbert import *  # noqa: F403
from .modeling_modernbert import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="modernbert",
    config_class=XfmrModernBertConfig,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("mlm",),
))
register_conversion(CONVERSION)

__all__ = ["XfmrModernBertConfig", *_modeling_all]
