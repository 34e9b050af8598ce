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
from lightning_edge.devices.registry import Registry
from lightning_edge.devices.spec import BoardSpec

DEVICES_HELP = "auto, jetson, nvpmodel, nvml[:INDEX], sim:orin-agx (any board of docs/boards.md: sim:<board>)"


#: power-mode controller backends by name (``register`` adds one); each gets only the options its constructor takes
CONTROLLERS = Registry("power-mode controller", {
    "jetson": JetsonSysfsController,
    "nvpmodel": NvpmodelController,
    "nvml": NvmlController,
    "sim": "lightning_edge.devices.sim.controller:SimModeController",
})


def _open(kind: str, arg: str, kwargs: dict[str, Any]) -> ModeController:
    cls = CONTROLLERS.get(kind)
    reason = cls.probe(arg, **kwargs)
    if reason:
        raise ControllerUnavailableError(f"--device {kind}: {reason}", {kind: reason})
    return cls.open(arg, **kwargs)


def get_controller(device: str | BoardSpec = "auto", *, allow_nvml: bool = False, **kwargs: Any) -> ModeController:
    """The power-mode controller for ``device``; raises :class:`ControllerUnavailableError` saying why not.

    ``device``: ``"auto"`` (a Jetson if there is one; NVML only with ``allow_nvml=True``), ``"jetson"``,
    ``"nvpmodel"`` (also ``"jetson:nvpmodel"``), ``"nvml"`` / ``"nvml:1"``, ``"sim"`` / ``"sim:orin-agx"``, or the
    name of a backend added with ``CONTROLLERS.register``. ``kwargs`` go to the controller (``root=``, ``dry_run=``,
    ``state_dir=``, ``board_file=`` for the twin...); each backend receives only those its constructor takes.
    """
    spec = BoardSpec.parse(device)
    device = spec.key  # for messages: the spec as a person writes it
    kind, arg = spec.kind, spec.arg
    if kind == "host":
        raise ControllerUnavailableError(f"device {device!r} is this machine without a board: no power-mode "
                                         f"controller (expected one of {DEVICES_HELP})")
    if kind != "auto":
        if kind not in CONTROLLERS:
            raise ControllerUnavailableError(f"unknown device {device!r}: expected one of {DEVICES_HELP}")
        return _open(kind, arg, kwargs)
    reasons: dict[str, str] = {}
    for k in ("jetson", "nvml"):
        if k == "nvml" and not allow_nvml:
            reasons[k] = "opt-in only, never chosen automatically (pass allow_nvml=True or device='nvml')"
            continue
        try:
            return _open(k, "", kwargs)
        except ControllerUnavailableError as exc:
            reasons[k] = exc.reasons.get(k, str(exc))
    lines = ["no power-mode controller available for device 'auto':"]
    lines += [f"  {k}: {v}" for k, v in reasons.items()]
    lines.append("For the simulated Orin AGX twin use device 'sim:orin-agx' (CLI: --device sim:orin-agx).")
    raise ControllerUnavailableError("\n".join(lines), reasons)


def available_backends(**kwargs: Any) -> dict[str, str | None]:
    """``{backend: None if available else why not}`` for every registered backend (the twin is always available)."""
    out = {}
    for k in CONTROLLERS:
        try:
            out[k] = CONTROLLERS.get(k).probe("", **kwargs)
        except ControllerUnavailableError as exc:
            out[k] = str(exc)
    return out


__all__ = [
    "CONTROLLERS",
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
