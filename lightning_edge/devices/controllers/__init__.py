"""Power-mode controllers: one interface (``current()``, ``apply(mode)``, ``restore()``), several backends.

============================  ================================================================
``jetson``                    :class:`JetsonSysfsController`: direct sysfs/debugfs writes (preferred)
``nvpmodel``                  :class:`NvpmodelController`: a custom nvpmodel.conf block + ``nvpmodel -m``
``nvml[:INDEX]``              :class:`NvmlController`: locked clocks on a desktop GPU (opt-in only)
``sim[:orin-agx]``            :class:`~lightning_edge.devices.sim.controller.SimModeController`: the twin
============================  ================================================================

:func:`get_controller` picks one; ``"auto"`` only ever picks a Jetson (NVML needs ``allow_nvml=True``).
"""

from __future__ import annotations

from typing import Any

from lightning_edge.devices.controllers.base import AppliedMode, ModeController
from lightning_edge.devices.controllers.errors import (
    BoardBusyError,
    ControllerUnavailableError,
    ModeControllerError,
    ModePermissionError,
    ModeVerificationError,
    ModeWriteError,
    RebootRequiredError,
    RecoveryError,
)
from lightning_edge.devices.controllers.jetson import JetsonSysfsController
from lightning_edge.devices.controllers.nvml import NvmlController
from lightning_edge.devices.controllers.nvpmodel import CommandRunner, DryRunRunner, NvpmodelController
from lightning_edge.devices.controllers.sysfs import (
    DryRunWriter,
    JetsonLayout,
    SysfsWriter,
    Write,
    discover_space,
)

DEVICES_HELP = "auto, jetson, nvpmodel, nvml[:INDEX], sim:orin-agx"


# keyword arguments that only one kind of backend understands; the others never see them
_JETSON_ONLY = {"root", "writer", "conf_path", "nvpmodel", "runner", "mode_id"}
_NVML_ONLY = {"nvml", "power_limit_w"}
_SIM_ONLY = {"board_file", "clock", "on_step", "initial"}


def _only(kwargs: dict[str, Any], *drop: set[str]) -> dict[str, Any]:
    out = dict(kwargs)
    for keys in drop:
        for k in keys:
            out.pop(k, None)
    return out


def _sim(board: str, kwargs: dict[str, Any]) -> ModeController:
    from lightning_edge.devices.sim.controller import SimModeController

    kw = _only(kwargs, _JETSON_ONLY, _NVML_ONLY)
    board = board or kw.pop("board", None) or "orin-agx"
    kw.pop("board", None)
    return SimModeController(board, **kw)


def get_controller(device: str = "auto", *, allow_nvml: bool = False, **kwargs: Any) -> ModeController:
    """The power-mode controller for ``device``; raises :class:`ControllerUnavailableError` saying why not.

    ``device``: ``"auto"`` (a Jetson if there is one; NVML only with ``allow_nvml=True``), ``"jetson"``,
    ``"nvpmodel"``, ``"nvml"`` / ``"nvml:1"``, ``"sim"`` / ``"sim:orin-agx"``. ``kwargs`` go to the
    controller (``root=``, ``dry_run=``, ``state_dir=``, ``board_file=`` for the twin...).
    """
    kind, _, arg = str(device).strip().partition(":")
    kind = kind.lower()
    if kind == "sim":
        return _sim(arg, dict(kwargs))
    if kind == "jetson" and arg in ("", "sysfs"):
        reason = JetsonSysfsController.why_unavailable(**_probe_kw(kwargs))
        if reason:
            raise ControllerUnavailableError(f"--device jetson: {reason}", {"jetson": reason})
        return JetsonSysfsController(
            **_only(kwargs, _NVML_ONLY, _SIM_ONLY, {"conf_path", "nvpmodel", "runner", "mode_id"})
        )
    if kind == "nvpmodel" or (kind == "jetson" and arg == "nvpmodel"):
        reason = NvpmodelController.why_unavailable(**_probe_kw(kwargs))
        if reason:
            raise ControllerUnavailableError(f"--device nvpmodel: {reason}", {"nvpmodel": reason})
        return NvpmodelController(**_only(kwargs, _NVML_ONLY, _SIM_ONLY))
    if kind == "nvml":
        return NvmlController(int(arg or 0), **_only(kwargs, _JETSON_ONLY, _SIM_ONLY, {"board"}))
    if kind != "auto":
        raise ControllerUnavailableError(f"unknown device {device!r}: expected one of {DEVICES_HELP}")
    reasons: dict[str, str] = {}
    reason = JetsonSysfsController.why_unavailable(**_probe_kw(kwargs))
    if reason is None:
        return JetsonSysfsController(
            **_only(kwargs, _NVML_ONLY, _SIM_ONLY, {"conf_path", "nvpmodel", "runner", "mode_id"})
        )
    reasons["jetson"] = reason
    if allow_nvml:
        nreason = NvmlController.why_unavailable(nvml=kwargs.get("nvml"))
        if nreason is None:
            return NvmlController(**_only(kwargs, _JETSON_ONLY, _SIM_ONLY, {"board"}))
        reasons["nvml"] = nreason
    else:
        reasons["nvml"] = "opt-in only, never chosen automatically (pass allow_nvml=True or device='nvml')"
    lines = ["no power-mode controller available for device 'auto':"]
    lines += [f"  {k}: {v}" for k, v in reasons.items()]
    lines.append("For the simulated Orin AGX twin use device 'sim:orin-agx' (CLI: --device sim:orin-agx).")
    raise ControllerUnavailableError("\n".join(lines), reasons)


def _probe_kw(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs[k] for k in ("root", "board", "conf_path", "nvpmodel") if k in kwargs}


def available_backends(**kwargs: Any) -> dict[str, str | None]:
    """``{backend: None if available else why not}`` for every real backend (the twin is always available)."""
    return {
        "jetson": JetsonSysfsController.why_unavailable(**_probe_kw(kwargs)),
        "nvpmodel": NvpmodelController.why_unavailable(**_probe_kw(kwargs)),
        "nvml": NvmlController.why_unavailable(nvml=kwargs.get("nvml")),
        "sim": None,
    }


__all__ = [
    "AppliedMode",
    "BoardBusyError",
    "CommandRunner",
    "ControllerUnavailableError",
    "DryRunRunner",
    "DryRunWriter",
    "JetsonLayout",
    "JetsonSysfsController",
    "ModeController",
    "ModeControllerError",
    "ModePermissionError",
    "ModeVerificationError",
    "ModeWriteError",
    "NvmlController",
    "NvpmodelController",
    "RebootRequiredError",
    "RecoveryError",
    "SysfsWriter",
    "Write",
    "available_backends",
    "discover_space",
    "get_controller",
]
