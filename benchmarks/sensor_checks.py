"""What checking every reading costs: INA3221 reads on the fake Orin AGX tree, and the sampler thread's CPU share.

    python benchmarks/sensor_checks.py [--seconds 3] [--rate 1000]

Prints the mean time of ``INA3221Sensor.read()`` (4 rails, 8 sysfs files, each value checked against the rail's
bounds) and the sampler thread's CPU time over wall time at ``--rate`` Hz with ``quality()`` bookkeeping, plus
``quality()`` over a 1 s window. Run it on an older checkout (PYTHONPATH) to compare.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--reads", type=int, default=20000)
    args = ap.parse_args()

    from lightning_edge.devices.sampler import PowerSampler
    from lightning_edge.devices.sensors import INA3221Sensor
    from tests.fakes.ina3221 import build_orin_agx_ina

    try:
        from benchmarks._machine import machine

        print(f"machine: {machine()}")
    except ImportError:
        pass
    print(f"load: {os.getloadavg()}")
    d = Path(tempfile.mkdtemp(prefix="le-bench-"))
    build_orin_agx_ina(d)
    s = INA3221Sensor(root=d)
    for _ in range(200):
        s.read()
    t0 = time.perf_counter()
    for _ in range(args.reads):
        s.read()
    per = (time.perf_counter() - t0) / args.reads
    print(f"INA3221Sensor.read(): {per * 1e6:.1f} us per read ({args.reads} reads, 4 rails)")

    sampler = PowerSampler(s, rate_hz=args.rate)
    sampler.start()
    time.sleep(args.seconds)
    sampler.stop()
    o = sampler.overhead()
    print(f"sampler at {args.rate:g} Hz: {o}")
    if hasattr(sampler, "quality"):
        t1 = int(sampler.samples().t_ns[-1])
        t0 = time.perf_counter()
        for _ in range(200):
            sampler.quality(t1 - 1_000_000_000, t1)
        print(f"quality() over a 1 s window: {(time.perf_counter() - t0) / 200 * 1e6:.0f} us")


if __name__ == "__main__":
    main()
