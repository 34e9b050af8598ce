"""Reading a JSON file a user named, within limits, and writing every file the tool writes without losing or
clobbering anything: every JSON document the package reads, from a path a user gave (latency models, device
profiles, board files, twin profiles, partial calibrations, ``layers.json``, a ``torch.profiler`` trace to merge
into), from its own state files (``devices/safety.py``, which opens them itself and hands the bytes over) or from
its own ``data/`` folder, goes through :func:`read_json` (a path) or :func:`parse_json` (bytes already read);
every file it writes to a path a user named (``--out``, ``--json PATH``, board files, partial calibrations)
through :func:`write_file` / :func:`write_json`, and the state files of ``devices/safety.py`` through
:func:`replace_in_folder`.

Refused, each with one line passed to the caller's ``fail`` (so that it becomes the caller's own error type, and no
traceback from the parser follows it): a path that is not a regular file (a folder; a FIFO or a device, without
blocking on it), a symbolic link where the caller replaces the file afterwards (``follow_symlinks=False``), a file
larger than ``limit`` bytes (before it is read; a gzipped one, also once inflated), text that is not UTF-8 or not
JSON, lists and objects nested deeper than ``max_depth``, numbers Python will not convert (more than 4300 digits),
a document whose top level is not the kind the caller expects (``expect``). What the values mean (types, ranges,
finite numbers: ``NaN`` and ``Infinity`` parse as floats) is the caller's check.

Writing (:func:`write_file`): the target must be absent, a regular file the caller recognises as its own (``ours``:
a board file, a partial calibration, an earlier JSON result), or the user said ``--force`` (``force=True``); a
symbolic link, a folder, a FIFO, a device or a socket is refused whatever ``force`` says (one line, through
``fail``). The data goes to a new temporary file in the same folder (a random name opened ``O_CREAT | O_EXCL |
O_NOFOLLOW``: never an existing file, never through a link), is fsynced, then renamed over the target (the rename
replaces a link planted meanwhile, never its target) and the folder fsynced: a reader sees the old file or the new
one, never half of one, and two writers never share a temporary file. A failed write (a full or read-only disk)
leaves the target as it was and removes the temporary file.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Tuple, Union

__all__ = ["MAX_BYTES", "MAX_DEPTH", "read_json", "parse_json", "kind_of", "one_line", "write_file", "write_json",
           "write_output", "check_target", "replace_in_folder", "json_schema_is"]

#: the default size limit: far above any file this package writes, far below what would take long to read
MAX_BYTES = 16 << 20

#: the default nesting limit: the deepest file this package writes nests about 8 levels
MAX_DEPTH = 32

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # absent on Windows
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

#: what ``expect`` may name: the Python type (or types) json gives the top level
Expect = Union[type, Tuple[type, ...], None]

_KINDS = {dict: "an object", list: "a list", str: "a text", bool: "true or false", int: "a number",
          float: "a number", type(None): "null"}


def read_json(path: str | os.PathLike, fail: Callable[[str], Exception], *, limit: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH, expect: Expect = None, follow_symlinks: bool = True,
              gzipped: bool = False) -> Any:
    """The JSON document in ``path``. Raises ``FileNotFoundError`` when there is no such file, else
    ``fail(reason)`` for a file that is not a regular file, is a symbolic link (``follow_symlinks=False``), is
    larger than ``limit`` bytes, is not UTF-8 text, is not JSON, nests deeper than ``max_depth``, holds a number with
    too many digits or whose top level is not ``expect`` (:func:`parse_json`); ``reason`` does not repeat the path.
    ``gzipped``: the file is gzip-compressed (a ``.json.gz``); ``limit`` bounds it and its inflated text."""
    p = Path(path)
    nofollow = 0 if follow_symlinks else _O_NOFOLLOW
    if not follow_symlinks and not nofollow and os.path.islink(p):  # pragma: no cover - a system without O_NOFOLLOW
        raise fail(_LINK_REFUSED)
    try:
        # O_NONBLOCK: opening a FIFO for reading does not wait for a writer (a regular file ignores the flag)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC | nofollow)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise fail("is a folder; give the file in it") from None
    except OSError as exc:
        if nofollow and exc.errno == errno.ELOOP:
            raise fail(_LINK_REFUSED) from None
        raise fail(f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise fail("is a folder; give the file in it")
        if not stat.S_ISREG(st.st_mode):
            raise fail("is not a regular file (a FIFO, a device or a socket); give a JSON file")
        if st.st_size > limit:
            raise fail(f"is larger than {_size(limit)} ({_size(st.st_size)}), more than such a file holds")
        data = _read(fd, limit)
        if data is None:
            raise fail(f"is larger than {_size(limit)}, more than such a file holds")
    finally:
        os.close(fd)
    if gzipped:
        data = _gunzip(data, limit, fail)
    return parse_json(data, fail, max_depth=max_depth, expect=expect)


_LINK_REFUSED = ("is a symbolic link: refused (lightning_edge replaces this file in place and never through a "
                 "link); give the file itself")


def parse_json(data: bytes | str, fail: Callable[[str], Exception], *, max_depth: int = MAX_DEPTH,
               expect: Expect = None) -> Any:
    """The JSON document in ``data`` (a file's bytes, read by a caller that opens the file itself, such as the state
    files of ``devices/safety.py``); ``fail(reason)`` for bytes that are not UTF-8, text that is not JSON, lists and
    objects nested deeper than ``max_depth``, a number with too many digits, or a top level that is not of type
    ``expect`` (``dict``: an object; a tuple of types: any of them). The size limit is the caller's, on what it
    reads. ``reason`` reads after the file's name: "is not valid JSON (...)"."""
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise fail(f"is not a JSON text file (byte {exc.start} is not UTF-8)") from None
    else:
        text = data
    try:
        # the package's one parser: every other module reads JSON through this function
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"is not valid JSON ({exc})") from None
    except RecursionError:  # the parser's own limit (about 1000 levels)
        raise fail(f"is nested more than the {max_depth} levels such a file may have") from None
    except ValueError as exc:  # a number of more than 4300 digits (sys.get_int_max_str_digits)
        raise fail(f"holds a number with too many digits ({str(exc).split(':')[0]})") from None
    if _deeper_than(doc, max_depth):
        raise fail(f"is nested more than the {max_depth} levels such a file may have")
    if expect is not None and (isinstance(doc, bool) and bool not in _types(expect)
                               or not isinstance(doc, expect)):
        want = " or ".join(dict.fromkeys(_KINDS.get(t, t.__name__) for t in _types(expect)))
        raise fail(f"holds {kind_of(doc)} where {want} is expected (at the top level)")
    return doc


def kind_of(value: object) -> str:
    """What a JSON value is, in words: "an object", "a list", "a text", "a number", "true or false", "null"."""
    return _KINDS.get(type(value), f"a {type(value).__name__}")


def _types(expect: type | tuple) -> tuple:
    return expect if isinstance(expect, tuple) else (expect,)


def _gunzip(data: bytes, limit: int, fail: Callable[[str], Exception]) -> bytes:
    """The inflated bytes of a gzip file (every member), at most ``limit`` of them: a small file that inflates to
    gigabytes is refused once ``limit`` is passed, never inflated whole."""
    out = bytearray()
    buf = data
    try:
        while True:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # 16: the gzip header and trailer
            while True:
                out += d.decompress(buf, limit + 1 - len(out))
                if len(out) > limit:
                    raise fail(f"inflates to more than {_size(limit)}, more than such a file holds")
                if d.eof:
                    break
                buf = d.unconsumed_tail
                if not buf:
                    raise fail("is a gzip file cut short (its end is missing)")
            buf = d.unused_data
            if not buf.strip(b"\0"):  # the end, or the zero padding gzip itself ignores
                return bytes(out)
    except zlib.error as exc:
        raise fail(f"is not a gzip file ({exc})") from None


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


def _deeper_than(doc: object, max_depth: int) -> bool:
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


# ============================================================================================ writing


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_target(path: str | os.PathLike, fail: Callable[[str], Exception], *,
                 ours: Callable[[Path], bool] | None = None, force: bool = False, what: str = "file") -> None:
    """Whether :func:`write_file` may replace ``path`` (module docstring); raises ``fail(reason)`` when not. Call it
    before long work too, so a wrong ``--out`` fails at once, not after it."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        folder = p.parent if str(p.parent) else Path(".")
        if not folder.is_dir():
            raise fail(f"its folder {folder} does not exist; give a file in an existing folder") from None
        return
    except OSError as exc:
        raise fail(f"cannot be checked ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise fail(f"is {_kind(st.st_mode)}, not a regular file: refused (lightning_edge writes a new file and "
                   f"never follows a link nor writes into a device); give the path of a {what} to create")
    if force:
        return
    if ours is None or not ours(p):
        raise fail(f"exists and is not a {what} lightning_edge wrote: not replaced; give another name, remove it, "
                   "or pass --force to replace it")


def json_schema_is(schema: str) -> Callable[[Path], bool]:
    """An ``ours`` test for :func:`write_file`: the file is a JSON object whose ``schema`` is ``schema``."""
    def ours(p: Path) -> bool:
        try:
            doc = read_json(p, ValueError, limit=MAX_BYTES)
        except (OSError, ValueError):
            return False
        return isinstance(doc, dict) and doc.get("schema") == schema
    return ours


def is_json_file(p: Path) -> bool:
    """An ``ours`` test for :func:`write_file`: any JSON document (an earlier ``--json`` result)."""
    try:
        read_json(p, ValueError)
    except (OSError, ValueError):
        return False
    return True


def replace_in_folder(dir_fd: int, name: str, data: bytes, *, mode: int = 0o666) -> None:
    """Write ``data`` as ``name`` in the folder open at ``dir_fd``, atomically: a new temporary file (random name,
    ``O_CREAT | O_EXCL | O_NOFOLLOW``, ``mode`` less the umask), written, fsynced, renamed over ``name`` (a link there
    is replaced, never followed), then the folder fsynced. Raises ``OSError`` as the system does (``ENOSPC``,
    ``EROFS``, ``EISDIR`` when ``name`` is a folder); the temporary file never stays."""
    for _ in range(100):
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 64 random bits
        raise FileExistsError(errno.EEXIST, "cannot create a temporary file", name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable (power loss right after a write)
        os.fsync(dir_fd)
    except OSError:  # pragma: no cover
        pass


def write_file(path: str | os.PathLike, data: bytes | str, fail: Callable[[str], Exception], *,
               ours: Callable[[Path], bool] | None = None, force: bool = False, what: str = "file") -> Path:
    """Write ``data`` to ``path`` without losing or clobbering anything (module docstring): :func:`check_target`,
    then :func:`replace_in_folder` in the folder opened once. ``fail(reason)`` for a target that is refused and for
    a write the system refuses (a full or read-only disk: the target is left as it was)."""
    p = Path(path)
    check_target(p, fail, ours=ours, force=force, what=what)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    folder = p.parent if str(p.parent) else Path(".")
    try:
        dfd = os.open(folder, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError as exc:
        raise fail(f"its folder {folder} cannot be opened ({exc.strerror or exc})") from None
    try:
        replace_in_folder(dfd, p.name, payload)
    except IsADirectoryError:
        raise fail("is a folder, not a regular file: refused; give the path of a file to create") from None
    except OSError as exc:
        raise fail(f"cannot be written ({exc.strerror or exc}; nothing was changed there)") from None
    finally:
        os.close(dfd)
    return p


def write_output(path: str | os.PathLike, data: bytes | str, what: str = "file") -> Path:
    """A file the tool writes again on every run (a report, a trace, a recorded power trace): :func:`write_file`
    over any earlier regular file (never a link, a device or a folder); ``OSError`` naming the path and why."""
    p = Path(path)
    return write_file(p, data, lambda why: OSError(f"{p} {why}"), ours=lambda _p: True, what=what)


def write_json(path: str | os.PathLike, doc: object, fail: Callable[[str], Exception], *, indent: int | None = 2,
               ours: Callable[[Path], bool] | None = None, force: bool = False, what: str = "file",
               default: Callable[[Any], Any] | None = None, allow_nan: bool = True) -> Path:
    """:func:`write_file` of ``doc`` as JSON text (``allow_nan=False``: a number that is not finite is refused)."""
    try:
        text = json.dumps(doc, indent=indent, default=default, allow_nan=allow_nan) + "\n"
    except ValueError as exc:
        raise fail(f"not written: {exc} (a number that is not finite)") from None
    return write_file(path, text, fail, ours=ours, force=force, what=what)
