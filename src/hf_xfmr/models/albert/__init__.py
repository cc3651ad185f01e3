"""ALBERT (xfmr-albert)."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_albert import XfmrAlbertConfig
from .convert_albert import CONVERSION
from .modeling_albert import *  # noqa: F403
from .modeling_albert import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="albert",
    config_class=XfmrAlbertConfig,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("mlm+sop", "mlm"),
))
register_conversion(CONVERSION)

__all__ = ["XfmrAlbertConfig", *_modeling_all]
