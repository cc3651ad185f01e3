"""BART (xfmr-bart): the denoising encoder-decoder, with cached generation."""

from ..registry import register_from_conversion
from .configuration_bart import XfmrBartConfig
from .convert_bart import CONVERSION
from .family import FAMILY
from .modeling_bart import *  # noqa: F403
from .modeling_bart import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrBartConfig", *_modeling_all]
