"""Reading a JSON file a user named, within limits: every file the command line reads from a user-supplied path
(latency models, device profiles, ``layers.json``) goes through :func:`read_json`.

Refused, each with one line passed to the caller's ``fail`` (so that it becomes the caller's own error type): a
path that is not a regular file (a folder; a FIFO or a device, without blocking on it), a file larger than
``limit`` bytes (before it is read), text that is not UTF-8 or not JSON, lists and objects nested deeper than
``max_depth``, numbers Python will not convert (more than 4300 digits). What the values mean (types, ranges,
finite numbers: ``NaN`` and ``Infinity`` parse as floats) is the caller's check.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["MAX_BYTES", "MAX_DEPTH", "read_json", "one_line"]

#: the default size limit: far above any file this package writes, far below what would take long to read
MAX_BYTES = 16 << 20

#: the default nesting limit: the deepest file this package writes nests about 8 levels
MAX_DEPTH = 32


def read_json(path: str | os.PathLike, fail: Callable[[str], Exception], *, limit: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in ``path``. Raises ``FileNotFoundError`` when there is no such file, else
    ``fail(reason)`` for a file that is not a regular file, is larger than ``limit`` bytes, is not UTF-8 text, is
    not JSON, nests deeper than ``max_depth`` or holds a number with too many digits (``reason`` does not repeat
    the path)."""
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading does not wait for a writer (a regular file ignores the flag)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise fail("is a folder; give the file in it") from None
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise fail("is a folder; give the file in it")
        if not stat.S_ISREG(st.st_mode):
            raise fail("is not a regular file (a FIFO, a device or a socket); give a JSON file")
        if st.st_size > limit:
            raise fail(f"is larger than {_size(limit)} ({_size(st.st_size)}): not a file this tool writes")
        data = _read(fd, limit)
        if data is None:
            raise fail(f"is larger than {_size(limit)}: not a file this tool writes")
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"is not a JSON text file (byte {exc.start} is not UTF-8)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"is not valid JSON ({exc})") from None
    except RecursionError:  # the parser's own limit (about 1000 levels)
        raise fail(f"is nested more than the {max_depth} levels such a file may have") from None
    except ValueError as exc:  # a number of more than 4300 digits (sys.get_int_max_str_digits)
        raise fail(f"holds a number with too many digits ({str(exc).split(':')[0]})") from None
    if _deeper_than(doc, max_depth):
        raise fail(f"is nested more than the {max_depth} levels such a file may have")
    return doc


def one_line(text: str, limit: int = 120) -> str:
    """``text`` (a field path built from the file's keys) fit for a one-line message: short, printable."""
    text = text if text.isprintable() else ascii(text)[1:-1]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read(fd: int, limit: int) -> bytes | None:
    """At most ``limit`` bytes (None when there are more: a file that grew after fstat)."""
    chunks, n = [], 0
    while True:
        b = os.read(fd, min(1 << 20, limit + 1 - n))
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        n += len(b)
        if n > limit:
            return None


def _deeper_than(doc: Any, max_depth: int) -> bool:
    """Whether lists and objects nest more than ``max_depth`` levels (without recursion: whatever reads the document
    afterwards, a copy, a repr, a check, may recurse into it)."""
    stack = [(doc, 1)] if isinstance(doc, (dict, list)) else []
    while stack:
        obj, d = stack.pop()
        if d > max_depth:
            return True
        items = obj.values() if isinstance(obj, dict) else obj
        stack.extend((v, d + 1) for v in items if isinstance(v, (dict, list)))
    return False


def _size(n: int) -> str:
    return f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n} bytes"
