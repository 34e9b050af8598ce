"""One Board from one resolver, for the profiler (control="read"), the tuner and serving (control="write")."""

from __future__ import annotations

import pytest

from lightning_edge.devices import Board, EmptySensor, get_board
from lightning_edge.devices.sim import SimulatedOrin


def test_this_machine_has_nothing_to_measure_or_control():
    for spec in ("none", "cpu", "host"):
        b = get_board(spec, control="write")
        assert isinstance(b.sensor, EmptySensor) and b.controller is None and b.twin is None
        assert b.source == "model" and not b.simulated and b.mode() is None
        assert "no power sensor" in b.describe()


def test_a_sim_spec_makes_a_twin_that_the_board_closes():
    b = get_board("sim:orin-agx", control="write", seed=3)
    assert b.simulated and b.label == "simulated" and b.source == "simulated"
    assert b.twin is not None and b.controller is not None and b.space.size == 18096
    assert isinstance(b.owner, SimulatedOrin) and b.mode() == str(b.controller.current())
    roof, desc = b.roofline(None)
    assert roof is not None and "simulated" in desc
    b.close()


def test_a_board_object_is_shared_not_closed():
    sim = SimulatedOrin(noise=False)
    closed = []
    sim.sensor.close = lambda: closed.append(True)
    b = get_board(sim)
    assert b.twin is sim.twin and b.controller is sim.controller and b.owner is None
    b.close()
    assert not closed  # the caller's board stays open
    assert get_board(b) is b


def test_a_sensor_object_is_a_board_with_that_sensor():
    s = EmptySensor(reason="test")
    b = get_board(s)
    assert b.sensor is s and b.controller is None and isinstance(b, Board)


@pytest.mark.parametrize("spec, err, match", [
    (object(), TypeError, "controller"),
    ("sim:orin-nano", ValueError, "sim:orin-agx"),
])
def test_bad_specs_say_what_was_expected(spec, err, match):
    with pytest.raises(err, match=match):
        get_board(spec)


def test_control_is_read_or_write():
    with pytest.raises(ValueError, match="'read' or 'write'"):
        get_board("none", control="rw")


def test_the_tuning_space_is_fulcrums_grid_on_an_agx_and_the_boards_own_elsewhere():
    """One rule for the modes a tuner searches (the tuner, the interleaver and the runner read ``Board.tuning_space``):
    Fulcrum's 441 on the AGX Orin; another module's own grid, which does not hold the AGX's subset (the interleaver
    and the runner gave every simulated board the AGX's 441)."""
    from lightning_edge.catalog import fulcrum_space
    from lightning_edge.devices import get_board

    agx, nx = get_board("sim:orin-agx"), get_board("sim:orin-nx-16gb")
    try:
        assert agx.tuning_space.size == 441 and agx.tuning_space.is_subspace_of(agx.space)
        assert nx.tuning_space is nx.space and not fulcrum_space().is_subspace_of(nx.space)
    finally:
        agx.close()
        nx.close()
