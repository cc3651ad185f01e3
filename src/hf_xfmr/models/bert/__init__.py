"""BERT (xfmr-bert)."""

from ..registry import register_from_conversion
from .configuration_bert import XfmrBertConfig
from .convert_bert import CONVERSION
from .family import FAMILY
from .modeling_bert import *  # noqa: F403
from .modeling_bert import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrBertConfig", *_modeling_all]
