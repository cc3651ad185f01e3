"""RoBERTa (xfmr-roberta): BERT's encoder with RoBERTa's positions and heads."""

from ..registry import register_from_conversion
from .configuration_roberta import XfmrRobertaConfig
from .convert_roberta import CONVERSION
from .family import FAMILY
from .modeling_roberta import *  # noqa: F403
from .modeling_roberta import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrRobertaConfig", *_modeling_all]
