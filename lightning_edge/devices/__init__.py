"""Everything that touches hardware: power-mode spaces, mode controllers and power sensors.

Light to import: no torch. ::

    from lightning_edge.devices import PowerMode, PowerModeSpace, get_controller

    space = orin_agx_space()                       # 18,096 modes
    with get_controller("sim:orin-agx") as ctl:    # or "auto" on a Jetson
        ctl.apply(space.parse("8c/1344/727/2133"))
    board = get_board("auto")                      # sensor + controller (+ twin): what the callbacks use
"""

from __future__ import annotations

from lightning_edge.catalog import (
    FULCRUM_MIDPOINT,
    ORIN_AGX_MAXN,
    fulcrum_space,
    named_space,
    orin_agx_space,
)
from lightning_edge.devices.board import Board, get_board
from lightning_edge.devices.controllers import (
    AppliedMode,
    BoardBusyError,
    ControllerUnavailableError,
    JetsonSysfsController,
    ModeController,
    ModeControllerError,
    ModePermissionError,
    ModeVerificationError,
    ModeWriteError,
    NvmlController,
    NvpmodelController,
    RebootRequiredError,
    RecoveryError,
    SysfsWriter,
    available_backends,
    get_controller,
)
from lightning_edge.devices.meter import SensorMeter, StepMeter, TwinMeter
from lightning_edge.devices.sensors import (
    EmptySensor,
    INA3221Sensor,
    JtopSensor,
    NvmlSensor,
    PowerReading,
    PowerSensor,
    RaplSensor,
    ReplaySensor,
    SensorError,
    SensorUnavailableError,
    available_sensors,
    get_sensor,
)
from lightning_edge.devices.sim.controller import SimModeController
from lightning_edge.modes import KNOBS, InvalidModeError, PowerMode, PowerModeSpace

__all__ = [
    "Board",
    "get_board",
    "StepMeter",
    "TwinMeter",
    "SensorMeter",
    "EmptySensor",
    "INA3221Sensor",
    "JtopSensor",
    "NvmlSensor",
    "PowerReading",
    "PowerSensor",
    "RaplSensor",
    "ReplaySensor",
    "SensorError",
    "SensorUnavailableError",
    "available_sensors",
    "get_sensor",
    "FULCRUM_MIDPOINT",
    "KNOBS",
    "ORIN_AGX_MAXN",
    "AppliedMode",
    "BoardBusyError",
    "ControllerUnavailableError",
    "InvalidModeError",
    "JetsonSysfsController",
    "ModeController",
    "ModeControllerError",
    "ModePermissionError",
    "ModeVerificationError",
    "ModeWriteError",
    "NvmlController",
    "NvpmodelController",
    "PowerMode",
    "PowerModeSpace",
    "RebootRequiredError",
    "RecoveryError",
    "SimModeController",
    "SysfsWriter",
    "available_backends",
    "fulcrum_space",
    "get_controller",
    "named_space",
    "orin_agx_space",
]
