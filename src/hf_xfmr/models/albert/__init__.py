"""ALBERT (xfmr-albert)."""

from ..registry import register_from_conversion
from .configuration_albert import XfmrAlbertConfig
from .convert_albert import CONVERSION
from .family import FAMILY
from .modeling_albert import *  # noqa: F403
from .modeling_albert import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrAlbertConfig", *_modeling_all]
