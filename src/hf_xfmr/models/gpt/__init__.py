"""GPT (xfmr-gpt): a GPT-2-style decoder with cached generation."""

from ..registry import register_from_conversion
from .configuration_gpt import XfmrGPTConfig
from .convert_gpt import CONVERSION
from .family import FAMILY
from .modeling_gpt import *  # noqa: F403
from .modeling_gpt import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrGPTConfig", *_modeling_all]
