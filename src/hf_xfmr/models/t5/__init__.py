"""T5 (xfmr-t5): the text-to-text encoder-decoder (v1.0 and v1.1), with cached generation."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_t5 import XfmrT5Config
from .convert_t5 import CONVERSION
from .modeling_t5 import *  # noqa: F403
from .modeling_t5 import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="t5",
    config_class=XfmrT5Config,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("span-corruption",),
))
register_conversion(CONVERSION)

__all__ = ["XfmrT5Config", *_modeling_all]
