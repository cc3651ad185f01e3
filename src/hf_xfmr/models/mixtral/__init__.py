"""Mixtral (xfmr-mixtral): the Llama decoder with a sparse mixture-of-experts feed-forward block."""

from ..registry import register_from_conversion
from .configuration_mixtral import XfmrMixtralConfig
from .convert_mixtral import CONVERSION
from .family import FAMILY
from .modeling_mixtral import *  # noqa: F403
from .modeling_mixtral import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrMixtralConfig", *_modeling_all]
