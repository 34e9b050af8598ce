"""The null sensor: :class:`~lightning_edge.devices.sensors.base.EmptySensor` (time-only profiling, says why).

It lives in ``base`` with the interface it completes; this module is where one looks for it.
"""

from __future__ import annotations

from lightning_edge.devices.sensors.base import EmptySensor

__all__ = ["EmptySensor"]
