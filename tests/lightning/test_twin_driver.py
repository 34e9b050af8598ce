"""A simulated step does not move with this machine's load (issue 37): the twin's CPU row is this thread's CPU time
between steps (the least of the first gaps), not the wall time of the smallest of two early gaps, so a loop whose
thread is kept off the CPU between steps (by another process, here by a sleep) gets the same simulated steps, and
one gap of one-off work (an analysis, a logger's set-up) does not move it either."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from lightning_edge.lightning.session import EnergySession
from lightning_edge.lightning.twin_driver import HOST_GAPS

_SEEN: list = []  # each fit's mode, CPU row and step times: said when a check fails


def _fit(pause_s: float = 0.0, busy_gap: int | None = None, host_cpu_s: float | None = None) -> tuple[list, float]:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    s = EnergySession(m, "sim:orin-agx", every_n_steps=5, warmup_steps=2, host_cpu_s=host_cpu_s)
    try:
        for i in range(HOST_GAPS + 8):
            s.step_begin("train", (x, y))
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            s.step_end("train")
            time.sleep(pause_s)  # the thread off the CPU between steps: what another process's load does to it
            if busy_gap == i:
                t = time.thread_time()
                while time.thread_time() - t < 0.03:  # 30 ms of one-off CPU work in one gap
                    pass
            # the loop's own CPU work between steps: a few ms
            t = time.thread_time()
            while time.thread_time() - t < 0.002:
                pass
        s.flush(wait=True)
        host = s.device.twin.runs["train"].host
        _SEEN.append((s.device.mode(), host.cpu_s, host.host_mhz, [m.time_s for m in s.totals["train"]]))
        return list(s.totals["train"]), host.cpu_s
    finally:
        s.close()


def test_a_simulated_step_does_not_move_with_this_machines_load():
    alone, cpu_alone = _fit()
    loaded, cpu_loaded = _fit(pause_s=0.02)  # 20 ms off the CPU in every gap: 10x the loop's own work
    spike, cpu_spike = _fit(busy_gap=3)
    assert cpu_alone == pytest.approx(0.002, abs=0.0015)  # the loop's own work, not the analysis after step 0
    for cpu in (cpu_loaded, cpu_spike):
        assert cpu == pytest.approx(cpu_alone, abs=0.001)
    # the steps with the CPU row (after HOST_GAPS gaps): the same meter draws, the same model: within 5 %
    late = slice(HOST_GAPS + 1, None)
    t_alone = sum(m.time_s for m in alone[late])
    for run in (loaded, spike):
        assert sum(m.time_s for m in run[late]) == pytest.approx(t_alone, rel=0.05), _SEEN[-3:]


def test_the_cpu_row_may_be_stated():
    steps, cpu = _fit(host_cpu_s=0.004, pause_s=0.01)
    assert cpu == 0.004
    stated, _ = _fit(host_cpu_s=0.004)
    assert [m.time_s for m in steps] == pytest.approx([m.time_s for m in stated], rel=1e-12)  # from the first step
