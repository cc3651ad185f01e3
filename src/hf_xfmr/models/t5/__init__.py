"""T5 (xfmr-t5): the text-to-text encoder-decoder (v1.0 and v1.1), with cached generation."""

from ..registry import register_from_conversion
from .configuration_t5 import XfmrT5Config
from .convert_t5 import CONVERSION
from .family import FAMILY
from .modeling_t5 import *  # noqa: F403
from .modeling_t5 import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrT5Config", *_modeling_all]
