"""ELECTRA (xfmr-electra): the encoder and its heads, and the replaced-token-detection model (`rtd.py`)."""

from ..registry import register_from_conversion
from .configuration_electra import XfmrElectraConfig
from .convert_electra import CONVERSION
from .family import FAMILY
from .modeling_electra import *  # noqa: F403
from .modeling_electra import __all__ as _modeling_all
from .rtd import XfmrElectraForReplacedTokenDetection, XfmrElectraForReplacedTokenDetectionOutput

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrElectraConfig", *_modeling_all, "XfmrElectraForReplacedTokenDetection",
           "XfmrElectraForReplacedTokenDetectionOutput"]
