"""Calibration recovers boards it has never seen (issue 29 item 4): simulated, hidden boards, 15 modes each.

    python benchmarks/calibration.py                  # 4 hidden boards x 3 seeds, ~15-25 minutes on 2 cores
    python benchmarks/calibration.py --keys orin-nx-16gb --seeds 0 --modes 15

For each catalogued module and seed a **hidden board** is drawn (``tests/fakes/boards.py``: the catalogue's board of
the module, extrapolated from the papers' AGX Orin: half the GPU for an NX, its bus and rated power, then every
coefficient the fit may move times a seeded log-normal factor, sd 0.2: other power figures, other efficiencies,
other CPU costs) and written as a board file. ``lightning-edge calibrate`` runs on it unchanged
(:func:`lightning_edge.calibrate.kit.calibrate` on ``get_board("sim:hidden.json")``): 15 modes of its design, the
microbenchmarks on the twin's kernels and the reference steps on the twin's meter (seeded noise: 2.5 % on a step's
time, 2 % on its power, 1 % on a kernel; the power settling after each change), then the fit from the catalogue's
board of the module (it never sees the hidden coefficients). Then both the fitted board and the catalogue's
(before calibration) predict the reference steps' time and power on 400 random modes of the module's grid, against
the hidden board's noise-free values: MAPE. Held-out workloads (not measured by the calibration) are reported
beside. Every number is **simulated**: the hidden boards are the twin's physics with other coefficients, so this
measures what the measurements identify and the fit recovers, not how far the physics are from a real board.

Targets (issue 29): time MAPE <= 5 %, power MAPE <= 3 % on the reference steps.
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

from lightning_edge.calibrate.kit import REFERENCE_STEPS, calibrate  # noqa: E402
from lightning_edge.devices.board import forget_boards, get_board  # noqa: E402
from lightning_edge.twin.boards import board_file  # noqa: E402
from lightning_edge.twin.fit import WorkloadSpec  # noqa: E402
from lightning_edge.twin.model import OrinTwin  # noqa: E402
from tests.fakes.boards import hidden_board  # noqa: E402

KEYS = ("orin-nx-16gb", "orin-nano-8gb", "orin-agx-32gb", "orin-nano-4gb")
HELD_OUT = (WorkloadSpec("resnet50", "infer", 8), WorkloadSpec("mobilenet_v2", "train", 16),
            WorkloadSpec("yolov8n", "infer", 1))


def mape(truth: OrinTwin, model: OrinTwin, specs, modes: np.ndarray) -> tuple[float, float]:
    t_err, p_err = [], []
    for s in specs:
        a, b = s.on(truth).step(modes), s.on(model).step(modes)
        t_err.append(np.abs(np.asarray(b.time_s) / np.asarray(a.time_s) - 1))
        p_err.append(np.abs(np.asarray(b.power_w) / np.asarray(a.power_w) - 1))
    return 100 * float(np.mean(np.concatenate(t_err))), 100 * float(np.mean(np.concatenate(p_err)))


def one(key: str, seed: int, n_modes: int, folder: Path, n_eval: int = 400) -> dict:
    hidden = hidden_board(key, seed)
    path = hidden.save(folder / f"hidden-{key}-{seed}.json")
    t0 = time.perf_counter()
    board = get_board(f"sim:{path}", control="write", seed=seed)
    try:
        res = calibrate(board, folder / f"calibrated-{key}-{seed}.json", modes=n_modes, seed=seed, progress=False)
    finally:
        board.close()
    elapsed = time.perf_counter() - t0
    truth = OrinTwin(board=hidden, noise=False, settling=False)
    fitted = OrinTwin(board=res.board_file, noise=False, settling=False)
    before = OrinTwin(board=board_file(key), noise=False, settling=False)
    space = truth.space
    rng = np.random.default_rng(10_000 + seed)
    modes = space.to_numpy()[rng.choice(space.size, min(n_eval, space.size), replace=False)].astype(float)
    t_fit, p_fit = mape(truth, fitted, REFERENCE_STEPS, modes)
    t_before, p_before = mape(truth, before, REFERENCE_STEPS, modes)
    t_ho, p_ho = mape(truth, fitted, HELD_OUT, modes)
    t_ho0, p_ho0 = mape(truth, before, HELD_OUT, modes)
    cal = res.board_file.calibration
    return {"key": key, "seed": seed, "modes": len(res.modes), "t_fit": t_fit, "p_fit": p_fit, "t_before": t_before,
            "p_before": p_before, "t_ho": t_ho, "p_ho": p_ho, "t_ho0": t_ho0, "p_ho0": p_ho0, "s": elapsed,
            "fitted": len(cal["fitted"]), "label": res.board_file.label}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", nargs="+", default=list(KEYS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--modes", type=int, default=15)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "calibration.md"))
    args = ap.parse_args()
    rows = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.keys:
            for seed in args.seeds:
                r = one(key, seed, args.modes, Path(tmp))
                forget_boards()
                rows.append(r)
                print(f"{key:14s} seed {seed}: time MAPE {r['t_fit']:.2f} % (before {r['t_before']:.1f} %), power "
                      f"{r['p_fit']:.2f} % (before {r['p_before']:.1f} %); held-out {r['t_ho']:.2f} / "
                      f"{r['p_ho']:.2f} %; {r['s']:.0f} s", flush=True)
    elapsed = time.perf_counter() - t_start
    worst_t = max(r["t_fit"] for r in rows)
    worst_p = max(r["p_fit"] for r in rows)
    ok = worst_t <= 5.0 and worst_p <= 3.0
    lines = [
        "## Calibration recovers hidden boards (benchmarks/calibration.py)",
        "",
        f"Machine: {machine()}. Run time {elapsed:.0f} s. `python benchmarks/calibration.py` (modules "
        f"{', '.join(args.keys)}; seeds {', '.join(map(str, args.seeds))}; {args.modes} modes each). Every number is "
        "**SIMULATED**: each hidden board is the catalogue's board of the module (extrapolated from the papers' AGX "
        "Orin: for an NX half the SMs, half the memory bus, 40/60 of the rated power) with every coefficient the fit "
        "may move drawn anew (x exp(0.2 N(0,1)), seeded: other power figures, efficiencies and CPU costs), played by "
        "`get_board(\"sim:hidden.json\")`; `lightning-edge calibrate`'s code measures it (microbenchmarks on the "
        "twin's kernels, the four reference steps on the twin's meter with noise and power settling) and fits from "
        "the catalogue's board, never seeing the hidden coefficients. MAPE over 400 random modes of the module's "
        "grid against the hidden board's noise-free time and power; *before*: the catalogue's extrapolated board.",
        "",
        f"Targets (issue 29): time MAPE <= 5 %, power MAPE <= 3 % on the reference steps: "
        f"{'met' if ok else 'NOT met'} (worst {worst_t:.2f} % time, {worst_p:.2f} % power). PowerTrain (FGCS 2024) "
        "reports < 15 % time, < 6 % power after 50 profiled modes on real boards; these hidden boards share the "
        "twin's physics, so the model form is exact here: the table measures identifiability and the fit, not the "
        "physics' error on a real Jetson.",
        "",
        "| module | seed | modes | label | coefficients fitted | time MAPE | power MAPE | before: time | before: power "
        "| held-out: time | held-out: power | held-out before: time / power | run (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['key']} | {r['seed']} | {r['modes']} | {r['label']} | {r['fitted']} | {r['t_fit']:.2f} % "
                     f"| {r['p_fit']:.2f} % | {r['t_before']:.1f} % | {r['p_before']:.1f} % | {r['t_ho']:.2f} % "
                     f"| {r['p_ho']:.2f} % | {r['t_ho0']:.1f} % / {r['p_ho0']:.1f} % | {r['s']:.0f} |")
    med = {k: float(np.median([r[k] for r in rows])) for k in ("t_fit", "p_fit", "t_before", "p_before", "t_ho",
                                                               "p_ho")}
    lines += ["", f"Medians: time {med['t_fit']:.2f} % (before {med['t_before']:.1f} %), power {med['p_fit']:.2f} % "
              f"(before {med['p_before']:.1f} %); held-out workloads {med['t_ho']:.2f} % / {med['p_ho']:.2f} %.",
              "Reference steps: " + ", ".join(s.id for s in REFERENCE_STEPS) + " (synthetic inputs, no DataLoader). "
              "Held-out: " + ", ".join(s.id for s in HELD_OUT) + " (never measured by the calibration)."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} in {elapsed:.0f} s")


if __name__ == "__main__":
    main()
