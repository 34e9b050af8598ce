"""Shared twin for the twin's tests: ModelCosts are cached inside it, so analyze() runs once per workload."""

from __future__ import annotations

import pytest

from lightning_edge.twin.model import OrinTwin


@pytest.fixture(scope="session")
def twin() -> OrinTwin:
    return OrinTwin(settling=False)


class FakeClock:
    """Seconds that only move when told to (``clock.t += 1.0``); ``ns()`` is the same time in ns."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = float(t)

    def __call__(self) -> float:
        return self.t

    def ns(self) -> int:
        return int(round(self.t * 1e9))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
