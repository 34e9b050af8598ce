"""Backend registries: sensors and mode controllers keyed by each backend class's ``name``, loaded on first use.

A backend class (a :class:`~lightning_edge.devices.sensors.base.PowerSensor` or a
:class:`~lightning_edge.devices.controllers.base.ModeController`) has a ``name``, a classmethod ``why_unavailable``
and the classmethods ``probe(arg, **kw)`` / ``open(arg, **kw)`` that turn the part of a device spec after the colon
(``nvml:1`` -> ``"1"``, ``sim:orin-agx`` -> ``"orin-agx"``) into a reason or an instance. Each backend receives only
the keyword arguments its constructor (or its base's) accepts, so callers pass one set of options to any backend.
The registry type itself is :class:`lightning_edge._lazy.Registry`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from lightning_edge._lazy import Registry  # the one registry type (tuning strategies use it too)

__all__ = ["Backend", "Registry", "accepted_kwargs"]


def accepted_kwargs(cls: type, kwargs: Mapping[str, Any], *, method: str = "__init__") -> dict[str, Any]:
    """The items of ``kwargs`` that ``cls.<method>`` accepts by name, following ``**kwargs`` into the base classes'
    same method (a controller's ``**common`` goes to ``ModeController.__init__``)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        fn = klass.__dict__.get(method)
        if fn is None:
            continue
        if isinstance(fn, (classmethod, staticmethod)):
            fn = fn.__func__
        params = inspect.signature(fn).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    names -= {"self", "cls"}
    return {k: v for k, v in kwargs.items() if k in names}


_B = TypeVar("_B", bound="Backend")


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
    def open(cls: type[_B], arg: str = "", **kw: Any) -> _B:
        """The backend for the spec ``name:arg``, given only the options of ``kw`` its constructor takes."""
        return cls(**accepted_kwargs(cls, kw))
