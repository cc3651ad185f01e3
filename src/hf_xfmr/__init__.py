"""hf_xfmr: classic and modern transformer architectures as a Hugging Face plugin.

`import hf_xfmr` registers every architecture with the transformers Auto classes.
"""

__version__ = "0.1.0"

from .models import register_auto_classes as _register_auto_classes

_register_auto_classes()

from .models.conversion import from_transformers, to_transformers  # noqa: E402

__all__ = ["__version__", "from_transformers", "to_transformers"]
