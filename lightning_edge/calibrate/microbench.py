"""Roofline microbenchmarks in the spirit of Pagoda (section 5.2.4) and PRoof.

* peak FLOP/s: square matmul ``C = A @ B`` swept over sizes n (powers of two); W = 2 n^3 FLOP,
  Q = 3 n^2 x element size (A and B read once, C written once: the compulsory traffic);
* bandwidth: ReLU (``clamp_min(x, 0, out=y)``: element-wise, W = n FLOP) and transpose (``y.copy_(x.t())``,
  the copy ``.contiguous()`` makes of a transposed view, W = 0) swept over sizes; Q = bytes read +
  bytes written. Outputs are preallocated so that allocator work (page faults on the CPU) is not timed;
* each point is the median of ``repeats`` timed runs after ``warmup`` untimed ones; peaks are the
  maximum over sizes of those medians (Pagoda: "median over 10 runs" and "peak across all sizes");
  bandwidth only counts sizes whose working set is well above the last-level cache;
* timing: CUDA events with synchronisation on a GPU, ``time.perf_counter_ns`` on the CPU; very short
  kernels are looped so that each timed block lasts at least ``min_block_s``;
* energy: through the board's meter (:func:`energy_meter`: the board's power sensor, its one sampler, integrated
  over a window of repeated calls; an ``EnergyMeter`` may be given). pi_0 is the idle power; eps_flop and eps_mop
  come from a non-negative least-squares fit of E - pi_0 T = eps_flop W + eps_mop Q over all samples
  (``lightning_edge.roofline.fit``). Without a sensor only the time roofline is measured, and the notes say why;
* on a simulated board (``board=get_board("sim:orin-agx")``) the same sweeps run on the twin
  (:mod:`lightning_edge.twin.kernels`): every sample, peak and coefficient is labelled ``simulated``.

torch is imported inside the functions, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lightning_edge.roofline.fit import EnergyFit, fit_energy_coefficients
from lightning_edge.roofline.model import Roofline
from lightning_edge.roofline.profile import DeviceProfile, ModeEntry

if TYPE_CHECKING:
    import torch

    from lightning_edge.devices.board import Board
    from lightning_edge.devices.protocols import BoardLike

__all__ = [
    "NO_SENSOR_MESSAGE", "EnergyMeter", "NullEnergyMeter", "SensorEnergyMeter", "energy_meter", "find_energy_meter",
    "TwinRunner", "Sample", "SweepConfig",
    "MicrobenchResult", "run_microbench", "time_callable",
]

NO_SENSOR_MESSAGE = (
    "no power sensor found on this machine: measured the time roofline only; "
    "the energy roofline needs a sensor (INA3221 on Jetson, NVML, RAPL)"
)


# ------------------------------------------------------------------------------------------ energy meters
@runtime_checkable
class EnergyMeter(Protocol):
    """What the microbenchmarks need from a power sensor. A future sensor (INA3221, NVML, RAPL, the
    twin) satisfies it with a small adapter.

    ``measure(fn, repeats)`` runs ``fn`` ``repeats`` times back to back (synchronising the device at
    the end) and returns ``(time_s, energy_j)`` for the whole window; ``idle_power_w(duration_s)``
    returns the average power of the idle device, used as the static power pi_0. ``min_window_s`` is
    the shortest window the meter can integrate reliably (about 2-3 s for a 1 Hz sampler).
    """

    name: str
    available: bool
    reason: str
    min_window_s: float

    def measure(self, fn: Callable[[], object], repeats: int = 1) -> tuple[float, float]: ...

    def idle_power_w(self, duration_s: float = 2.0) -> float: ...


@dataclass
class NullEnergyMeter:
    """The meter of a machine without a power sensor: says why, measures nothing."""

    reason: str = NO_SENSOR_MESSAGE
    name: str = "none"
    available: bool = False
    min_window_s: float = math.inf

    def measure(self, fn, repeats=1):
        raise RuntimeError(self.reason)

    def idle_power_w(self, duration_s=2.0):
        raise RuntimeError(self.reason)


class SensorEnergyMeter:
    """The energy of a window of work, from a board's power sensor: the board's one sampler integrates its readings
    over the window (``measure``), or averages them over an idle wait (``idle_power_w``). The window lasts at least
    ``min_window_s``: three of the sensor's update periods, and 0.5 s."""

    def __init__(self, board: Board, sync: Callable[[], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep, min_window_s: float | None = None):
        self.board = board
        self.name = str(board.sensor.name)
        self.available = bool(board.has_sensor)
        why = board.sensor.reason
        self.reason = "" if self.available else NO_SENSOR_MESSAGE + (f" ({why.splitlines()[0]})" if why else "")
        self.min_window_s = max(3.0 * board.update_period_s, 0.5) if min_window_s is None else float(min_window_s)
        self._sync = sync or (lambda: None)
        self._sleep = sleep

    def _window(self, run: Callable[[], None]) -> tuple[float, float]:
        sampler = self.board.sampler()
        try:
            self._sync()
            t0 = time.perf_counter_ns()
            run()
            self._sync()
            t1 = time.perf_counter_ns()
            sampler.wait_for(t1, timeout_s=max(2 * self.board.update_period_s, 0.05))
            energy = float(sampler.energy_j(t0, t1))
            if not sampler.quality(t0, t1).trusted or not math.isfinite(energy):
                raise RuntimeError(f"{self.name}: the readings over the window are partial ({sampler.quality(t0, t1).describe()})")
            return (t1 - t0) / 1e9, energy
        finally:
            self.board.release_sampler()

    def measure(self, fn: Callable[[], object], repeats: int = 1) -> tuple[float, float]:
        def run():
            for _ in range(repeats):
                fn()
        return self._window(run)

    def idle_power_w(self, duration_s: float = 2.0) -> float:
        t, e = self._window(lambda: self._sleep(max(duration_s, self.min_window_s)))
        return e / t


def energy_meter(board: Board | None = None, device: str = "cpu") -> EnergyMeter:
    """The energy meter of ``board`` (default: the process's ``get_board("auto")``): its power sensor, or a
    ``NullEnergyMeter`` saying why there is none."""
    if board is None:
        from lightning_edge.devices.board import get_board

        board = get_board("auto")
    if not board.has_sensor:
        why = (board.sensor.reason or "").splitlines()
        return NullEnergyMeter(reason=NO_SENSOR_MESSAGE + (f" ({why[0].rstrip(':')})" if why else ""))
    return SensorEnergyMeter(board, sync=(lambda: _sync(device)))


def find_energy_meter(device: str = "cpu") -> EnergyMeter:
    """The energy meter of this machine's board for the torch ``device`` (see :func:`energy_meter`)."""
    try:
        return energy_meter(None, device)
    except Exception as exc:  # a sensor that fails to open is reported, not fatal  # noqa: BLE001
        return NullEnergyMeter(reason=f"{NO_SENSOR_MESSAGE} (opening the sensor failed: {exc})")


# ------------------------------------------------------------------------------------------ samples
@dataclass
class Sample:
    """One microbenchmark point: the median per-call time of one kernel at one size."""

    kernel: str           # "matmul" | "relu" | "transpose"
    precision: str        # "fp32", "bf16", ...
    size: int             # matrix side n (matmul, transpose) or element count (relu)
    flops: float          # W per call
    bytes: float          # Q per call (read + write)
    time_s: float         # median seconds per call
    repeats: int
    energy_j: float | None = None    # per call, when a meter measured it
    label: str = "measured"

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.time_s

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.time_s

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SweepConfig:
    """Sizes and repeat counts of a run (``SweepConfig.for_device(device, quick)`` picks them).

    Matmul sizes are matrix sides n; ReLU and transpose sizes are working sets in bytes (read + write),
    so that every precision sweeps the same amounts of memory.
    """

    matmul_sizes: list[int]
    relu_bytes: list[int]
    transpose_bytes: list[int]
    repeats: int = 10
    warmup: int = 2
    max_call_s: float = 2.0        # stop growing a sweep once one call takes longer than this
    budget_s: float = 100.0        # soft limit for the whole run (each sweep keeps at least one size)
    min_block_s: float = 2e-3      # loop short kernels so that one timed block lasts at least this
    min_bandwidth_bytes: int | None = None  # working sets smaller than this do not count for bandwidth

    @classmethod
    def for_device(cls, device: str, quick: bool = False) -> SweepConfig:
        mib = 2 ** 20
        if device.startswith("cuda"):
            if quick:
                return cls([2 ** k for k in range(8, 13)], [2 ** k * mib for k in (0, 4, 8, 10)],
                           [2 ** k * mib for k in (2, 6, 8)], repeats=3, warmup=1, max_call_s=0.25, budget_s=15)
            return cls([2 ** k for k in range(8, 15)], [2 ** k * mib for k in range(-2, 12)],
                       [2 ** k * mib for k in range(0, 11)], repeats=10, warmup=3, max_call_s=2.0, budget_s=100)
        if quick:
            return cls([128, 256, 512, 1024], [2 ** k * mib for k in (-1, 2, 5, 8)], [2 ** k * mib for k in (1, 5, 7)],
                       repeats=3, warmup=1, max_call_s=0.25, budget_s=12, min_block_s=1e-3)
        return cls([2 ** k for k in range(7, 13)], [2 ** k * mib for k in range(-2, 11)],
                   [2 ** k * mib for k in range(0, 10)], repeats=10, warmup=2, max_call_s=2.0, budget_s=100)


_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}


def _torch_dtype(precision: str) -> torch.dtype:
    """The torch dtype of a precision's tensors (``KeyError``: not a precision of :data:`_DTYPES`)."""
    import torch

    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
    return dtypes[_DTYPES[precision]]


# ------------------------------------------------------------------------------------------ timing
def _sync(device: str):
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def time_callable(fn: Callable[[], object], device: str = "cpu", repeats: int = 10, warmup: int = 2,
                  min_block_s: float = 2e-3, clock_ns: Callable[[], int] = time.perf_counter_ns) -> tuple[float, int]:
    """Median seconds per call of ``fn`` over ``repeats`` timed blocks, after ``warmup`` untimed calls.

    CUDA: each block is bracketed by CUDA events and synchronised. CPU: ``clock_ns`` (perf_counter_ns)
    around each block. A block loops ``fn`` enough times to last ``min_block_s``. Returns
    ``(median_s, calls_per_block)``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    cuda = device.startswith("cuda")
    for _ in range(max(0, warmup)):
        fn()
    _sync(device)
    if cuda:
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def block(k: int) -> float:
            start.record()
            for _ in range(k):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
    else:
        def block(k: int) -> float:
            t0 = clock_ns()
            for _ in range(k):
                fn()
            return (clock_ns() - t0) / 1e9

    one = block(1)
    inner = 1 if one >= min_block_s or one <= 0 else min(1000, max(1, math.ceil(min_block_s / one)))
    times = [block(inner) / inner for _ in range(repeats)]
    return statistics.median(times), inner


# ------------------------------------------------------------------------------------------ sweeps
def _free_bytes(device: str) -> int:
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 2 ** 31


def _llc_bytes(device: str) -> int | None:
    if device.startswith("cuda"):
        import torch

        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or None
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in os.listdir(base):
            try:
                with open(f"{base}/{idx}/size") as fh:
                    s = fh.read().strip()
            except OSError:
                continue
            m = re.match(r"(\d+)([KMG]?)", s)
            if m:
                val = int(m.group(1)) * {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}[m.group(2)]
                best = max(best or 0, val)
    except OSError:
        return None
    return best


def _precision_runs(precision: str, device: str) -> bool:
    import torch

    try:
        dt = _torch_dtype(precision)
        a = torch.ones(8, 8, dtype=dt, device=device)
        (a @ a).sum().item()
        return True
    except (RuntimeError, TypeError, KeyError):
        return False


def _default_precisions(device: str) -> list[str]:
    import torch

    if device.startswith("cuda"):
        out = ["fp32"]
        major, _minor = torch.cuda.get_device_capability(device)
        if major >= 8:
            out.append("tf32")
        out.append("fp16")
        if torch.cuda.is_bf16_supported():
            out.append("bf16")
        return out
    return ["fp32"] + (["bf16"] if _precision_runs("bf16", device) else [])


@contextlib.contextmanager
def _tf32(on: bool):
    """Allow TF32 tensor-core matmuls only for the 'tf32' precision."""
    import torch

    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


class TwinRunner:
    """The sweeps' kernels on a simulated board: each call is the twin's time and energy of that kernel in the
    board's current mode (:func:`lightning_edge.twin.kernels.kernel_time_energy`), with its noise. Everything it
    gives is ``simulated``; the board's (simulated) sensor is its energy meter."""

    available = True
    reason = ""
    min_window_s = 0.0
    memory_bytes = 32 * 2 ** 30  # the Orin AGX 32 GB

    def __init__(self, board: BoardLike, seed: int | None = 0) -> None:
        import numpy as np

        self.board = board
        # "extrapolated" on an extrapolated board
        self.label = str(board.twin.label) if board.twin is not None else "simulated"
        self.name = f"{board.name} ({self.label})"
        self.rng = np.random.default_rng(seed)

    def element_size(self, precision: str) -> int:
        return 2 if precision == "fp16" else 4

    def run(self, kernel: str, precision: str, flops: float, nbytes: float, repeats: int) -> tuple[float, float]:
        """Median time and energy per call over ``repeats`` simulated calls."""
        from lightning_edge.twin.kernels import kernel_time_energy

        mode = self.board.controller.current()
        draws = [kernel_time_energy(self.board.twin, mode, flops, nbytes, precision, matmul=kernel == "matmul",
                                    rng=self.rng) for _ in range(max(repeats, 1))]
        return statistics.median(t for t, _ in draws), statistics.median(e for _, e in draws)

    def idle_power_w(self, duration_s: float = 0.0) -> float:
        return float(self.board.twin.static_power(self.board.controller.current()))


def _sweep(kernel: str, precision: str, device: str, sizes: list[int], cfg: SweepConfig, deadline: float,
           meter: EnergyMeter | None, log: Callable[[str], None], twin: TwinRunner | None = None) -> list[Sample]:
    if twin is not None:
        el, free = twin.element_size(precision), twin.memory_bytes
    else:
        import torch

        dt = _torch_dtype(precision)
        el = torch.empty((), dtype=dt).element_size()
        free = _free_bytes(device)
    out: list[Sample] = []
    for size in sizes:
        if out and time.monotonic() > deadline:
            log(f"  {kernel}/{precision}: time budget reached, stopping at size {out[-1].size}")
            break
        if kernel == "matmul":
            need, flops, nbytes = 3 * size * size * el, 2.0 * size ** 3, 3.0 * size * size * el
        elif kernel == "relu":
            size = max(1, int(size) // (2 * el))              # working-set bytes -> elements
            need, flops, nbytes = 2 * size * el, float(size), 2.0 * size * el
        else:
            size = max(1, math.isqrt(int(size) // (2 * el)))  # working-set bytes -> matrix side
            need, flops, nbytes = 2 * size * size * el, 0.0, 2.0 * size * size * el
        if need > 0.5 * free:
            log(f"  {kernel}/{precision}: size {size} needs {need / 2**20:.0f} MiB, more than half the free memory; stop")
            break
        if twin is not None:
            t, energy = twin.run(kernel, precision, flops, nbytes, cfg.repeats)
            out.append(Sample(kernel, precision, int(size), flops, nbytes, float(t), cfg.repeats, energy, twin.label))
            continue
        try:
            if kernel == "matmul":
                a = torch.randn(size, size, device=device, dtype=dt)
                b = torch.randn(size, size, device=device, dtype=dt)
                c = torch.empty(size, size, dtype=dt, device=device)

                def fn(a=a, b=b, c=c):
                    torch.matmul(a, b, out=c)
            elif kernel == "relu":
                x = torch.randn(size, device=device, dtype=dt)
                y = torch.empty_like(x)

                def fn(x=x, y=y):
                    torch.clamp_min(x, 0.0, out=y)
            else:
                x = torch.randn(size, size, device=device, dtype=dt)
                y = torch.empty_like(x)

                def fn(x=x, y=y):
                    y.copy_(x.t())
            with _tf32(precision == "tf32" and device.startswith("cuda")):
                t, inner = time_callable(fn, device, cfg.repeats, cfg.warmup, cfg.min_block_s)
                energy = None
                if meter is not None and meter.available:
                    reps = max(inner, math.ceil(meter.min_window_s / max(t, 1e-9)))
                    tw, ew = meter.measure(fn, reps)
                    energy = ew / reps
                    t_meas = tw / reps
                    t = t_meas if t_meas > 0 else t
        except (RuntimeError, MemoryError) as exc:  # out of memory or an unsupported dtype/kernel
            log(f"  {kernel}/{precision}: size {size} failed ({str(exc).splitlines()[0][:120]}); stop")
            break
        finally:
            _sync(device)
        s = Sample(kernel, precision, int(size), flops, nbytes, float(t), cfg.repeats, energy)
        out.append(s)
        rate = f"{s.flops_per_s / 1e9:9.1f} GFLOP/s" if kernel == "matmul" else f"{s.bytes_per_s / 1e9:9.2f} GB/s"
        log(f"  {kernel:9s} {precision:5s} size {size:>10d}  {t * 1e3:10.3f} ms  {rate}")
        if t > cfg.max_call_s:
            break
    return out


# ------------------------------------------------------------------------------------------ result
@dataclass
class MicrobenchResult:
    """Everything one microbenchmark run measured, for the current power mode of one device."""

    device: str
    device_name: str
    precisions: dict[str, dict]
    samples: list[Sample]
    static_power_w: float | None = None
    energy_fits: dict[str, EnergyFit] = field(default_factory=dict)
    sensor: str | None = None
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    host: dict = field(default_factory=dict)
    label: str = "measured"  # "simulated": the sweeps ran on a twin

    def roofline(self, precision: str = "fp32", mode: str = "current") -> Roofline:
        """The measured Roofline at ``precision`` (energy coefficients only if a sensor was used)."""
        return self.mode_entry(mode).roofline(precision, source=self.label)

    def mode_entry(self, mode: str = "current") -> ModeEntry:
        precision = {}
        for name, p in self.precisions.items():
            entry = {"peak_flops": float(p["peak_flops"]), "bandwidth": float(p["bandwidth"])}
            for key in ("eps_flop", "eps_mop"):
                if p.get(key) is not None:
                    entry[key] = float(p[key])
            entry["note"] = p.get("note", "")
            entry["extra"] = {k: v for k, v in p.items()
                              if k not in ("peak_flops", "bandwidth", "note", "eps_flop", "eps_mop")}
            if name in self.energy_fits:
                entry["extra"]["energy_fit"] = self.energy_fits[name].to_dict()
            precision[name] = entry
        # the mode-level eps values are those of fp32 (Pagoda's default precision), else the first fitted
        main = self.energy_fits.get("fp32") or next(iter(self.energy_fits.values()), None)
        extra = {"elapsed_s": round(self.elapsed_s, 3), "sensor": self.sensor, "label": self.label}
        return ModeEntry(
            mode=mode, precision=precision,
            eps_flop=None if main is None else float(main.eps_flop),
            eps_mop=None if main is None else float(main.eps_mop),
            static_power_w=None if self.static_power_w is None else float(self.static_power_w),
            note="; ".join(self.notes) or None, extra=extra, source=self.label,
        )

    def to_profile(self, mode: str = "current", device: str | None = None) -> DeviceProfile:
        """A one-mode DeviceProfile (source ``measured``, or ``simulated`` for a twin) that ``save_profile`` can
        write."""
        return DeviceProfile(device=device or _slug(self.device_name), source=self.label,
                             modes=[self.mode_entry(mode)], host=self.host)

    def to_dict(self) -> dict:
        return asdict(self)  # samples and energy fits included, as dicts


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "unknown-device"


def _device_name(device: str) -> str:
    try:
        with open("/proc/device-tree/model") as fh:  # a Jetson says what it is here
            model = fh.read().strip("\x00\n ")
            if model:
                return model
    except OSError:
        pass
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return "cpu " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return f"cpu {platform.processor() or platform.machine()}"


def _host_info(device: str) -> dict:
    import torch

    return {
        "platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
        "torch": torch.__version__, "device": device, "device_name": _device_name(device),
        "cpu_threads": torch.get_num_threads(),
    }


def run_microbench(device: str | None = None, quick: bool = False, precisions: list[str] | None = None,
                   meter: EnergyMeter | None = None, config: SweepConfig | None = None,
                   idle_s: float = 3.0, log: Callable[[str], None] | None = None, board: Board | None = None,
                   seed: int | None = 0) -> MicrobenchResult:
    """Measure peak FLOP/s and bandwidth per precision (and, with a meter, pi_0, eps_flop, eps_mop).

    Args:
        device: the torch device the kernels run on: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; default ``cuda`` when
            available, else ``cpu``. Not used on a simulated board.
        quick: small sweeps and 3 repeats (under ~20 s on a 2-core CPU); default sweeps follow Pagoda
            (10 repeats, sizes up to what fits) within about 2 minutes.
        precisions: e.g. ``["fp32", "bf16"]``; default fp32 plus the fast low precisions the device runs (the twin:
            ``fp32``, TF32 tensor cores as Pagoda's, and ``fp16``).
        meter: an ``EnergyMeter``; default the board's (:func:`energy_meter`: its power sensor; a null meter
            without one).
        config: explicit sizes and repeats (overrides ``quick``).
        idle_s: seconds of idle power measured for pi_0 (with a meter).
        log: a function called with progress lines (default: silent).
        board: the board measured (``lightning_edge.devices.get_board``; default ``get_board("auto")``, the one this
            process shares). A simulated board runs the sweeps on its twin in its current mode (``seed``: its noise).
    """
    t_start = time.monotonic()
    log = log or (lambda _msg: None)
    if board is not None and board.twin is not None:
        return _run_on_twin(board, quick, precisions, config, log, seed, t_start)
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"--torch-device {device}: this torch build or machine has no CUDA device "
                           f"(torch {torch.__version__}); use --torch-device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    cfg = config or SweepConfig.for_device(device, quick)
    if meter is None:
        try:
            meter = energy_meter(board, device)
        except Exception as exc:  # a sensor that fails to open is reported, not fatal  # noqa: BLE001
            meter = NullEnergyMeter(reason=f"{NO_SENSOR_MESSAGE} (opening the sensor failed: {exc})")
    if precisions is None:
        precisions = _default_precisions(device)
    for p in precisions:
        if p not in _DTYPES:
            raise ValueError(f"precision {p!r}: expected one of {', '.join(_DTYPES)}")
    notes: list[str] = []
    if device == "cpu":
        notes.append(f"CPU roofline with {torch.get_num_threads()} threads")
    if "fp32" in precisions and device.startswith("cuda"):
        notes.append("fp32 measured with TF32 matmuls disabled (CUDA cores); 'tf32' has them enabled (Pagoda's "
                     "published 'fp32' is TF32)")
    static_power = None
    if meter.available:
        log(f"measuring idle power for {idle_s:.0f} s with {meter.name} ...")
        _sync(device)
        static_power = float(meter.idle_power_w(idle_s))
    llc = _llc_bytes(device)
    min_bw = cfg.min_bandwidth_bytes
    if min_bw is None:
        min_bw = min(4 * llc, 256 * 2 ** 20) if llc else 32 * 2 ** 20
    return _measure(device, _device_name(device), precisions, cfg, meter, static_power, min_bw, notes, log,
                    t_start, lambda prec: _precision_runs(prec, device), None, _host_info(device), "measured")


def _run_on_twin(board: BoardLike, quick: bool, precisions: list[str] | None, config: SweepConfig | None,
                 log: Callable[[str], None], seed: int | None, t_start: float) -> MicrobenchResult:
    """The sweeps on a simulated board's twin (see :class:`TwinRunner`), in its current mode."""
    from lightning_edge.twin.kernels import PRECISIONS

    runner = TwinRunner(board, seed)
    cfg = config or SweepConfig.for_device("cuda", quick)
    precisions = precisions or ["fp32", "fp16"]
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad:
        raise ValueError(f"precision {bad[0]!r}: the twin has rooflines for {', '.join(PRECISIONS)} (fp32 is TF32 "
                         "tensor cores, as Pagoda's published fp32; fp32_cuda the CUDA cores)")
    mode = str(board.controller.current())
    notes = [f"{runner.label}: the sweeps ran on the twin of {board.name} in mode {mode}, not on this machine"]
    if runner.label == "extrapolated":
        notes.append("EXTRAPOLATED: the twin's coefficients for this board are scaled from another board's by "
                     "hardware ratios, not measured (lightning_edge.twin.board_files)")
    static_power = runner.idle_power_w()
    log(f"{runner.name}: idle power {static_power:.2f} W ({runner.label})")
    host = {"device": board.name, "device_name": board.name, "simulated": True, "mode": mode}
    return _measure(board.name, board.name, precisions, cfg, runner, static_power,
                    cfg.min_bandwidth_bytes or 32 * 2 ** 20, notes, log, t_start, lambda prec: True, runner, host,
                    runner.label)


def _measure(device: str, device_name: str, precisions: list[str], cfg: SweepConfig, meter, static_power,
             min_bw_bytes: int, notes: list[str], log, t_start: float, supported, twin: TwinRunner | None,
             host: dict, label: str) -> MicrobenchResult:
    """The sweeps of every precision, their peaks and (with a meter) the energy fits."""
    deadline = t_start + cfg.budget_s
    results: dict[str, dict] = {}
    samples: list[Sample] = []
    n_prec = len(precisions)
    for k, prec in enumerate(precisions):
        if not supported(prec):
            notes.append(f"{prec}: not supported on {device} by this torch build; skipped")
            continue
        # share what is left of the budget between the remaining precisions (and their 3 sweeps)
        share = max(0.5, (deadline - time.monotonic()) / (n_prec - k))
        sub_deadline = time.monotonic() + share
        log(f"{prec} on {device}:")
        mm = _sweep("matmul", prec, device, cfg.matmul_sizes, cfg, time.monotonic() + share / 2, meter, log, twin)
        rl = _sweep("relu", prec, device, cfg.relu_bytes, cfg, time.monotonic() + share / 4, meter, log, twin)
        tr = _sweep("transpose", prec, device, cfg.transpose_bytes, cfg, sub_deadline, meter, log, twin)
        samples += mm + rl + tr
        if not mm or not (rl or tr):
            notes.append(f"{prec}: the sweeps did not finish; no roofline for it")
            continue
        best_mm = max(mm, key=lambda s: s.flops_per_s)
        mem = rl + tr
        big = [s for s in mem if s.bytes >= min_bw_bytes]
        entry_note = ""
        if not big:
            big = mem
            entry_note = (f"no bandwidth sample had a working set >= {min_bw_bytes / 2**20:.0f} MiB "
                          "(4x the last-level cache): bandwidth may include cache hits")
        best_bw = max(big, key=lambda s: s.bytes_per_s)
        results[prec] = {
            "peak_flops": best_mm.flops_per_s, "bandwidth": best_bw.bytes_per_s,
            "matmul_n": best_mm.size, "bandwidth_kernel": best_bw.kernel, "bandwidth_size": best_bw.size,
            "bandwidth_working_set_bytes": int(best_bw.bytes), "min_bandwidth_bytes": int(min_bw_bytes),
            "repeats": cfg.repeats, "note": entry_note or f"{label}: matmul, ReLU and transpose sweeps ({prec})",
        }
    if not results:
        raise RuntimeError(f"no precision could be measured on {device}; see the notes: {'; '.join(notes)}")

    fits: dict[str, EnergyFit] = {}
    if meter.available:
        # one fit per precision: a FLOP of bf16 does not cost what a FLOP of fp32 costs
        for prec in results:
            with_e = [s for s in samples if s.precision == prec and s.energy_j is not None]
            try:
                fit = fit_energy_coefficients([s.flops for s in with_e], [s.bytes for s in with_e],
                                              [s.time_s for s in with_e], [s.energy_j for s in with_e],
                                              static_power_w=static_power)
            except ValueError as exc:
                notes.append(f"{prec}: energy fit failed ({exc})")
                continue
            fits[prec] = fit
            results[prec]["eps_flop"] = fit.eps_flop
            results[prec]["eps_mop"] = fit.eps_mop
    else:
        notes.append(meter.reason)
    return MicrobenchResult(
        device=device, device_name=device_name, precisions=results, samples=samples,
        static_power_w=static_power, energy_fits=fits, sensor=meter.name if meter.available else None,
        notes=notes, elapsed_s=time.monotonic() - t_start, host=host, label=label,
    )
