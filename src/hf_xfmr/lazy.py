"""Names a package exposes on first use (PEP 562), so that importing the package stays cheap."""

import importlib
import sys
from typing import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package` whose public `name` lives in submodule `exports[name]`
    (relative to the package, e.g. "models.conversion"): imported when first read, then kept on the package.

        __getattr__, __dir__ = lazy_exports(__name__, {"pretrain": "pretrain", "read_log": "logs"})
    """

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{exports[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
