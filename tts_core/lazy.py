"""Packages whose public names are imported on first use, so importing the package stays cheap
and free of side effects (no torch until a model class is asked for)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`: `exports` maps each name to the module that
    defines it (absolute, or relative to `package` with a leading dot); a name is imported on
    first use and kept in the package's namespace."""
    namespace = importlib.import_module(package).__dict__

    def get(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return get, names
