"""BART (xfmr-bart): the denoising encoder-decoder, with cached generation."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_bart import XfmrBartConfig
from .convert_bart import CONVERSION
from .modeling_bart import *  # noqa: F403
from .modeling_bart import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="bart",
    config_class=XfmrBartConfig,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("text-infilling",),
))
register_conversion(CONVERSION)

__all__ = ["XfmrBartConfig", *_modeling_all]
