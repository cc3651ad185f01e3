"""DistilBERT (xfmr-distilbert)."""

from ..registry import register_from_conversion
from .configuration_distilbert import XfmrDistilBertConfig
from .convert_distilbert import CONVERSION
from .family import FAMILY
from .modeling_distilbert import *  # noqa: F403
from .modeling_distilbert import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrDistilBertConfig", *_modeling_all]
