"""The overhead budget (issue 26 item 5, issue 28's rule): one object, afford/charge, an injected clock, nothing
process-wide."""

from __future__ import annotations

import sys

import pytest

from lightning_edge.lightning.budget import IMPORT_S, OverheadBudget


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance(self, s: float) -> None:
        self.ns += int(s * 1e9)


def test_the_rule_is_five_percent_of_the_run_or_one_second_whichever_is_larger():
    clock = Clock()
    b = OverheadBudget(clock_ns=clock)
    assert (b.fraction, b.floor_s) == (0.05, 1.0)
    b.expect("train", 40)
    for _ in range(5):
        b.step("train", 0.010)  # 40 batches of 10 ms: a 0.4 s run
    assert b.run_s() == pytest.approx(0.4) and b.allowance_s() == 1.0
    b.expect("validate", 10)
    b.step("validate", 0.002)
    assert b.run_s() == pytest.approx(0.42)  # one estimate of the run: every stage it announced
    b.expect("train", 10_000)  # a 100 s run: 5 s
    assert b.allowance_s() == pytest.approx(0.05 * 100.02)
    # the run so far counts when it is longer than the estimate (a run of unknown length), less what was spent
    b.start()
    b.charge("analysis", 0.5)
    clock.advance(60.5)
    assert b.run_s() == pytest.approx(60.0) and b.allowance_s() == pytest.approx(3.0)
    assert b.left_s() == pytest.approx(2.5)
    assert b.afford(2.0, keep_s=0.5) and not b.afford(2.0, keep_s=0.6)


def test_spend_measures_a_block_once_and_nested_blocks_keep_their_own():
    clock = Clock()
    b = OverheadBudget(clock_ns=clock)
    with b.spend("steps"):
        clock.advance(0.001)
        with b.spend("analysis"):
            clock.advance(0.050)
        clock.advance(0.002)
    b.charge("profiled", 0.004)
    assert b.spent == pytest.approx({"steps": 0.003, "analysis": 0.050, "profiled": 0.004})
    assert b.spent_s() == pytest.approx(0.057) and b.spent_s("steps", "profiled") == pytest.approx(0.007)


def test_a_profiled_steps_cost_is_learnt_with_its_attribution_and_logging():
    clock = Clock()
    b = OverheadBudget(clock_ns=clock)
    assert b.need_s("profiled", 100) == pytest.approx(100 * 3e-4)  # the default until measured
    b.profiled_step(0.006, calls=100)  # 2 x the hooks' time
    with b.spend("steps"):
        with b.spend("attribution"):  # nothing attributed yet (the sensor has no sample after the step)
            clock.advance(0.001)
        assert b.learnt == 0
        with b.spend("attribution"):
            with b.spend("attribution"):  # the session's attribution inside the reporter's logging block
                clock.advance(0.003)
                b.attributed()
            assert b.learnt == 0  # learnt when the outermost block closes: its logging is part of the cost
            clock.advance(0.001)
    assert b.learnt == 1 and b.costs.profiled_s_per_call == pytest.approx((0.006 + 0.004) / 100)
    assert b.need_s("profiled", 50) == pytest.approx(0.005)


def test_what_a_budget_learns_is_its_own():
    """Six learned costs were module-level lists and dicts: one run's measurements moved every later run's
    decisions (and their advice) in the process. Each budget keeps its own."""
    a, b = OverheadBudget(), OverheadBudget()
    a.learn("analysis", 2.0, 10)
    a.learn("reports", 3.0)
    a.learn("figure", 9.0, 1)
    a.learn("trace", 1.0, 10)
    # the reports' reservation holds one layer bar chart (every run with a profiled step gets its chart)
    assert a.costs.analysis_s_per_call[True] == 0.2 and a.need_s("reports") == pytest.approx(3.0 + a.costs.bars_s)
    assert b.costs.analysis_s_per_call[True] == 1.2e-3 and b.need_s("reports") == pytest.approx(0.010 + 0.03)
    assert b.need_s("trace", 10) < 0.01
    assert b.costs is not a.costs and b.costs.analysis_s_per_call is not a.costs.analysis_s_per_call


def test_advice_is_computed_once_per_run():
    b = OverheadBudget()
    calls = []
    assert b.advise("k", lambda: calls.append(1) or "needs 116 batches") == "needs 116 batches"
    assert b.advise("k", lambda: calls.append(1) or "needs 264 batches") == "needs 116 batches"
    assert calls == [1]
    b.start()  # a new run is advised afresh
    assert b.advise("k", lambda: "needs 300 batches") == "needs 300 batches"


def test_the_analysis_warm_up_is_the_import_it_pays_and_only_while_the_process_lacks_it(monkeypatch):
    """The first analysis in a process was budgeted at 1.5 s of 'meta-kernel warm-up'. Measured: it is the import of
    torch._dynamo (torch wraps every __torch_dispatch__ in _disable_dynamo, which imports it on the first call), and
    `import lightning` has already paid it: in a Lightning process the first analysis of ResNet-18 takes 60 ms."""
    pytest.importorskip("lightning.pytorch")
    assert "torch._dynamo" in sys.modules  # Lightning imported it
    b = OverheadBudget()
    assert b.import_s("torch._dynamo") == 0.0
    assert b.need_s("analysis", 100) == pytest.approx(100 * 1.2e-3)  # no warm-up left to pay
    monkeypatch.delitem(sys.modules, "torch._dynamo")  # a plain loop that never imported it pays the import once
    assert b.need_s("analysis", 100) == pytest.approx(100 * 1.2e-3 + IMPORT_S["torch._dynamo"])


def test_a_budget_says_what_is_wrong_with_it():
    with pytest.raises(ValueError, match="fraction of the run"):
        OverheadBudget(5)
    with pytest.raises(ValueError, match="floor_s"):
        OverheadBudget(0.05, floor_s=-1)
    with pytest.raises(ValueError, match="unknown kind"):
        OverheadBudget().need_s("coffee")


def test_a_decision_inside_a_block_counts_what_the_block_has_spent_so_far():
    clock = Clock()
    b = OverheadBudget(clock_ns=clock)
    with b.spend("reports"):
        clock.advance(0.3)
        with b.spend("bars"):
            clock.advance(0.1)
        with b.spend("trace"):
            clock.advance(0.05)
            assert b.spent_s() == pytest.approx(0.45) and b.left_s() == pytest.approx(0.55)
    assert b.spent_s() == pytest.approx(0.45) and b.spent["reports"] == pytest.approx(0.3)
