"""BERT (xfmr-bert)."""

from ..conversion import register_conversion
from ..registry import Architecture, register_architecture
from .configuration_bert import XfmrBertConfig
from .convert_bert import CONVERSION
from .modeling_bert import *  # noqa: F403
from .modeling_bert import __all__ as _modeling_all

ARCHITECTURE = register_architecture(Architecture(
    name="bert",
    config_class=XfmrBertConfig,
    classes={task: cls for task, (_, cls) in CONVERSION.tasks.items()},
    objectives=("mlm", "wwm", "mlm+nsp"),
))
register_conversion(CONVERSION)

__all__ = ["XfmrBertConfig", *_modeling_all]
