"""Assemble BENCHMARKS.md from the latest output of every benchmark (benchmarks/results/*.md).

Each benchmark writes its own section, with the machine it ran on, to benchmarks/results/NAME.md;
this script puts them together in a fixed order:  python benchmarks/collect.py
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
ORDER = ["analyze_speed", "twin_validation", "twin_sweep", "overhead", "overhead_fit", "sensor_checks",
         "fulcrum_eval", "autotune", "autotune_prior", "one_story", "calibration", "transfer", "transfer_heldout", "transfer_fresh", "store_field", "interleaving",
         "latency_models"]

HEADER = """# Benchmarks

Latest results of the scripts in `benchmarks/` (each section names the script and the machine it ran on).
Regenerate a section by running its script, then `python benchmarks/collect.py`.
Anything produced by the Orin twin is **simulated**, not measured on a Jetson.
"""


def main() -> None:
    results = {p.stem: p for p in (HERE / "results").glob("*.md")}
    names = [n for n in ORDER if n in results] + sorted(set(results) - set(ORDER))
    parts = [HEADER] + [results[n].read_text().strip() + "\n" for n in names]
    (HERE.parent / "BENCHMARKS.md").write_text("\n".join(parts))
    print(f"BENCHMARKS.md: {', '.join(names)}")


if __name__ == "__main__":
    main()
