"""Where a tuner's profiles live: the profile-backend protocol the tuning core talks to, and the in-memory backend.

The core (problems, search, the strategies, Pareto, tables) asks a :class:`ProfileBackend` for the profiles of
one workload (:meth:`ProfileBackend.profiles`), then a :class:`ProfileSource` for each batch of points a strategy
wants, handing it a ``measure`` function for the misses. It knows nothing else about storage. Backends:
:class:`MemoryStore` (here: a dict, nothing kept) and the Optuna profile store
(:class:`lightning_edge.tuning.store.ProfileStore`: SQLite, PostgreSQL, journal files, in its own module).
``store=`` arguments become backends in one place: :func:`lightning_edge.tuning.search.open_backend`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from lightning_edge.modes import PowerMode
from lightning_edge.tuning.problems import Measurement, Problem, Workload


class ProfileKey(NamedTuple):
    """One entry of a profile store: a training profile of a mode, or an inference profile of (mode, bs)."""

    kind: str  # "train" | "infer"
    mode: PowerMode
    batch_size: int | None


class ProfileSource(Protocol):
    """The profiles of one workload."""

    def fetch_or_measure_many(self, keys: Sequence[ProfileKey], measure: Callable[[ProfileKey], Measurement],
                              context: dict | None = None) -> list[tuple[Measurement, bool]]:
        """Each key's profile, in order, with ``True`` where it was measured now (``measure(key)``, once per key).
        ``context`` may hold ``"check"`` (call while waiting for other processes; it raises to stop) and
        ``"on_wait"`` (called with a progress line while waiting)."""
        ...

    def lookup(self, key: ProfileKey) -> Measurement | None: ...


@runtime_checkable
class ProfileBackend(Protocol):
    """A place that keeps profiles (``store=`` of every strategy)."""

    def profiles(self, workload: Workload, *, workload_id: str | None = None, device_model: str | None = None,
                 problem: Problem | None = None, strategy: str = "") -> ProfileSource:
        """The profiles of ``workload`` (keyed by ``workload_id`` / its fingerprint and the device model); a
        persistent backend records ``problem`` (its constraint values) and ``strategy`` with what it measures."""
        ...

    def describe(self) -> str:
        """The backend for messages (a file, or a URL without its password)."""
        ...


class MemoryStore:
    """An in-memory profile backend: a dict ``ProfileKey -> Measurement``, the same for every workload given to it
    (use one per workload). Shared across solves if reused; nothing is kept after the process."""

    def __init__(self) -> None:
        self._data: dict[ProfileKey, Measurement] = {}

    def __len__(self) -> int:
        return len(self._data)

    def describe(self) -> str:
        return "in memory (not kept)"

    def profiles(self, workload: Workload, **_: Any) -> MemoryStore:
        return self

    def lookup(self, key: ProfileKey) -> Measurement | None:
        return self._data.get(key)

    def put(self, key: ProfileKey, m: Measurement) -> None:
        self._data[key] = m

    def fetch_or_measure_many(self, keys: Sequence[ProfileKey], measure: Callable[[ProfileKey], Measurement],
                              context: dict | None = None) -> list[tuple[Measurement, bool]]:
        out = []
        for k in keys:
            m = self._data.get(k)
            new = m is None
            if new:
                m = self._data[k] = measure(k)
            out.append((m, new))
        return out
