"""ReplaySensor (CSV / npz / tegrastats) and the tegrastats parser, on the fixtures in tests/fakes/traces."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from lightning_edge.devices.sensors import ReplaySensor, parse_tegrastats
from lightning_edge.devices.sensors.tegrastats import parse_line

TRACES = Path(__file__).resolve().parents[2] / "fakes" / "traces"

JP5_LINE = (
    "11-21-2026 22:40:03 RAM 4711/30536MB (lfb 5961x4MB) SWAP 0/15268MB (cached 0MB) CPU [2%@1728,1%@1728,"
    "0%@1728,0%@1728,0%@2201,0%@2201,0%@2201,0%@2201,off,off,off,off] EMC_FREQ 0%@2133 GR3D_FREQ 99%@[1300,1300] "
    "VIC_FREQ 729 APE 174 CV0@-256C CPU@47.937C Tboard@36C SOC2@44.625C Tdiode@37.75C SOC0@44.343C CV1@-256C "
    "GPU@-256C tj@47.937C SOC1@44.406C CV2@-256C VDD_GPU_SOC 21012mW/10686mW VDD_CPU_CV 2110mW/1426mW "
    "VIN_SYS_5V0 4610mW/4067mW VDDQ_VDD2_1V8AO 1950mW/1215mW"
)


class Clock:
    def __init__(self) -> None:
        self.t = 7 * 10**12

    def __call__(self) -> int:
        return self.t


def test_parse_a_jetpack5_line():
    stamp, rails = parse_line(JP5_LINE)
    assert stamp is not None and stamp.second == 3
    # the instantaneous value (before the "/"), in W; RAM/SWAP/EMC_FREQ/temperatures are not rails
    assert rails == {"VDD_GPU_SOC": 21.012, "VDD_CPU_CV": 2.11, "VIN_SYS_5V0": 4.61, "VDDQ_VDD2_1V8AO": 1.95}


def test_parse_orin_agx_log_total_is_the_documented_sum():
    tr = parse_tegrastats((TRACES / "tegrastats_orin_agx_jp5.log").read_text())
    assert list(tr.t_s) == [0, 1, 2, 3, 4, 5]
    assert tr.power_w[3] == pytest.approx(21.012 + 2.11 + 4.61 + 1.95)
    assert "orin-agx" in tr.total_desc


def test_parse_jetpack4_nano_needs_the_interval():
    text = (TRACES / "tegrastats_nano_jp4.log").read_text()
    with pytest.raises(ValueError, match="interval_s"):
        parse_tegrastats(text)
    tr = parse_tegrastats(text, interval_s=0.5)
    assert list(tr.t_s) == [0.0, 0.5, 1.0] and tr.power_w[1] == pytest.approx(6.12)  # POM_5V_IN is the total
    assert set(tr.rails_w) == {"POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"}


def test_repeated_one_second_stamps_need_the_interval():
    lines = [JP5_LINE.replace("22:40:03", "22:40:03")] * 3
    with pytest.raises(ValueError, match="repeat"):
        parse_tegrastats("\n".join(lines))


def test_replay_plays_at_the_recorded_rate_and_holds_between_samples():
    clock = Clock()
    s = ReplaySensor([0.0, 0.1, 0.2], [1.0, 2.0, 3.0], {"X": [1.0, 2.0, 3.0]}, clock_ns=clock)
    assert s.update_period_s == pytest.approx(0.1)
    assert s.read().power_w == 1.0  # starts at the first read
    clock.t += 99_000_000
    assert s.read().power_w == 1.0
    clock.t += 2_000_000
    r = s.read()
    assert r.power_w == 2.0 and r.rails_w == {"X": 2.0} and r.t_ns == clock.t
    clock.t += 500_000_000
    assert s.read().power_w == 3.0 and s.finished  # past the end: holds the last value
    s.restart()
    assert s.read().power_w == 1.0 and not s.finished


def test_replay_loops():
    clock = Clock()
    s = ReplaySensor([0.0, 0.1], [1.0, 2.0], clock_ns=clock, loop=True)
    s.read()
    clock.t += 250_000_000  # 0.25 s into a 0.2 s loop -> 0.05 s -> first sample
    assert s.read().power_w == 1.0 and not s.finished


def test_replay_exact_energy_and_round_trips(tmp_path):
    s = ReplaySensor.from_csv(TRACES / "orin_agx_steps_200hz.csv")
    assert s.energy_j(0.0, 0.005) == pytest.approx(s.power_w[0] * 0.005)
    s.save_csv(tmp_path / "copy.csv", comment="round trip")
    back = ReplaySensor.from_csv(tmp_path / "copy.csv")
    assert back.rails == s.rails and np.allclose(back.power_w, s.power_w, atol=1e-3)
    np.savez(tmp_path / "t.npz", t_s=s.t_ns / 1e9, power_w=s.power_w, rails_w=s.rails_w, rails=np.array(s.rails))
    z = ReplaySensor.from_npz(tmp_path / "t.npz")
    assert z.rails == s.rails and z.energy_j(0, 2) == pytest.approx(s.energy_j(0, 2))
    tg = ReplaySensor.from_tegrastats(TRACES / "tegrastats_orin_agx_jp5.log")
    assert tg.update_period_s == pytest.approx(1.0) and len(tg.rails) == 4


def test_replay_rejects_bad_traces(tmp_path):
    with pytest.raises(ValueError, match="increasing"):
        ReplaySensor([0.0, 0.0, 1.0], [1, 2, 3])
    with pytest.raises(ValueError, match="at least 2"):
        ReplaySensor([0.0], [1.0])
    (tmp_path / "bad.csv").write_text("time,watts\n0,1\n")
    with pytest.raises(ValueError, match="t_s"):
        ReplaySensor.from_csv(tmp_path / "bad.csv")


def test_a_recording_is_checked_like_a_live_sensor():
    clock = Clock()
    s = ReplaySensor([0.0, 0.1], [5.0, -3.0], {"X": [5.0, -3.0]}, clock_ns=clock)
    r = s.read()
    assert r.ok and r.rails_w == {"X": 5.0}
    clock.t += 150_000_000
    r = s.read()
    assert math.isnan(r.power_w) and r.partial and r.rejected == ("X",) and s.rejected_count == 2


def test_a_recorded_total_that_includes_a_rejected_rail_is_not_believed():
    """A recording whose rail Y is negative had its recorded total (5 + -3 = 2 W) reported as a full, ok reading:
    the rail was rejected but the total that summed it was not."""
    s = ReplaySensor([0.0, 0.1], [2.0, 2.0], {"X": [5.0, 5.0], "Y": [-3.0, -3.0]}, clock_ns=Clock())
    r = s.read()
    assert r.rejected == ("Y",) and r.partial and not r.ok
    assert r.power_w == 5.0  # the rails that passed, labelled partial; never the total that summed a bad one


def test_an_absurd_recorded_value_is_rejected():
    """A corrupt trace (4.95e5 W, as 999 V x 999 A gave live) was replayed as measured power."""
    s = ReplaySensor([0.0, 0.1], [4.95e5, 4.95e5], clock_ns=Clock())
    r = s.read()
    assert not r.ok and math.isnan(r.power_w) and s.rejected_count == 1
    s = ReplaySensor([0.0, 0.1], [4.95e5, 4.95e5], {"X": [4.95e5, 4.95e5]}, clock_ns=Clock())
    r = s.read()
    assert r.rejected == ("X",) and not r.ok


def test_save_csv_never_writes_through_a_link(tmp_path):
    """A link at save_csv's path is refused with the path named; its target is untouched (issue 36: every file the
    tool writes is a new file renamed into place)."""
    s = ReplaySensor.from_csv(TRACES / "orin_agx_steps_200hz.csv")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "trace.csv").symlink_to(victim)
    with pytest.raises(OSError, match=r"trace\.csv is a symbolic link"):
        s.save_csv(tmp_path / "trace.csv")
    assert victim.read_text() == "precious"
