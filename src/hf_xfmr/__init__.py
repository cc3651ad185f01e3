"""hf_xfmr: classic and modern transformer architectures as a Hugging Face plugin.

`import hf_xfmr` registers every architecture with the transformers Auto classes.
"""

__version__ = "0.1.0"

from . import models  # noqa: F401  (registers every architecture with the Auto classes)
from .models.conversion import from_transformers, to_transformers

__all__ = ["__version__", "from_transformers", "to_transformers"]
