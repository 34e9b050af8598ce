"""Regenerate the trace fixtures in this folder: ``python tests/fakes/traces/make_traces.py``.

The traces are *synthetic* (made up here, deterministic), shaped like what an Orin AGX shows: idle, then
training steps (forward lower, backward higher power), then idle. They are not measurements.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")


def orin_agx_steps(rate_hz: float = 200.0, duration_s: float = 2.0, seed: int = 4):
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate_hz * duration_s)) / rate_hz
    gpu = np.full(t.size, 3.2)
    busy = (t >= 0.5) & (t < 1.5)
    phase = ((t - 0.5) % 0.1) / 0.1
    gpu[busy & (phase < 0.4)] = 14.0  # forward
    gpu[busy & (phase >= 0.4)] = 21.0  # backward
    cpu = np.where(busy, 2.1, 0.8)
    sys5 = np.where(busy, 4.6, 3.5)
    ddr = np.where(busy, 1.9, 0.5)
    rails = np.column_stack([gpu, cpu, sys5, ddr]) + rng.normal(0.0, 0.05, (t.size, 4))
    rails = np.round(np.clip(rails, 0.0, None), 3)
    return t, rails


def main() -> None:
    t, rails = orin_agx_steps()
    lines = ["# synthetic Orin AGX trace (make_traces.py, seed 4): 200 Hz, 2 s; idle / 10 training steps / idle",
             "t_s,power_w," + ",".join(RAILS)]
    for ti, row in zip(t, rails):
        lines.append(f"{ti:.4f},{row.sum():.3f}," + ",".join(f"{v:.3f}" for v in row))
    (HERE / "orin_agx_steps_200hz.csv").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
