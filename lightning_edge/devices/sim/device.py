"""``SimulatedOrin``: the twin as a device, like a real board: a mode controller, a power sensor, a mode space; of the
papers' AGX Orin by default, of any catalogued module (``board="orin-nano-8gb"``: extrapolated coefficients, labelled
so) or of a board file (``get_board("sim:PATH.json")``: :mod:`lightning_edge.twin.board_files`).

    >>> from lightning_edge.devices.sim.device import SimulatedOrin
    >>> dev = SimulatedOrin(seed=0)
    >>> dev.controller.apply("8c/1344/727/2133")
    >>> with dev.live.running("resnet18", "train", 16):
    ...     dev.sensor.read().power_w           # settles to the training power within ~2.5 s

Three parts: ``twin``, the board's model (:class:`~lightning_edge.twin.model.OrinTwin`: pure, no mode, no clock);
``controller``, the :class:`~lightning_edge.devices.sim.controller.SimModeController` that holds the simulated mode;
``live``, the board running (:class:`~lightning_edge.devices.sim.live.LiveTwin`: the model in the controller's mode,
what runs, the power's settling after a change made through the controller, seeded noise), which the ``sensor``
(:class:`~lightning_edge.devices.sim.sensor.SimPowerSensor`) reads. Everything is labelled ``simulated``
(``extrapolated`` on an extrapolated board).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from lightning_edge.devices.sim.controller import SimModeController
from lightning_edge.devices.sim.live import LiveTwin
from lightning_edge.devices.sim.sensor import SimPowerSensor
from lightning_edge.devices.spec import BoardSpec
from lightning_edge.modes import PowerMode, PowerModeSpace
from lightning_edge.twin.board_files import BoardFile
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.sim_workload import SimWorkload

__all__ = ["SimulatedOrin"]


class SimulatedOrin:
    """A simulated Jetson: ``controller``, ``sensor``, ``space``, ``twin`` (the model), ``live`` (the board running)
    (module docstring; ``name``: ``"sim:orin-agx"``, the papers' board, by default).

    ``board``: a catalogued module's key (``"orin-nano-8gb"``: its grid and named modes, and the twin's coefficients
    extrapolated to it, labelled ``extrapolated``) or a :class:`~lightning_edge.twin.board_files.BoardFile` (a board
    file: its coefficients, grid and label). ``controller``: an existing SimModeController to share (default: a new
    in-memory one, or one persisted in ``board_file``, the controller's state file); ``clock``/``clock_ns``: inject
    fake clocks in tests (the controller and the live board use ``clock``, the sensor stamps readings with
    ``clock_ns``); ``noise``/``power_noise``/``seed``: the live board's noise on its readings; ``settling`` and
    ``**model_kwargs`` (``params``, ``settle_tau_s``, ``tf32_matmul``): the model's (:class:`OrinTwin`).
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
        power_noise: float = 0.02,
        update_period_s: float = 0.01,
        initial: PowerMode | str | None = None,
        board_file: str | os.PathLike | None = None,
        board: str | BoardFile = "orin-agx",
        **model_kwargs: Any,
    ) -> None:
        from lightning_edge.twin.board_files import board_file as catalogued

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
        self.twin = OrinTwin(space=controller.space, settling=settling, board=bf, **model_kwargs)
        self.live = LiveTwin(self.twin, controller, clock=clock, noise=noise, seed=seed, power_noise=power_noise)
        self.name = self.twin.name
        self.label = self.twin.label
        self.sensor = SimPowerSensor(self.live, update_period_s=update_period_s, clock_ns=clock_ns)
        if bf.key != "orin-agx" or self.label != "simulated":
            self.sensor.label = (f"simulated INA3221 rails of the {self.label} twin of the {bf.name} (the AGX Orin's "
                                 "rail split)")
        self.notes = [bf.describe()]

    @classmethod
    def from_name(cls, device: str | BoardSpec, **kwargs: Any) -> SimulatedOrin:
        """A new simulated board for a device name: ``"sim"`` / ``"sim:<key>"`` (a catalogued module:
        :data:`lightning_edge.catalog.BOARDS`) or ``"sim:PATH.json"`` (a board file)."""
        from lightning_edge import catalog
        from lightning_edge.twin.board_files import load_board_file

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

    def current_mode(self) -> PowerMode:
        return self.controller.current()

    def workload(self, model: Any, **kwargs: Any) -> SimWorkload:
        """A :class:`SimWorkload` for tuners, on this device's twin."""
        return SimWorkload(model, self.twin, **kwargs)

    def close(self) -> None:
        self.sensor.close()
        self.controller.close()

    def __enter__(self) -> SimulatedOrin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SimulatedOrin({self.name}, mode {self.controller.current()}, {self.label})"
