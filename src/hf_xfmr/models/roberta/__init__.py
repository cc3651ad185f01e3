"""RoBERTa (xfmr-roberta): BERT's encoder with RoBERTa's positions and heads."""

from .configuration_roberta import XfmrRobertaConfig
from .modeling_roberta import *  # noqa: F403
from .modeling_roberta import __all__ as _modeling_all

ARCHITECTURE = (
    XfmrRobertaConfig,
    [globals()[name] for name in _modeling_all if name != "XfmrRobertaPreTrainedModel"],
)

__all__ = ["XfmrRobertaConfig", *_modeling_all]
