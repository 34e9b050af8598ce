"""A minimal stand-in for the ``pynvml`` module (nvidia-ml-py): one Ampere GPU, records every call.

Only what :class:`~lightning_edge.devices.controllers.nvml.NvmlController` uses. Pass it as
``NvmlController(nvml=FakeNvml())``. ``FakeNvml(gpus=0)`` has no GPU; ``FakeNvml(fail_init=...)``
fails like NVML without a driver.
"""

from __future__ import annotations


class NVMLError(Exception):
    pass


class NVMLError_NoPermission(NVMLError):  # noqa: N801 - pynvml's name
    pass


class FakeNvml:
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVMLError = NVMLError

    def __init__(self, gpus: int = 1, fail_init: str | None = None, deny: bool = False) -> None:
        self.gpus = gpus
        self.fail_init = fail_init
        self.deny = deny
        self.calls: list[tuple] = []
        self.gpu_lock: tuple[int, int] | None = None
        self.mem_lock: tuple[int, int] | None = None
        self.power_limit_mw = 300000

    def nvmlInit(self):
        if self.fail_init:
            raise NVMLError(self.fail_init)

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-00000000-fake-{h[1]}"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetSupportedMemoryClocks(self, h):
        return [1215]

    def nvmlDeviceGetSupportedGraphicsClocks(self, h, mem):
        return list(range(210, 1411, 15))

    def nvmlDeviceGetClockInfo(self, h, kind):
        if kind == self.NVML_CLOCK_MEM:
            return self.mem_lock[0] if self.mem_lock else 1215
        return self.gpu_lock[0] if self.gpu_lock else 1410

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self.power_limit_mw

    def _record(self, name, *args):
        self.calls.append((name, *args))
        if self.deny:
            raise NVMLError_NoPermission("Insufficient Permissions")

    def nvmlDeviceSetGpuLockedClocks(self, h, lo, hi):
        self._record("nvmlDeviceSetGpuLockedClocks", lo, hi)
        self.gpu_lock = (lo, hi)

    def nvmlDeviceSetMemoryLockedClocks(self, h, lo, hi):
        self._record("nvmlDeviceSetMemoryLockedClocks", lo, hi)
        self.mem_lock = (lo, hi)

    def nvmlDeviceResetGpuLockedClocks(self, h):
        self._record("nvmlDeviceResetGpuLockedClocks")
        self.gpu_lock = None

    def nvmlDeviceResetMemoryLockedClocks(self, h):
        self._record("nvmlDeviceResetMemoryLockedClocks")
        self.mem_lock = None

    def nvmlDeviceSetPowerManagementLimit(self, h, mw):
        self._record("nvmlDeviceSetPowerManagementLimit", mw)
        self.power_limit_mw = mw
