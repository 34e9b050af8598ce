"""Small synthetic workloads with analytic time and power (no twin, no hardware)."""

from __future__ import annotations

import collections

from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning import Measurement

# A hand-made space: 3 x 5 x 7 x 3 = 315 modes, midpoint 4c/300/400/2000.
HAND_SPACE = PowerModeSpace(
    cores=(2, 4, 6), cpu_mhz=(100, 200, 300, 400, 500), gpu_mhz=(100, 200, 300, 400, 500, 600, 700),
    mem_mhz=(1000, 2000, 3000), name="hand",
)

# A small space for the conformance suite: 3 x 3 x 3 x 2 = 54 modes.
SMALL_SPACE = PowerModeSpace(cores=(2, 4, 6), cpu_mhz=(200, 400, 600), gpu_mhz=(200, 500, 800),
                             mem_mhz=(1000, 3000), name="small")


class LinearWorkload:
    """Time falls and power rises linearly along every knob, so every slope ratio is a known constant.

    time  = 1 - 0.01 cores - 0.00015 cpu - 0.0005 gpu - 0.0001 mem      (s)
    power = 5 + 1.0 cores + 0.008 cpu + 0.01 gpu + 0.004 mem            (W)
    rho (time saved per watt): gpu 0.05 > mem 0.025 > cpu 0.01875 > cores 0.01.
    """

    fingerprint = "linear-v1"

    def __init__(self, train_scale: float = 1.0) -> None:
        self.train_scale = train_scale  # multiplies the training time (concurrent tests want short minibatches)
        self.calls: collections.Counter = collections.Counter()

    @staticmethod
    def time_s(m) -> float:
        return 1.0 - 0.01 * m.cores - 0.00015 * m.cpu_mhz - 0.0005 * m.gpu_mhz - 0.0001 * m.mem_mhz

    @staticmethod
    def power_w(m) -> float:
        return 5.0 + 1.0 * m.cores + 0.008 * m.cpu_mhz + 0.01 * m.gpu_mhz + 0.004 * m.mem_mhz

    def train(self, mode) -> Measurement:
        self.calls[("train", mode, None)] += 1
        return Measurement(self.train_scale * self.time_s(mode), self.power_w(mode), "simulated")

    def infer(self, mode, batch_size) -> Measurement:
        self.calls[("infer", mode, batch_size)] += 1
        t = (0.02 + 0.002 * batch_size) * self.time_s(mode) / 0.5
        p = self.power_w(mode) + 0.05 * batch_size
        return Measurement(t, p, "simulated")


class SaturatingWorkload:
    """Time saturates with GPU frequency (Fig. 7a), power rises along every knob (Fig. 7b);
    inference time grows sub-linearly with the batch size. Training draws less power than inference
    at large batches, so the dominant workload of a concurrent pair changes with the batch size."""

    fingerprint = "saturating-v1"

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.calls: collections.Counter = collections.Counter()

    def _t(self, m) -> float:
        return self.scale * (0.01 + 4.0 / m.gpu_mhz + 1.0 / m.cpu_mhz + 20.0 / m.mem_mhz + 0.02 / m.cores)

    def _p(self, m) -> float:
        return 6.0 + 0.6 * m.cores + 0.006 * m.cpu_mhz + 0.02 * m.gpu_mhz + 0.003 * m.mem_mhz

    def train(self, mode) -> Measurement:
        self.calls[("train", mode, None)] += 1
        return Measurement(3.0 * self._t(mode), self._p(mode), "simulated")

    def infer(self, mode, batch_size) -> Measurement:
        self.calls[("infer", mode, batch_size)] += 1
        return Measurement(self._t(mode) * batch_size ** 0.6, self._p(mode) * (0.8 + 0.01 * batch_size), "simulated")
