"""Calibration holds beyond what it measured (issue 38, parts 1-2): simulated hidden boards, 15 modes each, judged on
workloads the kit never ran, its own error estimate against the measured one, and a board whose physics the twin does
not have.

    python benchmarks/calibration.py                   # 3 modules x 3 seeds + the foreign-physics board, ~40 min on 2 cores
    python benchmarks/calibration.py --keys orin-nx-16gb --seeds 0 --foreign

For each module and seed a **hidden board** is drawn (``tests/fakes/boards.py``, ``derated_board``): the catalogue's
board of the module with its GPU's compute peak and its bandwidth each derated (x U(0.45, 0.85): issue 38's "half
the GPU's peak and bandwidth"), its power figures drawn anew (x exp(0.25 N(0,1))) and every other coefficient the fit
may move (efficiencies, CPU costs, curve shapes) x exp(0.1 N(0,1)), seeded, written as a board file and played by
``get_board("sim:hidden.json")``. ``lightning-edge calibrate``'s code runs on it unchanged
(:func:`lightning_edge.calibrate.kit.calibrate`: 15 modes of its design, the microbenchmarks on the twin's kernels,
the reference steps on the twin's meter with seeded noise and power settling, the fit from the catalogue's board of
the module, which never sees the hidden coefficients, then its leave-one-workload-out and leave-modes-out refits).
Then the fitted board predicts, on 400 random modes of the module's grid, the hidden board's noise-free time and power
of workloads **none of which is a reference step** (:data:`UNSEEN`: other models, other batch sizes and precisions,
training and inference; what each is is printed beside it): MAPE per workload. MobileNetV3 inference at batch 8 (the
issue's example: a reference model at another batch size) is reported apart and not counted.

The **foreign-physics board** (``ForeignPhysics``): a hidden board whose GPU voltage comes in three discrete levels
(where the twin's rises linearly) and whose layers' compute efficiency falls with the memory clock (x (f_mem /
3199)^0.4, while a matmul benchmark still reaches the peak): physics the twin does not have, built in the test fakes,
not in the twin. The calibration must say it does not explain it, and which knob.

Every number is **simulated**: the hidden boards are the twin's physics with other coefficients (the foreign one:
other physics), so this measures what the measurements identify and what the fit recovers, not the physics' error on
a real Jetson.

Targets (issue 38): on every hidden board and seed, time MAPE <= 5 % and power MAPE <= 3 % on every unseen workload;
the board file's own error estimate within 2 points of the measured one; the foreign-physics board reported as poorly
explained.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for p in (str(REPO), str(Path(__file__).resolve().parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

from _machine import machine  # noqa: E402

from lightning_edge.calibrate.kit import REFERENCE_STEPS, STEPS_PER_MODE, TwinStepper, calibrate  # noqa: E402
from lightning_edge.devices.board import forget_boards, get_board  # noqa: E402
from lightning_edge.devices.meter import JETSON_SETTLE_S  # noqa: E402
from lightning_edge.twin.board_files import board_file  # noqa: E402
from lightning_edge.twin.fit import WorkloadSpec  # noqa: E402
from lightning_edge.twin.model import OrinTwin  # noqa: E402
from tests.fakes.boards import ForeignPhysics, derated_board, with_foreign_physics  # noqa: E402

KEYS = ("orin-agx", "orin-nx-16gb", "orin-nano-8gb")
W = WorkloadSpec
UNSEEN = (
    (W("resnet50", "train", 32), "another CNN (bottleneck blocks, 1x1 convolutions), training at batch 32"),
    (W("mobilenet_v2", "train", 64), "another depthwise CNN (inverted residuals, ReLU6), training at batch 64"),
    (W("yolov8n", "infer", 8), "a detector (SiLU, concatenations, upsampling), inference at batch 8"),
    (W("bert_large", "infer", 4, 256, precision="fp16"), "a larger transformer (24 layers, width 1024), sequences "
                                                         "of 256, FP16 inference"),
    (W("resnet50", "infer", 16, precision="fp16"), "another CNN in FP16, inference at batch 16"),
    (W("mobilenet_v2", "infer", 1), "another depthwise CNN at batch 1 (launch-bound), inference"),
)
ASIDE = ((W("mobilenet_v3_large", "infer", 8), "a reference model at another batch size (issue 38's example; the "
                                               "reference steps hold it at batch 1 and 32): not counted"),)
OLD_STEPS = (W("resnet18", "train", 16), W("mobilenet_v3_large", "infer", 1), W("bert_base", "train", 8, 128),
             W("lstm", "infer", 1, 1))
"""The reference steps before issue 38, every one at every mode: only timed here (what a mode's steps took)."""
MICROBENCH_S = 15.0  # the quick sweeps' budget on a GPU (calibrate/microbench.py, SweepConfig.for_device)


def truth_twin(hidden, foreign: bool) -> OrinTwin:
    twin = OrinTwin(board=hidden, settling=False)
    if foreign:
        twin.physics = ForeignPhysics(twin.physics.p)
    return twin


def mape(truth: OrinTwin, model: OrinTwin, spec: WorkloadSpec, modes: np.ndarray) -> tuple[float, float]:
    a, b = spec.on(truth).step(modes), spec.on(model).step(modes)
    return (100 * float(np.mean(np.abs(np.asarray(b.time_s) / np.asarray(a.time_s) - 1))),
            100 * float(np.mean(np.abs(np.asarray(b.power_w) / np.asarray(a.power_w) - 1))))


def old_steps_s(board, modes: list[str], seed: int) -> float:
    """Simulated seconds the four reference steps before issue 38 took per mode (warm-up and window, each mode)."""
    steppers = [TwinStepper(board, s, seed=seed + i) for i, s in enumerate(OLD_STEPS)]
    total = 0.0
    for m in modes:
        mode = board.space.coerce(m)
        total += sum(st.measure(mode)["elapsed_s"] for st in steppers)
    return total / max(len(modes), 1)


def one(key: str, seed: int, n_modes: int, folder: Path, foreign: bool = False, n_eval: int = 400,
        time_old: bool = False) -> dict:
    hidden = derated_board(key, seed)
    tag = f"{key}-{seed}{'-foreign' if foreign else ''}"
    path = hidden.save(folder / f"hidden-{tag}.json")
    t0 = time.perf_counter()
    board = get_board(f"sim:{path}", control="write", seed=seed)
    if foreign:
        with_foreign_physics(board)
    try:
        res = calibrate(board, folder / f"calibrated-{tag}.json", modes=n_modes, seed=seed, progress=False)
        old_s = old_steps_s(board, res.modes, seed) if time_old else None
    finally:
        board.close()
    elapsed = time.perf_counter() - t0
    truth = truth_twin(hidden, foreign)
    fitted = OrinTwin(board=res.board_file, settling=False)
    before = OrinTwin(board=board_file(key), settling=False)
    rng = np.random.default_rng(10_000 + seed)
    modes = truth.space.to_numpy()[rng.choice(truth.space.size, min(n_eval, truth.space.size),
                                              replace=False)].astype(float)
    per = {s.id: mape(truth, fitted, s, modes) for s, _ in UNSEEN + ASIDE}
    unseen = [per[s.id] for s, _ in UNSEEN]
    ref = [mape(truth, fitted, s, modes) for s in REFERENCE_STEPS]
    before_unseen = [mape(truth, before, s, modes) for s, _ in UNSEEN]
    cal = res.board_file.calibration
    est = cal.get("error_estimate") or {}
    return {"key": key, "seed": seed, "foreign": foreign, "modes": len(res.modes), "s": elapsed, "per": per,
            "t_unseen": float(np.mean([t for t, _ in unseen])), "p_unseen": float(np.mean([p for _, p in unseen])),
            "t_unseen_max": max(t for t, _ in unseen), "p_unseen_max": max(p for _, p in unseen),
            "t_ref": float(np.mean([t for t, _ in ref])), "p_ref": float(np.mean([p for _, p in ref])),
            "t_before": float(np.mean([t for t, _ in before_unseen])),
            "p_before": float(np.mean([p for _, p in before_unseen])),
            "est_t": est.get("time_percent"), "est_p": est.get("power_percent"),
            "est_mt": est.get("modes_time_percent"), "est_mp": est.get("modes_power_percent"),
            "worst": est.get("worst") or {}, "verdict": cal.get("verdict"), "reasons": cal.get("unexplained", []),
            "fitted": len(cal["fitted"]), "unidentified": list(cal.get("unidentified") or {}),
            "steps_s": cal.get("steps_s_per_mode"), "old_steps_s": old_s, "label": res.board_file.label,
            "hidden": hidden.name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", nargs="+", default=list(KEYS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--modes", type=int, default=15)
    ap.add_argument("--foreign", nargs="*", default=["orin-nx-16gb:0"], metavar="KEY:SEED",
                    help="foreign-physics boards (default orin-nx-16gb:0)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "calibration.md"))
    args = ap.parse_args()
    rows = []
    t_start = time.perf_counter()
    runs = [(k, s, False) for k in args.keys for s in args.seeds]
    runs += [(f.split(":")[0], int(f.split(":")[1]), True) for f in args.foreign]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (key, seed, foreign) in enumerate(runs):
            r = one(key, seed, args.modes, Path(tmp), foreign=foreign, time_old=i == 0)
            forget_boards()
            rows.append(r)
            print(f"{key:14s} seed {seed}{' FOREIGN' if foreign else ''}: unseen time {r['t_unseen']:.2f} % (max "
                  f"{r['t_unseen_max']:.2f}), power {r['p_unseen']:.2f} % (max {r['p_unseen_max']:.2f}); estimate "
                  f"{r['est_t']} / {r['est_p']} %; {r['verdict']}; {r['s']:.0f} s", flush=True)
    elapsed = time.perf_counter() - t_start
    good = [r for r in rows if not r["foreign"]]
    bad = [r for r in rows if r["foreign"]]
    worst_t = max(r["t_unseen_max"] for r in good)
    worst_p = max(r["p_unseen_max"] for r in good)

    def gap(r: dict, q: str) -> float:
        est = r["est_t"] if q == "t" else r["est_p"]
        return abs(est - r[f"{q}_unseen"]) if est is not None else float("inf")

    worst_gap = max(max(gap(r, "t"), gap(r, "p")) for r in good)
    flagged = sum(r["verdict"] == "poorly explained" for r in bad)
    false_alarms = sum(r["verdict"] == "poorly explained" for r in good)
    ok_acc = worst_t <= 5.0 and worst_p <= 3.0
    steps_s = float(np.mean([r["steps_s"] for r in good if r["steps_s"] is not None]))
    old = next((r["old_steps_s"] for r in rows if r["old_steps_s"] is not None), None)
    mode_s = JETSON_SETTLE_S + MICROBENCH_S + steps_s
    lines = [
        "## Calibration holds beyond what it measured (benchmarks/calibration.py)",
        "",
        f"Machine: {machine()}. Run time {elapsed:.0f} s. `python benchmarks/calibration.py` (modules "
        f"{', '.join(args.keys)}; seeds {', '.join(map(str, args.seeds))}; {args.modes} modes each; foreign-physics "
        f"board{'s' if len(args.foreign) != 1 else ''} {', '.join(args.foreign) or 'none'}). Every number is "
        "**SIMULATED**: each hidden board is the catalogue's board of the module with its GPU's compute peak and "
        "bandwidth each derated (x U(0.45, 0.85), issue 38's \"half the GPU's peak and bandwidth\"), its power "
        "figures drawn anew (x exp(0.25 N(0,1))) and every other coefficient the fit may move x exp(0.1 N(0,1)), "
        "seeded (`tests/fakes/boards.py`, `derated_board`), played by `get_board(\"sim:hidden.json\")`; "
        "`lightning-edge calibrate`'s code measures it (microbenchmarks on the twin's kernels, the reference steps on "
        "the twin's meter with noise and power settling), fits from the catalogue's board (never seeing the hidden "
        "coefficients) and estimates its own errors (refits without each reference step, and without each of 3 "
        "folds of the modes). Then the fitted board against the hidden board's noise-free time and power over 400 "
        "random modes of the module's grid, on workloads **the kit never ran** (below); *before*: the catalogue's "
        "board, uncalibrated.",
        "",
        f"Targets (issue 38): time MAPE <= 5 % and power MAPE <= 3 % on every unseen workload of every board and seed: "
        f"{'met' if ok_acc else 'NOT met'} (worst {worst_t:.2f} % time, {worst_p:.2f} % power over "
        f"{len(good)} x {len(UNSEEN)} board-workload pairs). The board file's own error estimate within 2 points of "
        f"the measured one: {'met' if worst_gap <= 2.0 else 'NOT met'} (largest gap {worst_gap:.2f} points, time or "
        f"power). The foreign-physics board reported as poorly explained: "
        f"{'met' if bad and flagged == len(bad) else 'NOT met'} ({flagged} of {len(bad)}); false alarms on the "
        f"hidden boards of the twin's own physics: {false_alarms} of {len(good)}.",
        "",
        f"Measurement time: {len(REFERENCE_STEPS)} reference steps, {STEPS_PER_MODE} of them at each mode "
        f"(alternating): their warm-up and windows take {steps_s:.1f} s of (simulated) board time per mode, "
        + (f"against {old:.1f} s for the four steps measured at every mode before issue 38; " if old else "")
        + f"with the power settling ({JETSON_SETTLE_S:g} s) and the quick microbenchmark sweeps (~{MICROBENCH_S:g} s) "
        f"about {mode_s:.0f} s per mode, {args.modes} modes ~{args.modes * mode_s / 60:.0f} min (the kit budgets "
        "90 s a mode for model builds and warm-ups on a Jetson: 30 minutes measure 20 modes, as before). The fit "
        "and its refits run after the measurements (the run times below, on this machine).",
        "",
        "### Per board and seed",
        "",
        "Unseen: mean (max) MAPE over the unseen workloads; estimate: the board file's own (`calibration."
        "error_estimate`: the median over left-out reference steps of their error when fitted without them); gap: "
        "|estimate - unseen mean|; modes estimate: leave-modes-out, against the reference steps' own MAPE at the 400 "
        "modes (*ref*).",
        "",
        "| module | seed | hidden board | modes | fitted / held as inseparable | unseen time | unseen power "
        "| estimate time / power | gap (points) | modes estimate time / power | ref time / power | before: time / "
        "power | verdict | run (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in good:
        lines.append(
            f"| {r['key']} | {r['seed']} | {r['hidden'].split('(made up: ')[-1].rstrip(')')} | {r['modes']} | "
            f"{r['fitted']} / {len(r['unidentified'])} | {r['t_unseen']:.2f} % ({r['t_unseen_max']:.2f}) | "
            f"{r['p_unseen']:.2f} % ({r['p_unseen_max']:.2f}) | {r['est_t']:.2f} / {r['est_p']:.2f} % | "
            f"{gap(r, 't'):.2f} / {gap(r, 'p'):.2f} | {r['est_mt']:.2f} / {r['est_mp']:.2f} % | {r['t_ref']:.2f} / "
            f"{r['p_ref']:.2f} % | {r['t_before']:.1f} / {r['p_before']:.1f} % | {r['verdict']} | {r['s']:.0f} |")
    lines += ["", "### Every unseen workload (time MAPE / power MAPE over 400 modes)", "",
              "| module | seed | " + " | ".join(s.id for s, _ in UNSEEN + ASIDE) + " |",
              "|---|---|" + "---|" * len(UNSEEN + ASIDE)]
    for r in rows:
        cells = [f"{r['per'][s.id][0]:.2f} / {r['per'][s.id][1]:.2f}" for s, _ in UNSEEN + ASIDE]
        lines.append(f"| {r['key']}{' (foreign)' if r['foreign'] else ''} | {r['seed']} | " + " | ".join(cells) + " |")
    lines += ["", "What each is (none is a reference step): " + "; ".join(f"`{s.id}`: {why}" for s, why in UNSEEN)
              + ". Apart: " + "; ".join(f"`{s.id}`: {why}" for s, why in ASIDE) + ".",
              "Reference steps: " + ", ".join(f"`{s.id}`" for s in REFERENCE_STEPS) + " (synthetic inputs, no "
              "DataLoader).",
              "", "### The foreign-physics board", ""]
    for r in bad:
        lines += [f"{r['key']} seed {r['seed']} with `ForeignPhysics` (three GPU voltage levels; layers' compute "
                  f"efficiency x (f_mem / 3199)^0.4): verdict **{r['verdict']}**; the fitted file is off by "
                  f"{r['t_unseen']:.1f} % time (max {r['t_unseen_max']:.1f}), {r['p_unseen']:.1f} % power on the unseen "
                  f"workloads; its own estimate said {r['est_t']:.1f} / {r['est_p']:.1f} % (leave-one-workload-out), "
                  f"{r['est_mt']:.1f} / {r['est_mp']:.1f} % (leave-modes-out). What calibrate said:", ""]
        lines += [f"- {x}" for x in r["reasons"]]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} in {elapsed:.0f} s")


if __name__ == "__main__":
    main()
