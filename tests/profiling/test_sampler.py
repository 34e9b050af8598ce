"""PowerSampler: energy over intervals from synthetic traces with known energy, edges, ring buffer, errors, thread.

Deterministic tests drive ``sample_once()`` with an injected clock; the threaded ones are short and assert
with tolerances (they must pass on a loaded 2-core machine).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from lightning_edge.devices.sensors import EmptySensor, PowerReading, PowerSensor, ReplaySensor, SensorError
from lightning_edge.profiling import PowerSampler, default_rate_hz

TRACES = Path(__file__).resolve().parents[1] / "fakes" / "traces"


class FakeClock:
    """Nanoseconds, advanced by hand."""

    def __init__(self, t_ns: int = 10**12) -> None:  # a perf_counter-like origin, far from 0
        self.t = t_ns

    def __call__(self) -> int:
        return self.t


class FunctionSensor(PowerSensor):
    """Power is a known function of the (fake) clock: P(t) = 20 + 8 sin(2 pi 3 t) + 4 sin(2 pi 11 t) W."""

    name = "function"
    rails = ("A", "B")
    update_period_s = 0.001

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.t_origin = clock.t

    def power(self, t_s):
        return 20 + 8 * np.sin(2 * np.pi * 3 * t_s) + 4 * np.sin(2 * np.pi * 11 * t_s)

    def energy(self, t0_s, t1_s):  # the analytic integral
        def prim(t):
            return 20 * t - 8 * np.cos(2 * np.pi * 3 * t) / (2 * np.pi * 3) - 4 * np.cos(2 * np.pi * 11 * t) / (
                2 * np.pi * 11
            )

        return prim(t1_s) - prim(t0_s)

    def read(self) -> PowerReading:
        t = (self.clock.t - self.t_origin) / 1e9
        p = float(self.power(t))
        return PowerReading(self.clock.t, p, {"A": 0.75 * p, "B": 0.25 * p})


def drive(sampler: PowerSampler, clock: FakeClock, duration_s: float, period_s: float, jitter: float = 0.0,
          seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    end = clock.t + int(duration_s * 1e9)
    while clock.t < end:
        sampler.sample_once()
        clock.t += int(period_s * 1e9 * (1 + jitter * rng.uniform(-1, 1)))


def test_smooth_trace_energy_recovered_over_random_intervals():
    clock = FakeClock()
    sensor = FunctionSensor(clock)
    sampler = PowerSampler(sensor, rate_hz=1000, clock_ns=clock)
    drive(sampler, clock, 2.0, 0.001, jitter=0.3)
    rng = np.random.default_rng(1)
    t0 = sensor.t_origin + rng.integers(10**7, 14 * 10**8, 300)
    length = np.exp(rng.uniform(np.log(1e5), np.log(5e8), 300)).astype(np.int64)  # 0.1 ms .. 500 ms
    t1 = t0 + length
    exact = sensor.energy((t0 - sensor.t_origin) / 1e9, (t1 - sensor.t_origin) / 1e9)
    got = sampler.energy_j_intervals(t0, t1)
    rel = np.abs(got - exact) / exact
    assert rel.max() < 0.05  # the acceptance bound
    assert np.median(rel) < 0.002  # and in fact much better
    one = sampler.energy_j(int(t0[0]), int(t1[0]))
    assert one == pytest.approx(got[0], rel=1e-9)
    # per rail: 3/4 and 1/4 of the total
    assert sampler.energy_j(int(t0[5]), int(t1[5]), rail="A") == pytest.approx(0.75 * got[5], rel=1e-9)
    by_rail = sampler.energy_j_by_rail(int(t0[7]), int(t1[7]))
    assert sum(by_rail.values()) == pytest.approx(got[7], rel=1e-9)
    mean = sampler.mean_power_w(int(t0[9]), int(t1[9]))
    assert mean == pytest.approx(got[9] / (length[9] / 1e9), rel=1e-9)


def test_interval_shorter_than_a_sample_period_gets_its_pro_rata_share():
    clock = FakeClock()
    sampler = PowerSampler(EmptyLike(10.0), rate_hz=100, clock_ns=clock)
    drive(sampler, clock, 0.5, 0.01)  # 100 Hz, constant 10 W
    t = clock.t - int(0.25e9)
    # 1 ms somewhere between two samples: 10 W x 1 ms = 10 mJ
    assert sampler.energy_j(t + 3_000_000, t + 4_000_000) == pytest.approx(0.010, rel=1e-9)
    # 10 us: 0.1 mJ
    assert sampler.energy_j(t, t + 10_000) == pytest.approx(1e-4, rel=1e-9)
    assert sampler.energy_j(t, t) == 0.0


def test_linear_ramp_between_two_samples_is_exact():
    clock = FakeClock(0)
    sampler = PowerSampler(EmptyLike(0.0), rate_hz=1, clock_ns=clock)  # two readings one period apart
    sampler.record(0, 0.0)
    sampler.record(1_000_000_000, 10.0)  # power ramps 0 -> 10 W over 1 s
    # over [0.2 s, 0.4 s]: mean power 3 W -> 0.6 J
    assert sampler.energy_j(200_000_000, 400_000_000) == pytest.approx(0.6)
    assert sampler.power_at(500_000_000) == pytest.approx(5.0)


class EmptyLike(PowerSensor):
    """A constant-power sensor, for the edge-arithmetic tests."""

    name = "const"
    update_period_s = 0.01

    def __init__(self, w: float) -> None:
        self.w = w

    def read(self) -> PowerReading:
        return PowerReading(0, self.w, {})


def test_recorded_trace_replayed_at_its_rate():
    """A recorded 200 Hz Orin AGX trace replayed against a fake clock, sampled at 1 kHz: the energy of every
    training step and of the whole busy second matches the trace's exact energy within 5 %."""
    clock = FakeClock()
    sensor = ReplaySensor.from_csv(TRACES / "orin_agx_steps_200hz.csv", clock_ns=clock)
    assert sensor.update_period_s == pytest.approx(0.005)
    assert sensor.rails == ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")
    sampler = PowerSampler(sensor, rate_hz=1000, clock_ns=clock)
    start = clock.t
    drive(sampler, clock, 2.0, 0.001, jitter=0.2, seed=3)
    for k in range(10):  # ten 100 ms training steps between 0.5 s and 1.5 s
        a, b = 0.5 + 0.1 * k, 0.6 + 0.1 * k
        got = sampler.energy_j(start + int(a * 1e9), start + int(b * 1e9))
        assert got == pytest.approx(sensor.energy_j(a, b), rel=0.05)
    got = sampler.energy_j(start + int(0.5e9), start + int(1.5e9))
    assert got == pytest.approx(sensor.energy_j(0.5, 1.5), rel=0.01)
    gpu = sampler.energy_j(start + int(0.5e9), start + int(1.5e9), rail="VDD_GPU_SOC")
    assert 10.0 < gpu < 25.0  # 14 W forward / 21 W backward for 1 s
    s = sampler.samples(start + int(0.5e9), start + int(0.6e9))
    assert s.rails_w.shape == (s.t_ns.size, 4) and np.all(np.diff(s.t_ns) > 0)
    assert np.allclose(s.rails_w.sum(axis=1), s.power_w, atol=0.01)


def test_ring_buffer_is_bounded_and_ordered_across_the_wrap():
    clock = FakeClock(0)
    sampler = PowerSampler(EmptyLike(5.0), rate_hz=100, capacity=16, clock_ns=clock)
    for i in range(100):
        sampler.record(i * 10_000_000, 5.0 + (i % 2))
    assert len(sampler) == 16 and sampler.overwritten == 84 and sampler.n_total == 100
    s = sampler.samples()
    assert s.t_ns[0] == 84 * 10_000_000 and np.all(np.diff(s.t_ns) == 10_000_000)
    # an interval straddling the physical wrap point is found and integrated (mean 5.5 W)
    assert sampler.energy_j(85 * 10_000_000, 99 * 10_000_000) == pytest.approx(5.5 * 0.14)
    assert math.isnan(sampler.energy_j(10 * 10_000_000, 90 * 10_000_000))  # evicted: nan, not a guess


def test_uncovered_intervals_are_nan_and_edges_within_hold_are_held():
    clock = FakeClock(0)
    sampler = PowerSampler(EmptyLike(5.0), rate_hz=100, clock_ns=clock)
    assert math.isnan(sampler.energy_j(0, 10))  # no samples yet
    for i in range(10):
        sampler.record(i * 10_000_000, 5.0)
    last = 9 * 10_000_000
    assert sampler.energy_j(last - 5_000_000, last + 5_000_000) == pytest.approx(0.05)  # within 20 ms hold
    assert math.isnan(sampler.energy_j(last, last + 500_000_000))
    with pytest.raises(ValueError):
        sampler.energy_j(10, 5)
    with pytest.raises(KeyError, match="no rail"):
        sampler.energy_j(0, 10, rail="VDD_IN")


def test_missing_total_samples_are_gaps_and_partial_is_reported():
    clock = FakeClock(0)
    sampler = PowerSampler(EmptyLike(5.0), rate_hz=100, clock_ns=clock)
    for i in range(11):
        p = math.nan if i == 5 else 10.0
        sampler.record(i * 10_000_000, p, partial=(i in (5, 6)))
    assert sampler.energy_j(0, 100_000_000) == pytest.approx(1.0)  # interpolated across the gap
    assert sampler.partial_fraction(0, 100_000_000) == pytest.approx(2 / 11)


def test_quality_of_an_interval_counts_partial_rejected_and_failed_reads():
    class Railed(EmptyLike):
        rails = ("A", "B")

    clock = FakeClock(0)
    sampler = PowerSampler(Railed(5.0), rate_hz=100, clock_ns=clock)
    for i in range(10):
        if i == 4:
            sampler.record_failure(i * 10_000_000)
            continue
        rejected = ("B",) if i in (6, 7) else ()
        missing = ("A",) if i == 8 else ()
        sampler.record(i * 10_000_000, 5.0, {"A": 2.0, "B": 3.0}, partial=bool(rejected or missing),
                       missing=missing, rejected=rejected)
    q = sampler.quality(0, 30_000_000)
    assert q.trusted and not q.is_partial and q.samples == 4 and q.describe() == ""
    q = sampler.quality(35_000_000, 45_000_000)
    assert q.failed == 1 and q.is_partial and not q.trusted and "1 read(s) failed" in q.describe()
    q = sampler.quality(55_000_000, 95_000_000)
    assert (q.samples, q.partial, q.rejected) == (4, 3, 2)
    assert q.missing_rails == ("A",) and q.rejected_rails == ("B",)
    assert "3 of 4 readings partial (A missing, B rejected)" in q.describe() and q.valid
    assert sampler.quality().failed == 1 and sampler.rejected == 2 and sampler.errors == 1


class StallingSensor(PowerSensor):
    """10 W on the sampler's clock; ``stall(s)`` makes the next read block that long before it returns (a stuck
    i2c bus that recovers): the clock moves on while the read waits, as it would for the sampler thread."""

    name = "stalling"
    update_period_s = 0.01

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.block_ns = 0

    def stall(self, seconds: float) -> None:
        self.block_ns = int(seconds * 1e9)

    def read(self) -> PowerReading:
        self.clock.t += self.block_ns  # the read hangs, then returns a plausible value
        self.block_ns = 0
        return PowerReading(self.clock.t, 10.0, {})


def stalled_sampler():
    """0.5 s at 100 Hz, a read that blocks 10 s, 0.5 s more. Returns (sampler, when the stall began)."""
    clock = FakeClock()
    sensor = StallingSensor(clock)
    sampler = PowerSampler(sensor, rate_hz=100, clock_ns=clock)
    drive(sampler, clock, 0.5, 0.01)
    t_stall = clock.t
    sensor.stall(10.0)
    sampler.sample_once()  # blocks 10 s, then returns
    clock.t += 10_000_000
    drive(sampler, clock, 0.5, 0.01)
    return sampler, t_stall


def test_a_step_inside_a_stalled_read_is_not_measured():
    """Issue 25: a read that hangs 10 s and then returns. A step inside the gap had `measured` energy with
    quality().trusted and zero samples (interpolated across the gap)."""
    from lightning_edge.profiling.attribution import attribute_step

    sampler, t_stall = stalled_sampler()
    # 2 s into the gap, and around its middle (where a reading stamped at the read's midpoint would land)
    for a in (t_stall + 2_000_000_000, t_stall + 4_950_000_000):
        b = a + 100_000_000
        assert math.isnan(sampler.energy_j(a, b))  # nothing to integrate: never a guess
        assert np.isnan(sampler.energy_j_intervals([a], [b])).all()
        assert math.isnan(sampler.power_at(a + 50_000_000))
        q = sampler.quality(a, b)
        assert q.samples == 0 and q.coverage == 0.0 and not q.trusted and q.is_partial and not q.valid
        assert "readings cover 0 %" in q.describe()
        step = attribute_step({"layer": {"self_ns": b - a, "segments": [(a, b)]}}, a, b, trace=sampler,
                              update_period_s=0.01)
        assert step.label == "estimated"
    assert sampler.errors == 1 and "10 s" in sampler.last_error  # the stalled read: its time is unknown
    assert sampler.max_gap_ns == 100_000_000  # MAX_GAP_FLOOR_S: four 10 ms periods are less


def test_a_step_overlapping_a_stalled_read_is_partial_with_its_coverage():
    from lightning_edge.profiling.attribution import attribute_step

    sampler, t_stall = stalled_sampler()
    # the last reading before the stall is at t_stall - 10 ms, held 20 ms (two periods): readings cover
    # [a, t_stall + 10 ms] = 60 ms of this 100 ms step, and only that part is integrated (a lower bound)
    a, b = t_stall - 50_000_000, t_stall + 50_000_000
    q = sampler.quality(a, b)
    assert q.samples == 5 and q.coverage == pytest.approx(0.6) and q.is_partial and not q.trusted
    assert "readings cover 60 %" in q.describe()
    assert sampler.energy_j(a, b) == pytest.approx(10.0 * 0.060)
    assert sampler.energy_j_intervals([a], [b])[0] == pytest.approx(10.0 * 0.060)
    step = attribute_step({"layer": {"self_ns": b - a, "segments": [(a, b)]}}, a, b, trace=sampler,
                          update_period_s=0.01)
    assert step.label == "measured (partial)"
    # the same across the whole stall: 0.25 s before + 0.25 s after are read, the 10 s between are not
    a, b = t_stall - 250_000_000, t_stall + 10_260_000_000
    q = sampler.quality(a, b)
    assert 0.04 < q.coverage < 0.06 and q.is_partial
    assert sampler.energy_j(a, b) == pytest.approx(10.0 * q.coverage * (b - a) / 1e9)
    # a step well before or after the stall is measured as ever
    a = t_stall - 300_000_000
    assert sampler.quality(a, a + 100_000_000).trusted
    assert sampler.energy_j(a, a + 100_000_000) == pytest.approx(1.0)
    a = t_stall + 10_200_000_000
    assert sampler.quality(a, a + 100_000_000).trusted and sampler.quality(a, a + 100_000_000).coverage == 1.0


def test_short_gaps_are_still_bridged():
    """Up to MAX_GAP_PERIODS periods (at least MAX_GAP_FLOOR_S) without a reading (a late wake-up, a failed read or
    two) are interpolated."""
    clock = FakeClock(0)
    sampler = PowerSampler(EmptyLike(5.0), rate_hz=100, clock_ns=clock)
    for t_ms in (0, 10, 20, 60, 70, 80):  # 40 ms between 20 and 60: bridged
        sampler.record(t_ms * 1_000_000, 10.0)
    assert sampler.energy_j(15_000_000, 65_000_000) == pytest.approx(0.5)
    assert sampler.quality(15_000_000, 65_000_000).coverage == 1.0


class CounterSensor(PowerSensor):
    """A cumulative energy counter whose power is 7 W, with a deliberately noisy power reading: the sampler
    must difference the counter, not integrate the noisy power."""

    name = "counter"
    is_energy_counter = True
    update_period_s = 0.001

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.t0 = clock.t
        self.rng = np.random.default_rng(0)

    def read(self) -> PowerReading:
        e = 7.0 * (self.clock.t - self.t0) / 1e9
        return PowerReading(self.clock.t, 7.0 + float(self.rng.normal(0, 3)), {}, energy_j=e)

    def read_energy_j(self) -> float:
        return 7.0 * (self.clock.t - self.t0) / 1e9


def test_energy_counter_is_differenced():
    clock = FakeClock()
    sampler = PowerSampler(CounterSensor(clock), rate_hz=1000, clock_ns=clock)
    drive(sampler, clock, 0.5, 0.001, jitter=0.3)
    a = clock.t - int(0.4e9)
    assert sampler.energy_j(a, a + 123_456_789) == pytest.approx(7.0 * 0.123456789, rel=1e-6)
    assert sampler.energy_j(a, a + 300_000) == pytest.approx(7.0 * 0.0003, rel=1e-6)  # sub-period


def test_an_energy_counter_is_not_bridged_across_a_gap_either():
    clock = FakeClock()
    sampler = PowerSampler(CounterSensor(clock), rate_hz=1000, clock_ns=clock)
    drive(sampler, clock, 0.2, 0.001)
    t_gap = clock.t
    clock.t += 1_000_000_000  # a second without a reading (the counter went on counting)
    drive(sampler, clock, 0.2, 0.001)
    a = t_gap + 300_000_000
    assert math.isnan(sampler.energy_j(a, a + 100_000_000))
    a, b = t_gap - 100_000_000, t_gap + 1_100_000_000
    q = sampler.quality(a, b)
    assert q.is_partial and q.coverage == pytest.approx((0.1 + 0.1 + 0.002 + 0.001) / 1.2, abs=2e-3)
    assert sampler.energy_j(a, b) == pytest.approx(7.0 * q.coverage * 1.2, rel=1e-2)  # only what was read


class FlakySensor(PowerSensor):
    name = "flaky"
    update_period_s = 0.001

    def __init__(self) -> None:
        self.n = 0

    def read(self) -> PowerReading:
        self.n += 1
        if self.n % 3 == 0:
            raise SensorError("i2c timeout")
        if self.n % 7 == 0:
            raise OSError(5, "Input/output error")
        return PowerReading(0, 3.0, {})


def test_read_errors_are_counted_and_skipped():
    clock = FakeClock()
    sampler = PowerSampler(FlakySensor(), rate_hz=1000, clock_ns=clock)
    drive(sampler, clock, 0.1, 0.001)
    assert sampler.errors > 30 and len(sampler) + sampler.errors == 100
    assert "i2c timeout" in sampler.last_error or "Input/output" in sampler.last_error
    assert sampler.mean_power_w(clock.t - 50_000_000, clock.t - 10_000_000) == pytest.approx(3.0)


class MalformedSensor(PowerSensor):
    """A buggy backend: returns something that is not a number."""

    name = "malformed"
    rails = ("A",)

    def read(self) -> PowerReading:
        return PowerReading(0, None, {"A": "x"})  # type: ignore[arg-type]


def test_malformed_readings_are_errors_not_a_dead_thread():
    sampler = PowerSampler(MalformedSensor(), rate_hz=500)
    with sampler:
        time.sleep(0.05)
        assert sampler.running
    assert sampler.errors > 0 and "TypeError" in sampler.last_error and len(sampler) == 0


def test_empty_sensor_starts_no_thread_and_says_why():
    sampler = PowerSampler(EmptySensor("no INA3221 found under /sys/bus/i2c/drivers"))
    with sampler:
        assert not sampler.running
    assert math.isnan(sampler.energy_j(0, 10**9)) and math.isnan(sampler.mean_power_w(0, 10**9))
    assert "no INA3221" in sampler.why_no_energy
    assert not sampler.energy_available


def test_default_rates():
    class Slow(EmptyLike):
        update_period_s = 1.0

    class SlowSysfs(Slow):
        is_sysfs = True

    class Fast(EmptyLike):
        update_period_s = 1e-5

    assert default_rate_hz(Slow(0)) == pytest.approx(1.0)  # jtop-like: as fast as it updates
    assert default_rate_hz(SlowSysfs(0)) == pytest.approx(100.0)  # sysfs: at least 100 Hz
    assert default_rate_hz(Fast(0)) == pytest.approx(1000.0)  # capped at 1 kHz
    assert PowerSampler(Slow(0)).capacity == 4096
    assert PowerSampler(Slow(0)).max_gap_ns == 4_000_000_000  # MAX_GAP_PERIODS of the sensor's 1 s updates


def test_threaded_sampling_real_clock():
    """Real thread, real clock, 200 Hz for ~0.3 s on a looping replayed trace (tolerant assertions)."""
    t = np.arange(0, 0.2, 0.005)
    sensor = ReplaySensor(t, np.full(t.size, 12.0), {"VDD_IN": np.full(t.size, 12.0)}, loop=True)
    sampler = PowerSampler(sensor, rate_hz=200)
    with sampler:
        assert sampler.running
        t0 = time.perf_counter_ns()
        time.sleep(0.3)
        t1 = time.perf_counter_ns()
        assert sampler.wait_for(t1, timeout_s=1.0)
    assert not sampler.running
    ov = sampler.overhead()
    assert ov.samples >= 15 and 10 < ov.achieved_rate_hz < 260
    assert 0 < ov.cpu_s < ov.wall_s and ov.cpu_percent < 100
    assert "% of one core" in str(ov)
    assert sampler.mean_power_w(t0 + 50_000_000, t1 - 50_000_000) == pytest.approx(12.0, rel=1e-6)
    assert not sampler.wait_for(time.perf_counter_ns() + 10**9, timeout_s=0.01)  # stopped: no wait
