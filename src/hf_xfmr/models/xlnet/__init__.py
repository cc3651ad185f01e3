"""XLNet (xfmr-xlnet): two-stream relative attention with memory, permutation-LM pretraining."""

from ..registry import register_from_conversion
from .configuration_xlnet import XfmrXLNetConfig
from .convert_xlnet import CONVERSION
from .family import FAMILY
from .modeling_xlnet import *  # noqa: F403
from .modeling_xlnet import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrXLNetConfig", *_modeling_all]
