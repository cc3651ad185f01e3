"""XLNet (xfmr-xlnet): two-stream relative attention with memory, permutation-LM pretraining."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_xlnet import XfmrXLNetConfig
from .convert_xlnet import CONVERSION
from .modeling_xlnet import *  # noqa: F403
from .modeling_xlnet import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="xlnet",
    config_class=XfmrXLNetConfig,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("plm", "plm-mem"),
))
register_conversion(CONVERSION)

__all__ = ["XfmrXLNetConfig", *_modeling_all]
