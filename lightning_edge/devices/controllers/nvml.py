"""Locked GPU clocks and power limit on a desktop / server NVIDIA GPU through NVML. Opt-in only.

Never chosen by ``get_controller("auto")``: changing clocks of a shared workstation GPU is a
decision the user makes explicitly (``get_controller("nvml")`` or ``allow_nvml=True``).

A mode here has one core count (``os.cpu_count()``, not controlled) and CPU frequency 0
("not controlled"); the GPU knob is the locked graphics clock, the memory knob the locked
memory clock (``nvmlDeviceSetMemoryLockedClocks``, Ampere and newer; applications clocks
otherwise). An optional ``power_limit_w`` is applied with every mode. ``restore()`` resets the
locked clocks and puts the power limit back.

The equivalent ``nvidia-smi`` commands are what a dry run prints.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from lightning_edge.devices.controllers.base import ModeController
from lightning_edge.devices.controllers.errors import ControllerUnavailableError, ModePermissionError
from lightning_edge.devices.sensors.nvml import _import_nvml, _text, nvml_start
from lightning_edge.modes import PowerMode, PowerModeSpace


class NvmlController(ModeController):
    """GPU locked clocks / power limit through NVML (``pip install 'lightning-edge[nvml]'``). Opt-in.

    ``NvmlController(index=0, nvml=None, power_limit_w=None, **common)``; ``nvml`` is the pynvml
    module (injectable). Read-back compares the clocks NVML reports, which may sit below a lock at
    idle, so ``strict`` defaults to False here.
    """

    name = "nvml"

    def __init__(
        self,
        index: int = 0,
        *,
        nvml: Any = None,
        power_limit_w: float | None = None,
        space: PowerModeSpace | None = None,
        dry_run: bool = False,
        strict: bool = False,
        out: TextIO | None = None,
        **common: Any,
    ) -> None:
        reason = self.why_unavailable(index=index, nvml=nvml)
        if reason:
            raise ControllerUnavailableError(f"nvml: {reason}", {"nvml": reason})
        self.nvml = nvml or _import_nvml()
        self.index = index
        self.power_limit_w = power_limit_w
        self.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        super().__init__(
            space=space or self._discover_space(),
            device_id=f"nvml-{_text(self.nvml.nvmlDeviceGetUUID(self.handle))}",
            dry_run=dry_run,
            strict=strict,
            out=out,
            **common,
        )

    @staticmethod
    def index_of(arg: str) -> int:
        try:
            return int(arg or 0)
        except ValueError:
            raise ControllerUnavailableError(f"nvml:{arg}: expected an NVML GPU index such as nvml:0",
                                             {"nvml": f"bad index {arg!r}"}) from None

    @classmethod
    def probe(cls, arg: str = "", **kw: Any) -> str | None:
        return cls.why_unavailable(index=cls.index_of(arg), nvml=kw.get("nvml"))

    @classmethod
    def open(cls, arg: str = "", **kw: Any) -> NvmlController:
        from lightning_edge.devices.registry import accepted_kwargs

        return cls(cls.index_of(arg), **accepted_kwargs(cls, {k: v for k, v in kw.items() if k != "index"}))

    @classmethod
    def why_unavailable(cls, index: int = 0, nvml: Any = None, **_: Any) -> str | None:
        return nvml_start(index, nvml)[1]

    def cli_args(self) -> list[str]:
        return ["--device", f"nvml:{self.index}"]

    def _discover_space(self) -> PowerModeSpace:
        nv, h = self.nvml, self.handle
        mems = sorted(nv.nvmlDeviceGetSupportedMemoryClocks(h))
        gpus: set[int] = set()
        for m in mems:
            gpus.update(nv.nvmlDeviceGetSupportedGraphicsClocks(h, m))
        return PowerModeSpace(cores=[os.cpu_count() or 1], cpu_mhz=[0.0], gpu_mhz=sorted(gpus), mem_mhz=mems,
                              name=_text(nv.nvmlDeviceGetName(h)))

    # ------------------------------------------------------------------ hooks
    def _read_mode(self) -> PowerMode:
        nv, h = self.nvml, self.handle
        gpu = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_GRAPHICS)
        mem = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        return PowerMode(self.space.cores[0], 0.0, gpu, mem)

    def _snapshot(self) -> dict[str, Any]:
        nv, h = self.nvml, self.handle
        snap: dict[str, Any] = {"kind": "nvml", "index": self.index, "mode": self._read_mode().to_dict()}
        try:
            snap["power_limit_mw"] = int(nv.nvmlDeviceGetPowerManagementLimit(h))
        except Exception:
            snap["power_limit_mw"] = None
        return snap

    def _call(self, fn_name: str, *args: Any, smi: str) -> str:
        if self.dry_run:
            print(smi, file=self._out or sys.stdout)
            return smi
        try:
            getattr(self.nvml, fn_name)(self.handle, *args)
        except Exception as exc:
            if "permission" in type(exc).__name__.lower() or "permission" in str(exc).lower():
                raise ModePermissionError(
                    f"NVML refused {fn_name}: {exc}. Locking clocks needs root: run as root (sudo) or use "
                    f"`sudo {smi}`; see docs/power-modes.md"
                ) from exc
            raise
        return smi

    def _call_or(self, call: tuple, fallback: tuple) -> str:
        """``_call(*call)`` (the last item is the ``nvidia-smi`` equivalent); where the GPU lacks that call (memory
        clock locks before Ampere), ``fallback`` (applications clocks). A refused permission is never retried."""
        try:
            return self._call(*call[:-1], smi=call[-1])
        except Exception as exc:
            if isinstance(exc, ModePermissionError):
                raise
            return self._call(*fallback[:-1], smi=fallback[-1])

    def _apply_mode(self, mode: PowerMode) -> tuple[list[str], list[str]]:
        g, m, i = int(mode.gpu_mhz), int(mode.mem_mhz), self.index
        actions = [
            self._call(
                "nvmlDeviceSetGpuLockedClocks", g, g, smi=f"nvidia-smi -i {i} --lock-gpu-clocks={g},{g}"
            ),
        ]
        actions.append(self._call_or(
            ("nvmlDeviceSetMemoryLockedClocks", m, m, f"nvidia-smi -i {i} --lock-memory-clocks={m},{m}"),
            ("nvmlDeviceSetApplicationsClocks", m, g, f"nvidia-smi -i {i} --applications-clocks={m},{g}")))
        if self.power_limit_w is not None:
            mw = int(round(self.power_limit_w * 1000))
            actions.append(
                self._call(
                    "nvmlDeviceSetPowerManagementLimit",
                    mw,
                    smi=f"nvidia-smi -i {i} --power-limit={self.power_limit_w:g}",
                )
            )
        mismatches = []
        if not self.dry_run:
            now = self._read_mode()
            if int(now.gpu_mhz) != g:
                mismatches.append(f"GPU clock reads {now.gpu_mhz:g} MHz after locking at {g} MHz")
        return actions, mismatches

    def _apply_snapshot(self, snapshot: dict[str, Any]) -> tuple[list[str], list[str]]:
        i = self.index
        actions = [self._call("nvmlDeviceResetGpuLockedClocks", smi=f"nvidia-smi -i {i} --reset-gpu-clocks")]
        actions.append(self._call_or(
            ("nvmlDeviceResetMemoryLockedClocks", f"nvidia-smi -i {i} --reset-memory-clocks"),
            ("nvmlDeviceResetApplicationsClocks", f"nvidia-smi -i {i} --reset-applications-clocks")))
        mw = snapshot.get("power_limit_mw")
        if self.power_limit_w is not None and mw:
            actions.append(
                self._call(
                    "nvmlDeviceSetPowerManagementLimit",
                    int(mw),
                    smi=f"nvidia-smi -i {i} --power-limit={int(mw) / 1000:g}",
                )
            )
        return actions, []
