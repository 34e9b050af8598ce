"""The step scheduler: auto every-N within the overhead budget it is handed."""

from __future__ import annotations

import pytest

from lightning_edge.lightning.budget import OverheadBudget
from lightning_edge.lightning.schedule import AUTO_START, StepScheduler


def test_auto_every_n_follows_the_measured_overhead():
    clock = [0]
    b = OverheadBudget(0.03, floor_s=0.0, clock_ns=lambda: clock[0])
    s = StepScheduler(budget=b)
    assert s.auto and s.every_n_steps == AUTO_START
    s.stage("train")
    for _ in range(5):
        s.plain_step("train", 100_000_000)  # 100 ms plain steps
    s.profiled_step("train", 5_000_000, calls=10)  # 5 ms inside the hooks: a profiled step costs 10 ms more
    assert b.spent_s("profiled") == pytest.approx(0.010)
    with b.spend("attribution"):  # attribution + logging: 5 ms
        clock[0] += 5_000_000
        b.attributed()
    assert b.costs.profiled_s_per_call == pytest.approx(0.0015)  # (10 + 5 ms) / 10 module calls
    s.stages["train"].batches = 6
    assert s.should_profile("train", calls=10) is False  # N adapted first: 15 ms / (3 % of 100 ms) = 5
    assert s.every_n_steps == 5
    b.costs.profiled_s_per_call = 1e-5  # cheaper: N shrinks at once
    b.learnt += 1
    s.should_profile("train", calls=10)
    assert s.every_n_steps == 1
    b.costs.profiled_s_per_call = 1e-2  # 100 % per profiled step: N grows at most 2x per update
    b.learnt += 1
    s.should_profile("train", calls=10)
    assert s.every_n_steps == 2


@pytest.mark.parametrize("kw, match", [(dict(every_n_steps=0), "every_n_steps"), (dict(warmup_steps=0), "warmup")])
def test_bad_arguments_say_what_was_expected(kw, match):
    with pytest.raises(ValueError, match=match):
        StepScheduler(**kw)
    with pytest.raises(ValueError, match="fraction"):
        OverheadBudget(3)
