"""Time to predict one workload over all 18,096 Orin AGX modes with the twin (analyze timed separately).

    python benchmarks/twin_sweep.py [--repeat 5] [--out benchmarks/results/twin_sweep.md]

For each zoo model, training (bs 16) and inference (bs 1): the analyze() time of the ModelCost (once),
then the median of ``--repeat`` full-space steps of its one model (``TwinWorkload.step`` over the space;
compiling the ModelCost into rows is counted in the first, cold, sweep only).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import time
from pathlib import Path

from _machine import machine

from lightning_edge import zoo
from lightning_edge.twin.model import OrinTwin


def _ms(t_s: float) -> str:
    ms = t_s * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:,.0f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "twin_sweep.md"))
    ap.add_argument("--models", nargs="*", default=list(zoo.names()))
    args = ap.parse_args(argv)
    twin = OrinTwin(settling=False)
    space = twin.space
    rows = []
    worst = 0.0
    for name in args.models:
        for kind, bs in (("train", 16), ("infer", 1)):
            t0 = time.perf_counter()
            cost, n_tensors = twin.workload_cost(name, bs, kind)
            t_analyze = time.perf_counter() - t0
            t0 = time.perf_counter()
            wl = twin.workload(cost, bs, kind, param_tensors=n_tensors)
            pred = wl.step(space)
            t_cold = time.perf_counter() - t0
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                pred = wl.step(space)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            worst = max(worst, med)
            rows.append((name, kind, bs, len(wl.profile.names), t_analyze, t_cold, med, pred.time_s.shape[0],
                         float(pred.time_s.min()), float(pred.time_s.max()), float(pred.power_w.min()),
                         float(pred.power_w.max())))
            print(f"{name:20s} {kind:5s} bs{bs:<3d} steps {len(wl.profile.names):4d}  analyze {t_analyze:6.2f} s  "
                  f"sweep median {med * 1e3:7.1f} ms (cold {t_cold * 1e3:6.1f} ms) over {pred.time_s.shape[0]} modes")
    lines = [
        "# Twin full-space sweep timing",
        "",
        "Time to predict minibatch time and power of one workload over all 18,096 Orin AGX modes",
        "(`TwinWorkload.step` over the space, median of "
        f"{args.repeat} runs), and the one-off `analyze()` time of its ModelCost. Values are simulated.",
        "",
        f"- generated: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}"
        " by `python benchmarks/twin_sweep.py`",
        f"- machine: {machine()}",
        f"- slowest sweep: {worst * 1e3:.1f} ms (target: < 1 s)",
        "",
        "| model | kind | batch | steps | analyze (s) | first sweep incl. compile (ms) | sweep median (ms) | modes |"
        " time range (ms) | power range (W) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, kind, bs, steps, ta, tc, med, n, tmin, tmax, pmin, pmax in rows:
        lines.append(f"| {name} | {kind} | {bs} | {steps} | {ta:.2f} | {tc * 1e3:.1f} | {med * 1e3:.1f} | {n:,} | "
                     f"{_ms(tmin)}-{_ms(tmax)} | {pmin:.1f}-{pmax:.1f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"slowest sweep {worst * 1e3:.1f} ms; wrote {args.out}")
    return 0 if worst < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
