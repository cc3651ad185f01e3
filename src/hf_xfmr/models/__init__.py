"""The architectures, one package each. Importing this package imports every architecture, and each
registers itself in one statement (`registry.register_from_conversion`: the Auto classes and the
transformers converter). Adding an architecture = its package + one line below."""

from . import albert, bart, bert, bigbird, bigbird_pegasus, distilbert, electra, gpt, llama, mixtral, modernbert, roberta, t5, xlnet  # noqa: F401  (each registers itself on import)
from .registry import Architecture, architectures, get_architecture, supported_tasks

__all__ = ["Architecture", "architectures", "get_architecture", "supported_tasks"]
