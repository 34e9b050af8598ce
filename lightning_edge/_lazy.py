"""Lazy loading: attributes of package ``__init__`` modules (PEP 562), so light imports stay light, and registries
of classes by name (sensors, controllers, tuning strategies) whose entries may be imported on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping

__all__ = ["Registry", "UnknownName", "lazy_getattr"]


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


class UnknownName(KeyError, ValueError):
    """A name no entry of a registry has. A ``KeyError`` for look-ups and a ``ValueError`` for argument checks, so
    either ``except`` catches it; the message names the registered entries."""

    def __str__(self) -> str:  # KeyError's own would quote the whole message
        return str(self.args[0]) if self.args else ""


class Registry:
    """``name -> class``, each class registered under its class attribute ``attr`` (``name`` unless told), and
    ``aliases`` (other spellings of a name). Entries may be ``"module:Class"`` strings, imported when first asked
    for. With ``fold_case`` names are matched without regard to case or surrounding blanks."""

    def __init__(self, what: str, entries: Mapping[str, type | str] | None = None,
                 aliases: Mapping[str, str] | None = None, *, attr: str = "name", fold_case: bool = False) -> None:
        self.what = what
        self.attr = attr
        self.fold_case = fold_case
        self._entries: dict[str, type | str] = {self._key(k): v for k, v in (entries or {}).items()}
        self.aliases: dict[str, str] = {self._key(a): self._key(n) for a, n in (aliases or {}).items()}

    def _key(self, name: str) -> str:
        return name.strip().lower() if self.fold_case else name

    def _resolve(self, name: object) -> str | None:
        if not isinstance(name, str):
            return None
        key = self._key(name)
        key = self.aliases.get(key, key)
        return key if key in self._entries else None

    def register(self, cls: type, *, aliases: Iterable[str] = (), override: bool = False) -> type:
        """Add ``cls`` under its ``attr`` (and ``aliases``); usable as a class decorator. ``override=True`` replaces
        an entry of that name; a class defined again under the same module and name (a reloaded module, a notebook
        cell run twice) replaces its earlier self without it."""
        name = getattr(cls, self.attr, None)  # the attribute's name is the registry's setting
        if not isinstance(name, str) or not name.strip() or ":" in name:
            raise ValueError(f"a {self.what} needs a class attribute {self.attr}='...' (no ':'), got {name!r}")
        key = self._key(name)
        old = self._entries.get(key)
        if not override:
            if old is not None and not _redefined(old, cls):
                raise ValueError(f"{self.what} {key!r} is already registered; pass override=True to replace it")
            if key in self.aliases:
                raise ValueError(f"{self.what} {key!r} is an alias of {self.aliases[key]!r}; pass override=True to "
                                 "register it as a name of its own")
        spellings = [alias for alias in map(self._key, aliases) if alias != key]
        for alias in spellings:
            if not override and (alias in self._entries or self.aliases.get(alias, key) != key):
                raise ValueError(f"{self.what} alias {alias!r} of {key!r} is already a name or another alias")
        self.aliases.pop(key, None)
        self._entries[key] = cls
        self.aliases.update((alias, key) for alias in spellings)
        return cls

    def unregister(self, name: str) -> None:
        """Remove the entry ``name`` (or the one ``name`` is an alias of) and its aliases; unknown: nothing."""
        key = self._resolve(name)
        if key is not None:
            del self._entries[key]
            self.aliases = {a: n for a, n in self.aliases.items() if n != key}

    def __contains__(self, name: object) -> bool:
        return self._resolve(name) is not None

    def __iter__(self) -> Iterator[str]:
        """The registered names (aliases left out), in the order they were registered."""
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def canonical(self, name: str) -> str:
        """The registered name that ``name`` spells (itself, another case with ``fold_case``, or an alias);
        :class:`UnknownName` naming the registered ones."""
        key = self._resolve(name)
        if key is None:
            raise UnknownName(f"unknown {self.what} {name!r}: expected one of {', '.join(self._entries)}")
        return key

    def get(self, name: str) -> type:
        """The class registered as ``name`` (or an alias); :class:`UnknownName` naming the registered ones."""
        key = self.canonical(name)
        entry = self._entries[key]
        if isinstance(entry, str):
            mod, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(mod), attr)
            registered_as = getattr(entry, self.attr, None)
            if registered_as != key:
                raise TypeError(f"{self.what} {mod}:{attr} has {self.attr} {registered_as!r}, registered as {key!r}")
            self._entries[key] = entry
        return entry


def _redefined(old: type | str, new: type) -> bool:
    """``new`` is ``old`` defined again (same module, same qualified name), not another class."""
    return isinstance(old, type) and old is not new and (old.__module__, old.__qualname__) == (
        new.__module__, new.__qualname__)
