"""The calibration kit: measure a board once, fit the twin's coefficients to it, write its board file.

    lightning-edge calibrate --device jetson --out my-nano.json [--modes N] [--minutes M]

What :func:`calibrate` does, through the board's own meter:

1. **chooses the modes** (:func:`design_modes`): a space-filling design over the board's grid (a Latin hypercube in
   knob-index space, the most spread of many, MAXN in it), as many as the time budget allows
   (:data:`MODE_COST_S` per mode; ``--minutes 30`` by default) or ``--modes N``;
2. **measures each mode**: the controller switches to it (the board's safety restores the original mode on every
   exit path), the power settles, then the Pagoda microbenchmarks (:func:`~lightning_edge.calibrate.microbench.
   run_microbench`, quick sweeps: peak FLOP/s and bandwidth per precision, the idle power, energy per FLOP and per
   byte) and half of the reference steps (:data:`REFERENCE_STEPS`: zoo models on synthetic inputs covering batch
   size, depthwise, attention, precision, training and inference; :data:`STEPS_PER_MODE` of them at each mode,
   :func:`step_schedule`; their mean time and the board's power over a window of steps);
3. **keeps a partial file** (``FILE.json.partial``) after every mode: an interrupted run resumes where it stopped
   (the same board and plan; ``--restart`` starts afresh). The partial file is read within limits and every
   measurement in it checked before it is fitted (shape, types, finite numbers, powers in [0, 1000] W: one line naming
   the field);
4. **fits** the twin's coefficients (:func:`lightning_edge.twin.fit.fit_board`: pure math, in the twin package) from
   the catalogue's board of the module (what the measurements cannot separate held there, and said), estimates its
   own errors (:func:`~lightning_edge.twin.fit.validate`: refits without each reference step and without each fold
   of the modes) and whether the twin explains the board at all (:func:`~lightning_edge.twin.fit.verdict`), and
   writes the board file labelled ``measured`` (``simulated`` when the board is a twin: the measurements were
   simulated) with both; ``--out`` must be absent or a board file already (``--force``: any regular file; a link, a
   device, a FIFO or a folder never), checked before anything is measured, and every file is written atomically (a
   new temporary file of a random name in the same folder, ``O_EXCL | O_NOFOLLOW``, fsynced, renamed:
   :func:`lightning_edge._jsonfile.write_file`); installed for the module on a real board when the twin explains it
   (:func:`~lightning_edge.twin.board_files.install_board_file`) so the tuner's prior and the profiler's estimates use
   it.

On a simulated board (``--device sim:orin-nano-8gb``, ``sim:FILE.json``) the same code runs: the microbenchmarks run
on the twin's kernels, the steps on the twin's meter (noise, power settling); only the clock is simulated.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from lightning_edge import catalog
from lightning_edge._jsonfile import check_target, json_schema_is, read_json, write_json
from lightning_edge.modes import PowerMode, PowerModeSpace
from lightning_edge.twin.board_files import SCHEMA as BOARD_SCHEMA
from lightning_edge.twin.fit import (
    Observation,
    WorkloadSpec,
    fit_board,
    fitted_label,
    observation_problem,
    validate,
    verdict,
)

__all__ = ["REFERENCE_STEPS", "STEPS_PER_MODE", "MODE_COST_S", "DEFAULT_MINUTES", "CalibrationResult", "calibrate",
           "design_modes", "step_schedule", "modes_for_budget", "PARTIAL_SCHEMA", "TwinStepper", "TorchStepper",
           "Progress"]

REFERENCE_STEPS: tuple[WorkloadSpec, ...] = (
    # consecutive steps are measured at alternate modes (step_schedule): each pair covers one thing a user's workload
    # varies, so every one of them is seen at every other mode and a left-out step has a sibling (leave-one-out)
    WorkloadSpec("resnet18", "train", 16),                          # TF32 tensor-core convolutions, backward, SGD
    WorkloadSpec("resnet18", "infer", 32, precision="fp16"),        # FP16 tensor cores, a larger batch, inference
    WorkloadSpec("mobilenet_v3_large", "train", 32),                # depthwise and element-wise at scale, training
    WorkloadSpec("mobilenet_v3_large", "infer", 32, precision="fp16"),  # depthwise in FP16, inference
    WorkloadSpec("bert_base", "train", 8, 128),                     # FP32 matmuls on CUDA cores, attention, training
    WorkloadSpec("bert_base", "infer", 8, 128, precision="fp16"),   # FP16 attention and matmuls, inference
    WorkloadSpec("bert_base", "infer", 8, 128),                     # FP32 matmuls, inference (no backward)
    WorkloadSpec("mobilenet_v3_large", "infer", 1),                 # batch 1: small kernels, launch- and CPU-bound
    WorkloadSpec("lstm", "infer", 1, 1),                            # one token: dispatch-bound (cuDNN's launches)
    WorkloadSpec("resnet18", "infer", 1),                           # batch 1 convolutions: kernel fill, launches
)
"""The reference steps (synthetic inputs, no DataLoader): what a user's workload varies (batch size, depthwise,
attention, precision, training and inference), each covered by two steps. Each mode measures
:data:`STEPS_PER_MODE` of them (:func:`step_schedule`), so the time a mode takes stays what four steps took."""

STEPS_PER_MODE = 5
"""Reference steps measured at each mode (the others at the next mode): the measurement time per mode."""

MODE_COST_S = 90.0
"""About what measuring one mode takes on a Jetson: the power settling, quick microbenchmark sweeps (~15 s), warm-up
and a window of steps of each of the mode's :data:`STEPS_PER_MODE` reference steps. A budget of M minutes measures
M x 60 / MODE_COST_S modes."""

DEFAULT_MINUTES = 30.0
MIN_MODES, MAX_MODES = 6, 60
PARTIAL_SCHEMA = "lightning_edge.calibration_partial"
STEP_WINDOW_S = 4.0      # a window of steps lasts at least this (a Jetson's INA3221 averages ~0.43 s)
WARMUP_SETTLES = 2.0     # warm-up steps for this many settling times (the power within ~0.3 % of its level)
MIN_STEPS, MAX_STEPS, WARMUP_STEPS = 5, 5000, 2
MAX_STEP_S = 20.0        # one step slower than this ends the window (the slowest modes)


def modes_for_budget(minutes: float) -> int:
    """How many modes a budget of ``minutes`` measures (:data:`MODE_COST_S` each), within [6, 60]."""
    return int(min(max(round(float(minutes) * 60.0 / MODE_COST_S), MIN_MODES), MAX_MODES))


def step_schedule(n_modes: int, n_steps: int, per_mode: int = STEPS_PER_MODE) -> list[list[int]]:
    """Which reference steps each of ``n_modes`` modes measures: all of them when there are at most ``per_mode``,
    else every ``k``-th (``k = ceil(n_steps / per_mode)``), step ``i`` at the modes ``j`` with ``i = j (mod k)``:
    consecutive steps at consecutive modes, every step at every ``k``-th mode of the design."""
    n_steps, per_mode = int(n_steps), max(int(per_mode), 1)
    k = max(math.ceil(n_steps / per_mode), 1)
    return [[i for i in range(n_steps) if i % k == j % k] for j in range(int(n_modes))]


def design_modes(space: PowerModeSpace, n: int, seed: int = 0, tries: int = 300) -> list[PowerMode]:
    """``n`` modes of ``space`` that fill it: a Latin hypercube in knob-index space (each knob's values visited
    evenly: every level of the memory clock, not only its ends), the most spread of ``tries`` seeded ones (the
    largest smallest distance between two modes, knob indices scaled to [0, 1]), with MAXN in it (the mode a board
    is usually in: its point closest to MAXN is moved there)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"--modes must be at least 1, got {n}")
    levels = [len(v) for v in (space.cores, space.cpu_mhz, space.gpu_mhz, space.mem_mhz)]
    n = min(n, space.size)
    rng = np.random.default_rng(seed)
    best, best_score = None, -1.0
    for _ in range(max(int(tries), 1)):
        cols = []
        for L in levels:
            pos = (np.arange(n) + rng.random(n)) / n                     # one point per stratum of [0, 1)
            cols.append(np.minimum((pos * L).astype(int), L - 1)[rng.permutation(n)])
        idx = np.stack(cols, axis=1)
        idx = np.unique(idx, axis=0)
        if len(idx) < n:
            continue
        c = idx / np.maximum(np.array(levels) - 1, 1)
        d = np.linalg.norm(c[:, None, :] - c[None, :, :], axis=2)
        score = float(d[np.triu_indices(len(c), 1)].min()) if len(c) > 1 else 0.0
        if score > best_score:
            best, best_score = idx, score
    if best is None:  # a grid too small for a Latin hypercube of n distinct modes: n of its modes
        flat = rng.choice(space.size, n, replace=False)
        knobs = space.to_numpy()[flat]
        return [space.coerce(tuple(k)) for k in knobs]
    top = np.array(levels) - 1
    near = int(np.argmin(np.linalg.norm(best / np.maximum(top, 1) - 1.0, axis=1)))
    best[near] = top                                                     # MAXN
    values = (space.cores, space.cpu_mhz, space.gpu_mhz, space.mem_mhz)
    out: list[PowerMode] = []
    for row in best:
        m = space.coerce(tuple(values[k][int(i)] for k, i in enumerate(row)))
        if m not in out:
            out.append(m)
    return out


# ============================================================================================ steps
class TwinStepper:
    """A reference step on a simulated board: the twin's one model of it, measured through a step meter
    (:class:`~lightning_edge.devices.meter.TwinMeter`: seeded noise, the power settling after a mode change, a
    simulated clock)."""

    def __init__(self, board: Any, spec: WorkloadSpec, seed: int | None = 0) -> None:
        from lightning_edge.devices.meter import TwinMeter
        from lightning_edge.twin.sim_workload import SimWorkload

        self.spec = spec
        wl = SimWorkload(spec.model, board.twin, train_batch_size=spec.batch_size, seq_len=spec.seq_len, seed=seed,
                         dataloader=spec.dataloader, precision=spec.precision)
        self.meter = TwinMeter(board.twin, seed=seed, **{spec.kind: wl})
        self.label = self.meter.label

    def measure(self, mode: PowerMode) -> dict[str, float]:
        m = self.meter
        m.mode_changed(mode)
        t0 = start = m.now_s()
        n = 0  # warm-up: the power settles to the workload's level at this mode (as on a board: 2-3 s)
        while n < WARMUP_STEPS or (m.now_s() - t0 < WARMUP_SETTLES * m.settle_s and n < MAX_STEPS):
            m.start()
            m.stop(mode, self.spec.kind, self.spec.batch_size)
            n += 1
        times, powers = [], []
        while len(times) < MIN_STEPS or (sum(times) < STEP_WINDOW_S and len(times) < MAX_STEPS):
            m.start()
            r = m.stop(mode, self.spec.kind, self.spec.batch_size)
            times.append(r.time_s)
            powers.append(r.power_w)
            if r.time_s > MAX_STEP_S:
                break
        t = np.asarray(times)
        return {"time_s": float(t.mean()), "power_w": float(np.dot(t, powers) / t.sum()), "n": len(times),
                "elapsed_s": m.now_s() - start}


class TorchStepper:
    """A reference step on a real board: the zoo model on synthetic inputs (``torch_device``), a training step
    (forward, loss, backward, SGD) or an inference step, timed on the board's step meter; the power is the board's
    energy over the window of steps (its one sampler) divided by its time."""

    def __init__(self, board: Any, spec: WorkloadSpec, torch_device: str = "cuda", seed: int | None = 0) -> None:
        self.board, self.spec, self.device, self.seed = board, spec, torch_device, seed
        self.label = "measured"
        self._step: Callable[[], None] | None = None

    def _build(self) -> Callable[[], None]:
        import torch

        from lightning_edge import zoo

        if self.seed is not None:
            torch.manual_seed(self.seed)
        entry = zoo.get(self.spec.model)
        model = entry.build(device=self.device)
        kw = {"seq_len": self.spec.seq_len} if self.spec.seq_len is not None else {}
        inputs = entry.inputs(batch_size=self.spec.batch_size, device=self.device, **kw)
        if self.spec.precision == "fp16":  # the model in half precision (its floating-point inputs too)
            model = model.half()
            inputs = tuple(x.half() if x.is_floating_point() else x for x in inputs)
        if self.spec.kind == "train":
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=1e-4)

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                out = model(*inputs)
                out = out[0] if isinstance(out, (tuple, list)) else out
                out.float().mean().backward()
                opt.step()
        else:
            model.eval()

            def step() -> None:
                with torch.inference_mode():
                    model(*inputs)
        return step

    def measure(self, mode: PowerMode) -> dict[str, float]:
        if self._step is None:
            self._step = self._build()
        meter = self.board.meter()
        meter.open()
        try:
            w0, n = meter.now_s(), 0  # warm-up: the power settles to the workload's level (2-3 s on a Jetson)
            while n < WARMUP_STEPS or (meter.now_s() - w0 < WARMUP_SETTLES * meter.settle_s and n < MAX_STEPS):
                meter.start()
                self._step()
                meter.stop(mode, self.spec.kind, self.spec.batch_size)
                n += 1
            t0 = meter.start()
            n = 0
            while n < MIN_STEPS or ((meter.now_s() - t0) < STEP_WINDOW_S and n < MAX_STEPS):
                s0 = meter.now_s()
                self._step()
                n += 1
                if meter.now_s() - s0 > MAX_STEP_S:
                    break
            r = meter.stop(mode, self.spec.kind, self.spec.batch_size)
            t1 = t0 + r.time_s
            energy = meter.energy_j(t0, t1)
            power = float(energy) / r.time_s if energy is not None and math.isfinite(float(energy)) else r.power_w
            return {"time_s": r.time_s / n, "power_w": float(power), "n": n, "elapsed_s": meter.now_s() - w0}
        finally:
            meter.close()


# ============================================================================================ progress
class Progress:
    """A one-line progress bar on a stream (stderr): modes done, elapsed and left, the mode now."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 24, clock=time.monotonic) -> None:
        self.total, self.width, self.clock = max(int(total), 1), width, clock
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = clock()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def show(self, done: int, what: str = "") -> None:
        frac = min(done / self.total, 1.0)
        bar = "#" * int(round(frac * self.width)) + "." * (self.width - int(round(frac * self.width)))
        el = self.clock() - self.t0
        left = el / done * (self.total - done) if done else float("nan")
        line = (f"[{bar}] {done}/{self.total} modes  {_mmss(el)} elapsed"
                f"{'' if math.isnan(left) else f', ~{_mmss(left)} left'}{f'  {what}' if what else ''}")
        self.stream.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _mmss(s: float) -> str:
    s = max(int(s), 0)
    return f"{s // 60}:{s % 60:02d}"


# ============================================================================================ the run
@dataclass
class CalibrationResult:
    """What :func:`calibrate` did: the board file (and where it went), the modes measured, the fit."""

    board_file: Any
    path: Path
    modes: list[str]
    resumed: int
    installed: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def trusted(self) -> bool:
        """Whether the twin explains the board (the calibration's verdict is not ``poorly explained``)."""
        return (self.board_file.calibration or {}).get("verdict") != "poorly explained"

    def summary(self) -> str:
        bf = self.board_file
        cal = bf.calibration or {}
        errs = cal.get("errors_percent", {})
        worst = max(errs.items(), key=lambda kv: kv[1]) if errs else ("-", float("nan"))
        lines = [f"wrote {self.path}: {bf.describe()}",
                 f"  label {bf.label}; {len(cal.get('fitted', []))} coefficients fitted, {len(cal.get('held', []))} "
                 f"held; {len(self.modes)} modes ({self.resumed} from an earlier run)",
                 f"  fit residuals (RMS): largest {worst[0]} {worst[1]:.2f} %"]
        lost = cal.get("unidentified") or {}
        if lost:
            lines.append("  not separable by these measurements, held at the start's: " + ", ".join(
                f"{k} (from {v['with']})" if v.get("with") else k for k, v in lost.items()))
        lines += _estimate_lines(cal.get("error_estimate") or {})
        if cal.get("verdict") == "poorly explained":
            lines.append("  WARNING: the twin does not explain this board: do not trust this file's predictions")
            lines += [f"    - {r}" for r in cal.get("unexplained", [])]
        elif cal.get("verdict"):
            lines.append("  the twin explains this board (fit residuals within the measurements' noise)")
        if self.installed is not None:
            lines.append(f"  installed as this board's model: {self.installed} (the tuner's prior and the profiler's "
                         "estimates use it)")
        lines.append(f"  what-if on it: --device sim:{self.path}")
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def _estimate_lines(est: dict) -> list[str]:
    """The calibration's own error estimate, as the summary prints it."""
    def pct(v: Any) -> str:
        return "-" if v is None else f"{v:.1f} %"

    lines = []
    if est.get("time_percent") is not None:
        lines.append(f"  expected error on a workload it did not measure: time {pct(est['time_percent'])}, power "
                     f"{pct(est.get('power_percent'))} (leave-one-workload-out, the median over "
                     f"{len(est.get('leave_one_workload_out') or {})} reference steps)")
        worst = est.get("worst") or {}
        if worst.get("workload"):
            lines.append(f"  on a workload unlike the reference steps up to: time {pct(worst.get('time_percent'))}, "
                         f"power {pct(worst.get('power_percent'))} (without {worst['workload']})")
    if est.get("modes_time_percent") is not None:
        lines.append(f"  expected error at a mode it did not measure: time {pct(est['modes_time_percent'])}, power "
                     f"{pct(est.get('modes_power_percent'))} (leave-modes-out, {len(est.get('leave_modes_out') or [])} "
                     "folds)")
    lines += [f"  note: {n}" for n in est.get("notes", [])]
    return lines


def _start_board(board: Any) -> Any:
    """Where the fit starts: the catalogue's board of the module (never the simulated truth's own file)."""
    from lightning_edge.twin.board_files import BoardFile, board_file, seed_board

    key = getattr(board.space, "name", None)
    if key in catalog.BOARDS:
        start = board_file(str(key))
        grid = board.space
        if grid.to_numpy().shape != start.space().to_numpy().shape or not np.array_equal(
                grid.to_numpy(), start.space().to_numpy()):
            start.mode_space = _grid(grid)  # the board's own frequencies win
        return start
    seed = seed_board()
    return BoardFile(str(key or "unknown"), dict(seed.params), {k: "extrapolated" for k in seed.params},
                     label="extrapolated", mode_space=_grid(board.space),
                     notes=["a module the catalogue does not know: the papers' coefficients as the start"])


def _grid(space: PowerModeSpace) -> dict[str, list[float]]:
    return {"cores": [int(c) for c in space.cores], "cpu_mhz": list(space.cpu_mhz), "gpu_mhz": list(space.gpu_mhz),
            "mem_mhz": list(space.mem_mhz)}


def _precisions(board: Any, torch_device: str) -> dict[str, str]:
    """microbenchmark precision -> the twin's name of it."""
    if board.twin is not None:
        return {"fp32": "fp32", "fp16": "fp16", "fp32_cuda": "fp32_cuda"}
    if str(torch_device).startswith("cuda"):
        return {"tf32": "fp32", "fp16": "fp16", "fp32": "fp32_cuda"}
    return {"fp32": "fp32_cuda"}


def calibrate(board: Any, out: str | Path, *, modes: int | None = None, minutes: float = DEFAULT_MINUTES,
              seed: int = 0, steps: Sequence[WorkloadSpec] = REFERENCE_STEPS, restart: bool = False,
              install: bool | None = None, torch_device: str | None = None, microbench: Any = None,
              max_nfev: int = 30, progress: Progress | bool | None = True, check: bool = True,
              log: Callable[[str], None] | None = None, force: bool = False) -> CalibrationResult:
    """Calibrate ``board`` (a :class:`~lightning_edge.devices.board.Board` opened with ``control="write"``) and
    write its board file to ``out`` (module docstring). ``modes``: how many (default: what ``minutes`` allows);
    ``steps``: the reference steps; ``microbench``: a :class:`~lightning_edge.calibrate.microbench.SweepConfig`
    (default: the quick sweeps); ``install``: install the file as the board's model (default: on a real board, when
    the twin explains it); ``check``: estimate the fitted file's errors by refits that leave a reference step, then a
    fold of the modes, out (:func:`~lightning_edge.twin.fit.validate`: printed and written into the file);
    ``force``: replace ``out`` even when it is a regular file that is not a board file."""
    from lightning_edge.calibrate.microbench import run_microbench

    log = log or (lambda _m: None)
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    # before anything is measured: where the results go must take them
    check_target(out, lambda why: ValueError(f"--out {out}: {why}"), ours=json_schema_is(BOARD_SCHEMA), force=force,
                 what="board file")
    # FILE.json.partial is this tool's name: a regular file there is read (and refused saying what is wrong with it)
    # or, with --restart, replaced; a link, a device, a FIFO or a folder never
    check_target(partial, lambda why: ValueError(f"{partial} (the partial calibration): {why}"),
                 ours=_any_file, what="partial calibration")
    if board.controller is None:
        raise ValueError(f"{board.name}: calibration switches power modes and this board has no mode controller "
                         "(run it on a Jetson: --device jetson, or a simulated board: --device sim:<key>)")
    if not board.has_sensor:
        why = (getattr(board.sensor, "reason", "") or "no power sensor").splitlines()[0]
        raise ValueError(f"{board.name}: calibration measures energy and this board has no power sensor ({why})")
    simulated = board.twin is not None
    if torch_device is None:
        torch_device = "cuda"
        if not simulated:
            import torch

            torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    space = board.space
    n = modes if modes is not None else modes_for_budget(minutes)
    plan_modes = design_modes(space, n, seed)
    schedule = step_schedule(len(plan_modes), len(steps))
    plan = {"board": board.name, "key": space.name, "modes": [str(m) for m in plan_modes],
            "steps": [s.to_dict() for s in steps], "schedule": schedule, "seed": seed, "simulated": simulated}
    done: dict[str, dict] = {}
    if not restart:
        done = _read_partial(partial, plan)
        if done:
            log(f"resuming {partial}: {len(done)} of {len(plan_modes)} modes already measured")
    resumed = len(done)
    steppers = [TwinStepper(board, s, seed=None if seed is None else seed + i) if simulated
                else TorchStepper(board, s, torch_device, seed) for i, s in enumerate(steps)]
    precs = _precisions(board, torch_device)
    bar = progress if isinstance(progress, Progress) else (Progress(len(plan_modes)) if progress else None)
    notes: list[str] = []
    ctl = board.controller
    t_start = time.monotonic()
    try:
        for k, mode in enumerate(plan_modes):
            label = str(mode)
            if label in done:
                continue
            if bar is not None:
                bar.show(len(done), f"measuring {label}")
            if not simulated and len(done) >= MIN_MODES and time.monotonic() - t_start > 1.5 * minutes * 60:
                notes.append(f"the time budget ({minutes:g} min) ran out: {len(done)} of {len(plan_modes)} modes "
                             "measured (run again to measure the rest: the partial file is kept until the fit)")
                break
            ctl.apply(mode)
            if not simulated:  # the power settles (the twin's meters settle on their simulated clocks)
                from lightning_edge.devices.meter import JETSON_SETTLE_S

                time.sleep(JETSON_SETTLE_S)
            mb = run_microbench(board=board, quick=microbench is None, config=microbench,
                                precisions=list(precs), seed=None if seed is None else seed * 1000 + k,
                                device=torch_device if not simulated else None)
            obs = Observation(mode.as_tuple(), static_power_w=mb.static_power_w)
            for prec, entry in mb.precisions.items():
                obs.rooflines[precs[prec]] = {q: float(entry[q]) for q in ("peak_flops", "bandwidth", "eps_flop",
                                                                           "eps_mop") if entry.get(q) is not None}
            for i in schedule[k]:
                obs.steps[steppers[i].spec.id] = steppers[i].measure(mode)
            done[label] = obs.to_dict()
            _write_partial(partial, {"schema": PARTIAL_SCHEMA, "plan": plan, "done": done,
                                     "label": steppers[0].label if steppers else board.label})
        if bar is not None:
            bar.show(len(done), "fitting the twin's coefficients")
            bar.end()
    finally:
        try:
            ctl.restore()
        except Exception as exc:  # noqa: BLE001 - say so; the controller's exit handlers try again at exit
            log(f"restoring the board's mode failed: {exc} (`lightning-edge mode restore` puts it back)")
    observations = [Observation.from_dict(done[m], f"{partial}: done.{m}") for m in plan["modes"] if m in done]
    start = _start_board(board)
    result = fit_board(start, observations, list(steps), max_nfev=max_nfev, log=log)
    check_res = validate(result, observations, list(steps), max_nfev=max_nfev, seed=seed or 0, log=log) if check \
        else None
    trust, reasons = verdict(result.diagnosis, check_res)
    label = fitted_label(simulated)
    how = ("SIMULATED measurements: the twin of " + board.name) if simulated else f"measurements of {board.name}"
    spent = [sum(float(s.get("elapsed_s", 0.0)) for s in o.steps.values()) for o in observations]
    bf = result.board(label=label, calibration={
        "board": board.name, "method": "lightning-edge calibrate", "modes": len(observations),
        "modes_measured": [m for m in plan["modes"] if m in done], "steps": plan["steps"],
        "schedule": plan["schedule"], "steps_s_per_mode": round(float(np.mean(spent)), 1) if spent else None,
        "microbenchmarks": {"precisions": precs, "sweeps": "quick" if microbench is None else "custom"},
        "seed": seed, "measured_from": how,
        "error_estimate": check_res.to_dict() if check_res is not None else None,
        "verdict": trust, "unexplained": reasons},
        notes=([f"the twin does not explain this board: {'; '.join(reasons)}"] if reasons else []))
    for line in [f"calibration: the twin {'does not explain' if reasons else 'explains'} this board"] + reasons:
        log(line)
    bf.save(out, force=force)
    installed = None
    if install if install is not None else (not simulated and not reasons):
        from lightning_edge.twin.board_files import install_board_file

        installed = install_board_file(bf)
    elif reasons and install is None and not simulated:
        from lightning_edge.twin.board_files import user_board_dir

        notes.append(f"not installed as this board's model: the twin does not explain it (to use it anyway, copy it to "
                     f"{user_board_dir() / (bf.key + '.json')})")
    partial.unlink(missing_ok=True)
    return CalibrationResult(bf, out, [m for m in plan["modes"] if m in done], resumed, installed, notes)


#: the largest partial calibration read (60 modes of measurements are about 100 KiB)
MAX_PARTIAL_BYTES = 8 << 20


def _read_partial(partial: Path, plan: dict[str, Any]) -> dict[str, dict]:
    """The modes measured by an interrupted run of ``plan`` (``{}`` when there is no partial file), every one checked
    (:func:`~lightning_edge.twin.fit.observation_problem`); ``ValueError``, one line naming the field and how to go on,
    for a file that cannot be believed or is another plan's."""
    def bad(why: str) -> ValueError:
        return ValueError(f"{partial}: {why}; delete it or pass --restart to measure afresh")

    try:
        # replaced after every mode: a link planted there since the check before the run is refused, not followed
        saved = read_json(partial, bad, limit=MAX_PARTIAL_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        return {}
    if not isinstance(saved, dict):
        raise bad(f"holds a JSON {type(saved).__name__}, not a partial calibration (an object)")
    if saved.get("schema") != PARTIAL_SCHEMA:
        raise bad(f"not a partial calibration (schema {saved.get('schema')!r:.40}, expected {PARTIAL_SCHEMA!r})")
    if saved.get("plan") != plan:
        other = saved.get("plan") if isinstance(saved.get("plan"), dict) else {}
        modes = other.get("modes") if isinstance(other.get("modes"), list) else []
        raise ValueError(f"{partial} is the partial calibration of another plan (board {other.get('board')!r:.60}, "
                         f"{len(modes)} modes): resume it with the same --device/--modes/--seed, or pass --restart")
    done = saved.get("done")
    if not isinstance(done, dict):
        raise bad(f"done: expected an object (mode -> its measurements), got a JSON {type(done).__name__}")
    step_ids = [WorkloadSpec.from_dict(s).id for s in plan["steps"]]
    for label, obs in done.items():
        if label not in plan["modes"]:
            raise bad(f"done.{label:.40}: not a mode of this plan")
        want = {step_ids[i] for i in plan["schedule"][plan["modes"].index(label)]}
        why = observation_problem(obs, f"done.{label}")
        if why:
            raise bad(why)
        o = Observation.from_dict(obs)
        if PowerMode(*o.mode) != PowerMode.parse(label):
            raise bad(f"done.{label}.mode: {list(o.mode)} is not the mode {label}")
        if set(o.steps) != want:
            raise bad(f"done.{label}.steps: expected the plan's steps at this mode {sorted(want)}, got {sorted(o.steps)}")
    return dict(done)


def _write_partial(path: Path, data: dict) -> None:
    """The partial calibration, written atomically (:func:`lightning_edge._jsonfile.write_json`)."""
    write_json(path, data, lambda why: ValueError(f"{path} (the partial calibration): {why}"), indent=1,
               default=float, ours=_any_file, what="partial calibration")


def _any_file(_path: Path) -> bool:
    """FILE.json.partial is named by this tool: any regular file there may be replaced."""
    return True
