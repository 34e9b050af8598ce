"""Tuned versus MAXN: time and energy per training epoch on the Orin twin, five workloads x three budgets.

    python benchmarks/autotune.py                   # ~1-3 minutes on a 2-core machine
    python benchmarks/autotune.py --steps-per-epoch 1000 --out benchmarks/results/autotune.md

For each Fulcrum training workload (ResNet-18, MobileNetV3, YOLOv8n, BERT-base, LSTM; the twin's zoo models at
the evaluation's batch sizes) and three power budgets (50 %, 65 % and 80 % of the workload's power in MAXN, so
each budget binds: MAXN breaks all three), the tuner's engine
(:class:`~lightning_edge.tuning.online.OnlineTuner`, the one inside ``PowerModeTuner``) runs a simulated training
loop: every step's time and power come from the twin (:class:`~lightning_edge.devices.meter.TwinMeter`: noise,
power settling after each switch); no real computation runs, so this is the tuner's behaviour on the Orin, simulated.
Default profiling windows (settling detected on the power trace, at most 2.4 s; 1 warm-up; 10-40 measured minibatches),
GMD from the prior and then its full search (``thorough``: what ``PowerModeTuner`` does for a run of 2,000
minibatches or more, since issue 18), an in-memory store.

Reported per (workload, budget):

* MAXN: time and energy of one epoch in MAXN (steady state; it breaks the budget where its power is higher);
* epoch 1 with the tuner: starts in MAXN, profiles, then trains in the chosen mode: includes the profiling cost;
* epoch 2: steady state in the chosen mode (a second run, or later epochs);
* the oracle: the fastest mode within the budget over the 441 modes (noise-free), for reference;
* mean power of epoch 2 (must be within the budget) and the number of profiles.

``--part prior`` (issue 18: short fine-tunes): ResNet-18, MobileNetV3 and BERT-base training (bs 16) under 20, 25,
30 and 40 W, several seeds, three settings of the same engine: *before* (no prior, a fixed 2.4 s settling wait per
profile: the defaults until issue 18), *no prior* (settling detected on the power trace) and *prior* (the
default of ``PowerModeTuner``: the prior of :mod:`lightning_edge.tuning.prior` plus the detected settling).
Reported: profiles the strategy used, profiling windows measured (MAXN for the summary included), minibatches
until training runs in the chosen mode, and the chosen mode's excess time over the noise-free oracle (the
fastest of the 441 modes within the budget); a chosen mode whose noise-free power exceeds the budget is counted.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(Path(__file__).resolve().parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

from _machine import machine  # noqa: E402

from lightning_edge.devices import ORIN_AGX_MAXN, fulcrum_space  # noqa: E402
from lightning_edge.devices.meter import TwinMeter  # noqa: E402
from lightning_edge.devices.sim.device import SimulatedOrin  # noqa: E402
from lightning_edge.tuning import Exhaustive, TrainingProblem  # noqa: E402
from lightning_edge.tuning.online import (  # noqa: E402
    THOROUGH_AFTER_STEPS,
    OnlineTuner,
    WindowSpec,
    simulate_tuning,
)
from lightning_edge.twin.sim_workload import SimWorkload  # noqa: E402

WORKLOADS = [("ResNet-18", "resnet18", 16), ("MobileNetV3", "mobilenet_v3", 16), ("YOLOv8n", "yolo", 16),
             ("BERT-base", "bert_base", 16), ("LSTM", "lstm", 16)]


def run_epochs(name: str, model: str, bs: int, budget: float, steps: int, seed: int) -> dict:
    board = SimulatedOrin(seed=seed)
    meter = TwinMeter(board, seed=seed, train=SimWorkload(model, board.twin, train_batch_size=bs, seed=seed))
    # what PowerModeTuner does for a run of 2 x steps minibatches (thorough from THOROUGH_AFTER_STEPS on)
    tuner = OnlineTuner(budget, board.controller, meter, store=None, fingerprint=f"{model}-bs{bs}",
                        thorough=2 * steps >= THOROUGH_AFTER_STEPS)
    tuner.start()
    epochs = []
    for _ in range(2):
        t0 = len(tuner.records)
        for _ in range(steps):
            tuner.before_step()
            tuner.after_step()
        tuner.epoch_boundary()
        recs = tuner.records[t0:]
        epochs.append({"time_s": sum(r.time_s for r in recs), "energy_j": sum(r.energy_j for r in recs),
                       "profiling_steps": sum(1 for r in recs if r.window is not None)})
    summary = tuner.summary()
    tuner.close()
    return {"epochs": epochs, "summary": summary, "solution": tuner.solution}


PRIOR_WORKLOADS = [("ResNet-18", "resnet18", 16), ("MobileNetV3", "mobilenet_v3", 16), ("BERT-base", "bert_base", 16)]
PRIOR_BUDGETS = (20.0, 25.0, 30.0, 40.0)
SETTINGS = {  # name: (prior, window)
    "before": (None, WindowSpec(settle_s=2.4)),
    "no prior": (None, WindowSpec()),
    "prior": ("auto", WindowSpec()),
}


def tune_once(model: str, bs: int, budget: float, setting: str, seed: int, max_steps: int = 5000) -> dict:
    """One simulated fine-tune until training runs in the chosen mode: what tuning cost and what it chose."""
    prior, window = SETTINGS[setting]
    tuner = simulate_tuning(SimWorkload(model, train_batch_size=bs, seed=seed), budget, prior=prior, window=window,
                            seed=seed, max_steps=max_steps)
    s = tuner.summary()
    steps = tuner.tuned_at_step
    ob = s.over_budget
    return {"profiles": s.profiles_used, "windows": len(tuner.profiles), "steps": steps,
            "sim_s": sum(r.time_s for r in tuner.records[: steps or len(tuner.records)]),
            "mode": tuner.solution.mode if tuner.solution is not None else None, "prior_s": s.progress.prior_time_s,
            "over_steps": ob.steps if ob is not None else 0, "over_windows": ob.windows if ob is not None else 0,
            "maxn_steps": s.maxn_steps}


def prior_part(seeds: list[int], out: str) -> None:
    space = fulcrum_space()
    t_start = time.perf_counter()
    rows = []
    for name, model, bs in PRIOR_WORKLOADS:
        clean = SimWorkload(model, train_batch_size=bs, noise=False)
        for budget in PRIOR_BUDGETS:
            oracle = Exhaustive().solve(TrainingProblem(budget), space, clean, store=None)
            for setting in SETTINGS:
                for seed in seeds:
                    r = tune_once(model, bs, budget, setting, seed)
                    t_p = clean.expected("train", r["mode"]) if r["mode"] is not None else (math.nan, math.nan)
                    r.update(workload=name, budget=budget, setting=setting, seed=seed,
                             excess=(t_p[0] / oracle.time_s - 1) * 100 if oracle and r["mode"] else math.nan,
                             true_power=t_p[1], over=bool(t_p[1] > budget), oracle_mode=str(oracle.mode))
                    rows.append(r)
                    print(f"{name:12s} {budget:4.0f} W {setting:9s} seed {seed}: {r['profiles']:2d} profiles, "
                          f"{r['windows']:2d} windows, {r['steps']} minibatches, excess {r['excess']:+.1f} %, "
                          f"mode {r['mode']} ({t_p[1]:.1f} W)", flush=True)
    elapsed = time.perf_counter() - t_start
    lines = [
        "# Short fine-tunes: tuning with and without the prior (simulated: the Orin twin)",
        "",
        f"Machine: {machine()}. Run time {elapsed:.0f} s. `python benchmarks/autotune.py --part prior` "
        f"(seeds {', '.join(map(str, seeds))}; GMD through the PowerModeTuner engine, an in-memory store; every "
        "time and power is the twin's, SIMULATED: noise on every minibatch, power settling after every switch).",
        "",
        "*before*: no prior, a fixed 2.4 s settling wait per profile (the defaults until issue 18); *no prior*: "
        "settling detected on the power trace; *prior*: the prior (the twin's model with its uncalibrated "
        "coefficients, of the workload's analyze cost: not the simulated truth) plus detected settling, the default. "
        "Profiles: the strategy's; windows: profiles measured (issue 37: MAXN is no longer run for the summary's "
        "comparison); minibatches: until training runs in the chosen mode; over while tuning: those minibatches "
        "whose (simulated, noisy) power was over the budget, and the windows whose profile was (issue 37); "
        "excess: the chosen mode's noise-free time over the oracle's (the fastest of the 441 modes within the "
        "budget, noise-free); over budget: chosen modes whose noise-free power exceeds the budget (the profile, "
        "with noise, showed it within).",
        "",
        "## Medians per workload and setting (over budgets and seeds)",
        "",
        "| workload | setting | profiles | windows | minibatches tuning | simulated tuning time (s) | over while tuning "
        "(minibatches, median) | windows over (median) | excess (median) | excess (max) | over budget |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def med(xs: list) -> float:
        xs = [x for x in xs if x is not None and not math.isnan(x)]
        return float(np.median(xs)) if xs else math.nan

    for name, _, _ in PRIOR_WORKLOADS + [("all", None, None)]:
        for setting in SETTINGS:
            sel = [r for r in rows if r["setting"] == setting and name in ("all", r["workload"])]
            lines.append(
                f"| {name} | {setting} | {med([r['profiles'] for r in sel]):.1f} | {med([r['windows'] for r in sel]):.1f} "
                f"| {med([r['steps'] for r in sel]):.0f} | {med([r['sim_s'] for r in sel]):.1f} "
                f"| {med([r['over_steps'] for r in sel]):.0f} | {med([r['over_windows'] for r in sel]):.1f} "
                f"| {med([r['excess'] for r in sel]):+.1f} % | {max(r['excess'] for r in sel):+.1f} % "
                f"| {sum(r['over'] for r in sel)} of {len(sel)} |")
    lines += ["", "## Every run", "",
              "| workload | budget (W) | setting | seed | profiles | windows | minibatches | over while tuning "
              "| windows over | excess | chosen mode | its power (W, noise-free) | oracle mode |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['budget']:.0f} | {r['setting']} | {r['seed']} | {r['profiles']} "
                     f"| {r['windows']} | {r['steps']} | {r['over_steps']} | {r['over_windows']} "
                     f"| {r['excess']:+.1f} % | {r['mode']} | {r['true_power']:.1f} | {r['oracle_mode']} |")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("\n".join(lines) + "\n")
    print(f"wrote {out} in {elapsed:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("epochs", "prior"), default="epochs",
                    help="epochs: tuned versus MAXN per epoch (default); prior: short fine-tunes with/without the prior")
    ap.add_argument("--steps-per-epoch", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3, help="--part prior: seeds 0..N-1 (default 3)")
    ap.add_argument("--out", default=None, help="default: benchmarks/results/autotune.md (epochs), "
                    "benchmarks/results/autotune_prior.md (prior)")
    args = ap.parse_args()
    if args.part == "prior":
        prior_part(list(range(args.seeds)), args.out or str(REPO / "benchmarks" / "results" / "autotune_prior.md"))
        return
    args.out = args.out or str(REPO / "benchmarks" / "results" / "autotune.md")
    space = fulcrum_space()
    t_start = time.perf_counter()
    rows = []
    for name, model, bs in WORKLOADS:
        clean = SimWorkload(model, train_batch_size=bs, noise=False)
        maxn = clean.train(ORIN_AGX_MAXN)
        for q in (50, 65, 80):
            budget = float(np.round(maxn.power_w * q / 100, 1))
            oracle = Exhaustive().solve(TrainingProblem(budget), space, clean, store=None)
            r = run_epochs(name, model, bs, budget, args.steps_per_epoch, args.seed)
            e1, e2 = r["epochs"]
            s = r["summary"]
            rows.append({
                "workload": name, "bs": bs, "q": q, "budget": budget,
                "maxn_t": maxn.time_s * args.steps_per_epoch, "maxn_e": maxn.time_s * maxn.power_w * args.steps_per_epoch,
                "maxn_p": maxn.power_w,
                "e1_t": e1["time_s"], "e1_e": e1["energy_j"], "e1_prof": e1["profiling_steps"],
                "e2_t": e2["time_s"], "e2_e": e2["energy_j"], "e2_p": e2["energy_j"] / e2["time_s"],
                "mode": s.mode or "-", "profiles": s.new_profiles,
                "oracle_t": (oracle.time_s * args.steps_per_epoch) if oracle else float("nan"),
                "oracle_mode": str(oracle.mode) if oracle else "-",
            })
            print(f"{name:12s} {budget:5.1f} W: epoch2 {e2['time_s']:.1f} s {e2['energy_j']:.0f} J "
                  f"(MAXN {rows[-1]['maxn_t']:.1f} s {rows[-1]['maxn_e']:.0f} J), mode {rows[-1]['mode']}", flush=True)
    elapsed = time.perf_counter() - t_start
    lines = [
        "# Tuned versus MAXN per training epoch (simulated: the Orin twin)",
        "",
        f"Machine: {machine()}. Run time {elapsed:.0f} s. `python benchmarks/autotune.py` "
        f"(epoch = {args.steps_per_epoch} training minibatches; GMD through the PowerModeTuner engine; default "
        "profiling windows; every time and energy below is the twin's, SIMULATED).",
        "",
        "Budgets are 50 %, 65 % and 80 % of the workload's power in MAXN. "
        "Epoch 1 starts in MAXN and includes the profiling windows (settling and warm-up minibatches too); "
        "epoch 2 is the steady state in the chosen mode. Oracle: the fastest mode within the budget (noise-free, "
        "441 modes). Energy change is epoch 2 versus MAXN (negative = saved).",
        "",
        "| workload | budget (W) | MAXN epoch (s) | MAXN energy (J) | MAXN power (W) | epoch 1 tuned (s) | epoch 1 energy (J) "
        "| profiling minibatches | epoch 2 tuned (s) | epoch 2 energy (J) | epoch 2 power (W) | time vs MAXN | energy vs MAXN "
        "| oracle epoch (s) | tuned vs oracle | chosen mode | profiles |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} (bs {r['bs']}) | {r['budget']:.1f} | {r['maxn_t']:.1f} | {r['maxn_e']:.0f} | {r['maxn_p']:.1f} "
            f"| {r['e1_t']:.1f} | {r['e1_e']:.0f} | {r['e1_prof']} | {r['e2_t']:.1f} | {r['e2_e']:.0f} | {r['e2_p']:.1f} "
            f"| {(r['e2_t'] / r['maxn_t'] - 1) * 100:+.1f} % | {(r['e2_e'] / r['maxn_e'] - 1) * 100:+.1f} % "
            f"| {r['oracle_t']:.1f} | {(r['e2_t'] / r['oracle_t'] - 1) * 100:+.1f} % | {r['mode']} | {r['profiles']} |")
    within = sum(1 for r in rows if r["e2_p"] <= r["budget"] * 1.02)
    lines += ["", f"Epoch-2 mean power within the budget (2 % measurement tolerance): {within} of {len(rows)}.",
              "Mean power in MAXN exceeds every budget here: MAXN is what a user gets without the tuner."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} in {elapsed:.0f} s")


if __name__ == "__main__":
    main()
