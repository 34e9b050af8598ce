"""Arrival processes, trace files and the rate estimator."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_edge.serving.arrivals import (
    SYNTHETIC_TRACE_PATH,
    ConstantArrivals,
    PoissonArrivals,
    RateEstimator,
    TraceArrivals,
    TraceFormatError,
    load_trace,
    make_synthetic_segments,
    synthetic_trace,
)


def chunked(process, edges):
    s = process.stream()
    return np.concatenate([s.until(e) for e in edges])


def test_constant_rate_is_exact_and_chunking_does_not_change_it():
    a = ConstantArrivals(40.0)
    t = a.times(10.0)
    assert t.size == 400
    assert t[0] == 0.0
    np.testing.assert_allclose(np.diff(t), 1 / 40.0)
    np.testing.assert_array_equal(chunked(a, [0.013, 2.5, 2.5, 7.0, 10.0]), t)


def test_poisson_is_seeded_and_has_the_mean_rate():
    t1 = PoissonArrivals(80.0, seed=3).times(100.0)
    t2 = PoissonArrivals(80.0, seed=3).times(100.0)
    t3 = PoissonArrivals(80.0, seed=4).times(100.0)
    np.testing.assert_array_equal(t1, t2)
    assert not np.array_equal(t1[:50], t3[:50])
    assert abs(t1.size / 100.0 - 80.0) < 80.0 * 0.05  # 8000 arrivals: sd ~1.1 %
    gaps = np.diff(t1)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05  # exponential: cv = 1
    np.testing.assert_array_equal(chunked(PoissonArrivals(80.0, seed=3), [1.0, 33.3, 60.0, 100.0]), t1)


def test_bad_rates_are_refused():
    for bad in (0, -1, float("nan"), "fast"):
        with pytest.raises(ValueError, match="requests per second"):
            ConstantArrivals(bad)
        with pytest.raises(ValueError, match="requests per second"):
            PoissonArrivals(bad)


def test_trace_segments_replay_their_rates():
    tr = TraceArrivals([(0.0, 10.0), (5.0, 50.0)], end_s=8.0)
    t = tr.times(100.0)
    assert np.count_nonzero(t < 5.0) == 50
    assert np.count_nonzero(t >= 5.0) == 150
    assert t.max() < 8.0
    assert tr.rate_at(1.0) == 10.0 and tr.rate_at(6.0) == 50.0 and tr.rate_at(9.0) == 0.0
    tp = TraceArrivals([(0.0, 20.0), (50.0, 100.0)], end_s=100.0, poisson=True, seed=1).times(100.0)
    assert abs(np.count_nonzero(tp < 50) / 50 - 20) < 20 * 0.2
    assert abs(np.count_nonzero(tp >= 50) / 50 - 100) < 100 * 0.1


def test_trace_timestamps():
    tr = TraceArrivals(timestamps_s=[0.5, 0.7, 2.0])
    np.testing.assert_array_equal(tr.times(10.0), [0.5, 0.7, 2.0])
    with pytest.raises(ValueError, match="sorted"):
        TraceArrivals(timestamps_s=[1.0, 0.5])
    with pytest.raises(ValueError, match="either"):
        TraceArrivals()


def test_load_trace_formats(tmp_path):
    seg = tmp_path / "seg.csv"
    seg.write_text("# label: my-recording\ntime_s,rate_rps\n0,30\n60,90\n120,0\n")
    tr = load_trace(seg)
    assert tr.label == "my-recording"
    assert tr.segments() == [(0.0, 60.0, 30.0), (60.0, 120.0, 90.0)]
    ts = tmp_path / "ts.csv"
    ts.write_text("timestamp_s\n0.1\n0.2\n0.25\n")
    np.testing.assert_allclose(load_trace(ts).times(1.0), [0.1, 0.2, 0.25])


@pytest.mark.parametrize("text, match", [
    ("when,rate\n0,30\n", "unknown header 'when,rate'"),
    ("time_s,rate_rps\n0,30\n60,fast\n", r":3: not a number"),
    ("time_s,rate_rps\n0,30\n60\n", r":3: 1 columns, expected 2"),
    ("time_s,rate_rps\n60,30\n0,40\n", "strictly increasing"),
    ("time_s,rate_rps\n0,-5\n60,40\n", "rate must be > 0"),
    ("time_s,rate_rps\n", "no data rows"),
    ("# only a comment\n", "no header"),
    ("timestamp_s\n2\n1\n", "sorted"),
])
def test_load_trace_bad_files_say_what_was_expected(tmp_path, text, match):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(TraceFormatError, match=match):
        load_trace(p)


def test_load_trace_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="time_s,rate_rps"):
        load_trace(tmp_path / "nope.csv")


def test_bundled_synthetic_trace_is_labelled_and_shaped_like_section_7_4():
    tr = synthetic_trace()
    assert tr.label == "synthetic"
    assert "SYNTHETIC" in SYNTHETIC_TRACE_PATH.read_text().splitlines()[0]
    segs = tr.segments()
    assert len(segs) == 24 and tr.duration_s == 7200.0
    assert all(b - a == 300.0 for a, b, _ in segs)
    rates = np.array([r for *_, r in segs])
    assert rates.min() == 30.0 and rates.max() == 115.0
    assert [(a, r) for a, _, r in segs] == make_synthetic_segments()  # the file is the generator's output
    t = tr.times(600.0)
    assert t.size == int(round(300 * rates[0])) + int(round(300 * rates[1]))


def test_rate_estimator_follows_a_change():
    est = RateEstimator(window_s=10.0)
    assert est.rate_rps(0.0) is None
    tr = TraceArrivals([(0.0, 20.0), (30.0, 80.0)], end_s=60.0)
    t = tr.times(60.0)
    est.observe(t[t <= 29.0])
    assert est.rate_rps(29.0) == pytest.approx(20.0, rel=0.06)
    est.observe(t[(t > 29.0) & (t <= 45.0)])
    assert est.rate_rps(45.0) == pytest.approx(80.0, rel=0.03)
    with pytest.raises(ValueError, match="window_s"):
        RateEstimator(window_s=0)
