"""The step scheduler: auto every-N within the overhead target."""

from __future__ import annotations

from collections import deque

import pytest

from lightning_edge.lightning.schedule import AUTO_START, StepScheduler


def test_auto_every_n_follows_the_measured_overhead():
    s = StepScheduler()
    assert s.auto and s.every_n_steps == AUTO_START
    s.stage("train")
    for _ in range(5):
        s.plain_step("train", 100_000_000)  # 100 ms plain steps
    s.profiled_step("train", 5_000_000)  # 5 ms inside the hooks: a profiled step costs 10 ms more
    assert s.excess_ns == 10_000_000
    s.add_work_ns(5_000_000)  # attribution + logging: 5 ms
    assert s.every_n_steps == 5  # 15 ms / (3 % of 100 ms) = 5
    s._prof_ns["train"] = deque([0])
    s._work_ns.clear()
    s.add_work_ns(1_000_000)
    assert s.every_n_steps == 1
    s._prof_ns["train"] = deque([100_000_000])  # 100 % per profiled step: N grows at most 2x per update
    s.add_work_ns(0)
    assert s.every_n_steps == 2


@pytest.mark.parametrize("kw, match", [(dict(every_n_steps=0), "every_n_steps"), (dict(warmup_steps=0), "warmup"),
                                       (dict(overhead_target=3), "fraction")])
def test_bad_arguments_say_what_was_expected(kw, match):
    with pytest.raises(ValueError, match=match):
        StepScheduler(**kw)
