"""Print every figure of the twin's spec beside the twin's value and the error; write the markdown results.

    python benchmarks/twin_validation.py [--out benchmarks/results/twin_validation.md]

Targets: docs/twin-targets.md (Pagoda and Fulcrum, docs/references.md). The twin's values are
``simulated``. Conventions (Pagoda's 96 modes, slope ratio, LSTM sequence length...) are in
``lightning_edge/twin/validation.py`` and docs/twin.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import time
from pathlib import Path

from _machine import machine

from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.validation import to_markdown, validate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "twin_validation.md"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    twin = OrinTwin(settling=False)
    rows = validate(twin)
    elapsed = time.perf_counter() - t0
    table = to_markdown(rows)
    checked = [r for r in rows if r.passed is not None]
    failed = [r for r in checked if not r.passed]
    summary = (f"{len(checked) - len(failed)} of {len(checked)} checked figures within tolerance"
               f" ({len(rows) - len(checked)} information rows); validation ran in {elapsed:.1f} s.")
    print(table)
    print()
    print(summary)
    head = [
        "# Orin AGX twin: validation against the published figures",
        "",
        "Every figure of `docs/twin-targets.md` (Pagoda and Fulcrum, docs/references.md) beside the",
        "twin's value. All twin values are **simulated** (the model in `lightning_edge/devices/sim`,",
        "coefficients in `lightning_edge/data/orin-agx-twin.json`). Errors are relative (twin/target - 1)",
        "unless given in percentage points (pts). Conventions: see docs/twin.md.",
        "",
        f"- generated: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}"
        " by `python benchmarks/twin_validation.py`",
        f"- machine: {machine()}",
        f"- {summary}",
        "",
        "",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(head) + table + "\n")
    print(f"wrote {args.out}")
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
