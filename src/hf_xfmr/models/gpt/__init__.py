"""GPT (xfmr-gpt): a GPT-2-style decoder with cached generation."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_gpt import XfmrGPTConfig
from .convert_gpt import CONVERSION
from .modeling_gpt import *  # noqa: F403
from .modeling_gpt import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="gpt",
    config_class=XfmrGPTConfig,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("clm",),
))
register_conversion(CONVERSION)

__all__ = ["XfmrGPTConfig", *_modeling_all]
