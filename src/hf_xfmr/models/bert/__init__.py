"""BERT (xfmr-bert)."""

from ..registry import register_from_conversion
from .configuration_bert import XfmrBertConfig
from .convert_bert import CONVERSION
from .modeling_bert import *  # noqa: F403
from .modeling_bert import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion("bert", CONVERSION, objectives=("mlm", "wwm", "mlm+nsp"))

__all__ = ["XfmrBertConfig", *_modeling_all]
