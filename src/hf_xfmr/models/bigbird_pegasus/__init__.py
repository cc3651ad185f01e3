"""BigBird-Pegasus (xfmr-bigbird-pegasus): the block-sparse encoder with Pegasus's decoder, with cached generation."""

from ..registry import register_from_conversion
from .configuration_bigbird_pegasus import XfmrBigBirdPegasusConfig
from .convert_bigbird_pegasus import CONVERSION
from .family import FAMILY
from .modeling_bigbird_pegasus import *  # noqa: F403
from .modeling_bigbird_pegasus import __all__ as _modeling_all

ARCHITECTURE = register_from_conversion(FAMILY, CONVERSION)

__all__ = ["XfmrBigBirdPegasusConfig", *_modeling_all]
