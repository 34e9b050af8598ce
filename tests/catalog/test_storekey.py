"""A board's key in a profile store has one home, :class:`lightning_edge.catalog.StoreKey`: made and read back there,
and the twin's, the Board's and the tuner's key are the same value."""

from __future__ import annotations

import pickle

import pytest

from lightning_edge.catalog import StoreKey


def test_a_simulated_key_carries_its_models_digest_and_reads_back():
    k = StoreKey("orin-agx", simulated=True, digest="1a2b3c4d")
    assert k == "sim:orin-agx+1a2b3c4d" and (k.module, k.simulated, k.digest) == ("orin-agx", True, "1a2b3c4d")
    assert StoreKey.parse(str(k)) == k and type(StoreKey.parse(str(k))) is StoreKey
    assert pickle.loads(pickle.dumps(k)) == k and type(pickle.loads(pickle.dumps(k))) is StoreKey
    assert k.names("sim:orin-agx") and k.names(str(k)) and not k.names("orin-agx") and not k.names("sim:orin-nx-16gb")
    real = StoreKey.parse("orin-agx")
    assert not real.simulated and real.digest is None and not real.names("sim:orin-agx")


@pytest.mark.parametrize("bad", [dict(module=""), dict(module="sim:orin-agx"),
                                 dict(module="orin-agx", digest="1a2b3c4d"),
                                 dict(module="orin-agx", simulated=True, digest="not hex")])
def test_a_malformed_key_is_refused_with_what_was_expected(bad):
    with pytest.raises(ValueError, match="store key|module"):
        StoreKey(**bad)


def test_a_board_file_path_with_a_plus_is_a_module_not_a_digest():
    k = StoreKey.parse("sim:/home/me/orin+fan.json")
    assert k.simulated and k.module == "/home/me/orin+fan.json" and k.digest is None


def test_the_twin_the_board_and_a_tuner_handed_a_controller_agree_on_the_key():
    from lightning_edge.devices import get_board
    from lightning_edge.tuning.online import OnlineTuner
    from lightning_edge.tuning.problems import TrainingProblem

    board = get_board("sim:orin-agx", control="write")
    try:
        key = board.store_key
        assert isinstance(key, StoreKey) and key == board.twin.store_key and key.digest
        tuner = OnlineTuner(TrainingProblem(30.0), controller=board.controller, meter=board.meter())
        assert tuner.device_model == key
    finally:
        board.close()


def test_store_show_names_a_simulated_board_without_its_digest(tmp_path, capsys):
    from lightning_edge.cli import main
    from lightning_edge.tuning import GMD, TrainingProblem
    from tests.tuning.workloads import HAND_SPACE, LinearWorkload

    path = str(tmp_path / "p.sqlite3")
    key = StoreKey("orin-agx", simulated=True, digest="0123abcd")
    GMD().solve(TrainingProblem(25.0), HAND_SPACE, LinearWorkload(), store=path, device_model=key)
    assert main(["store", "show", "linear", "--device-model", "sim:orin-agx", "--store", path]) == 0
    assert "4c/300/400/2000" in capsys.readouterr().out
    assert main(["store", "show", "linear", "--device-model", "sim:orin-nx-16gb", "--store", path]) == 1
