"""BERT (xfmr-bert)."""

from .configuration_bert import XfmrBertConfig
from .modeling_bert import *  # noqa: F403
from .modeling_bert import __all__ as _modeling_all

ARCHITECTURE = (XfmrBertConfig, [globals()[name] for name in _modeling_all if name != "XfmrBertPreTrainedModel"])

__all__ = ["XfmrBertConfig", *_modeling_all]
