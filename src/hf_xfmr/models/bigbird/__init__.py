"""BigBird (xfmr-bigbird): the long-document encoder with block-sparse attention."""

from ..registry import register_from_conversion
from .configuration_bigbird import XfmrBigBirdConfig
from .convert_bigbird import CONVERSION
from .family import FAMILY
from .modeling_bigbird import *  # noqa: F403
from .modeling_bigbird import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrBigBirdConfig", *_modeling_all]
