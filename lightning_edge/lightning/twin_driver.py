"""Driving the twin from a profiling session: one job of :class:`~lightning_edge.lightning.session.EnergySession`.

The captured step's cost becomes the workload's one model on the twin (:meth:`TwinDriver.workload`, a
:class:`~lightning_edge.twin.workload_model.TwinWorkload`: the same object, and so the same numbers, that the board's
step meter, the tuner's prior and serving ask for the same cost): the live simulated board runs it (the board's
``live``, :class:`~lightning_edge.devices.sim.live.LiveTwin`: its sensor's power follows it), the board's step meter
gives each step's simulated time and power from it (:meth:`TwinDriver.bind_meter`), and its per-layer table
(``TwinWorkload.layers``, in the step's mode) splits a profiled step into the model's layers, named as the profiler
names them. The table's rows sum to the step.

What the twin takes from the user's own run on this machine (:meth:`TwinDriver.add_cost` sets it on the twin, so the
tuner's steps on the same board model the same workload, ``OrinTwin.set_run``):

- the CPU work outside the layers (fetching and collating the next batch, the training loop's Python between
  steps), which the twin runs on the board's CPU (``twin.workload_model.HostCPU``): stated (``host_cpu_s``), or
  measured as this thread's CPU time between consecutive steps of the stage, the least of the first :data:`HOST_GAPS`
  gaps (CPU time, not wall time: the time another process holds the core does not count; and the least: load and
  one-off work such as the cost analysis only add to a gap); kept for the rest of the run once known, the steps
  before it modelled without it;
- the optimizer steps per batch: ``1 / accumulate_grad_batches`` under Lightning's automatic optimisation, else
  measured (the parameters the optimizers stepped per training batch, as a share of the trainable ones);
- the optimizer: the Trainer's, else the first one seen stepping (:func:`~lightning_edge.twin.workload.optimizer_run`).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from lightning_edge._torchcompat import tensor_version
from lightning_edge.twin.workload import count_param_tensors, optimizer_run
from lightning_edge.twin.workload_model import IDLE_ROW as IDLE
from lightning_edge.twin.workload_model import HostCPU

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.devices.sim.live import LiveTwin
    from lightning_edge.twin.model import OrinTwin

__all__ = ["TwinDriver", "host_cpu_mhz", "host_cpu_from_gaps", "HOST_GAPS"]

HOST_GAPS = 8
"""Gaps between a stage's first steps whose least CPU time is its CPU work outside the layers per batch."""


def host_cpu_mhz() -> float | None:
    """This machine's CPU clock (MHz): the first core's maximum (cpufreq), else the fastest ``cpu MHz`` of
    /proc/cpuinfo; None where neither can be read."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            return float(f.read().strip()) / 1e3
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", f.read(), re.M)]
        return max(mhz) if mhz else None
    except (OSError, ValueError):
        return None


def host_cpu_from_gaps(gaps_s: list[float], host_mhz: float | None = None) -> HostCPU | None:
    """The CPU work outside the layers per batch from this thread's CPU time in the gaps between a stage's steps
    (seconds each): the least of them. Each gap does the same work (fetching and collating a batch, the loop's
    Python); another process's load only adds to a gap's CPU time (a shared core, its caches), one-off work (the cost
    analysis after the first step, a logger's set-up) only adds to one gap, so the least is the work itself: over
    the first 8 gaps of a small CNN's fit on a 2-core VM, 0.47-0.59 ms alone and beside one to three CPU-bound
    processes, where their median moved 0.74-1.18 ms (and the wall time of the smallest of two gaps, the measure this
    replaced, 9 ms once). None without a gap."""
    gaps = [float(g) for g in gaps_s if g >= 0 and math.isfinite(g)]
    if not gaps:
        return None
    return HostCPU(min(gaps), host_mhz,
                   f"the least of this thread's CPU time in {len(gaps)} gap(s) between steps on this machine")


class TwinDriver:
    """The twin of a session's device, fed with the session's analysed costs: ``twin``, the board's model (an
    :class:`~lightning_edge.twin.model.OrinTwin`); ``live``, the simulated board running (its ``live``: it runs the
    captured workload; None: the model alone, nothing drawn on a board). ``host_cpu_s``: the CPU work outside the
    layers per batch on this machine, stated (None: measured from the gaps between steps, :meth:`add_gap`)."""

    def __init__(self, twin: OrinTwin, model: Any, root_name: str, notes: list[str],
                 host_cpu_s: float | None = None, *, live: LiveTwin | None = None) -> None:
        self.twin = twin
        self.live = live
        self.model = model
        self.root_name = root_name
        self.notes = notes
        self.costs: dict[tuple[str, bool], Any] = {}  # (module path, training) -> its ModelCost
        self.kind: str | None = None  # the workload the twin runs now ("train" / "infer")
        self._cache: dict[tuple, Any] = {}  # (training, mode, batch, cost, run) -> (LayerTimes, names) or None
        self.host_mhz = host_cpu_mhz()
        self.host_cpu_s = host_cpu_s
        self._train_batches = 0  # training batches begun (follow), for the measured optimizer steps per batch
        self._stepped = 0.0  # parameter elements the optimizers stepped (their step hook)
        self._opt_steps = 0
        self._gaps: dict[str, list[float]] = {}  # kind -> this thread's CPU time between consecutive steps (s)
        self._host: dict[str, HostCPU | None] = {}  # kind -> the CPU work outside the layers, once known
        self._hook = None
        self._optimizer: Any = None  # the OptimizerRun of the optimizer seen stepping (plain loops)
        self._opt_noted: set[str] = set()
        # the parameters' version counters: an optimizer's in-place update shows there even where torch runs no step
        # hook (torch 2.1 once torch.compile has been called in the process)
        self._versions: dict[int, int] = {}
        self._v_stepped = 0.0  # parameter elements updated in place since the first training batch
        self._v_updates = 0  # batches in which some parameter was updated
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._stepped_params)
        except Exception:  # noqa: BLE001 - an old torch: automatic optimisation's setting still tells
            self._hook = None

    def _stepped_params(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """An optimizer stepped: count the parameter elements it updated (those with a gradient)."""
        self._opt_steps += 1
        if self._optimizer is None:
            self._optimizer = optimizer_run(optimizer, "the run's optimizer, seen at its first step")
        self._stepped += float(sum(p.numel() for g in optimizer.param_groups for p in g["params"]
                                   if getattr(p, "grad", None) is not None))

    def _automatic(self) -> bool:
        """Lightning's automatic optimisation: its Trainer says how often the optimizer steps."""
        return getattr(self.model, "_trainer", None) is not None and getattr(self.model, "automatic_optimization", True)

    def _trainable(self) -> list:
        return [p for p in self.model.parameters() if p.requires_grad] if hasattr(self.model, "parameters") else []

    def _scan_versions(self) -> None:
        """Count the trainable parameters updated in place since the last scan (their version counters)."""
        changed = 0.0
        for p in self._trainable():
            v = tensor_version(p)
            before = self._versions.get(id(p))
            if before is not None and v != before:
                changed += p.numel()
            self._versions[id(p)] = v
        if changed:
            self._v_stepped += changed
            self._v_updates += 1

    def optimizer_steps(self) -> tuple[float, str]:
        """Optimizer steps per training batch and how it was found: ``1 / accumulate_grad_batches`` under
        Lightning's automatic optimisation; else the parameters stepped per batch so far as a share of the trainable
        parameters (a manual optimisation, a plain loop), from the optimizers' step hook or, where torch runs none,
        from the parameters' in-place updates; one per batch until a step has been seen."""
        if self._automatic():
            k = max(int(getattr(self.model._trainer, "accumulate_grad_batches", 1) or 1), 1)
            return 1.0 / k, f"accumulate_grad_batches={k}"
        trainable = float(sum(p.numel() for p in self._trainable()))
        if self._opt_steps and self._train_batches and trainable > 0:
            share = self._stepped / (trainable * self._train_batches)
            return share, (f"measured: {self._opt_steps} optimizer step(s) in {self._train_batches} batch(es) "
                           f"updated {share:.3g} of the trainable parameters per batch")
        if self._train_batches and trainable > 0:
            self._scan_versions()
            if self._v_updates:
                share = self._v_stepped / (trainable * self._train_batches)
                return share, (f"measured: in {self._train_batches} batch(es) {self._v_updates} updated the "
                               f"parameters in place, {share:.3g} of the trainable parameters per batch (this torch "
                               "runs no optimizer step hook: torch 2.1 once torch.compile has been called in the process)")
        return 1.0, "no optimizer step seen yet: one per batch assumed"

    def optimizer(self) -> Any:
        """The run's optimizer as the twin models it (:class:`~lightning_edge.twin.workload.OptimizerRun`): the
        Trainer's first optimizer, else the first one seen stepping; None (Fulcrum's is modelled) until known."""
        trainer = getattr(self.model, "_trainer", None)
        opts = list(getattr(trainer, "optimizers", None) or []) if trainer is not None else []
        if opts:
            return optimizer_run(opts[0], "the Trainer's optimizer")
        if self._optimizer is None and not self._opt_steps and self._train_batches:
            self._scan_versions()  # stepped since the batch began?
        if self._optimizer is None and self._v_updates and not self._opt_steps:
            self._note("the run's optimizer is not known (this torch runs no optimizer step hook: torch 2.1 once "
                       "torch.compile has been called in the process): the (optimizer) row models the papers' SGD loop")
        return self._optimizer

    def _set_run(self, kind: str, host: Any, share: float, how: str) -> None:
        opt = self.optimizer() if kind == "train" else None
        self.twin.set_run(kind, host=host, optimizer_steps=share, how=how, optimizer=opt)
        if opt is not None and kind == "train" and opt.describe() not in self._opt_noted:
            self._opt_noted.add(opt.describe())
            self._note(f"the twin's (optimizer) row models {opt.describe()}")

    def add_cost(self, cost: Any, training: bool, qual: str = "") -> None:
        """The stage's captured cost: the twin's run of that kind gets its optimizer steps, optimizer and (stated
        or once measured) CPU work outside the layers."""
        self.costs[(qual, training)] = cost
        kind = "train" if training else "infer"
        share, how = self.optimizer_steps() if training else (1.0, "")
        self._set_run(kind, self.host_cpu(kind), share, how)
        if training and share != 1.0:
            self._note(f"the twin's (optimizer) row: one optimizer step's kernels apportioned over the batches "
                       f"between steps, {share:.3g} of a step per batch ({how})")

    def add_gap(self, kind: str, seconds: float) -> None:
        """This thread's CPU time between two consecutive steps of ``kind``; the :data:`HOST_GAPS`-th sets the CPU
        work outside the layers (their median) for the rest of the run."""
        if kind in self._host or self.host_cpu_s is not None:
            return
        gaps = self._gaps.setdefault(kind, [])
        gaps.append(float(seconds))
        if len(gaps) >= HOST_GAPS:
            host = self._host[kind] = host_cpu_from_gaps(gaps, self.host_mhz)
            run = self.twin.runs.get(kind)
            if run is not None:
                self._set_run(kind, host, run.optimizer_steps, run.how)
            self._note_host(kind, host, f"from the {len(gaps) + 2}th step on (the steps before it: without it)")

    def host_cpu(self, kind: str) -> HostCPU | None:
        """The CPU work outside the layers per ``kind`` batch on this machine: stated, or measured (None until the
        first :data:`HOST_GAPS` gaps are in)."""
        if self.host_cpu_s is not None and kind not in self._host:
            self._host[kind] = HostCPU(float(self.host_cpu_s), self.host_mhz, "stated: host_cpu_s")
            self._note_host(kind, self._host[kind], "for every step")
        return self._host.get(kind)

    def _note_host(self, kind: str, host: HostCPU | None, when: str) -> None:
        self._note(f"the twin's {IDLE} row ({kind}): the time after the GPU's last kernel of a step (its "
                   "synchronisation, the CPU finishing its dispatch) plus "
                   + (host.describe() if host is not None else "no CPU work outside the layers")
                   + f", {when}; no image decoding is modelled (TwinWorkload(dataloader='decode') models Fulcrum's "
                   "loader)")

    def _refresh_run(self, training: bool) -> None:
        """A manual optimisation's measured steps per batch, updated on the twin when they have moved."""
        if not training or self._hook is None:
            return
        run = self.twin.runs.get("train")
        share, how = self.optimizer_steps()
        if run is not None and (not math.isclose(share, run.optimizer_steps, rel_tol=0.01)
                                or run.optimizer != self.optimizer()):
            self._set_run("train", run.host, share, how)

    def main_cost(self, training: bool) -> tuple[Any, str] | None:
        """The largest analysed module's cost for training or inference, and its path in the model."""
        mc = [(c, key[0]) for key, c in self.costs.items() if key[1] == training]
        return max(mc, key=lambda x: x[0].flops) if mc else None

    def workload(self, training: bool, batch: int | None) -> Any:
        """The twin's one model of the captured workload (the largest analysed module's cost, its optimizer's
        parameter tensors counted from that module), or None when nothing was analysed for ``training``."""
        main = self.main_cost(training)
        if main is None:
            return None
        cost, qual = main
        return self.twin.workload(cost, batch, "train" if training else "infer", param_tensors=self._tensors(qual))

    def _tensors(self, qual: str) -> int | None:
        try:
            return count_param_tensors(self.model.get_submodule(qual))
        except Exception:  # noqa: BLE001 - not a module: the twin guesses from the layers
            return None

    def bind_meter(self, meter: Any, kind: str, batch: int | None) -> bool:
        """Let the board's step meter time this session's ``kind`` steps (``"train"`` / ``"infer"``) with the
        workload's one model (the same object as :meth:`workload`); False when nothing is analysed for it."""
        main = self.main_cost(kind == "train")
        if main is None or not batch:
            return False
        cost, qual = main
        if kind == "train":
            meter.bind_cost(cost, int(batch), param_tensors=self._tensors(qual))
        else:
            from lightning_edge.twin.sim_workload import SimWorkload

            meter.workloads["infer"] = SimWorkload(cost, self.twin, train_batch_size=int(batch), seed=meter.seed,
                                                   param_tensors=self._tensors(qual))
        return True

    def layer_model(self, training: bool, mode: str, batch: int | None) -> tuple[Any, dict[str, str]] | None:
        """The twin's per-layer model of the captured workload in ``mode`` (the step's):
        ``(LayerTimes, {twin row name: profiler layer name})``, or None when there is no cost or it cannot be
        modelled (a note says why)."""
        main = self.main_cost(training)
        if main is None:
            return None
        cost, qual = main
        kind = "train" if training else "infer"
        self._refresh_run(training)
        key = (training, mode, batch, id(cost), self.twin.runs.get(kind))
        if key in self._cache:
            return self._cache[key]
        out = None
        try:
            lt = self.workload(training, batch).layers(mode)
            root = qual or self.root_name
            if lt.wait_s is not None and float(lt.wait_s.sum()) > 0:
                self._note("the twin's layer times include the time the GPU waited for the CPU to launch their "
                           "kernels (as CUDA events around a layer measure it on a board): in a launch-bound step a "
                           "layer's time is its dispatch")
            names = {n: (f"{qual}.{n}" if qual else n) for n in lt.names if n and not n.startswith("(")}
            names["(root)"] = root
            out = (lt, names)
            others = [k for k in self.costs if k[1] == training]
            if len(others) > 1:
                self._note(f"the twin models {root!r} only ({len(others) - 1} other analysed module(s) of the step "
                           "get no simulated time)")
        except Exception as exc:  # noqa: BLE001 - the twin cannot model it: host times x simulated power
            self._note(f"the twin could not model the workload per layer ({type(exc).__name__}: {exc}): layer times "
                       "are this machine's, energies apportioned from the simulated sensor")
        self._cache[key] = out
        return out

    @property
    def times(self) -> bool:
        """True when layers' and steps' times and energies are the twin's model of the workload."""
        return any(v is not None for v in self._cache.values())

    def begin(self, training: bool, samples: int | None) -> None:
        """Let the live simulated board run this workload: its power follows the same model as the per-layer
        table (no live board: only the kind is remembered)."""
        kind = "train" if training else "infer"
        if self.kind == kind or self.main_cost(training) is None:
            return
        try:
            wl = self.workload(training, samples)
            if self.live is not None:
                self.live.begin(wl)
            self.kind = kind
        except Exception as exc:  # noqa: BLE001
            self.notes.append(f"the twin could not simulate this workload ({exc}): it shows idle power")

    def follow(self, training: bool, samples: int | None) -> None:
        """A step of the stage begins: switch the board's workload when the stage changes (training <-> inference)
        and its cost is known; count the training batches (the optimizer steps per batch are measured over them)."""
        if training:
            if not self._opt_steps and not self._automatic():  # no step hook has fired: watch the parameters
                self._scan_versions()
            self._train_batches += 1
        if self.kind is not None and self.kind != ("train" if training else "infer") and self.main_cost(training):
            self.begin(training, samples)

    def end(self) -> None:
        """The session closes: the board stops running the workload; the optimizer hook is removed."""
        if self.kind is not None:
            if self.live is not None:
                self.live.end()
            self.kind = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)
