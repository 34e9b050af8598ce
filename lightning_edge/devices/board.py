"""One ``Board`` per device per process: what the profiler, the tuner, serving and every command know of a board.

``get_board(spec)`` returns **the same** :class:`Board` for the same spec (parsed by the one parser,
:class:`~lightning_edge.devices.spec.BoardSpec`) within a process, so every callback, runner and command reads and
switches one board: a mode set by one is the mode all report, and a real board has one controller and one power
sampler. ``spec``:

- ``"auto"`` / ``None``: the power sensor found here (Jetson sysfs > jtop > NVML > RAPL > none, as
  :func:`~lightning_edge.devices.get_sensor` probes) and the board's mode controller when there is one;
- a sensor or board name: ``"jetson"``, ``"jtop"``, ``"nvpmodel"``, ``"nvml"`` / ``"nvml:0"``, ``"rapl"``;
- ``"none"`` / ``"cpu"`` / ``"host"``: this machine, no power sensor, no controller (time-only profiling,
  wall-clock serving);
- ``"sim"`` / ``"sim:orin-agx"``: the Orin AGX twin (:class:`~lightning_edge.devices.sim.device.SimulatedOrin`);
  ``"sim:<key>"``: the twin of any catalogued module (its grid; its coefficients extrapolated from the papers' board,
  labelled ``extrapolated``: :mod:`lightning_edge.twin.board_files`); ``"sim:PATH.json"``: the twin of a board file
  (``lightning-edge calibrate`` writes one);
- a ``SimulatedOrin`` or any object with ``sensor`` and/or ``controller`` (and optionally ``twin`` and ``live``)
  attributes: that device (one Board per object, shared, not closed with the board); a bare ``PowerSensor``; a
  ``Board``.

``control``: ``"read"`` (the profiler: the mode is read, through a controller opened without safety handlers when
the board has no writer yet; optional: without one a note says mode changes are not tracked) or ``"write"`` (the
tuner, serving: the board's controller that switches modes, with its state file and restore handlers, created once
and then shared by every reader; a board name without one raises, saying why).

Each caller that gets a board closes it when done (:meth:`Board.close`); the board is closed (its sampler stopped,
its sensor closed) when the last one does, and the next ``get_board`` opens it anew. :func:`forget_boards` closes
them all (tests, notebooks).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_edge.catalog.boards import tuning_space
from lightning_edge.catalog.storekey import StoreKey
from lightning_edge.devices.meter import JETSON_SETTLE_S, SensorMeter, TwinMeter
from lightning_edge.devices.sensors.base import EmptySensor, PowerSensor
from lightning_edge.devices.spec import HOST_NAMES, BoardSpec

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.devices.controllers.base import ModeController
    from lightning_edge.devices.protocols import ControllerLike, SensorLike
    from lightning_edge.devices.sim.live import LiveTwin
    from lightning_edge.modes import PowerModeSpace

__all__ = ["Board", "BoardSpec", "ControlOptions", "get_board", "store_key_for", "store_key_of", "forget_boards", "ORIN_PROFILE", "JETSON_SETTLE_S", "HOST_NAMES"]

#: the published roofline profile used for the model energies on real boards (Pagoda's Orin AGX)
ORIN_PROFILE = "orin-agx-pagoda"


@dataclass(eq=False)
class Board:
    """A device: its power ``sensor`` (never None: an ``EmptySensor`` saying why when there is none), its mode
    ``controller`` (None when it has none), when it is simulated the ``twin`` (the board's model, an ``OrinTwin``)
    and ``live`` (the simulated board running, a :class:`~lightning_edge.devices.sim.live.LiveTwin`: what a workload
    started on it draws; None on a real board), and the ``owner`` that is closed with
    it: what the resolver created (the ``SimulatedOrin`` of a ``"sim"`` spec, a sensor opened by name); a device
    you pass in stays open (yours to close). ``spec``: the parsed spec it was opened from (None for an object)."""

    name: str
    sensor: PowerSensor | SensorLike
    controller: ModeController | ControllerLike | None = None
    twin: Any = None
    live: LiveTwin | None = None
    owner: Any = None
    notes: list[str] = field(default_factory=list)
    spec: BoardSpec | None = None
    root: Any = None
    writable: bool = False  # the controller is the board's writer (state file, lock, restore handlers)
    options: ControlOptions = field(default_factory=lambda: ControlOptions())
    _users: int = 0
    _key: Any = None
    _sampler: Any = None
    _sampler_users: int = 0
    closed: bool = False

    @property
    def simulated(self) -> bool:
        return self.twin is not None or getattr(self.sensor, "source", "measured") == "simulated"

    @property
    def label(self) -> str:
        """``measured`` (a real board), ``simulated`` (a twin), or ``extrapolated`` (the twin of a board whose
        coefficients are extrapolated from another's); :attr:`source` says ``simulated`` for both."""
        if self.twin is not None:
            return str(getattr(self.twin, "label", "simulated"))
        return "simulated" if self.simulated else "measured"

    @property
    def has_sensor(self) -> bool:
        return bool(self.sensor.available)

    @property
    def source(self) -> str:
        """``measured``, ``simulated``, or ``model`` (no sensor: energies come from a model)."""
        if not self.has_sensor:
            return "model"
        return "simulated" if self.simulated else "measured"

    @property
    def space(self) -> PowerModeSpace | None:
        """The board's power-mode space (None without a controller)."""
        return None if self.controller is None else self.controller.space

    @property
    def tuning_space(self) -> PowerModeSpace | None:
        """The modes a tuner searches on this board (:func:`lightning_edge.catalog.tuning_space`: Fulcrum's 441 on an
        Orin AGX, else the whole space; None without a controller)."""
        return tuning_space(self.space)

    @property
    def store_key(self) -> StoreKey:
        """The board's key in a profile store (:func:`store_key_for`)."""
        return store_key_for(self.controller, self.twin if self.simulated else None, simulated=self.simulated,
                             name=self.name)

    @property
    def update_period_s(self) -> float:
        v = float(self.sensor.update_period_s or 0.0)
        return v if math.isfinite(v) else 0.0

    def mode(self) -> str | None:
        """The current power mode as a string, or None when there is no controller (or reading it failed)."""
        if self.controller is None:
            return None
        try:
            return str(self.controller.current())
        except Exception:  # noqa: BLE001 - a mode read must never stop training
            return None

    def seconds_since_mode_change(self) -> float | None:
        """Seconds since the controller last changed the mode (the twin's controller knows; real ones: None)."""
        if self.controller is None:
            return None
        try:
            v = self.controller.seconds_since_change()
        except Exception:  # noqa: BLE001
            return None
        return None if v is None else float(v)

    def roofline(self, mode: str | None, precision: str = "fp32") -> tuple[Any, str]:
        """The roofline whose energy model apportions a step's energy: the twin's for the mode, else the published
        Orin AGX profile (the mode when it is one of its modes, else MAXN). ``(Roofline or None, description)``."""
        if self.twin is not None:
            try:
                m = mode or self.mode()
                if m is None:
                    raise ValueError("no controller says the board's mode")
                return self.twin.roofline(m, precision), (f"twin roofline of {self.twin.name} in mode {m} "
                                                          f"({self.label})")
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"twin roofline unavailable: {exc}")
        model = self._calibrated_model()
        if model is not None:  # the board's own calibrated file (lightning-edge calibrate): its twin's roofline
            try:
                m = mode or str(self.controller.current())
                return model.roofline(m, precision), (f"roofline of the calibrated twin of {model.board.key} in mode "
                                                      f"{m} ({model.board.path}, {model.board.label})")
            except Exception as exc:  # noqa: BLE001 - an unusable file: the published profile, and say why
                self.notes.append(f"calibrated board file unusable: {exc}")
        try:
            from lightning_edge.roofline.profile import load_profile

            prof = load_profile(ORIN_PROFILE)
        except Exception as exc:  # noqa: BLE001
            return None, f"no roofline ({exc}): energies apportioned by time"
        if mode is not None:
            with contextlib.suppress(Exception):  # not one of the profile's modes: MAXN's
                return prof.roofline(mode, precision), f"{ORIN_PROFILE} (published) mode {mode}"
        maxn = prof.modes[0].mode
        return prof.roofline(maxn, precision), f"{ORIN_PROFILE} (published) mode {maxn} (MAXN)"

    def _calibrated_model(self) -> Any:
        """The twin of this real board's installed calibrated board file (:func:`lightning_edge.twin.board_files.
        installed_board_file`), or None (no file, or not a catalogued module)."""
        if self.twin is not None or self.controller is None:
            return None
        if not hasattr(self, "_model_cache"):
            self._model_cache = None
            key = getattr(self.space, "name", None)
            try:
                from lightning_edge.twin.board_files import installed_board_file

                bf = installed_board_file(str(key)) if key else None
                if bf is not None:
                    from lightning_edge.twin.model import OrinTwin

                    self._model_cache = OrinTwin(board=bf, space=self.space, settling=False)
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"calibrated board file unusable: {exc}")
        return self._model_cache

    def sampler(self, rate_hz: float | None = None, clock_ns: Any = None) -> Any:
        """The board's one background power sampler (started on first use; every reader of the board shares it:
        the profiler and the tuner's meter integrate the same readings). None without a sensor. Release it with
        :meth:`release_sampler`."""
        if not self.has_sensor:
            return None
        if self._sampler is None:
            from lightning_edge.devices.sampler import PowerSampler

            kw = {"clock_ns": clock_ns} if clock_ns is not None else {}
            self._sampler = PowerSampler(self.sensor, rate_hz=rate_hz, **kw)
            self._sampler.start()
        self._sampler_users += 1
        return self._sampler

    def release_sampler(self) -> None:
        self._sampler_users = max(self._sampler_users - 1, 0)
        if self._sampler_users == 0 and self._sampler is not None:
            self._sampler.stop()
            self._sampler = None

    def meter(self, *, seed: int | None = 0, settling: bool = True, wait: bool = True, **twin: Any) -> Any:
        """A step meter of the board (:mod:`lightning_edge.devices.meter`): a ``TwinMeter`` on the twin (``seed``,
        ``settling``, and ``train=``/``infer=``/``precision=`` for it; its own simulated clock), else a
        ``SensorMeter`` over the board's one sampler (``wait``: wait for a sample after each step)."""
        if self.twin is not None:
            return TwinMeter(self.twin, seed=seed, settling=settling, **twin)
        return SensorMeter(self.sensor, wait=wait, board=self)

    def describe(self) -> str:
        if not self.has_sensor:
            why = (self.sensor.reason or "no power sensor").splitlines()[0].rstrip(":")
            return f"no power sensor ({why}): energies are estimated from the roofline model"
        what = f"{self.name}: {self.sensor.label or type(self.sensor).__name__}"
        return f"{what} [EXTRAPOLATED coefficients]" if self.label == "extrapolated" else what

    def close(self) -> None:
        """Done with the board: it is closed when its last user closes it (see the module docstring)."""
        with _LOCK:
            self._users = max(self._users - 1, 0)
            if self._users > 0 or self.closed:
                return
            if self._key is not None and _BOARDS.get(self._key) is self:
                del _BOARDS[self._key]
            self.closed = True
        if self._sampler is not None:
            with contextlib.suppress(Exception):
                self._sampler.stop()
            self._sampler = None
        close = getattr(self.owner, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()

    # ------------------------------------------------------------------ the writer
    def _make_writable(self) -> None:
        """Give the board its writer (once): the controller that switches modes, with its safety."""
        if self.writable:
            return
        if self.spec is None:  # an object passed in: its controller is what it is
            self.writable = self.controller is not None
            return
        if self.twin is not None:  # the simulated board's controller is its writer already
            self.writable = True
            return
        if self.spec.kind == "host":  # this machine: nothing to switch (callers check board.controller)
            return
        from lightning_edge.devices.controllers import get_controller

        kind = self.spec.kind
        kw = {"root": self.root} if self.root is not None else {}
        self.controller = get_controller(_AUTO if kind in ("auto", "jtop") else self.spec, **kw,
                                         **self.options.controller_kwargs())
        self.notes[:] = [n for n in self.notes if not n.startswith("no mode controller")]
        self.writable = True


_BOARDS: dict[Any, Board] = {}
_AUTO = BoardSpec("auto")  # the backends' own choice (a spec parsed once: get_board hands the backends BoardSpecs)
_LOCK = threading.RLock()


def store_key_for(controller: Any, twin: Any = None, *, simulated: bool = False, name: str = "device") -> StoreKey:
    """The key a board's profiles are kept under in a profile store: its model (``orin-agx``: its mode space's
    name, else its controller's device id, else ``name``), or for a simulated board its twin's (``sim:<key>+<digest>``:
    :attr:`~lightning_edge.twin.model.OrinTwin.store_key`), so simulated profiles are never mixed with a real board's,
    nor with another model of the board. The one place a board's key is made (the Board's, and the tuner's when it
    is handed a controller and a meter instead of a Board)."""
    twin_key = getattr(twin, "store_key", None) if simulated else None
    if isinstance(twin_key, str):
        return StoreKey.parse(twin_key)
    space = getattr(controller, "space", None)
    label = getattr(space, "name", None) or getattr(controller, "device_id", None) or name
    key = StoreKey.parse(str(label))
    return key if key.simulated or not simulated else StoreKey(key.module, simulated=True)


def store_key_of(spec: Any = "sim:orin-agx", **kw: Any) -> StoreKey:
    """The key under which the board ``spec`` names keeps its profiles in a profile store (:attr:`Board.store_key`:
    ``sim:orin-agx+<digest>`` for the twin), without holding the board: for reading a store's studies."""
    board = get_board(spec, **kw)
    try:
        return board.store_key
    finally:
        board.close()


def forget_boards() -> None:
    """Close every board of this process and forget them (tests, notebooks): the next ``get_board`` opens anew."""
    with _LOCK:
        boards = list(_BOARDS.values())
        _BOARDS.clear()
    for b in boards:
        b._users = 1
        b._key = None
        b.close()


@dataclass(frozen=True)
class ControlOptions:
    """How a board's writer (its mode controller) is opened, beyond its spec: ``dry_run`` (say what would be
    written, write nothing), ``state_dir`` (where its state file and lock live; for a simulated board also where its
    mode is kept across processes, as ``lightning-edge mode`` needs: ``sim_<key>.board.json``), ``writer`` (the
    sysfs writer its files go through: a fake board's in tests; a Python argument only). Boards opened with other
    options are other boards."""

    dry_run: bool = False
    state_dir: str | None = None
    writer: Any = None

    def controller_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self.dry_run:
            kw["dry_run"] = True
        if self.state_dir is not None:
            kw["state_dir"] = self.state_dir
        if self.writer is not None:
            kw["writer"] = self.writer
        return kw

    def key(self) -> tuple:
        return (self.dry_run, self.state_dir, None if self.writer is None else id(self.writer))


def persisted_sim_board_file(spec: BoardSpec, state_dir: str | os.PathLike) -> Path:
    """The file that keeps a simulated board's mode across processes in ``state_dir``: ``sim_<key>.board.json``,
    or for a board file ``sim_file-<digest of its absolute path>.board.json`` (its own, never the catalogue's)."""
    name = spec.arg
    if name.endswith(".json"):
        from lightning_edge.devices.sim.controller import file_board_digest

        name = "file-" + file_board_digest(name)
    return Path(state_dir) / f"sim_{name}.board.json"


def get_board(spec: Any = "auto", *, control: str = "read", seed: int | None = 0, root: Any = None,
              options: ControlOptions | None = None) -> Board:
    """The process's :class:`Board` for ``spec`` (see the module docstring): the same one for the same spec.
    ``seed`` seeds a new twin's noise (the first opener's wins); ``root``: the file-system root of a board (a fake
    sysfs tree in tests; a Python argument only, never a command-line option); ``options``: how its writer is
    opened (:class:`ControlOptions`: ``lightning-edge mode``'s dry run and state directory)."""
    if control not in ("read", "write"):
        raise ValueError(f"control must be 'read' or 'write', got {control!r}")
    options = options or ControlOptions()
    if isinstance(spec, Board):
        board = spec
        with _LOCK:
            board._users += 1
    else:
        if spec is not None and not isinstance(spec, str) and not isinstance(spec, (PowerSensor, BoardSpec)) \
                and getattr(spec, "sensor", None) is None and getattr(spec, "controller", None) is None:
            raise TypeError("device: expected 'auto', a name such as 'sim:orin-agx', 'jetson', 'nvml:0', 'rapl' or "
                            "'none', a PowerSensor, or an object with .sensor and/or .controller attributes "
                            f"(SimulatedOrin); got {type(spec).__name__}")
        parsed = BoardSpec.parse(spec) if spec is None or isinstance(spec, (str, BoardSpec)) else None
        key = (parsed.key, str(root) if root is not None else None, options.key()) if parsed is not None \
            else ("object", id(spec))
        with _LOCK:
            board = _BOARDS.get(key)
            if board is None or board.closed:
                board = _open(spec, parsed, control, seed, root, options)
                board._key = key
                board.options = options
                board._pin = spec  # an object spec stays alive while its board is cached (its id is the key)
                _BOARDS[key] = board
            board._users += 1
    if control == "write" and not board.writable and not (board.spec is not None and board.spec.kind == "host"):
        try:
            board._make_writable()
        except BaseException:
            board.close()
            raise
    return board


def _open(spec: Any, parsed: BoardSpec | None, control: str, seed: int | None, root: Any,
          options: ControlOptions) -> Board:
    if isinstance(spec, PowerSensor):
        return Board(getattr(spec, "name", "sensor"), spec, owner=spec)
    if parsed is None:  # a device object (SimulatedOrin, or anything with .sensor / .controller)
        sensor, ctl = getattr(spec, "sensor", None), getattr(spec, "controller", None)
        return Board(str(getattr(spec, "name", type(spec).__name__)),
                     sensor if sensor is not None else EmptySensor(reason=f"{type(spec).__name__} has no sensor"),
                     ctl, getattr(spec, "twin", None), getattr(spec, "live", None), writable=ctl is not None)
    kind = parsed.kind
    if kind == "sim":
        from lightning_edge.devices.sim.device import SimulatedOrin

        ctl = None
        if options.state_dir is not None:  # its mode kept in the state directory, across processes
            from lightning_edge.devices.controllers import get_controller

            ctl = get_controller(parsed, board_file=persisted_sim_board_file(parsed, options.state_dir),
                                 **options.controller_kwargs())
        sim = SimulatedOrin.from_name(parsed, seed=seed, controller=ctl)
        return Board(parsed.key, sim.sensor, sim.controller, sim.twin, sim.live, owner=sim, spec=parsed, writable=True,
                     notes=list(getattr(sim, "notes", [])) if sim.label != "simulated" or sim.board != "orin-agx"
                     else [])
    from lightning_edge.devices.sensors import get_sensor

    kw: dict[str, Any] = {"root": root} if root is not None else {}
    if kind == "host":
        sensor = get_sensor("none")
        return Board(parsed.key, sensor, owner=sensor, spec=parsed, root=root)
    from lightning_edge.devices.controllers import get_controller

    if control == "write":  # raises saying why there is no controllable board here
        ctl = get_controller(_AUTO if kind in ("auto", "jtop") else parsed, **kw, **options.controller_kwargs())
        sensor = get_sensor(_AUTO if kind in ("auto", "jetson", "nvpmodel") else parsed, **kw)
        return Board(parsed.key, sensor, ctl, owner=sensor, spec=parsed, root=root, writable=True)
    sensor = get_sensor(_AUTO if kind == "nvpmodel" else parsed, **kw)
    ctl, notes = None, []
    if kind != "rapl" and not isinstance(sensor, EmptySensor):
        try:  # read only: never restore anything at exit, never recover someone else's leftover state
            ctl = get_controller(_AUTO if kind in ("auto", "jetson", "jtop") else parsed, handle_exit=False,
                                 recover=False, safety=False, **kw)
        except Exception as exc:  # noqa: BLE001 - no controller: no mode tracking, still profiling
            notes.append(f"no mode controller ({str(exc).splitlines()[0]}): power-mode changes are not tracked")
    name = str(getattr(sensor, "name", kind) if kind == "auto" else parsed.key)
    return Board(name, sensor, ctl, owner=sensor, notes=notes, spec=parsed, root=root)
