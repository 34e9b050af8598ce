"""A stand-in for the ``pynvml`` module's power and energy queries (the parts the NVML *sensor* uses).

(tests/fakes/nvml.py fakes the clock-locking parts for the mode controller; this one adds what a power sensor
needs, without changing that file.) Like the real module, errors are ``NVMLError`` instances with a ``value``
code, and "Not Supported" is raised as the ``NVMLError_NotSupported`` subclass with value 3.

- ``FakeNvmlPower()``: an A100 with the total-energy counter (mJ) and power usage (mW);
- ``FakeNvmlPower(energy=False)``: an older GPU, power usage only;
- ``FakeNvmlPower.jetson()``: Jetson's NVML (JetPack 6): the GPU is there, power and energy are Not Supported.

``nv.advance(joules)`` moves the energy counter; ``nv.power_mw`` sets the power reading; ``nv.lost = True`` makes
every read fail like a GPU that fell off the bus.
"""

from __future__ import annotations

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_GPU_IS_LOST = 15


class NVMLError(Exception):
    def __init__(self, value: int, msg: str = "") -> None:
        super().__init__(msg or f"NVML error {value}")
        self.value = value


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED, "Not Supported")


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_GPU_IS_LOST, "GPU is lost")


def uuid_of(nvml_index: int) -> str:
    """The fake GPUs' UUIDs, as NVML writes them (CUDA's ``device properties .uuid`` has no ``GPU-`` prefix)."""
    return f"GPU-5a3c0de{nvml_index}-1b2c-4d5e-8f90-0123456789a{nvml_index}"


class FakeNvmlPower:
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVMLError = NVMLError

    def __init__(self, gpus: int = 1, *, energy: bool = True, power: bool = True,
                 name: str = "NVIDIA A100-SXM4-40GB", fail_init: str | None = None) -> None:
        self.gpus = gpus
        self.energy_supported = energy
        self.power_supported = power
        self.name = name
        self.fail_init = fail_init
        self.energy_mj = 987_654_321  # since the driver loaded
        self.power_mw = 65_000
        self.lost = False
        self.shutdowns = 0

    @classmethod
    def jetson(cls) -> FakeNvmlPower:
        return cls(energy=False, power=False, name="Orin (nvgpu)")

    def advance(self, joules: float) -> None:
        self.energy_mj += int(round(joules * 1e3))

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError(9, self.fail_init)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int):
        return ("gpu", i)

    def nvmlDeviceGetName(self, h) -> bytes:
        return self.name.encode()

    def nvmlDeviceGetUUID(self, h) -> str:
        return uuid_of(h[1])

    def nvmlDeviceGetTotalEnergyConsumption(self, h) -> int:
        if self.lost:
            raise NVMLError_GpuIsLost()
        if not self.energy_supported:
            raise NVMLError_NotSupported()
        return self.energy_mj

    def nvmlDeviceGetPowerUsage(self, h) -> int:
        if self.lost:
            raise NVMLError_GpuIsLost()
        if not self.power_supported:
            raise NVMLError_NotSupported()
        return self.power_mw
