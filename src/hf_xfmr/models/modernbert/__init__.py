"""ModernBERT (xfmr-modernbert)."""

from ..registry import register_from_conversion
from .configuration_modernbert import XfmrModernBertConfig
from .convert_modernbert import CONVERSION
from .family import FAMILY
from .modeling_modernbert import *  # noqa: F403
from .modeling_modernbert import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrModernBertConfig", *_modeling_all]
