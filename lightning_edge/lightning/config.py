"""What the callbacks are told, once: :class:`ProfilerConfig` (``EnergyProfiler``, ``EnergyReporter``,
``EnergySession``) and :class:`TunerConfig` (``PowerModeTuner``), frozen, validated when made.

Each callback's options are the fields of its configuration: ``EnergyProfiler(device, every_n_steps=5)`` is
``EnergyProfiler(device, config=ProfilerConfig(every_n_steps=5))``, and the reporter and the session below it take
the same object, so an option is named, defaulted, documented and checked in one place.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from lightning_edge.lightning.budget import FRACTION
from lightning_edge.profiling.attribution import DEFAULT_K

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from lightning_edge.cost.model_cost import ModelCost
    from lightning_edge.modes import PowerModeSpace
    from lightning_edge.profiling.hooks import Include
    from lightning_edge.roofline.model import Roofline
    from lightning_edge.tuning.backend import ProfileBackend
    from lightning_edge.tuning.online import WindowSpec
    from lightning_edge.tuning.prior import Prior
    from lightning_edge.tuning.search import Strategy

__all__ = ["ProfilerConfig", "TunerConfig", "TB_LAYERS", "configure"]

#: per-layer scalars go to TensorBoard for this many layers per stage (the top ones by energy in the stage's first
#: profiled step); every layer is in the markdown table and layers.csv
TB_LAYERS = 10


def _tristate(name: str, value: bool | str) -> None:
    if value not in (True, False, "auto"):
        raise ValueError(f"{name} must be True (always), False (never) or 'auto' (when the overhead budget allows), "
                         f"got {value!r}")


@dataclass(frozen=True)
class ProfilerConfig:
    """The options of :class:`~lightning_edge.lightning.EnergyProfiler` (and of the reporter and session under it).

    Steps and layers:
        every_n_steps: profile every N-th step per layer; ``"auto"`` profiles a stage's first step after the warm-up
            and then adapts N to the overhead budget.
        warmup_steps: never profile the first steps of a stage, nor the steps right after a power-mode change.
        depth, include: which modules are timed (:class:`~lightning_edge.profiling.hooks.LayerTimer`).
        k: a layer is measured on its own when its self time spans ``k`` sensor periods, else apportioned.
        roofline: the roofline whose energy model apportions / estimates (default: the board's in the current mode).
        cost: a precomputed ``ModelCost`` (names relative to the LightningModule); ``analyze``: run the cost model
            on the model's calls captured at the first step (``True`` always, ``False`` never, ``"auto"`` when its
            expected cost fits the run's overhead budget; on the twin always).
        settle_s: after a mode change, no step is profiled within this many seconds (default: the board's settling
            time on a board with a controller; on the twin, simulated seconds).
        sampler_rate_hz, cuda: the power sampler's rate; whether to time CUDA (default: when the model is on it).
        host_cpu_s: on the twin, the CPU work outside the layers per batch on this machine (s), stated; ``None``:
            measured (this thread's CPU time between steps, the least of the first gaps: not moved by other
            processes' load).
    What it may cost:
        overhead_target: the fraction of the run profiling may add (default 5 %; every run may spend 1 s whatever
            its length).
    What it writes:
        log_layers: per-layer scalars in TensorBoard (``True``: the top ``tb_layers``; ``"all"``; ``False``);
        layer_power: also each layer's power; figure / table: the roofline figure, the layer chart and the
            markdown tables; trace: the Chrome/Perfetto trace (``trace_steps`` profiled steps at most); ``figure``
            and ``trace``: ``True`` always, ``False`` never, ``"auto"`` within the overhead budget;
        loggers: step and epoch energy, power and time through every logger of the Trainer (CSV, W&B, MLflow;
            TensorBoard gets them with its charts and tables);
        report: ``layers.csv`` / ``layers.json``; print_summary: print the summary (``top`` layers per mode);
        log_dir: where an own SummaryWriter, the reports and the trace go when the Trainer has no TensorBoard logger.
    """

    every_n_steps: int | Literal["auto"] = "auto"
    warmup_steps: int = 2
    depth: int | None = None
    include: Include = None
    k: float = DEFAULT_K
    roofline: Roofline | None = None
    cost: ModelCost | None = None
    analyze: bool | Literal["auto"] = "auto"
    overhead_target: float = FRACTION
    settle_s: float | None = None
    sampler_rate_hz: float | None = None
    cuda: bool | None = None
    host_cpu_s: float | None = None
    log_layers: bool | Literal["all"] = True
    tb_layers: int = TB_LAYERS
    layer_power: bool = False
    figure: bool | Literal["auto"] = "auto"
    table: bool = True
    trace: bool | Literal["auto"] = "auto"
    trace_steps: int = 20
    loggers: bool = True
    report: bool = True
    print_summary: bool = True
    top: int = 5
    log_dir: str | os.PathLike[str] | None = None  # a str once made

    def __post_init__(self) -> None:
        n = self.every_n_steps
        if n != "auto" and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ValueError(f"every_n_steps must be 'auto' or an integer >= 1, got {n!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 1:
            raise ValueError(f"warmup_steps must be >= 1 (the first step captures the inputs), got {self.warmup_steps!r}")
        if self.analyze not in (True, False, "auto"):
            raise ValueError(f"analyze must be True (always run the cost model), False (never) or 'auto' (when it "
                             f"fits the overhead budget of the run), got {self.analyze!r}")
        _tristate("figure", self.figure)
        _tristate("trace", self.trace)
        if self.log_layers not in (True, False, "all"):
            raise ValueError(f"log_layers must be True (the top tb_layers layers), 'all' or False, got "
                             f"{self.log_layers!r}")
        if self.host_cpu_s is not None and not (math.isfinite(self.host_cpu_s) and self.host_cpu_s >= 0):
            raise ValueError(f"host_cpu_s must be a time >= 0 s per batch (or None: measured), got {self.host_cpu_s!r}")
        if self.log_dir is not None:
            object.__setattr__(self, "log_dir", os.fspath(self.log_dir))

    def with_options(self, **options: Any) -> ProfilerConfig:
        return configure(self, **options)


@dataclass(frozen=True)
class TunerConfig:
    """The options of :class:`~lightning_edge.lightning.PowerModeTuner` besides its budget and board (the
    callback's docstring says what each does)."""

    strategy: str | Strategy = "gmd"
    store: str | os.PathLike[str] | BaseStorage | ProfileBackend | None = "default"
    baseline: bool = True
    space: PowerModeSpace | None = None
    window: WindowSpec | dict[str, float | None] | None = None  # a WindowSpec once made
    switch_at: str = "window"
    drift_window: int = 20
    drift_tolerance: float = 0.03
    drift_patience: int = 2
    workload_id: str | None = None
    precision: str | None = None
    seed: int | None = 0
    log_every_n_steps: int = 10
    print_summary: bool = True
    log_dir: str | os.PathLike[str] | None = None  # a str once made
    prior: bool | Prior = True
    thorough: bool | None = None
    cost: ModelCost | None = None

    def __post_init__(self) -> None:
        from lightning_edge.tuning.online import WindowSpec
        from lightning_edge.tuning.search import STRATEGIES, strategy_named

        # a name is checked here, when the callback is made, not at the Trainer's set-up
        if isinstance(self.strategy, str):
            object.__setattr__(self, "strategy", STRATEGIES.canonical(self.strategy))
        else:
            strategy_named(self.strategy)  # a TypeError for anything that is not a strategy
        if self.switch_at not in ("window", "epoch"):
            raise ValueError(f"switch_at must be 'window' or 'epoch', got {self.switch_at!r}")
        if isinstance(self.window, dict):
            names = [f.name for f in fields(WindowSpec)]
            unknown = sorted(set(self.window) - set(names))
            if unknown:
                raise ValueError(f"window: unknown setting(s) {unknown}; a profiling window takes {names}")
            object.__setattr__(self, "window", WindowSpec(**self.window))
        if int(self.log_every_n_steps) < 1:
            raise ValueError(f"log_every_n_steps must be >= 1, got {self.log_every_n_steps}")
        if self.log_dir is not None:
            object.__setattr__(self, "log_dir", os.fspath(self.log_dir))


_Config = TypeVar("_Config", ProfilerConfig, TunerConfig)


def configure(config: _Config | None, cls: type[_Config] | None = None, **options: Any) -> _Config:
    """``config`` (or a default ``cls()``) with ``options`` applied; an unknown option is an error that lists the
    known ones."""
    if config is None:
        config = (cls or ProfilerConfig)()
    if not options:
        return config
    names = {f.name for f in fields(config)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"unknown option(s) {unknown}; {type(config).__name__} takes {sorted(names)}")
    return replace(config, **options)
