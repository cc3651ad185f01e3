"""hf_xfmr: classic and modern transformer architectures as a Hugging Face plugin.

`import hf_xfmr` registers every architecture with the transformers Auto classes.

One exception: in a process started as the `hf-xfmr` command (or `python -m hf_xfmr.cli`), registration
waits until a command runs (`hf_xfmr.cli.main` does it then), so that `hf-xfmr --help` does not import torch
and transformers. The other names are imported on first use (PEP 562).
"""

import importlib
import sys
from pathlib import Path

from .lazy import lazy_exports

__version__ = "0.1.0"

__all__ = ["__version__", "from_transformers", "to_transformers"]

_LAZY = {"from_transformers": "models.conversion", "to_transformers": "models.conversion"}
COMMAND_NAMES = ("hf-xfmr", "hf-xfmr.exe", "hf-xfmr-script.py")  # the console script, as installers name it


def started_as_command() -> bool:
    """Whether this process is the `hf-xfmr` console script or `python -m hf_xfmr.cli` (read from
    `sys.argv[0]`, and from `sys.orig_argv` while `-m` imports its package)."""
    argv = getattr(sys, "argv", None) or [""]
    if Path(argv[0]).name in COMMAND_NAMES:
        return True
    orig = getattr(sys, "orig_argv", [])
    return argv[0] == "-m" and any(a == "-m" and b in ("hf_xfmr.cli", "hf_xfmr.cli.__main__")
                                   for a, b in zip(orig, orig[1:]))


def register_architectures() -> None:
    """Register every hf_xfmr architecture with the transformers Auto classes (idempotent)."""
    importlib.import_module(".models", __name__)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

if not started_as_command():
    register_architectures()
