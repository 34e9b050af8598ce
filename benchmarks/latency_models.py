"""Latency models (Jantsch, issue 30) on networks they never saw, fitted from this device's microbenchmarks alone.

Every kind is fitted here, from measurements of this machine only (no network's per-layer times), within a time
budget, and predicts the held-out networks of ``benchmarks/heldout_nets.py`` (families not in the zoo: AlexNet-
like 11x11/5x5 kernels, SqueezeNet-like fire modules, depthwise-separable stacks, an all-convolutional net,
ResNeXt-like grouped convolutions, a small ViT) at batch 1 and 8, one thread:

* roofline / refined: peaks from ``lightning_edge.roofline``'s microbenchmarks;
* stepwise: class functions generated from points measured in a network's context (``--budget-s``);
* statistical / mixed: random forests trained on units drawn by ``measure.sample_units`` (``--budget-s``, one
  sweep for both; ``--seeds`` draws different units).

Runs: each seed is fitted ``quiet`` (as the machine is) and ``loaded`` (with a competing process pinned to the
same CPU as this one: a 1-thread matmul and a 32 MB copy in a loop). The whole benchmark is pinned to one CPU,
and the machine's load average (other users) is recorded before and after every step. Each condition has its own
reference, measured under that condition (issue 38: fitted and evaluated under a competing process): rounds of
the least of ``--repeats`` passes on the thread clock, measured just before, between and just after each seed's
two fits (loaded: with the loader running), ``SUB_ROUNDS`` rounds at each of those points, the networks in
turn. A run's reference is the median of its own rounds (the machine's speed drifts over the run, and the host's
other tenants slow it in bursts of seconds); the median of all the condition's rounds is reported beside it. A model
is scored against the reference of the condition it was fitted under.

Reported: network MAPE per kind and condition, fit times (wall and CPU), what each fit measured of the machine
(its disturbance factors, preemptions, unit calls rejected as preempted), APE per network, and errors per unit
class (in-network LayerTimer self times against the predictions, summed over the networks). Then the measurements
behind the models: the in-network context effect per class (hot loop, ``time_unit``'s context, in the network),
the batch-8 1x1 convolution of ResNet-50 alone, with its own shape and with the batch folded into one map, the
allocator's page faults, and the share of the weights read from memory at batch 1 (the layers with weights timed in
the network against ``time_unit`` with warm and with cold weights) beside the models' ``dram_share``.

    python benchmarks/latency_models.py --quick          # one seed, quiet only, small budgets: ~10 min
    python benchmarks/latency_models.py                  # seeds 0 and 1, quiet and loaded, 280 s fits: ~50 min
    python benchmarks/latency_models.py --update-benchmarks-md    # also replace the section in BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

from _machine import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SECTION = "# Latency models (Jantsch) on this machine"
KINDS = ("roofline", "refined", "statistical", "mixed", "stepwise")
#: issue 38: network MAPE on the held-out networks, quiet and with a competing process beside the fit and the
#: evaluation; every fit within 5 minutes
TARGET = {"quiet": 5.0, "loaded": 10.0}
TARGET_KINDS = ("stepwise", "mixed")
#: reference rounds at each point (before, between, after a seed's fits): a shared host's other tenants slowed
#: a ResNeXt-like pass from 4.0 to 6.8 ms for seconds at a time, several networks' rounds long
SUB_ROUNDS = 3

LOADER = """
import time, torch
torch.set_num_threads(1)
a, b = torch.randn(256, 256), torch.randn(256, 256)
src, dst = torch.randn(8 << 20), torch.empty(8 << 20)
x = torch.randn(8, 64, 32, 32)
conv = torch.nn.Conv2d(64, 64, 3, padding=1)
with torch.inference_mode():
    while True:
        for _ in range(20):
            torch.mm(a, b)
        dst.copy_(src)
        conv(x).relu_()
"""


def loadavg() -> str:
    try:
        a, b, c = os.getloadavg()
        return f"{a:.2f}, {b:.2f}, {c:.2f}"
    except OSError:
        return "unknown"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {loadavg()}] {msg}", flush=True)


class Loader:
    """A competing process on this process's CPU (started and stopped by us, by its own pid)."""

    def __init__(self, cpu: int):
        self.cpu = cpu
        self.proc: subprocess.Popen | None = None

    def __enter__(self):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-c", LOADER], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        try:
            os.sched_setaffinity(self.proc.pid, {self.cpu})
        except (AttributeError, OSError):
            pass
        time.sleep(2.0)  # let it start its loop
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one seed, quiet only, 120 s fits, fewer repeats")
    ap.add_argument("--seeds", default=None, help="comma-separated sweep seeds (default 0,1; --quick 0)")
    ap.add_argument("--conditions", default=None, help="quiet,loaded (default both; --quick quiet)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall seconds per fit, everything included (default 280; --quick 120)")
    ap.add_argument("--repeats", type=int, default=None, help="passes per network per round (default 9)")
    ap.add_argument("--nets", default=None, help="comma-separated held-out networks (default all)")
    ap.add_argument("--cpu", type=int, default=None, help="the CPU to pin to (default the last one allowed)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "latency_models.md"))
    ap.add_argument("--update-benchmarks-md", action="store_true",
                    help=f"replace the section '{SECTION}' of BENCHMARKS.md with this run's output")
    ap.add_argument("--save-models", default=None, help="write the fitted models (JSON) to this folder")
    ap.add_argument("--beside", default="no work of ours; the machine's other users aside",
                    help="what ran on the other CPUs during the run, for the report (they share the last-level "
                         "cache: a test suite there moved the quiet references by 25 %%)")
    args = ap.parse_args(argv)
    q = args.quick
    seeds = [int(s) for s in (args.seeds or ("0" if q else "0,1")).split(",")]
    conditions = (args.conditions or ("quiet" if q else "quiet,loaded")).split(",")
    budget = args.budget_s or (120.0 if q else 280.0)
    repeats = args.repeats or (5 if q else 9)

    import heldout_nets
    import torch

    from lightning_edge.latency import measure
    from lightning_edge.latency.features import describe
    from lightning_edge.latency.model import LatencyModel

    warnings.simplefilter("ignore")  # extrapolation notes: the tables say how far off the models are
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    cpu = args.cpu if args.cpu is not None else cpus[-1]
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    measure.use_clock("thread")
    kept = measure.keep_freed_memory()   # as every fit does: no page faults from the allocator (docs/latency.md)
    nets = args.nets.split(",") if args.nets else heldout_nets.names()
    t_start = time.monotonic()
    log(f"{machine()}; pinned to CPU {cpu}; seeds {seeds}; conditions {conditions}; budget {budget:.0f} s")

    # ---------------------------------------------------------------- the networks
    cases = []  # (name, batch, model, input, descs, containers)
    for name in nets:
        model, size = heldout_nets.build(name)
        for b in (1, 8):
            x = torch.rand(b, 3, size, size)
            descs, containers = describe(model, x)
            cases.append((name, b, model, x, descs, containers))
    # the reference of each condition: rounds of the least of `repeats` passes, spread over that condition's fits
    # (quiet: before and after every fit; loaded: under the loader, before, between and after each seed's fits);
    # the median of the rounds counts
    rounds: dict[str, dict[tuple, list[float]]] = {"quiet": defaultdict(list), "loaded": defaultdict(list)}

    def measure_round(cond: str, what: str) -> None:
        # SUB_ROUNDS rounds at each point, the networks in turn: the host's other tenants slow this machine in
        # bursts of seconds, which a round of one network's passes cannot outlast
        for _ in range(SUB_ROUNDS):
            for name, b, model, x, _d, _c in cases:
                rounds[cond][(name, b)].append(measure.time_network(model, (x,), repeats=repeats))
        log(f"networks measured ({cond}, {what})")

    measure_round("quiet", "round 1")
    per_layer = {(name, b): measure.time_layers(model, (x,), steps=max(3, repeats // 2))
                 for name, b, model, x, _d, _c in cases}
    log("per-layer LayerTimer times measured")

    # ---------------------------------------------------------------- fits
    runs = []  # dict(seed, condition, models, fit times, loads)
    for cond in conditions:
        for seed in seeds:
            ctx = Loader(cpu) if cond == "loaded" else None
            if ctx:
                ctx.__enter__()
            try:
                first = len(next(iter(rounds[cond].values()), []))   # this run's rounds: before, between, after
                if cond == "loaded" or seed != seeds[0]:
                    measure_round(cond, f"before the seed {seed} fits")
                else:  # the quiet round just measured is the one before
                    first -= SUB_ROUNDS
                before = loadavg()
                calls0 = measure.preemption_counts()
                log(f"fit stepwise ({cond}, seed {seed})")
                t0, c0 = time.monotonic(), time.process_time()
                step = LatencyModel.fit("stepwise", "cpu", budget_s=budget, threads=1, clock="thread", seed=seed)
                step_wall, step_cpu = time.monotonic() - t0, time.process_time() - c0
                measure_round(cond, f"after the seed {seed} stepwise fit")
                log(f"fit mixed + statistical ({cond}, seed {seed})")
                t0, c0 = time.monotonic(), time.process_time()
                mixed = LatencyModel.fit("mixed", "cpu", budget_s=budget, threads=1, clock="thread", seed=seed)
                mixed_wall, mixed_cpu = time.monotonic() - t0, time.process_time() - c0
                t0, c0 = time.monotonic(), time.process_time()
                stat = mixed.with_samples([], kind="statistical")   # the same sweep, trained for the other target
                train_wall, train_cpu = time.monotonic() - t0, time.process_time() - c0
                calls1 = measure.preemption_counts()
                measure_round(cond, f"after the seed {seed} fits")
            finally:
                if ctx:
                    ctx.__exit__(None, None, None)
            roof = LatencyModel("roofline", step.meta, step.peak_flops, step.bandwidth, tile=step.tile)
            refined = LatencyModel("refined", step.meta, step.peak_flops, step.bandwidth, tile=step.tile)
            sweep_s = mixed.fit_cost.get("measure_elapsed_s", mixed_wall)
            runs.append({
                "seed": seed, "cond": cond, "load": (before, loadavg()),
                "models": {"roofline": roof, "refined": refined, "statistical": stat, "mixed": mixed,
                           "stepwise": step},
                "fit": {"stepwise": (step_wall, step_cpu, step.fit_cost.get("points")),
                        "mixed": (mixed_wall, mixed_cpu, mixed.fit_cost.get("points")),
                        "statistical": (sweep_s + train_wall, mixed_cpu - (mixed_wall - sweep_s) + train_cpu,
                                        mixed.fit_cost.get("points")),
                        "roofline": (step.fit_cost.get("microbench_s", 0), None, "microbench"),
                        "refined": (step.fit_cost.get("microbench_s", 0), None, "microbench")},
                "llc": step.meta.get("llc_bytes"),
                "calls": (calls1["preempted"] - calls0["preempted"], calls1["timed"] - calls0["timed"]),
                "ref": {k: statistics.median(v[first:]) for k, v in rounds[cond].items()},
                "dist": {k: (m.meta.get("disturbance_pass_s"), m.meta.get("disturbance_factor"),
                             m.meta.get("preempt_hz"), m.fit_cost.get("speed"))
                         for k, m in (("stepwise", step), ("mixed", mixed))},
            })
            if args.save_models:
                d = Path(args.save_models)
                d.mkdir(parents=True, exist_ok=True)
                for k in ("stepwise", "mixed"):
                    runs[-1]["models"][k].save(d / f"{k}-{cond}-seed{seed}.json")
            if cond == "loaded":
                measure_round("quiet", f"after the {cond} seed {seed} fits")
    ref_of = {cond: {k: statistics.median(v) for k, v in rounds[cond].items()} for cond in rounds if rounds[cond]}
    if args.save_models:
        import json

        (Path(args.save_models) / "references.json").write_text(json.dumps(
            {cond: {f"{k[0]} b{k[1]}": v for k, v in rounds[cond].items()} for cond in rounds}, indent=1))

    # ---------------------------------------------------------------- predictions
    for run in runs:
        run["pred"] = {}
        for k, lm in run["models"].items():
            run["pred"][k] = [lm.predict_layers(descs, containers) for _n, _b, _m, _x, descs, containers in cases]

    # ---------------------------------------------------------------- the measurements behind the models
    log("context effect: hot loop, time_unit's context, in the network")
    context_rows = context_effect(cases, per_layer)
    log("batch fold: ResNet-50's 1x1 convolutions at batch 8")
    fold_rows = batch_fold()
    log("allocator: zoo networks at batch 8, default allocator against one that keeps its memory")
    alloc_rows = allocator_effect()
    log("weights from memory at batch 1: in the network against time_unit with warm and with cold weights")
    share_rows = weight_share(cases, next((r for r in runs if r["cond"] == "quiet"), runs[0])["models"]["stepwise"])
    total_min = (time.monotonic() - t_start) / 60

    text = report(args, runs, cases, ref_of, rounds, per_layer, context_rows, fold_rows, seeds, conditions, budget,
                  repeats, cpu, total_min) + allocator_report(alloc_rows, kept) + share_report(share_rows)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    log(f"wrote {out}")
    if args.update_benchmarks_md:
        bm = ROOT / "BENCHMARKS.md"
        old = bm.read_text()
        i = old.find(SECTION)
        j = old.find("\n# ", i + 1) if i >= 0 else -1
        new = (old[:i] if i >= 0 else old.rstrip() + "\n\n") + text.strip() + "\n" + (old[j:] if j >= 0 else "")
        bm.write_text(new)
        log(f"replaced '{SECTION}' in {bm}")
    return 0


def context_effect(cases, per_layer) -> dict[str, list[float]]:
    """Per unit class, summed over every leaf layer of every case: a hot loop of the layer alone, ``time_unit``
    in its network context, and the LayerTimer self time in the network. Leaf layers only (containers' times in
    the network include the hooks of their children)."""
    import torch

    from lightning_edge.latency.measure import time_unit

    rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for name, b, model, x, descs, _c in cases:
        mods = dict(model.named_modules())
        leaf = {d.name: d for d in descs if d.name in mods and not list(mods[d.name].children())}
        caps: dict = {}
        hooks = [mods[n].register_forward_hook(
            lambda m, a, o, n=n, caps=caps: (caps.setdefault(n, tuple(t.clone() if isinstance(t, torch.Tensor)
                                                                       else t for t in a)), None)[1]) for n in leaf]
        with torch.inference_mode():
            model(x)
        for h in hooks:
            h.remove()
        for n, d in leaf.items():
            if n not in caps or d.calls != 1:
                continue
            r = rows[d.cls]
            r[0] += time_unit(mods[n], caps[n], context=False)
            r[1] += time_unit(mods[n], caps[n])
            r[2] += per_layer[(name, b)].get(n, 0.0)
            r[3] += 1
    return dict(rows)


#: the zoo's calibration networks whose weights (9-17 MB) lie about the measured cache, at batch 1
SHARE_CASES = ("mobilenet_v2@48", "yolov8n@64", "mobilenet_v3_large@48", "mobilenet_v2", "yolov8n")


def _keep_input(m, a, n, caps) -> None:
    caps.setdefault(n, tuple(t.clone() for t in a))


def weight_share(cases, lm) -> list[tuple]:
    """At batch 1, for the zoo's networks of ``SHARE_CASES`` and the held-out ones: the layers with weights of
    ``COLD_MIN_BYTES`` or more, each timed in the network (``measure.time_layers``: their self times, the least of
    10 passes) and by ``time_unit`` with warm and with cold weights, on their input in the network (summed); the
    share of the weights read from memory the times imply, (network - warm) / (cold - warm), against the model's
    ``dram_share`` (what ``lm``'s effective last-level cache gives the network)."""
    import torch

    from lightning_edge.latency.features import describe
    from lightning_edge.latency.measure import COLD_MIN_BYTES, network_cases, time_layers, time_unit

    nets = [(label, model, inputs) for label, model, inputs in network_cases("cpu", SHARE_CASES)
            if label.endswith(" b1")]
    nets += [(f"{name} b1", model, (x,)) for name, b, model, x, _d, _c in cases if b == 1]
    rows = []
    for label, model, inputs in nets:
        descs, _cont = describe(model, *inputs)
        mods = dict(model.named_modules())
        big = [n for n, m in mods.items() if not list(m.children())
               and sum(4 * p.numel() for p in m.parameters(recurse=False)) >= COLD_MIN_BYTES]
        caps: dict = {}   # each layer's input in one pass, for time_unit
        hooks = [mods[n].register_forward_pre_hook(functools.partial(_keep_input, n=n, caps=caps)) for n in big]
        with torch.inference_mode():
            model(*inputs)
        for h in hooks:
            h.remove()
        in_net = time_layers(model, inputs, steps=10)
        warm = cold = net = 0.0
        for n in big:
            if n not in caps or n not in in_net:   # not called in a pass
                continue
            warm += time_unit(mods[n], caps[n])
            cold += time_unit(mods[n], caps[n], cold=True)
            net += in_net[n]
        weights = sum(4.0 * d.params for d in descs)
        foot = weights + sum(4.0 * d.n_out * max(1, d.calls) for d in descs)
        rows.append((label, len(big), weights, foot, warm, cold, net, lm.dram_share(descs)))
    return rows


def share_report(rows: list[tuple]) -> str:
    if not rows:
        return ""
    out = ["", "Weights from memory at batch 1: the layers with 64 KB of weights or more, timed in the network "
           "(`measure.time_layers` self times, the least of 10 passes) and by `time_unit` with warm and with cold weights (ms, "
           "summed); measured share = (network - warm) / (cold - warm), above 1 where the network slows the layers in "
           "other ways too; the model's `dram_share` (of the first quiet "
           "step-wise fit, its effective last-level cache) is what the step-wise and statistical models blend by. "
           "The first rows are zoo calibration networks (fit data), the others held-out networks.", "",
           "| network | layers | weights MB | weights + activations MB | warm | cold | in network | measured share "
           "| model's share |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, n, weights, foot, warm, cold, net, share in rows:
        got = f"{(net - warm) / (cold - warm):.2f}" if cold - warm > 0.02 * warm else "(cold within 2 % of warm)"
        out.append(f"| {label} | {n} | {weights / 2**20:.1f} | {foot / 2**20:.1f} | {warm * 1e3:.2f} | "
                   f"{cold * 1e3:.2f} | {net * 1e3:.2f} | {got} | {share:.2f} |")
    return "\n".join(out) + "\n"


def batch_fold() -> list[tuple]:
    """ResNet-50's last 1x1 convolutions at batch 8 on 64x64 inputs (2x2 maps), timed in context with their own
    shape, and with the batch folded into one map of about as many pixels (what the step-wise model measured
    before issue 30: output pixels P = batch x h x w)."""
    import torch
    from torch import nn

    from lightning_edge.latency.measure import time_unit

    out = []
    for c, f, s in ((512, 2048, 2), (2048, 512, 2), (1024, 512, 4)):
        conv = nn.Conv2d(c, f, 1, bias=False).eval()
        own = time_unit(conv, (torch.randn(8, c, s, s),))
        side = max(1, round(math.sqrt(8 * s * s)))
        folded = time_unit(conv, (torch.randn(1, c, side, side),))
        out.append((c, f, s, side, own, folded))
    return out


ALLOC_CODE = """
import json, sys, torch
sys.path.insert(0, {root!r})
torch.set_num_threads(1)
from lightning_edge import zoo
from lightning_edge.latency import measure
measure.use_clock("thread")
if {keep}:
    measure.keep_freed_memory()
out = {{}}
for name in ("mobilenet_v2", "resnet50", "resnet18"):
    m = zoo.get(name).build().eval()
    x = torch.rand(8, 3, 96, 96)
    out[name] = (measure.network_page_faults(m, (x,)), measure.time_network(m, (x,), repeats=5))
sys.path.insert(0, {here!r})
import heldout_nets
held = {{}}
for name in heldout_nets.names():
    m, size = heldout_nets.build(name)
    for b in (1, 8):
        held[f"{{name}} b{{b}}"] = measure.network_page_faults(m, (torch.rand(b, 3, size, size),))
out["held-out"] = held
print(json.dumps(out))
"""


def allocator_effect() -> dict:
    """Zoo networks at batch 8 on 96x96 inputs, each in a fresh process with glibc's default allocator and with
    ``keep_freed_memory``: page faults per pass and the least pass (s). Run in subprocesses pinned to this CPU:
    the allocator's setting stays for a process."""
    import json

    rows = {}
    for keep in (False, True):
        code = ALLOC_CODE.format(root=str(ROOT), here=str(Path(__file__).resolve().parent), keep=keep)
        try:
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
            rows[keep] = json.loads(r.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            rows[keep] = {}
    return rows


def allocator_report(rows: dict, kept: bool) -> str:
    held = rows.get(False, {}).get("held-out", {})
    faulting = {k: v for k, v in held.items() if v}
    lines = ["", "The allocator: zoo networks at batch 8 on 96x96 inputs, each in a fresh process, with glibc's default "
             "allocator and with `measure.keep_freed_memory` (what every fit and this benchmark set"
             + ("" if kept else "; not available here") + "): page faults per pass and the least of 5 passes (ms). "
             "The held-out networks with the default allocator: "
             + (", ".join(f"{k} {v}" for k, v in faulting.items()) + " faults a pass" if faulting
                else f"no page faults in any of their {len(held)} runs") + ".", "",
             "| network | faults, default | ms, default | faults, kept | ms, kept |", "|---|---:|---:|---:|---:|"]
    for name, d in rows.get(False, {}).items():
        if name == "held-out":
            continue
        k = rows.get(True, {}).get(name, (None, float("nan")))
        lines.append(f"| {name} | {d[0]} | {d[1] * 1e3:.1f} | {k[0]} | {k[1] * 1e3:.1f} |")
    return "\n".join(lines) + "\n"


def _pct(p: float, m: float) -> float:
    return abs(p - m) / m * 100


def report(args, runs, cases, ref_of, rounds, per_layer, context_rows, fold_rows, seeds, conditions, budget,
           repeats, cpu, total_min) -> str:
    keys = [(c[0], c[1]) for c in cases]
    n_rounds = {c: len(next(iter(rounds[c].values()), [])) for c in rounds if rounds[c]}

    def spread(cond: str) -> float:   # how far the rounds of one condition lie apart: the reference's own noise
        return statistics.mean((max(v) / min(v) - 1) * 100 for v in rounds[cond].values())

    lines = [
        SECTION,
        "",
        f"Machine: {machine()}; device cpu, 1 torch thread, fp32, clock: thread (the thread's CPU time), pinned to "
        f"CPU {cpu} (the other CPUs: {args.beside}). "
        "Effective last-level cache measured by each fit: "
        + ", ".join(sorted({f'{r["llc"] / 2 ** 20:.0f} MB' for r in runs if r.get('llc')})) + " (nominal "
        f"{runs[0]['models']['stepwise'].meta.get('llc_nominal_bytes', 0) / 2 ** 20:.0f} MB).",
        "Load average (1, 5, 15 min; 2 CPUs shared with other users) while fitting: "
        + "; ".join(f"{r['cond']} seed {r['seed']}: {r['load'][0]} -> {r['load'][1]}" for r in runs) + ".",
        f"Networks (held out: not in the zoo, never fitted on; benchmarks/heldout_nets.py): "
        f"{', '.join(sorted({k[0] for k in keys}))}, batch 1 and 8. Every model was fitted from this device's "
        f"microbenchmarks alone, within a {budget:.0f} s wall budget each (statistical and mixed share one sweep). "
        "Loaded: a competing 1-thread process (matmul, 32 MB copies, a convolution) on the same CPU during the fit "
        "and during the loaded reference's rounds.",
        "References, measured under the condition the model was fitted under (loaded: with the loader running): "
        f"rounds of the least of {repeats} passes per network (thread clock). A run's reference is the median of "
        f"its own rounds, {SUB_ROUNDS} measured just before, {SUB_ROUNDS} between and {SUB_ROUNDS} just after its two "
        "fits, the networks in turn (the machine's speed drifts over the run, and the host's other virtual machines "
        "slow it in bursts of seconds); 'MAPE, all rounds' scores the same predictions "
        "against the median of all the condition's rounds ("
        + ", ".join(f"{c}: {n}" for c, n in n_rounds.items()) + "). The rounds of one condition lie "
        + ", ".join(f"{spread(c):.1f} % ({c})" for c in n_rounds)
        + " apart on average (largest over least round per network): the reference's own noise.",
        f"Command: `python benchmarks/latency_models.py{' --quick' if args.quick else ''} --seeds "
        f"{','.join(map(str, seeds))} --conditions {','.join(conditions)} --budget-s {budget:.0f}` "
        f"({total_min:.0f} min in all).",
        "",
        "| kind | condition | seed | network MAPE % | max APE % | MAPE, all rounds % | fit wall s | fit CPU s | "
        "fit points / units |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    mape = defaultdict(list)
    for k in KINDS:
        for r in runs:
            apes = [_pct(p.total_s, r["ref"][key]) for p, key in zip(r["pred"][k], keys)]
            pooled = statistics.mean(_pct(p.total_s, ref_of[r["cond"]][key]) for p, key in zip(r["pred"][k], keys))
            m = statistics.mean(apes)
            mape[(k, r["cond"])].append(m)
            wall, cpu_s, pts = r["fit"][k]
            lines.append(f"| {k} | {r['cond']} | {r['seed']} | {m:.1f} | {max(apes):.0f} | {pooled:.1f} | {wall:.0f} | "
                         f"{'' if cpu_s is None else f'{cpu_s:.0f}'} | {pts} |")
    lines += ["", "Targets (issue 38): step-wise and mixed network MAPE on the held-out networks, batch 1 and 8, "
              "<= 5 % quiet and <= 10 % with a CPU-bound process beside the fit and the evaluation; each fit within "
              "5 minutes on this CPU."]
    for k in TARGET_KINDS:
        for cond in conditions:
            tgt = TARGET[cond]
            vals = mape[(k, cond)]
            walls = [r["fit"][k][0] for r in runs if r["cond"] == cond]
            ok = all(v <= tgt for v in vals) and all(w <= 300 for w in walls)
            lines.append(f"- {k}, {cond}: MAPE {', '.join(f'{v:.1f}' for v in vals)} % (seeds {seeds}; target "
                         f"{tgt:.0f} %), fit {max(walls):.0f} s at most: " + ("met." if ok else "NOT met."))
    # the busy machine: what each fit measured of it
    lines += ["", "What each fit measured of the machine (`measure.disturbance`: a network-like probe's passes, "
              "timed as the references are, over as many undisturbed segments; the factor multiplies a prediction "
              "by the length of its pass), and the unit calls the OS preempted (rejected; `time_unit` takes the "
              "least of the others); and the machine's speed through the fit (`measure.SpeedTrack`: a probe every "
              "2 s; what was timed while the probe ran more than 10 % off its usual, the lower quartile of the "
              "probes, was corrected by that factor, after waiting the burst out where the fit had time left: "
              "`SpeedTrack(wait_s=...)`):", "",
              "| condition | seed | kind | preemptions / CPU s (before, after) | factor at 1, 4, 15, 45 ms | "
              "unit calls preempted | speed probes: slowest / usual, share off | measurements corrected (factors) | "
              "bursts waited out (ended, s) |",
              "|---|---:|---|---|---|---:|---|---|---|"]
    from lightning_edge.latency.measure import disturbance_factor

    for r in runs:
        for k, (ps, fs, hz, sp) in r["dist"].items():
            fac = ", ".join(f"{disturbance_factor(t, ps, fs):.3f}" for t in (1e-3, 4e-3, 15e-3, 45e-3)) if ps else ""
            pre, tot = r["calls"]
            probes, fixed, waited = "", "", ""
            if sp and isinstance(sp.get("waited"), dict):
                w = sp["waited"]
                waited = f"{w.get('bursts', 0)} ({w.get('ended', 0)}, {w.get('waited_s', 0):.0f} s)"
            if sp and sp.get("usual_ms"):
                slowest = max(v for _t, v in sp["probes"]) / sp["usual_ms"]
                off = sp.get("off_share", sp.get("slow_share")) or 0.0
                probes = f"{slowest:.2f}, {100 * off:.0f} % of {sp.get('n_probes', len(sp['probes']))}"
                n, of = sp["corrected"]
                fr = sp.get("factor_range")
                fixed = f"{n} of {of}" + (f" ({fr[0]:.2f}-{fr[1]:.2f})" if fr else "")
            lines.append(f"| {r['cond']} | {r['seed']} | {k} | {', '.join(f'{h:.0f}' for h in hz or [])} | {fac} | "
                         + (f"{pre} of {tot} ({100 * pre / max(tot, 1):.1f} %)" if k == "stepwise" else "")
                         + f" | {probes} | {fixed} | {waited} |")
    # the network calibration
    lines += ["", "The network calibration of each fit (`UnitLatencyModel.network_calibration`: the zoo's networks "
              "timed whole in three rounds, one before and two after the units, the median of each network's; never a "
              "held-out network): the factor on "
              "every layer and the cost per layer call it adds, the range of the zoo passes' ratios to the "
              "uncalibrated predictions, and the fit's own error estimate (leave one zoo network out) against the "
              "held-out networks' MAPE:", "",
              "| condition | seed | kind | factor | us per call | zoo ratios | estimated error % | held-out MAPE % |",
              "|---|---:|---|---:|---:|---|---:|---:|"]
    for r in runs:
        for k in ("stepwise", "mixed", "statistical"):
            m = r["models"][k].meta
            if m.get("network_factor") is None:
                continue
            rat = m.get("network_ratios") or [0]
            apes = [_pct(p.total_s, r["ref"][key]) for p, key in zip(r["pred"][k], keys)]
            lines.append(f"| {r['cond']} | {r['seed']} | {k} | {m['network_factor']:.3f} | "
                         f"{float(m.get('network_call_s') or 0) * 1e6:.1f} | {min(rat):.2f}-{max(rat):.2f} "
                         f"| {m.get('network_error_pct')} | {statistics.mean(apes):.1f} |")
    # per network
    lines += ["", "Per network: reference ms quiet and loaded (the median of all the condition's rounds), then each "
              "kind's APE % per run against the run's own reference (" + ", ".join(f"{r['cond'][0]}{r['seed']}" for r in runs)
              + ": q = quiet, l = loaded, digit = seed).",
              "", "| network | batch | ms quiet | ms loaded | " + " | ".join(KINDS) + " |",
              "|---|---:|---:|---:|" + "---|" * len(KINDS)]
    for i, key in enumerate(keys):
        cells = []
        for k in KINDS:
            cells.append(" / ".join(f"{_pct(r['pred'][k][i].total_s, r['ref'][key]):.0f}" for r in runs))
        ld = f"{ref_of['loaded'][key] * 1e3:.2f}" if key in ref_of.get("loaded", {}) else ""
        lines.append(f"| {key[0]} | {key[1]} | {ref_of['quiet'][key] * 1e3:.2f} | {ld} | " + " | ".join(cells) + " |")
    # per class
    lines += ["", "Per unit class, over every network and batch (ms; in network = LayerTimer self times, least of "
              "its passes, which include its hooks' own time in containers' rows; predictions of the first quiet "
              "run; error = predicted / in network - 1):", "",
              "| class | layers | in network | stepwise | error % | mixed | error % | statistical | error % |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    r0 = next((r for r in runs if r["cond"] == "quiet"), runs[0])
    by = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
    for i, key in enumerate(keys):
        for la in r0["pred"]["stepwise"][i].layers:
            row = by[la.cls or "?"]
            row[0] += 1
            row[1] += per_layer[key].get(la.name, 0.0)
            row[2] += la.time_s
        for k, col in (("mixed", 3), ("statistical", 4)):
            for la in r0["pred"][k][i].layers:
                by[la.cls or "?"][col] += la.time_s
    def err(p, meas):
        return f"{(p / meas - 1) * 100:+.0f}" if meas > 0 else ""

    for c, (n, meas, st, mx, sa) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {c} | {n} | {meas * 1e3:.2f} | {st * 1e3:.2f} | {err(st, meas)} | {mx * 1e3:.2f} | "
                     f"{err(mx, meas)} | {sa * 1e3:.2f} | {err(sa, meas)} |")
    # the context effect
    lines += ["", "The in-network context effect, per class, summed over the leaf layers of every held-out network "
              "and batch (ms): each layer alone in a hot loop, alone in `time_unit`'s network context (other ops' "
              "code, a sweep through twice the L2 cache, the producer writing its input; what every model is fitted "
              "on), and in the network (LayerTimer).", "",
              "| class | layers | hot loop | in context | in network | network / hot | network / context |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for c, (hot, ctx, net, n) in sorted(context_rows.items(), key=lambda kv: -kv[1][2]):
        lines.append(f"| {c} | {n} | {hot * 1e3:.2f} | {ctx * 1e3:.2f} | {net * 1e3:.2f} | "
                     f"{net / max(hot, 1e-12):.2f} | {net / max(ctx, 1e-12):.2f} |")
    tot = [sum(v[i] for v in context_rows.values()) for i in range(3)]
    lines.append(f"| all | {sum(v[3] for v in context_rows.values())} | {tot[0] * 1e3:.2f} | {tot[1] * 1e3:.2f} | "
                 f"{tot[2] * 1e3:.2f} | {tot[2] / max(tot[0], 1e-12):.2f} | {tot[2] / max(tot[1], 1e-12):.2f} |")
    lines += ["", "Batch and pixels are not interchangeable: ResNet-50's 1x1 convolutions at batch 8 on 64x64 inputs, "
              "timed in context with their own shape and with the batch folded into one map (what issue 19's "
              "step-wise model measured; ms):", "",
              "| conv | own shape | folded | own / folded |", "|---|---:|---:|---:|"]
    for c, f, s, side, own, folded in fold_rows:
        lines.append(f"| {c}->{f}, (8, {c}, {s}, {s}) vs (1, {c}, {side}, {side}) | {own * 1e3:.2f} | "
                     f"{folded * 1e3:.2f} | {own / folded:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
