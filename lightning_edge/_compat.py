"""What Python 3.8 (JetPack 5, every Xavier) lacks, in one place; nothing here imports torch.

The package runs on Python 3.8 to 3.12 (README, "Supported stacks"). Annotations are strings everywhere
(``from __future__ import annotations``), so ``X | None`` and ``list[int]`` are free in them; what runs at import or
call time must not use newer Python: ``str.removeprefix`` (3.9), ``importlib.resources.files`` (3.9), ``X | Y`` in
``isinstance`` or a module-level alias (3.10), ``list[int]`` outside an annotation (3.9), ``zip(strict=)`` (3.10),
dataclass ``slots=`` / ``kw_only=`` (3.10). The CI matrix's Python 3.8 session (noxfile.py) runs the whole suite.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["removeprefix", "removesuffix", "dtype_name", "data_dir"]


def removeprefix(text: str, prefix: str) -> str:
    """``text.removeprefix(prefix)`` (Python 3.9+)."""
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


def removesuffix(text: str, suffix: str) -> str:
    """``text.removesuffix(suffix)`` (Python 3.9+)."""
    return text[:-len(suffix)] if suffix and text.endswith(suffix) else text


def dtype_name(dtype: object) -> str:
    """``torch.float16`` -> ``"float16"`` (any object whose ``str`` is ``torch.<name>``; other strings unchanged)."""
    return removeprefix(str(dtype), "torch.")


def data_dir() -> Path:
    """The package's own ``data/`` folder (the shipped JSON profiles). ``importlib.resources.files`` is 3.9+; the
    package is always installed as files (a wheel or ``pip install -e``), never zipped, so its path is enough."""
    return Path(__file__).resolve().parent / "data"
