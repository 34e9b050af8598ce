"""Lazy attribute loading for package ``__init__`` modules (PEP 562), so light imports stay light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_getattr(package: str, names: Mapping[str, str], namespace: dict) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports ``names[attr]`` on first use and caches it in ``namespace``."""

    def __getattr__(name: str):
        mod = names.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(mod), name)
        namespace[name] = value
        return value

    return __getattr__
