"""Backend registries: sensors and mode controllers keyed by each backend class's ``name``, loaded on first use.

A backend class (a :class:`~lightning_edge.devices.sensors.base.PowerSensor` or a
:class:`~lightning_edge.devices.controllers.base.ModeController`) has a ``name``, a classmethod ``why_unavailable``
and the classmethods ``probe(arg, **kw)`` / ``open(arg, **kw)`` that turn the part of a device spec after the colon
(``nvml:1`` -> ``"1"``, ``sim:orin-agx`` -> ``"orin-agx"``) into a reason or an instance. Each backend receives only
the keyword arguments its constructor (or its base's) accepts, so callers pass one set of options to any backend.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

__all__ = ["Backend", "Registry", "accepted_kwargs"]


def accepted_kwargs(cls: type, kwargs: Mapping[str, Any], *, method: str = "__init__") -> dict[str, Any]:
    """The items of ``kwargs`` that ``cls.<method>`` accepts by name, following ``**kwargs`` into the base classes'
    same method (a controller's ``**common`` goes to ``ModeController.__init__``)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        fn = klass.__dict__.get(method)
        if fn is None:
            continue
        fn = getattr(fn, "__func__", fn)
        params = inspect.signature(fn).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    names -= {"self", "cls"}
    return {k: v for k, v in kwargs.items() if k in names}


class Backend:
    """What a registry needs of a backend class (a base of ``PowerSensor`` and ``ModeController``): a ``name``, a
    cheap ``why_unavailable`` probe, and the spec ``name:arg`` turned into a reason (:meth:`probe`) or an instance
    (:meth:`open`). Backends whose spec takes an argument (``nvml:1``, ``sim:orin-agx``) override both."""

    name: ClassVar[str] = "backend"

    @classmethod
    def why_unavailable(cls, **kwargs: Any) -> str | None:
        """Why this backend cannot run here (``None`` when it can). Cheap: never writes."""
        return None

    @classmethod
    def probe(cls, arg: str = "", **kw: Any) -> str | None:
        """:meth:`why_unavailable` for the spec ``name:arg`` (``arg``: what followed the colon; most take none)."""
        if arg:
            return f"{cls.name!r} takes nothing after ':' (got {cls.name}:{arg})"
        return cls.why_unavailable(**kw)

    @classmethod
    def open(cls, arg: str = "", **kw: Any) -> Any:
        """The backend for the spec ``name:arg``, given only the options of ``kw`` its constructor takes."""
        return cls(**accepted_kwargs(cls, kw))


class Registry:
    """``name -> backend class``; entries may be ``"module:Class"`` strings, imported when first asked for."""

    def __init__(self, what: str, entries: Mapping[str, type | str], aliases: Mapping[str, str] | None = None):
        self.what = what
        self._entries: dict[str, type | str] = dict(entries)
        self.aliases = dict(aliases or {})

    def register(self, cls: type, *, override: bool = False) -> type:
        """Add a backend under ``cls.name`` (usable as a class decorator); ``override=True`` to replace one."""
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a {self.what} backend needs a class attribute name='...' (no ':'), got {name!r}")
        if name in self._entries and not override:
            raise ValueError(f"{self.what} backend {name!r} is already registered; pass override=True to replace it")
        self._entries[name] = cls
        return cls

    def __contains__(self, name: object) -> bool:
        return self.aliases.get(name, name) in self._entries  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def get(self, name: str) -> type:
        """The backend class registered as ``name`` (or an alias); ``KeyError`` naming the known ones."""
        key = self.aliases.get(name, name)
        entry = self._entries.get(key)
        if entry is None:
            raise KeyError(f"unknown {self.what} {name!r}: expected one of {', '.join(self._entries)}")
        if isinstance(entry, str):
            mod, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(mod), attr)
            if getattr(entry, "name", None) != key:
                raise TypeError(f"{self.what} backend {mod}:{attr} has name {getattr(entry, 'name', None)!r}, "
                                f"registered as {key!r}")
            self._entries[key] = entry
        return entry
