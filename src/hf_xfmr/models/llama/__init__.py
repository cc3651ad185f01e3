"""Llama family (xfmr-llama): Llama, Mistral and Qwen2 checkpoints, one decoder with cached generation."""

from ..conversion import register_conversion
from ..registry import register_from_conversion
from .configuration_llama import XfmrLlamaConfig
from .convert_llama import CONVERSION, MISTRAL_CONVERSION, QWEN2_CONVERSION
from .family import FAMILY
from .modeling_llama import *  # noqa: F403
from .modeling_llama import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)
register_conversion(MISTRAL_CONVERSION)  # the same classes convert Mistral and Qwen2 checkpoints too
register_conversion(QWEN2_CONVERSION)

__all__ = ["XfmrLlamaConfig", *_modeling_all]
