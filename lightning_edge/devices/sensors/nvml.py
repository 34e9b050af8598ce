"""NVIDIA GPU power through NVML (``pip install nvidia-ml-py``): the total-energy counter where supported.

- ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta and newer): an energy counter,
  differenced by the sampler (the most accurate NVML path);
- otherwise ``nvmlDeviceGetPowerUsage`` (mW): on Ampere and newer (except GA100) NVML averages it over 1 s,
  older GPUs report instantaneous power;
- Jetson's NVML (JetPack 6 ships one) answers "Not Supported" for both: the probe says so and detection falls
  through to the INA3221 sysfs sensor.

Only the GPU board is measured (not the CPU, not the rest of the machine).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any

from lightning_edge.devices.sensors.base import (
    PowerReading,
    PowerSensor,
    RailBounds,
    SensorError,
    SensorUnavailableError,
)

#: no GPU board draws more (the largest have a 1.2 kW limit); used when NVML does not give the board's limit
NVML_MAX_W = 2000.0

NVML_ERROR_NOT_SUPPORTED = 3
_JETSON_HINTS = ("orin", "xavier", "tegra", "jetson", "nvgpu")


def _import_nvml() -> Any:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    return pynvml


def _not_supported(nv: Any, exc: BaseException) -> bool:
    code = getattr(nv, "NVML_ERROR_NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED)
    return getattr(exc, "value", None) == code or "notsupported" in type(exc).__name__.lower() or \
        "not supported" in str(exc).lower()


def _text(x: bytes | str) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _uuid_key(uuid: str) -> str:
    u = uuid.strip().lower()
    return u[4:] if u.startswith("gpu-") else u


def nvml_index_of_cuda_device(device: int | None = None, *, nvml: Any = None, cuda: Any = None) -> int | None:
    """The NVML index of CUDA device ``device`` (default: this process's current one), matched by UUID.

    CUDA numbers the GPUs it sees after ``CUDA_VISIBLE_DEVICES`` and fastest first (``CUDA_DEVICE_ORDER``), NVML
    all of them in PCI order, so under DDP rank 1's ``cuda:0`` can be NVML's GPU 3. None when CUDA is not in use
    in this process (never initialises it), or no NVML GPU has that UUID (MIG instances included).
    ``cuda``: the ``torch.cuda`` module (default) or a stand-in."""
    try:
        if cuda is None:
            torch = sys.modules.get("torch")  # not imported: CUDA is not in use here (and the CLI stays light)
            if torch is None:
                return None
            cuda = torch.cuda
        if not (cuda.is_available() and cuda.is_initialized()):
            return None
        dev = cuda.current_device() if device is None else int(device)
        want = _uuid_key(str(cuda.get_device_properties(dev).uuid))
        nv = nvml if nvml is not None else _import_nvml()
        if nv is None:
            return None
        nv.nvmlInit()
        for i in range(int(nv.nvmlDeviceGetCount())):
            if _uuid_key(_text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)))) == want:
                return i
    except Exception:  # noqa: BLE001 - no mapping: the caller falls back to GPU 0
        return None
    return None


def nvml_start(index: int, nvml: Any) -> tuple[Any, str | None]:
    """-> (the pynvml module, why GPU ``index`` cannot be reached through it or ``None``), NVML initialised."""
    nv = nvml or _import_nvml()
    if nv is None:
        return None, "pynvml is not installed (pip install nvidia-ml-py, or pip install 'lightning-edge[nvml]')"
    try:
        nv.nvmlInit()
        count = nv.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded...
        return nv, f"NVML could not start ({exc}): no NVIDIA driver on this machine?"
    if count <= index:
        return nv, f"no NVIDIA GPU with index {index} (NVML sees {count})"
    return nv, None


def _probe(index: int, nvml: Any) -> tuple[Any, Any, str | None, str | None]:
    """-> (module, handle, mode "energy"|"power", reason)."""
    nv, reason = nvml_start(index, nvml)
    if reason:
        return nv, None, None, reason
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        name = _text(nv.nvmlDeviceGetName(h))
    except Exception as exc:  # noqa: BLE001
        return nv, None, None, f"NVML cannot open GPU {index} ({exc})"
    errors = []
    for mode, fn in (("energy", "nvmlDeviceGetTotalEnergyConsumption"), ("power", "nvmlDeviceGetPowerUsage")):
        try:
            getattr(nv, fn)(h)
            return nv, h, mode, None
        except Exception as exc:  # noqa: BLE001
            if not _not_supported(nv, exc):
                errors.append(f"{fn}: {exc}")
                continue
            errors.append(f"{fn}: Not Supported")
    if any(k in name.lower() for k in _JETSON_HINTS):
        return nv, None, None, (f"Jetson's NVML does not report power ({name}: {'; '.join(errors)}); "
                                "use the INA3221 sensor ('jetson') instead")
    return nv, None, None, f"NVML reports neither energy nor power for GPU {index} ({name}): {'; '.join(errors)}"


class NvmlSensor(PowerSensor):
    """One NVIDIA GPU through NVML. ``NvmlSensor(index=0, nvml=None, clock_ns=time.perf_counter_ns,
    update_period_s=None)``; ``nvml`` is the pynvml module (injectable).

    Energy-counter mode (``is_energy_counter``): readings carry ``energy_j`` (J since the sensor opened) and
    ``power_w`` = counter difference / time since the previous read (``nan`` on the first). NVML does not document
    how often the counter moves; the default ``update_period_s`` is 20 ms (so the sampler polls at 50 Hz).
    Power mode: ``power_w`` from ``nvmlDeviceGetPowerUsage``, default ``update_period_s`` 100 ms.
    """

    name = "nvml"

    def __init__(self, index: int = 0, *, nvml: Any = None, clock_ns: Callable[[], int] = time.perf_counter_ns,
                 update_period_s: float | None = None) -> None:
        nv, h, mode, reason = _probe(index, nvml)
        if reason:
            raise SensorUnavailableError(f"nvml: {reason}", {"nvml": reason})
        self.nvml, self.handle, self.mode, self.index = nv, h, mode, index
        self.is_energy_counter = mode == "energy"  # type: ignore[misc]
        self.gpu_name = _text(nv.nvmlDeviceGetName(h))
        self.rails = (f"GPU{index}",)
        self.clock_ns = clock_ns
        self.update_period_s = float(update_period_s or (0.02 if self.is_energy_counter else 0.1))
        how = "total-energy counter" if self.is_energy_counter else "power usage"
        self.label = f"NVML {how}, GPU {index} ({self.gpu_name})"
        self.notes = "the GPU board only (not the CPU or the rest of the machine)"
        if not self.is_energy_counter:
            self.notes += "; on Ampere and newer (except GA100) NVML averages power over 1 s"
        self._e0_mj: int | None = None
        self._last: tuple[int, float] | None = None
        self.bounds = {self.rails[0]: self._bounds()}

    def _bounds(self) -> RailBounds:
        """Twice the board's highest settable power limit (NVML), else :data:`NVML_MAX_W`."""
        try:
            _, hi_mw = self.nvml.nvmlDeviceGetPowerManagementLimitConstraints(self.handle)
            if hi_mw and hi_mw > 0:
                return RailBounds(2 * hi_mw / 1e3, f"twice the GPU's {hi_mw / 1e3:g} W maximum power limit")
        except Exception:  # noqa: BLE001 - not supported, no such call in the module
            pass
        return RailBounds(NVML_MAX_W, f"{NVML_MAX_W:g} W: above any GPU board")

    @property
    def energy_domain(self) -> str:
        """One GPU: NVML's index is the physical one (``CUDA_VISIBLE_DEVICES`` does not renumber it)."""
        return f"nvml:{self.index}"

    @classmethod
    def why_unavailable(cls, index: int = 0, nvml: Any = None, **_: Any) -> str | None:
        return _probe(index, nvml)[3]

    @staticmethod
    def index_of(arg: str, nvml: Any = None, cuda: Any = None, **_: Any) -> int:
        """``nvml:N`` -> N; plain ``nvml`` (and ``auto``) -> the GPU this process computes on when CUDA is in use
        (each DDP rank its own), else 0."""
        if arg:
            try:
                return int(arg)
            except ValueError:
                raise SensorUnavailableError(f"nvml:{arg}: expected an NVML GPU index such as nvml:0",
                                             {"nvml": f"bad index {arg!r}"}) from None
        found = nvml_index_of_cuda_device(nvml=nvml, cuda=cuda)
        return 0 if found is None else found

    @classmethod
    def probe(cls, arg: str = "", **kw: Any) -> str | None:
        return cls.why_unavailable(index=cls.index_of(arg, **kw), nvml=kw.get("nvml"))

    @classmethod
    def open(cls, arg: str = "", **kw: Any) -> NvmlSensor:
        from lightning_edge.devices.registry import accepted_kwargs

        return cls(cls.index_of(arg, **kw), **accepted_kwargs(cls, {k: v for k, v in kw.items() if k != "index"}))

    def read(self) -> PowerReading:
        t = int(self.clock_ns())
        rail = self.rails[0]
        try:
            if not self.is_energy_counter:
                w = self.check(rail, float(self.nvml.nvmlDeviceGetPowerUsage(self.handle)) / 1e3)
                if not math.isfinite(w):
                    return PowerReading(t, math.nan, {}, partial=True, rejected=(rail,))
                return PowerReading(t, w, {rail: w})
            mj = int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception as exc:  # noqa: BLE001 - NVMLError_GpuIsLost, Unknown...
            raise SensorError(f"nvml: GPU {self.index} read failed ({exc})") from exc
        if self._e0_mj is None:
            self._e0_mj = mj
        e = (mj - self._e0_mj) / 1e3
        w = math.nan
        if self._last is not None and t > self._last[0]:
            w = self.check(rail, (e - self._last[1]) / ((t - self._last[0]) / 1e9))
            if not math.isfinite(w):  # the counter went back (driver reload) or jumped: not energy; rebase on it
                self._e0_mj = mj - int(round(self._last[1] * 1e3))
                self._last = (t, self._last[1])
                return PowerReading(t, math.nan, {}, energy_j=self._last[1], rails_energy_j={rail: self._last[1]},
                                    partial=True, rejected=(rail,))
        self._last = (t, e)
        return PowerReading(t, w, {rail: w} if math.isfinite(w) else {}, energy_j=e, rails_energy_j={rail: e})

    def read_energy_j(self) -> float:
        if not self.is_energy_counter:
            return super().read_energy_j()
        mj = int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        if self._e0_mj is None:
            self._e0_mj = mj
        return (mj - self._e0_mj) / 1e3

    def close(self) -> None:
        nv, self.nvml = self.nvml, None
        if nv is not None:
            try:
                nv.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


__all__ = ["NvmlSensor"]
