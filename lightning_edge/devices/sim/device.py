"""``SimulatedOrin``: the twin as a device, like a real board: a mode controller, a power sensor, a mode space; of the
papers' AGX Orin by default, of any catalogued module (``board="orin-nano-8gb"``: extrapolated coefficients, labelled
so) or of a board file (``get_board("sim:PATH.json")``: :mod:`lightning_edge.twin.boards`).

    >>> from lightning_edge.devices.sim.device import SimulatedOrin
    >>> dev = SimulatedOrin(seed=0)
    >>> dev.controller.apply("8c/1344/727/2133")
    >>> with dev.twin.running("resnet18", "train", 16):
    ...     dev.sensor.read().power_w           # settles to the training power within ~2.5 s

The controller is the existing :class:`~lightning_edge.devices.sim.controller.SimModeController`; the twin
follows it (it reads ``controller.current()`` and ``controller.last_change_s``), so the mode is shared and
a change made through the controller shows up in the sensor's readings with the settling curve.
Everything is labelled ``simulated``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lightning_edge.devices.sim.controller import SimModeController
from lightning_edge.devices.sim.sensor import SimPowerSensor
from lightning_edge.devices.spec import BoardSpec
from lightning_edge.modes import PowerModeSpace
from lightning_edge.twin.live import SimWorkload
from lightning_edge.twin.model import OrinTwin

__all__ = ["SimulatedOrin"]


class SimulatedOrin:
    """A simulated Jetson: ``controller``, ``sensor``, ``space``, ``twin`` (``name``: ``"sim:orin-agx"``, the papers'
    board, by default).

    ``board``: a catalogued module's key (``"orin-nano-8gb"``: its grid and named modes, and the twin's coefficients
    extrapolated to it, labelled ``extrapolated``) or a :class:`~lightning_edge.twin.boards.BoardFile` (a board file:
    its coefficients, grid and label). ``controller``: an existing SimModeController to share (default: a new
    in-memory one, or one persisted in ``board_file``, the controller's state file); ``clock``/``clock_ns``: inject
    fake clocks in tests (the controller and twin use ``clock``, the sensor stamps readings with ``clock_ns``).
    """

    def __init__(
        self,
        controller: SimModeController | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        noise: bool = True,
        settling: bool = True,
        seed: int | None = 0,
        update_period_s: float = 0.01,
        initial: Any = None,
        board_file: Any = None,
        board: Any = "orin-agx",
        **twin_kwargs: Any,
    ) -> None:
        from lightning_edge.twin.boards import BoardFile
        from lightning_edge.twin.boards import board_file as catalogued

        bf = board if isinstance(board, BoardFile) else catalogued(str(board))
        self.board_file_ = bf
        self.board = bf.key
        space = bf.space()
        if controller is None:
            from lightning_edge.devices.sim.controller import file_board_id

            identity = file_board_id(bf.path, bf.key) if bf.path else None
            controller = SimModeController(bf.key, space=space, initial=initial, board_file=board_file, clock=clock,
                                           identity=identity,
                                           safety=False if board_file is None else None,
                                           handle_exit=False if board_file is None else None)
        self.controller = controller
        self.twin = OrinTwin(space=controller.space, controller=controller, clock=clock, noise=noise,
                             settling=settling, seed=seed, board=bf, **twin_kwargs)
        self.name = self.twin.name
        self.label = self.twin.label
        self.sensor = SimPowerSensor(self.twin, update_period_s=update_period_s, clock_ns=clock_ns)
        if bf.key != "orin-agx" or self.label != "simulated":
            self.sensor.label = (f"simulated INA3221 rails of the {self.label} twin of the {bf.name} (the AGX Orin's "
                                 "rail split)")
        self.notes = [bf.describe()]

    @classmethod
    def from_name(cls, device: str | BoardSpec, **kwargs: Any) -> SimulatedOrin:
        """A new simulated board for a device name: ``"sim"`` / ``"sim:<key>"`` (a catalogued module:
        :data:`lightning_edge.catalog.BOARDS`) or ``"sim:PATH.json"`` (a board file)."""
        from lightning_edge import catalog
        from lightning_edge.twin.boards import load_board_file

        spec = BoardSpec.parse(device)
        device = spec.key  # for messages: the spec as a person writes it
        if spec.kind != "sim":
            raise ValueError(f"device {device!r}: not a simulated board (sim:<key> or sim:PATH.json)")
        if spec.arg.endswith(".json"):
            return cls(board=load_board_file(spec.arg), **kwargs)
        if spec.arg not in catalog.BOARDS:
            raise ValueError(f"device {device!r}: no simulated board {spec.arg!r}: the twin plays "
                             f"{', '.join('sim:' + k for k in catalog.BOARDS)}, or sim:PATH.json (a board file)")
        return cls(board=spec.arg, **kwargs)

    @property
    def space(self) -> PowerModeSpace:
        return self.controller.space

    def current_mode(self):
        return self.controller.current()

    def workload(self, model: Any, **kwargs: Any) -> SimWorkload:
        """A :class:`SimWorkload` for tuners, on this device's twin."""
        return SimWorkload(model, self.twin, **kwargs)

    def close(self) -> None:
        self.sensor.close()
        close = getattr(self.controller, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> SimulatedOrin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SimulatedOrin({self.name}, mode {self.controller.current()}, {self.label})"
