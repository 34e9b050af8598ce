"""Transfer between boards (issue 29 item 5, issue 38 part 3): a prior made on one simulated board tunes another.

    python benchmarks/transfer.py                    # 3 pairs x 2 workloads x 3 budgets x 6 seeds, ~4 minutes
    python benchmarks/transfer.py --pairs orin-nx-16gb:orin-nano-8gb --seeds 0
    python benchmarks/transfer.py --seeds 6 7 8 9 10 11 --out benchmarks/results/transfer_heldout.md \
        --title "Transfer between boards, held-out seeds 6-11 (benchmarks/transfer.py)"   # looked into since: see below
    python benchmarks/transfer.py --seeds 12 13 14 15 16 17 --out benchmarks/results/transfer_fresh.md \
        --title "Transfer between boards, fresh seeds 12-17 (benchmarks/transfer.py)"   # first run with the final code

Seeds 0-5 are the development seeds. Seeds 6-11 were held out until their misses were read (the guard of 3 standard
errors came from one of them), so they are no longer a clean test. Seeds 12-17 were first run in the session that set
that guard; no choice was made on them (their totals were read, none of their runs; the two rules added after were
chosen on seeds 0-11 and the short fine-tunes of benchmarks/autotune.py).

Each seed draws a **hidden silicon**: the papers' AGX Orin coefficients, every one times a seeded log-normal factor
(sd 0.2; ``tests/fakes/boards.py``). Two modules of it are simulated boards: each is that silicon extrapolated to the
module by the catalogue's hardware ratios, with its own power figures (x exp(0.1 N(0,1))): board A (the source, the
one the user owns first) and board B (the target). Nothing below sees a hidden coefficient:

1. A is calibrated (``lightning-edge calibrate``'s code, 15 modes, simulated measurements with noise; its
   leave-out refits skipped: they estimate the file's errors, they do not change it);
2. the workload is tuned on A without a prior (GMD, Fulcrum's Algorithm 1) and its profiles go to a profile store
   (SQLite, as a user's would);
3. on B the same workload is tuned three ways, through the same engine as ``PowerModeTuner`` (simulated steps, noise,
   power settling): *no prior*; *catalogue prior* (the default on a simulated board: B's catalogue board, extrapolated
   from the papers' published-figure twin); *transferred prior* (:func:`lightning_edge.tuning.transfer.
   transferred_prior`: A's calibrated file with the workload's data loader fitted to A's stored profiles of it,
   extrapolated to B, corrected by those profiles, with its uncertainty). On B every profile window measures up to
   40 minibatches (``WindowSpec(rel_sem=0.004)``, :data:`WINDOW`: Fulcrum's window; at a budget's edge a profile's
   noise decides, docs/tuning.md), in all three settings.

Reported: the chosen mode's noise-free time over the oracle's (the fastest mode of B's grid within the budget, from
B's hidden noise-free truth), profiles spent, chosen modes whose noise-free power breaks the budget, and the profile
windows the strategy ran in a mode over the budget (MAXN's, profiled for the summary's comparison, not counted). A
run where no mode of B is within the budget has no oracle: the right answer is none. Every number is **simulated**.

Targets: the transferred prior tunes to within 3 % of the oracle (issue 29: the median; issue 38: in >= 90 % of the
runs), none over the budget (issue 38).
"""

from __future__ import annotations

import argparse
import math
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

from lightning_edge.calibrate.kit import calibrate  # noqa: E402
from lightning_edge.devices.board import forget_boards, get_board  # noqa: E402
from lightning_edge.devices.meter import TwinMeter  # noqa: E402
from lightning_edge.tuning.online import OnlineTuner, WindowSpec, simulate_tuning  # noqa: E402
from lightning_edge.tuning.store import ProfileStore  # noqa: E402
from lightning_edge.tuning.transfer import stored_profiles, transferred_prior  # noqa: E402
from lightning_edge.twin.board_files import board_file, extrapolate, seed_board  # noqa: E402
from lightning_edge.twin.sim_workload import SimWorkload  # noqa: E402
from tests.fakes.boards import hidden_board, module_variant  # noqa: E402

PAIRS = (("orin-nx-16gb", "orin-nano-8gb"), ("orin-agx-32gb", "orin-nx-16gb"), ("orin-nano-8gb", "orin-nano-4gb"))
WORKLOADS = (("ResNet-18", "resnet18", 16), ("MobileNetV2", "mobilenet_v2", 16))
BUDGETS = (0.45, 0.6, 0.75)
SETTINGS = ("no prior", "catalogue prior", "transferred prior")
WINDOW = WindowSpec(rel_sem=0.004)
"""B's profile windows: up to 40 minibatches (a profile's power to ~0.3 %), in every setting."""


def boards(pair: tuple[str, str], seed: int, folder: Path) -> tuple[Path, Path]:
    silicon = hidden_board("orin-agx", seed, base=seed_board())
    a = module_variant(extrapolate(silicon, pair[0]), 100 + seed)
    b = module_variant(extrapolate(silicon, pair[1]), 200 + seed)
    return a.save(folder / f"A-{pair[0]}-{seed}.json"), b.save(folder / f"B-{pair[1]}-{seed}.json")


def tune_on_a(path_a: Path, model: str, bs: int, seed: int, store_url: str) -> tuple[str, int]:
    """Tune the workload on A without a prior, profiles into the store: (A's store key, profiles)."""
    board = get_board(f"sim:{path_a}", control="write", seed=seed)
    try:
        wl = SimWorkload(model, board.twin, train_batch_size=bs, seed=seed)
        clean = wl.sweep("train", modes=board.space)
        budget = 0.6 * float(np.max(clean.power_w))
        meter = TwinMeter(board.twin, seed=seed, train=wl)
        tuner = OnlineTuner(budget, board.controller, meter, store=ProfileStore(store_url), fingerprint=wl.fingerprint,
                            prior=None)
        tuner.start()
        while tuner.tuned_at_step is None and tuner.step < 5000:
            tuner.before_step()
            tuner.after_step()
        tuner.close()
        return tuner.device_model, len(tuner.profiles)
    finally:
        board.close()


def run_pair(pair: tuple[str, str], seed: int, folder: Path, rows: list[dict]) -> None:
    path_a, path_b = boards(pair, seed, folder)
    board_a = get_board(f"sim:{path_a}", control="write", seed=seed)
    try:
        cal_a = calibrate(board_a, folder / f"cal-{pair[0]}-{seed}.json", modes=15, seed=seed, progress=False,
                          check=False)
    finally:
        board_a.close()
    forget_boards()
    store_url = f"sqlite:///{folder}/profiles-{seed}.db"
    for name, model, bs in WORKLOADS:
        dm, n_a = tune_on_a(path_a, model, bs, seed, store_url)
        fp = SimWorkload(model, train_batch_size=bs).fingerprint
        profiles = stored_profiles(ProfileStore(store_url), dm, fp)
        board_b = get_board(f"sim:{path_b}", control="write", seed=seed)
        try:
            truth = SimWorkload(model, board_b.twin, train_batch_size=bs, noise=False).sweep("train",
                                                                                            modes=board_b.space)
            wl_b = SimWorkload(model, board_b.twin, train_batch_size=bs, seed=seed)
            t0 = time.perf_counter()
            prior_t = transferred_prior(wl_b, board_b.space, target=board_file(pair[1]), source=cal_a.board_file,
                                        profiles=profiles)
            prior_s = time.perf_counter() - t0
            for frac in BUDGETS:
                budget = frac * float(np.max(truth.power_w))
                ok = np.asarray(truth.power_w) <= budget
                oracle = float(np.min(np.where(ok, truth.time_s, np.inf)))
                for setting in SETTINGS:
                    prior = {"no prior": None, "catalogue prior": "auto", "transferred prior": prior_t}[setting]
                    tuner = simulate_tuning(wl_b, budget, prior=prior, board=board_b, seed=seed, window=WINDOW)
                    mode = tuner.solution.mode if tuner.solution is not None else None
                    idx = board_b.space.index(mode) if mode is not None else None
                    t_true = float(truth.time_s[idx]) if idx is not None else math.nan
                    p_true = float(truth.power_w[idx]) if idx is not None else math.nan
                    maxn = board_b.space.max_mode()
                    w_pw = [float(truth.power_w[board_b.space.index(w["mode"])]) for w in tuner.profiles
                            if w["mode"] != maxn]
                    w_over = sum(pw > budget * (1 + 1e-9) for pw in w_pw)
                    w_over_by = max([(pw / budget - 1) * 100 for pw in w_pw if pw > budget * (1 + 1e-9)], default=0.0)
                    rows.append({"feasible": bool(ok.any()), "windows_over": w_over, "windows_over_by": w_over_by,
                                 "minibatches": tuner.tuned_at_step if tuner.tuned_at_step is not None else math.nan,"pair": f"{pair[0]} -> {pair[1]}", "workload": name, "seed": seed, "budget": budget,
                                 "frac": frac, "setting": setting, "profiles": tuner.summary().profiles_used,
                                 "excess": (t_true / oracle - 1) * 100 if idx is not None and ok.any() else math.nan,
                                 "over": bool(p_true > budget * (1 + 1e-9)), "over_by": (p_true / budget - 1) * 100,
                                 "mode": str(mode), "a_profiles": len(
                                     profiles), "prior_s": prior_s if setting == "transferred prior" else 0.0})
                    r = rows[-1]
                    print(f"{r['pair']:32s} {name:11s} seed {seed} {frac:.0%} budget {setting:17s}: {r['profiles']:2d} "
                          f"profiles, excess {r['excess']:+.2f} %{' OVER' if r['over'] else ''} ({r['mode']}), "
                          f"{w_over} windows over (by up to {w_over_by:.2f} %)",
                          flush=True)
        finally:
            board_b.close()
            forget_boards()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", nargs="+", default=[f"{a}:{b}" for a, b in PAIRS])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4, 5])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "transfer.md"))
    ap.add_argument("--title", default="Transfer between boards (benchmarks/transfer.py)",
                    help="the section's heading (the held-out seeds' run: see the module docstring)")
    args = ap.parse_args()
    pairs = [tuple(p.split(":")) for p in args.pairs]
    rows: list[dict] = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for pair in pairs:
            for seed in args.seeds:
                run_pair(pair, seed, Path(tmp), rows)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - t_start

    def med(xs):
        xs = [x for x in xs if not math.isnan(x)]
        return float(np.median(xs)) if xs else math.nan

    tr = [r for r in rows if r["setting"] == "transferred prior"]
    worst = float(np.nanmax([r["excess"] for r in tr]))
    med_tr = med([r["excess"] for r in tr])

    def within(sel):
        return sum(r["feasible"] and r["excess"] <= 3.0 and not r["over"] for r in sel)

    feasible = [r for r in tr if r["feasible"]]
    share = within(tr) / len(tr) if tr else 0.0
    overs_tr = sum(r["over"] for r in tr)
    lines = [
        f"## {args.title}",
        "",
        f"Machine: {machine()}. Run time {elapsed:.0f} s. `python benchmarks/transfer.py` (pairs "
        f"{', '.join(args.pairs)}; seeds {', '.join(map(str, args.seeds))}; budgets "
        f"{', '.join(f'{b:.0%}' for b in BUDGETS)} of the workload's highest power on B). Every number is "
        "**SIMULATED**: per seed a hidden silicon (the papers' AGX Orin coefficients x exp(0.2 N(0,1))), two modules of it "
        "(extrapolated by the catalogue's hardware ratios, each with its own power figures x exp(0.1 N(0,1))); A is "
        "calibrated (15 modes) and the workload tuned on it without a prior into a SQLite profile store; then on B the "
        "same engine as `PowerModeTuner` (GMD, simulated steps with noise and power settling; profile windows of up to "
        "40 minibatches, `WindowSpec(rel_sem=0.004)`, in every setting) tunes with no prior, with the catalogue's "
        "prior (B extrapolated from the published-figure twin, the default on a simulated board), and with the prior "
        "transferred from A (A's calibrated file with the workload's data loader fitted to A's stored profiles, "
        "extrapolated to B, corrected by those profiles, with its uncertainty). Excess: the chosen mode's noise-free "
        "time over the oracle's (the fastest of B's whole grid within the budget, B's hidden noise-free truth); over: "
        "chosen modes whose noise-free power breaks the budget; windows over: profile windows the strategy ran in a "
        "mode whose noise-free power breaks the budget (MAXN's, profiled for the summary, not counted); minibatches: "
        "until training runs in the chosen mode.",
        "",
        f"Targets (issue 38): >= 90 % of the runs with the transferred prior within 3 % of the oracle: "
        f"{'met' if share >= 0.9 else 'NOT met'} ({within(tr)} of {len(tr)} runs, {100 * share:.1f} %; "
        f"{within(tr)} of the {len(feasible)} runs where a mode of B is within the budget); none over the budget: "
        f"{'met' if overs_tr == 0 else 'NOT met'} ({overs_tr} over). Median {med_tr:+.2f} % (issue 29's target, "
        f"{'met' if med_tr <= 3.0 else 'NOT met'}), worst {worst:+.2f} % (every run below). Within 3 %: a mode of B "
        "is within the budget, the excess is <= 3 % and the chosen mode's noise-free power is within the budget; "
        "over budget: the profile (with noise) showed it within, the noise-free power is above (by at most its "
        "'largest overshoot'); no mode chosen: the tuner ended without one (the right answer where no mode of B is "
        f"within the budget: {len(tr) - len(feasible)} run{'s' if len(tr) - len(feasible) != 1 else ''}). Within 3 % "
        "per seed: " + ", ".join(f"seed {s}: {within([r for r in tr if r['seed'] == s])} of "
                                 f"{sum(r['seed'] == s for r in tr)}" for s in args.seeds) + ".",
        "",
        "| setting | runs | profiles (median) | minibatches (median) | excess (median) | excess (90th pct) "
        "| excess (max) | within 3 % | over budget | largest overshoot | windows over (all runs) | largest window overshoot "
        "| no mode chosen |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        sel = [r for r in rows if r["setting"] == s]
        overs = [r["over_by"] for r in sel if r["over"]]
        ex = np.array([r["excess"] for r in sel], dtype=float)
        none = sum(r["mode"] == "None" for r in sel)
        lines.append(f"| {s} | {len(sel)} | {med([r['profiles'] for r in sel]):.1f} | "
                     f"{med([float(r['minibatches']) for r in sel]):.0f} | "
                     f"{med([r['excess'] for r in sel]):+.2f} % | {float(np.nanpercentile(ex, 90)):+.2f} % | "
                     f"{float(np.nanmax(ex)):+.2f} % | {within(sel)} of {len(sel)} | {len(overs)} "
                     f"| {max(overs, default=0.0):.2f} % | {sum(r['windows_over'] for r in sel)} "
                     f"| {max(r['windows_over_by'] for r in sel):.2f} % | {none} |")
    lines += ["", "### Per pair and workload (medians over seeds and budgets)", "",
              "| pair | workload | profiles on A | no prior: profiles / excess | catalogue prior | transferred prior |",
              "|---|---|---|---|---|---|"]
    for pair in dict.fromkeys(r["pair"] for r in rows):
        for name, _, _ in WORKLOADS:
            cells = []
            for s in SETTINGS:
                sel = [r for r in rows if r["pair"] == pair and r["workload"] == name and r["setting"] == s]
                cells.append(f"{med([r['profiles'] for r in sel]):.0f} / {med([r['excess'] for r in sel]):+.2f} % "
                             f"(max {float(np.nanmax([r['excess'] for r in sel])):+.2f} %)")
            a_prof = med([r["a_profiles"] for r in rows if r["pair"] == pair and r["workload"] == name])
            lines.append(f"| {pair} | {name} | {a_prof:.0f} | " + " | ".join(cells) + " |")
    lines += ["", "### Every run", "", "| pair | workload | seed | budget (W) | setting | profiles | windows over "
              "(largest, %) | excess | chosen mode |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        over = f" (over by {r['over_by']:.2f} %)" if r["over"] else ""
        excess = f"{r['excess']:+.2f} %" if r["feasible"] else "no mode within the budget"
        lines.append(f"| {r['pair']} | {r['workload']} | {r['seed']} | {r['budget']:.1f} | {r['setting']} "
                     f"| {r['profiles']} | {r['windows_over']} ({r['windows_over_by']:.2f}) | {excess}{over} | {r['mode']} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} in {elapsed:.0f} s")


if __name__ == "__main__":
    main()
