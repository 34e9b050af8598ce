"""The simulated board's tests use the twin's fixtures (one shared twin, a fake clock)."""

from tests.twin.conftest import FakeClock, clock, twin  # noqa: F401
