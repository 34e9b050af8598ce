"""PowerMode and PowerModeSpace: labels, grids, snapping, neighbours, numpy, sub-grids, the catalogue."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from lightning_edge.catalog import board_info, detect_board, jetpack_major, named_space
from lightning_edge.devices import (
    FULCRUM_MIDPOINT,
    KNOBS,
    ORIN_AGX_MAXN,
    InvalidModeError,
    PowerMode,
    PowerModeSpace,
    fulcrum_space,
    orin_agx_space,
)


@pytest.fixture(scope="module")
def space() -> PowerModeSpace:
    return orin_agx_space()


# ---------------------------------------------------------------- PowerMode
def test_mode_prints_and_parses():
    assert str(ORIN_AGX_MAXN) == "12c/2201.6/1300.5/3199"
    assert ORIN_AGX_MAXN == PowerMode(12, 2201.6, 1300.5, 3199)
    # a bare parse keeps the numbers as given; a space snaps them (below)
    assert PowerMode.parse("12c/2201/1300/3199") == PowerMode(12, 2201, 1300, 3199)
    assert PowerMode.parse("12c/2201.6/1300.5/3199") == ORIN_AGX_MAXN
    assert PowerMode.parse(" 8 / 1344 MHz / 727mhz / 2133 ") == PowerMode(8, 1344, 727, 2133)
    # issue 16: the label is exact, so it parses back to the same mode (it used to print truncated MHz)
    assert PowerMode.parse(str(ORIN_AGX_MAXN)) == ORIN_AGX_MAXN
    assert ORIN_AGX_MAXN.describe() == "12 cores, CPU 2201.6 MHz, GPU 1300.5 MHz, memory 3199 MHz"


def test_mode_dict_roundtrip_and_short_names():
    d = ORIN_AGX_MAXN.to_dict()
    assert d == {"cores": 12, "cpu_mhz": 2201.6, "gpu_mhz": 1300.5, "mem_mhz": 3199.0}
    assert PowerMode.from_dict(d) == ORIN_AGX_MAXN
    assert PowerMode.from_dict({"cores": 8, "cpu": 1344, "gpu": 726.75, "emc": 2133}) == FULCRUM_MIDPOINT
    assert PowerMode.from_dict(json.loads(json.dumps(d))) == ORIN_AGX_MAXN
    with pytest.raises(InvalidModeError, match="lacks mem_mhz"):
        PowerMode.from_dict({"cores": 8, "cpu_mhz": 1, "gpu_mhz": 1})


def test_mode_is_immutable_hashable_and_canonical():
    m = PowerMode(8, 1344.0000001, 726.75, 2133)
    assert m == PowerMode(8.0, 1344, 726.7500004, 2133.0)  # canonical to 1 kHz
    assert hash(m) == hash(FULCRUM_MIDPOINT)
    assert len({m, FULCRUM_MIDPOINT, ORIN_AGX_MAXN}) == 2
    assert isinstance(m.cores, int)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.cores = 4  # type: ignore[misc]
    assert m.replace(gpu=114.75) == PowerMode(8, 1344, 114.75, 2133)
    assert m.as_tuple() == (8, 1344.0, 726.75, 2133.0)


@pytest.mark.parametrize("bad", ["12c/2201/1300", "twelve/1/2/3", "0c/1/2/3", "12c/-1/2/3"])
def test_mode_parse_errors(bad):
    with pytest.raises(InvalidModeError):
        PowerMode.parse(bad)


# ---------------------------------------------------------------- the Orin AGX grid
def test_orin_agx_space_size_and_extremes(space):
    assert space.shape == (12, 29, 13, 4)
    assert len(space) == space.size == 18_096  # 12 x 29 x 13 x 4
    assert space.max_mode() == ORIN_AGX_MAXN
    assert space.min_mode() == PowerMode(1, 115.2, 114.75, 204)
    assert space.lowest("cpu") == 115.2 and space.highest("cpu_mhz") == 2201.6
    assert space.highest("gpu") == 1300.5 and space.highest("mem") == 3199
    assert space.values("cores") == tuple(range(1, 13))
    assert ORIN_AGX_MAXN in space and PowerMode(12, 2200, 1300.5, 3199) not in space
    assert "18,096 modes" in repr(space)


def test_space_parse_snaps_within_one_mhz(space):
    assert space.parse("12c/2201/1300/3199") == ORIN_AGX_MAXN  # a truncated label still names the mode
    assert space.parse("8c/1344/727/2133") == FULCRUM_MIDPOINT
    assert space.parse(str(ORIN_AGX_MAXN)) == ORIN_AGX_MAXN  # every label round-trips
    for m in (space.mode_at(i) for i in range(0, space.size, 997)):
        assert space.parse(str(m)) == m
    assert space.parse("maxn") == ORIN_AGX_MAXN
    assert space.coerce({"cores": 8, "cpu_mhz": 1344, "gpu_mhz": 727, "mem_mhz": 2133}) == FULCRUM_MIDPOINT


def test_invalid_values_list_the_valid_ones(space):
    with pytest.raises(InvalidModeError) as exc:
        space.parse("8c/1350/727/2133")
    msg = str(exc.value)
    assert "cpu_mhz=1350" in msg and "1344" in msg and "2201.6" in msg and "115.2" in msg
    with pytest.raises(InvalidModeError, match="cores=13 is not valid"):
        space.parse("13c/1344/727/2133")
    with pytest.raises(InvalidModeError, match=r"gpu_mhz=1300 is not one of: 114.75, .*1300.5"):
        space.validate(PowerMode(12, 2201.6, 1300, 3199))


def test_nearest_always_snaps(space):
    assert space.nearest("12c/2300/5000/10") == PowerMode(12, 2201.6, 1300.5, 204)
    assert space.nearest(PowerMode(7, 1350, 700, 2000)) == PowerMode(7, 1344, 726.75, 2133)


def test_index_and_mode_at_are_inverse(space):
    assert space.index(space.min_mode()) == 0
    assert space.index(ORIN_AGX_MAXN) == space.size - 1
    assert space.mode_at(-1) == ORIN_AGX_MAXN
    # C order: memory varies fastest, cores slowest
    assert space.mode_at(1) == PowerMode(1, 115.2, 114.75, 665.6)
    assert space.mode_at(4) == PowerMode(1, 115.2, 216.75, 204)
    assert space.mode_at(29 * 13 * 4) == PowerMode(2, 115.2, 114.75, 204)
    for i in (0, 1, 17, 4321, 18_095):
        assert space.index(space.mode_at(i)) == i
    with pytest.raises(IndexError):
        space.mode_at(18_096)


def test_iteration_matches_index_order(space):
    sub = fulcrum_space()
    assert [sub.index(m) for m in sub] == list(range(441))


def test_numpy_roundtrip(space):
    arr = space.to_numpy()
    assert arr.shape == (18_096, 4) and arr.dtype == np.float64
    assert KNOBS == ("cores", "cpu_mhz", "gpu_mhz", "mem_mhz")
    assert tuple(arr[-1]) == ORIN_AGX_MAXN.as_tuple()
    assert tuple(arr[4321]) == space.mode_at(4321).as_tuple()
    assert np.array_equal(space.indices(arr), np.arange(18_096))
    assert space.indices(arr[7]) == 7
    assert np.array_equal(space.modes_at([0, -1, 4321]), arr[[0, -1, 4321]])
    assert space.from_numpy(arr[[5, 9]]) == [space.mode_at(5), space.mode_at(9)]
    arr[0, 0] = 4  # a copy: the cache is not changed
    assert space.to_numpy()[0, 0] == 1
    with pytest.raises(InvalidModeError, match="cpu_mhz=1350"):
        space.indices([[8, 1350, 726.75, 2133]])


def test_neighbours_and_step(space):
    lower, higher = space.neighbours(ORIN_AGX_MAXN, "gpu")
    assert lower == PowerMode(12, 2201.6, 1236.75, 3199) and higher is None
    assert space.neighbours(space.min_mode(), "cores") == (None, PowerMode(2, 115.2, 114.75, 204))
    assert space.step(FULCRUM_MIDPOINT, "mem", +1) == PowerMode(8, 1344, 726.75, 3199)
    assert space.step(FULCRUM_MIDPOINT, "cpu_mhz", -2) == PowerMode(8, 1190.4, 726.75, 2133)
    assert space.step(FULCRUM_MIDPOINT, "mem_mhz", +2) is None
    with pytest.raises(InvalidModeError, match="unknown knob"):
        space.step(FULCRUM_MIDPOINT, "fan", 1)


# ---------------------------------------------------------------- Fulcrum's subset
def test_fulcrum_subset():
    sub = fulcrum_space()
    assert sub.shape == (3, 7, 7, 3) and sub.size == 441
    assert sub.cores == (4, 8, 12)
    assert sub.cpu_mhz == (422.4, 729.6, 1036.8, 1344.0, 1651.2, 1958.4, 2201.6)  # 422-2200 MHz
    assert sub.gpu_mhz == (114.75, 318.75, 522.75, 726.75, 930.75, 1134.75, 1300.5)  # 115-1300 MHz
    assert sub.mem_mhz == (665.6, 2133.0, 3199.0)  # 665-3200 MHz
    assert sub.midpoint() == FULCRUM_MIDPOINT == sub.parse("8c/1344/727/2133")
    assert sub.max_mode() == ORIN_AGX_MAXN
    assert sub.is_subspace_of(orin_agx_space())
    # Fulcrum's named low modes (GMD, one knob at its lowest) are in the subset
    for label in ("4c/1344/727/2133", "8c/422/727/2133", "8c/1344/115/2133", "8c/1344/727/665"):
        assert sub.parse(label) in sub
    assert named_space("fulcrum") == sub


def test_subspace_snaps_and_checks(space):
    sub = space.subspace(cores=[4, 8], gpu="727 1300".split())
    assert sub.shape == (2, 29, 2, 4)
    with pytest.raises(InvalidModeError):
        space.subspace(cpu_mhz=[1350])


def test_space_profile_roundtrip(space):
    d = json.loads(json.dumps(space.to_dict()))
    assert PowerModeSpace.from_dict(d) == space
    assert PowerModeSpace.from_dict({"name": "x", "modes": d}).size == 18_096
    with pytest.raises(InvalidModeError, match="gpu_mhz"):
        PowerModeSpace.from_dict({"cores": [1], "cpu_mhz": [1], "mem_mhz": [1]})


def test_midpoint_of_full_grid_is_upper_middle(space):
    assert space.midpoint() == PowerMode(7, 1190.4, 726.75, 2133)


# ---------------------------------------------------------------- the catalogue
def test_catalogue_detection(orin):
    assert detect_board(orin.root) is board_info("orin-agx")
    assert jetpack_major(orin.root) == orin.jetpack
    assert board_info("orin-agx").clusters == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    assert board_info("orin-nx-16gb").cpu_count == 8 and board_info("orin-nano-8gb").cpu_count == 6
    assert board_info("orin-agx").space() == orin_agx_space()
