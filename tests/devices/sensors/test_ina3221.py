"""Jetson INA3221 sysfs sensor on fake trees built from the catalogue: every catalogued module's rails (hwmon; Xavier
also JetPack 4 iio), and TX2 (JetPack 4 iio, not catalogued).

Every fault a board can show is a clear reason or a marked-missing rail, never an exception mid-run.
"""

from __future__ import annotations

import math

import pytest

from lightning_edge import catalog
from lightning_edge.devices.sensors import INA3221Sensor, SensorError, SensorUnavailableError
from lightning_edge.devices.sensors.ina3221 import BOARD_SUMS, board_total
from tests.fakes.ina3221 import (
    build_ina,
    build_orin_agx_ina,
    build_orin_nx_ina,
    build_tx2_jp4,
    build_xavier_nx_jp4,
    remove_tree,
    run_unprivileged,
    world_tmpdir,
)

AGX_RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")


class Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        self.t += 1_000_000
        return self.t


@pytest.fixture
def world():
    d = world_tmpdir()
    yield d
    remove_tree(d)


def test_orin_agx_rails_units_and_documented_sum(tmp_path):
    board = build_orin_agx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    assert s.layout == "hwmon" and s.board == "orin-agx"
    assert s.rails == AGX_RAILS  # the two NC channels of 1-0041 are skipped
    assert any("NC" in x for x in s.skipped)
    r = s.read()
    # VDD_GPU_SOC: 4976 mV x 803 mA = 3.995728 W
    assert r.rails_w["VDD_GPU_SOC"] == pytest.approx(4976 * 803 / 1e6)
    assert r.power_w == pytest.approx(sum(board.power_w(n) for n in AGX_RAILS))
    assert r.ok and not r.missing and r.energy_j is None
    assert "no VDD_IN" in s.notes and "VIN_SYS_5V0" in s.label
    # update_interval (ms) from the driver: 3 enabled channels on 1-0040 -> 6 ms (the slowest chip)
    assert s.update_period_s == pytest.approx(0.006)
    board.set_power_w("VDD_GPU_SOC", 12.0)
    assert s.read().rails_w["VDD_GPU_SOC"] == pytest.approx(12.0, rel=1e-3)


@pytest.mark.parametrize("index", [0, 3, 7])
def test_hwmon_index_is_globbed(tmp_path, index):
    build_orin_agx_ina(tmp_path, hwmon_index=(index, index + 1))
    assert INA3221Sensor(root=tmp_path).rails == AGX_RAILS


def test_hwmon_renumbered_mid_run_is_found_again(tmp_path):
    board = build_orin_agx_ina(tmp_path)
    clock = Clock()
    s = INA3221Sensor(root=tmp_path, clock_ns=clock)
    board.renumber("1-0041", 9)
    clock.t += 2_000_000_000  # relocation is attempted at most once a second
    r = s.read()
    assert r.ok and "VDDQ_VDD2_1V8AO" in r.rails_w


def test_orin_nx_total_is_vdd_in(tmp_path):
    board = build_orin_nx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    assert s.total_rails == ("VDD_IN",) and s.board == "input-rail"
    r = s.read()
    assert r.power_w == pytest.approx(board.power_w("VDD_IN"))
    assert set(r.rails_w) == {"VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"}
    # a sub-rail missing does not make the total partial, but is reported
    board.remove("VDD_SOC")
    r = s.read()
    assert not r.partial and r.missing == ("VDD_SOC",) and math.isfinite(r.power_w)
    # the input rail missing: no total at all this time
    board.remove("VDD_IN")
    r = s.read()
    assert r.partial and math.isnan(r.power_w)


def test_jetpack4_iio_xavier_nx(tmp_path):
    board = build_xavier_nx_jp4(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    assert s.layout == "iio" and s.rails == ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC")
    r = s.read()
    # in_power0_input is mW: 5064 mV x 1176 mA -> 5955 mW
    assert r.rails_w["VDD_IN"] == pytest.approx(5.955)
    assert r.power_w == pytest.approx(board.power_w("VDD_IN"))


def test_jetpack4_iio_tx2_two_chips(tmp_path):
    build_tx2_jp4(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    assert len(s.rails) == 6 and s.total_rails == ("VDD_IN",)
    assert s.read().rails_w["VDD_IN"] == pytest.approx(round(19072 * 104 / 1000) / 1e3)


def test_rail_vanishes_mid_run_total_partial_no_exception(tmp_path):
    board = build_orin_agx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    board.remove("VIN_SYS_5V0")
    r = s.read()
    assert r.partial and r.missing == ("VIN_SYS_5V0",) and not r.ok
    assert r.power_w == pytest.approx(sum(board.power_w(n) for n in AGX_RAILS if n != "VIN_SYS_5V0"))
    board.restore("VIN_SYS_5V0")
    assert s.read().ok


@pytest.mark.parametrize("text", ["garbage\n", "", "12.5.3"])
def test_garbage_values_mark_the_rail_missing(tmp_path, text):
    board = build_orin_agx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    board.garbage("VDD_CPU_CV", text)
    r = s.read()
    assert r.missing == ("VDD_CPU_CV",) and r.partial and "VDD_CPU_CV" not in r.rails_w


@pytest.mark.parametrize("text", ["99999999999\n", "-5000\n"])
def test_implausible_numbers_are_rejected_and_counted(tmp_path, text):
    board = build_orin_agx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    board.garbage("VDD_CPU_CV", text)
    r = s.read()
    assert r.rejected == ("VDD_CPU_CV",) and not r.missing and r.partial and "VDD_CPU_CV" not in r.rails_w
    assert s.rejected_count == 1 and "VDD_CPU_CV" in s.last_rejection
    assert 0 < r.power_w < sum(board.power_w(n) for n in board.rails)  # the other three rails, flagged partial


def test_rail_bounds_come_from_the_boards_own_limits(tmp_path):
    build_orin_agx_ina(tmp_path / "agx")
    b = INA3221Sensor(root=tmp_path / "agx").bounds["VDD_GPU_SOC"]
    assert b.max_a == pytest.approx(0.16384 / 0.005) and b.max_v == 26.0 and "5 mOhm shunt" in b.source
    build_xavier_nx_jp4(tmp_path / "xnx")
    b = INA3221Sensor(root=tmp_path / "xnx").bounds["VDD_IN"]
    assert b.max_a == pytest.approx(4.0) and "critical-current limit" in b.source


def test_garbage_at_probe_is_not_fatal(tmp_path):
    board = build_orin_agx_ina(tmp_path)
    board.garbage("VDD_CPU_CV")
    s = INA3221Sensor(root=tmp_path)
    assert "VDD_CPU_CV" in s.rails and s.read().missing == ("VDD_CPU_CV",)


def test_everything_gone_raises_sensor_error(tmp_path):
    board = build_orin_nx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    for name in list(board.rails):
        board.remove(name)
    with pytest.raises(SensorError, match="no INA3221 rail could be read"):
        s.read()


def test_not_a_jetson(tmp_path):
    reason = INA3221Sensor.why_unavailable(root=tmp_path)
    assert "no INA3221 found" in reason and "not a Jetson" in reason
    with pytest.raises(SensorUnavailableError) as exc:
        INA3221Sensor(root=tmp_path)
    assert exc.value.reasons["jetson"] == reason


def test_only_nc_channels(tmp_path):
    from tests.fakes.ina3221 import _build_hwmon

    _build_hwmon(tmp_path, {"1-0041": [None, None, None]}, None)
    assert "no connected, readable rail" in INA3221Sensor.why_unavailable(root=tmp_path)


def test_permission_denied_at_probe_says_how_to_fix(world):
    board = build_orin_agx_ina(world)
    board.deny("VDD_GPU_SOC")
    reason = run_unprivileged(INA3221Sensor.why_unavailable, world)
    assert reason and "permission denied" in reason
    assert "udev" in reason and "chmod a+r" in reason


def test_permission_denied_on_labels(world):
    board = build_xavier_nx_jp4(world)
    board.deny_labels()
    reason = run_unprivileged(INA3221Sensor.why_unavailable, world)
    assert reason and "permission denied" in reason and "rail_name_0" in reason


def test_permission_denied_mid_run_marks_missing(world):
    board = build_orin_agx_ina(world)
    s = INA3221Sensor(root=world)
    board.deny("VDD_CPU_CV")
    r = run_unprivileged(s.read)
    assert r.partial and r.missing == ("VDD_CPU_CV",)


def test_board_total_rules():
    assert board_total(["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"])[0] == ("POM_5V_IN",)
    assert board_total(["GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"])[1] == "xavier-agx"
    parts, board, desc = board_total(["A", "B"])
    assert parts == ("A", "B") and board == "unknown" and "double counted" in desc


def test_found_through_sys_class_hwmon_only(tmp_path):
    """Some kernels show the chip only under /sys/class/hwmon (name == ina3221)."""
    import shutil

    board = build_orin_nx_ina(tmp_path, hwmon_index=4)
    real = tmp_path / "sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040"
    real.parent.mkdir(parents=True)
    shutil.move(str(tmp_path / "sys/bus/i2c/drivers/ina3221/1-0040"), real)
    (tmp_path / "sys/class/hwmon/hwmon4").unlink()
    (tmp_path / "sys/class/hwmon/hwmon4").symlink_to(real / "hwmon/hwmon4")
    s = INA3221Sensor(root=tmp_path)
    assert s.rails == ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC")
    assert s.read().power_w == pytest.approx(board.power_w("VDD_IN"))


def test_update_period_without_update_interval_uses_documented_default(tmp_path):
    board = build_orin_nx_ina(tmp_path)
    (board.dirs["1-0040"] / "update_interval").unlink()
    (board.dirs["1-0040"] / "samples").write_text("4\n")
    # 3 channels x 4 samples x (1.1 ms bus + 1.1 ms shunt) = 26.4 ms
    assert INA3221Sensor(root=tmp_path).update_period_s == pytest.approx(0.0264)
    assert INA3221Sensor(root=tmp_path, update_period_s=0.002).update_period_s == 0.002


# ---------------------------------------------------------------- board-level plausibility caps (issue 25)
def test_a_reading_above_the_modules_rating_is_rejected(tmp_path):
    """Issue 25: a current x1000 passed as 166 W measured on a board whose module is rated 40 W at most (Orin NX
    16GB, JetPack 6.2 "Super"): under the INA3221's own full scale, far above the module's cap."""
    board = build_orin_nx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    board.set("VDD_IN", ma=32_000)  # 32 mA x 1000: 5.048 V x 32 A = 161.5 W, within the chip's 32.768 A full scale
    r = s.read()
    assert r.rejected == ("VDD_IN",) and math.isnan(r.power_w) and r.partial and "VDD_IN" not in r.rails_w
    assert s.module == "orin-nx-16gb" and s.module_cap_w == pytest.approx(40.0 * 1.5)
    assert s.rejected_count == 1 and "VDD_IN" in s.last_rejection and "orin-nx-16gb" in s.last_rejection
    board.set("VDD_IN", ma=1446)
    assert s.read().ok  # believed again once plausible


def test_a_cpu_or_soc_rail_cannot_draw_the_whole_module_input(tmp_path):
    board = build_orin_nx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    board.set_power_w("VDD_SOC", 40.0)  # under the module's 60 W cap, above what a SOC rail can draw
    r = s.read()
    assert r.rejected == ("VDD_SOC",) and r.ok  # a sub-rail: the total (VDD_IN) is still measured
    assert "VDD_SOC" in s.last_rejection
    board.set_power_w("VDD_SOC", 1.4)
    board.set_power_w("VDD_IN", 40.0)  # the input rail may draw the module's rated maximum
    board.set_power_w("VDD_CPU_GPU_CV", 28.0)  # and the GPU's rail most of it
    r = s.read()
    assert r.ok and not r.rejected and r.power_w == pytest.approx(40.0, rel=1e-3)


def test_a_board_sum_above_the_modules_cap_is_not_believed(tmp_path):
    """Orin AGX (no VDD_IN: the total is the sum of four rails): each rail within its role's limit, the sum above the
    module's cap (60 W rated, x1.5): no rail of the total is believed; a real 60 W load is."""
    board = build_orin_agx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    for rail, w in (("VDD_GPU_SOC", 40.4), ("VDD_CPU_CV", 12.0), ("VIN_SYS_5V0", 6.0), ("VDDQ_VDD2_1V8AO", 2.0)):
        board.set_power_w(rail, w)  # MAXN under a GPU stress (VDD_GPU_SOC 40.4 W, NVIDIA forum 323456)
    r = s.read()
    assert r.ok and not r.rejected and r.power_w == pytest.approx(60.4, rel=1e-3)
    board.set_power_w("VDD_GPU_SOC", 60.0)
    board.set_power_w("VDD_CPU_CV", 40.0)
    r = s.read()
    assert set(r.rejected) == set(AGX_RAILS) and math.isnan(r.power_w) and r.partial and not r.rails_w
    assert "sum" in s.last_rejection
    assert s.module == "orin-agx" and s.module_cap_w == pytest.approx(90.0)


def test_an_unnamed_module_is_capped_by_the_largest_rating_of_the_modules_with_its_rails(tmp_path):
    """No device tree: any module carrying these rails could be under it (Orin NX / Nano, Xavier NX: the largest
    rating is the Orin NX's 40 W), not any module of the catalogue (a Thor is rated 130 W)."""
    board = build_orin_nx_ina(tmp_path, module=None)
    s = INA3221Sensor(root=tmp_path)
    board.set_power_w("VDD_IN", 50.0)
    assert s.read().ok
    board.set("VDD_IN", ma=32_000)  # 161.5 W
    assert s.read().rejected == ("VDD_IN",)
    assert s.module is None and s.module_cap_w == pytest.approx(40.0 * 1.5)
    assert "orin-nx-16gb" in s.notes and "rails" in s.notes


def test_an_unnamed_module_with_rails_no_module_has_is_capped_by_the_largest_rating(tmp_path):
    from tests.fakes.ina3221 import _build_hwmon

    _build_hwmon(tmp_path, {"1-0040": [("VDD_X", 5000, 1000), None, None]}, None)
    s = INA3221Sensor(root=tmp_path)
    from lightning_edge import catalog

    assert s.module is None and s.module_cap_w == pytest.approx(max(catalog.MODULE_MAX_POWER_W.values()) * 1.5)


def test_module_ratings_come_from_the_catalogue(tmp_path):
    from lightning_edge import catalog

    assert catalog.MODULE_MAX_POWER_W["orin-agx"] == 60.0 and catalog.MODULE_MAX_POWER_W["xavier-agx"] == 30.0
    assert catalog.BOARDS["orin-nano-8gb"].max_power_w == 25.0
    build_xavier_nx_jp4(tmp_path)
    assert catalog.detect_module(tmp_path) == "xavier-nx"
    assert INA3221Sensor(root=tmp_path).module_cap_w == pytest.approx(20.0 * 1.5)


# ---------------------------------------------------------------- rail identity (issue 25)
@pytest.mark.parametrize("builder", [build_orin_agx_ina, build_xavier_nx_jp4], ids=["hwmon", "iio"])
def test_swapped_rail_labels_are_refused_not_silently_swapped(tmp_path, builder):
    """Issue 25: labels swapped mid-run silently swapped per-rail values. The sensor re-reads each channel's label
    on every read; a channel whose label changed since it was opened is refused (rejected, with the reason)."""
    board = builder(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    a, b = s.rails[1], s.rails[2]
    board.set_power_w(a, 2.0)
    board.set_power_w(b, 3.0)
    r = s.read()
    assert r.rails_w[a] == pytest.approx(2.0, rel=1e-2) and r.rails_w[b] == pytest.approx(3.0, rel=1e-2)
    board.swap_labels(a, b)  # a's values are now on b's old channel
    r = s.read()
    assert set(r.rejected) == {a, b} and a not in r.rails_w and b not in r.rails_w
    assert r.partial == any(x in s.total_rails for x in (a, b))
    assert "label" in s.last_rejection and s.rejected_count == 2
    board.swap_labels(a, b)  # back as it was opened: believed again
    r = s.read()
    assert not r.rejected and r.rails_w[a] == pytest.approx(2.0, rel=1e-2)


def test_a_relabelled_input_rail_leaves_no_total(tmp_path):
    board = build_orin_nx_ina(tmp_path)
    s = INA3221Sensor(root=tmp_path)
    board.swap_labels("VDD_IN", "VDD_SOC")
    r = s.read()
    assert math.isnan(r.power_w) and r.partial and "VDD_IN" in r.rejected


# ---------------------------------------------------------------- every catalogued module (issue 29)
INPUT_KEYS = [k for k, b in catalog.BOARDS.items() if b.rails is not None and b.rails.input]
SUM_KEYS = [k for k, b in catalog.BOARDS.items() if b.rails is not None and b.rails.input is None and b.rails.total]
LAYOUTS = [(k, "hwmon") for k, b in catalog.BOARDS.items() if b.rails is not None] + [
    (k, "iio") for k, b in catalog.BOARDS.items() if b.soc == "t194"]  # JetPack 4: Xavier only


@pytest.mark.parametrize("key", INPUT_KEYS)
def test_every_module_with_an_input_rail_totals_it(tmp_path, key):
    board = build_ina(tmp_path, key)
    s = INA3221Sensor(root=tmp_path)
    assert s.rails == catalog.board_info(key).rails.names and s.total_rails == ("VDD_IN",)
    assert s.module == key and s.module_cap_w == pytest.approx(catalog.MODULE_MAX_POWER_W[key] * 1.5)
    assert s.read().power_w == pytest.approx(board.power_w("VDD_IN"))
    other = next(n for n in board.rails if n != "VDD_IN")
    board.remove(other)
    r = s.read()
    assert not r.partial and r.missing == (other,)
    board.remove("VDD_IN")
    assert math.isnan(s.read().power_w)


@pytest.mark.parametrize("key", SUM_KEYS)
def test_every_module_without_an_input_rail_sums_its_documented_rails(tmp_path, key):
    board = build_ina(tmp_path, key)
    s = INA3221Sensor(root=tmp_path)
    total = catalog.board_info(key).rails.total
    assert s.total_rails == total and s.board in BOARD_SUMS and BOARD_SUMS[s.board] == total
    assert s.module == key and s.module_cap_w == pytest.approx(catalog.MODULE_MAX_POWER_W[key] * 1.5)
    assert s.read().power_w == pytest.approx(sum(board.power_w(n) for n in total))
    board.remove(total[-1])
    r = s.read()
    assert r.partial and r.missing == (total[-1],)


def test_thors_rails_have_no_documented_total(tmp_path):
    """Thor (unconfirmed): its INA3221 has no input rail (VIN is on an INA238 of the carrier, which this sensor does not
    read), so the total is the sum of every rail, said to be unknown; its cap is the catalogue's 130 W rating."""
    build_ina(tmp_path, "thor")
    s = INA3221Sensor(root=tmp_path)
    assert s.board == "unknown" and "double counted" in s.total_desc
    assert s.module == "thor" and s.module_cap_w == pytest.approx(130.0 * 1.5)


@pytest.mark.parametrize("key, layout", LAYOUTS, ids=[f"{k}-{lay}" for k, lay in LAYOUTS])
def test_every_family_refuses_swapped_labels_and_marks_a_vanished_rail(tmp_path, key, layout):
    board = build_ina(tmp_path, key, layout)
    s = INA3221Sensor(root=tmp_path)
    assert s.layout == layout
    a, b = s.rails[0], s.rails[1]
    board.swap_labels(a, b)
    r = s.read()
    assert set(r.rejected) == {a, b} and a not in r.rails_w
    board.swap_labels(a, b)
    assert not s.read().rejected
    board.remove(s.rails[-1])
    assert s.read().missing == (s.rails[-1],)
