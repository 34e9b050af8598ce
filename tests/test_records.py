"""One record of a window (issue 37): ``Measurement`` for a step, a profiling window, a run of one mode or an epoch;
merging windows, a mode's settled figure, what ran over a budget."""

from __future__ import annotations

import math

import pytest

from lightning_edge.modes import PowerMode
from lightning_edge.records import Measurement, merge, over_budget, settled

MODE = "4c/1036.8/522.75/2133"


def test_a_window_knows_its_mode_clock_host_time_and_readings():
    m = Measurement(0.011, 19.0, "simulated", mode=MODE, t0_ns=1_000_000, t1_ns=101_000_000, samples=16)
    assert isinstance(m.mode, PowerMode) and str(m.mode) == MODE  # a mode, never a string in one place and not another
    assert m.host_time_s == pytest.approx(0.1) and m.time_s == 0.011  # the board's time, this machine's apart
    assert m.energy_j == pytest.approx(0.209) and m.simulated and m.settled and m.steps == 1
    assert not m.partial and m.trusted  # one flag: partial is not trusted
    bad = Measurement(0.01, 5.0, "measured", trusted=False)
    assert bad.partial and bad.shown_label == "measured (partial)"
    assert Measurement(1.0, math.nan, "estimated", trusted=False).shown_label == "estimated"  # no readings: an estimate
    assert Measurement(1.0, 1.0, mode="MODE_30W").mode == "MODE_30W"  # a controller's own name kept as given
    with pytest.raises(ValueError, match="time_s"):
        Measurement(0.0, 1.0)
    with pytest.raises(ValueError, match="nan, trusted=False"):
        Measurement(1.0, math.nan)
    with pytest.raises(ValueError, match="steps"):
        Measurement(1.0, 1.0, steps=0)
    with pytest.raises(AttributeError):
        m.power_w = 1.0  # immutable: a record is never patched


def test_merge_adds_windows_and_extrapolates_one_without_power():
    a = Measurement(1.0, 10.0, "measured", mode=MODE, t0_ns=0, t1_ns=10**9, samples=8)
    b = Measurement(3.0, 20.0, "measured", mode=MODE, t0_ns=10**9, t1_ns=4 * 10**9, samples=8)
    m = merge([a, b])
    assert m.time_s == 4.0 and m.energy_j == pytest.approx(70.0) and m.power_w == pytest.approx(17.5)
    assert (m.steps, m.samples, m.t0_ns, m.t1_ns, str(m.mode)) == (2, 16, 0, 4 * 10**9, MODE)
    assert m.trusted and m.time_per_step_s == 2.0 and m.energy_per_step_j == pytest.approx(35.0)
    c = Measurement(2.0, math.nan, "estimated", trusted=False, mode="12c/2201.6/1300.5/3199")
    n = merge([a, c])
    assert n.mode is None  # two modes: no one mode
    assert n.power_w == pytest.approx(10.0) and n.energy_j == pytest.approx(30.0) and not n.trusted  # extrapolated


def test_a_modes_figure_leaves_out_the_steps_whose_power_still_settled():
    moving = [Measurement(0.01, 30.0 - i, "simulated", mode=MODE, settled=False) for i in range(5)]
    steady = [Measurement(0.01, 20.0, "simulated", mode=MODE) for _ in range(5)]
    fig, ok = settled(moving + steady)
    assert ok and fig.steps == 5 and fig.power_w == pytest.approx(20.0)  # not a blend of two modes' levels
    fig, ok = settled(moving)
    assert not ok and fig.steps == 5  # nothing settled yet: all of them, and it says so
    assert not merge(moving + steady).settled


def test_over_budget_counts_blocks_of_steps_whose_mean_power_was_over():
    """A reading's noise averages out over a block of steps in one mode, a settling does not: steps of a mode at
    19.8 W whose readings scatter over 20 W are not over a 20 W budget, a settling from 26 W and a 21 W mode are."""
    rng = [0.0, 1.5, -1.5, 2.0, -2.0, 1.0, -1.0] * 6
    steady = [Measurement(0.01, 19.8 * (1 + 0.02 * z), mode=MODE) for z in rng]  # some readings over 20 W
    assert sum(m.power_w > 20.0 for m in steady) > 10
    settling = [Measurement(0.01, 26.0 - 0.3 * i, mode=MODE, settled=False) for i in range(20)]
    hot = [Measurement(0.01, 21.0, mode="12c/2201.6/1300.5/3199") for _ in range(5)]
    ob = over_budget(steady, 20.0)
    assert ob.steps == 0 and math.isnan(ob.worst_w) and "no minibatches over" in ob.describe()
    ob = over_budget(settling + steady + hot, 20.0, windows=1)
    assert (ob.steps, ob.of_steps, ob.windows) == (25, 67, 1)
    assert ob.time_s == pytest.approx(0.25) and ob.worst_w == pytest.approx(26.0 - 0.3 * 9.5)
    assert "25 of 67 minibatches (37.3 %) over the 20 W budget" in ob.describe() and ob.fraction == 25 / 67
    # a mode 1 % over reads within a power measurement's tolerance (2 %); 3 % over does not
    near = [Measurement(0.01, 20.2, mode=MODE) for _ in range(20)]
    assert over_budget(near, 20.0).steps == 0 and over_budget(near, 20.0, tolerance=0.0).steps == 20
    assert over_budget([m.scaled(power_w=20.6) for m in near], 20.0).steps == 20


def test_a_window_may_say_its_powers_standard_error_and_a_merge_does_not_make_one_up():
    m = Measurement(0.5, 20.0, "measured", power_rel_sem=0.002)
    assert m.power_rel_sem == 0.002 and m.scaled(power_w=21.0).power_rel_sem == 0.002
    assert Measurement(0.5, 20.0).power_rel_sem is None
    assert merge([m, Measurement(0.5, 22.0, power_rel_sem=0.003)]).power_rel_sem is None
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="power_rel_sem"):
            Measurement(0.5, 20.0, power_rel_sem=bad)


def test_a_standard_error_read_from_a_file_is_checked():
    """One check for a store's attribute and a checkpoint's field: a number that is not a standard error is unknown."""
    from lightning_edge.records import as_rel_sem

    assert as_rel_sem(0.002) == 0.002 and as_rel_sem(0) == 0.0
    assert [as_rel_sem(v) for v in ("0.1", -0.1, math.nan, math.inf, True, None, 10 ** 400)] == [None] * 7
