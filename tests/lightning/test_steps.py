"""The model's step loop (issue 37): a step begun once and ended once for every callback, in an order that does not
depend on the callbacks' order in the Trainer: the tuner switches the mode before the profiler's step starts, the
profiler measures the step once and the tuner trains its windows on that measurement."""

from __future__ import annotations

import pytest

from lightning_edge.lightning.steps import SESSION, TUNER, StepLoop, shared_loop
from tests.lightning.test_energy_profiler import _loader, _module, _trainer


class _Driver:
    def __init__(self, name, log, loop=None):
        self.name, self.log, self.loop = name, log, loop

    def begin(self, stage, trainer, batch):
        self.log.append(f"{self.name}.begin")

    def end(self, stage, trainer):
        self.log.append(f"{self.name}.end")
        if self.name == "session":
            self.loop.measured = "m"
        else:
            self.log.append(f"saw {self.loop.measured}")


def test_each_step_runs_every_driver_once_tuner_first_at_the_start_last_at_the_end():
    for first in (TUNER, SESSION):
        loop, log = StepLoop(), []
        drivers = {TUNER: _Driver("tuner", log, loop), SESSION: _Driver("session", log, loop)}
        loop.attach(drivers[first], first)  # whichever callback set up first
        loop.attach(drivers[SESSION if first == TUNER else TUNER], SESSION if first == TUNER else TUNER)
        for _ in range(2):  # both callbacks call begin and end, in either order
            loop.begin("train")
            loop.begin("train")
            loop.end("train")
            loop.end("train")
        assert log == ["tuner.begin", "session.begin", "session.end", "tuner.end", "saw m"] * 2
    loop.abort()
    loop.detach(drivers[TUNER])
    assert loop.session is drivers[SESSION] and loop.attached(TUNER) == []


@pytest.mark.parametrize("order", ["profiler first", "tuner first"])
def test_in_a_trainer_either_order_gives_one_record_per_step_in_the_tuners_mode(tmp_path, order):
    L = pytest.importorskip("lightning.pytorch")
    from lightning_edge.lightning.pytorch import EnergyProfiler, PowerModeTuner

    tuner = PowerModeTuner(20.0, device="sim:orin-agx", store=None, print_summary=False,
                           window=dict(settle_s=0, warmup_steps=1, min_steps=3, max_steps=5))
    prof = EnergyProfiler(device="sim:orin-agx", every_n_steps=7, print_summary=False, figure=False, trace=False,
                          log_dir=str(tmp_path / "energy"))
    cbs = [prof, tuner] if order == "profiler first" else [tuner, prof]
    model = _module(L)
    _trainer(L, tmp_path, cbs, max_steps=60, limit_val_batches=0).fit(model, _loader(n=8 * 60))
    t, s = tuner.tuner, prof.session
    assert len(t.profiles) >= 2  # the tuner switched modes several times
    totals = s.totals["train"]
    for r in t.records:  # the step the tuner saw is the profiler's, in the mode the tuner had set before it started
        m = totals[r.step + 1]
        assert r.m is m and str(m.mode) == str(r.mode)
    assert shared_loop(model).attached(TUNER) == [] and shared_loop(model).session is None  # detached at the end
