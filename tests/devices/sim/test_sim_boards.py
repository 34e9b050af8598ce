"""A simulated board per catalogued key and per board file (issue 29 item 3): ``get_board("sim:<key>")`` plays the
module's grid (cores, CPU / GPU / EMC maxima as the catalogue's files say), and every board but the papers' is
labelled **extrapolated** wherever its numbers appear."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lightning_edge import catalog
from lightning_edge.calibrate.microbench import SweepConfig, run_microbench
from lightning_edge.devices import get_board
from lightning_edge.devices.meter import TwinMeter
from lightning_edge.twin.board_files import PROVENANCE, board_file, load_board_file
from lightning_edge.twin.sim_workload import SimWorkload

KEYS = list(catalog.BOARDS)
TINY = SweepConfig([256, 1024], [2 ** 26], [2 ** 26], repeats=2, warmup=0, budget_s=5)


@pytest.mark.parametrize("key", KEYS)
def test_every_catalogued_key_is_a_simulated_board_with_its_modules_grid(key):
    info = catalog.board_info(key)
    b = get_board(f"sim:{key}", control="write")
    space = b.space
    assert space.cores[-1] == info.cpu_count and space.name == key
    assert space.cpu_mhz[-1] == info.cpu.max / 1e3
    assert space.gpu_mhz[-1] == info.gpu.max / 1e6
    assert space.mem_mhz[-1] == info.emc.max / 1e6
    assert b.live.current_mode() == space.max_mode()  # powered on in MAXN, its own
    expected = "simulated" if key == "orin-agx" else "extrapolated"
    assert b.simulated and b.source == "simulated" and b.label == expected
    assert b.store_key == b.twin.store_key and b.store_key.startswith(f"sim:{key}+")
    roof, desc = b.roofline(None)
    assert roof.source == expected and expected in desc
    step = b.twin.workload("lstm", 1, "infer", seq_len=1).step(space.max_mode())
    assert step.label == expected and float(step.time_s) > 0 and float(step.power_w) > 0
    if key != "orin-agx":
        assert "EXTRAPOLATED" in b.describe() and any("EXTRAPOLATED" in n for n in b.notes)
    b.close()


def test_the_seeds_board_is_the_twin_as_before():
    """sim:orin-agx through the board files is the twin of the shipped profile, number for number."""
    from lightning_edge.twin.model import OrinTwin

    b = get_board("sim:orin-agx")
    ref = OrinTwin(settling=False)
    modes = ref.space.to_numpy()[::97]
    a = b.twin.workload("resnet18", 16, "train").step(modes)
    r = ref.workload("resnet18", 16, "train").step(modes)
    assert np.array_equal(a.time_s, r.time_s) and np.array_equal(a.power_w, r.power_w)
    assert b.twin.physics.p == ref.physics.p
    b.close()


def test_an_extrapolated_boards_steps_tuner_measurements_and_rooflines_say_so():
    b = get_board("sim:orin-nano-8gb", control="write")
    wl = SimWorkload("resnet18", b.twin, train_batch_size=8, seed=1)
    assert wl.train(b.space.max_mode()).label == "extrapolated" and wl.device_model.startswith("sim:orin-nano-8gb+")
    meter = TwinMeter(b.twin, train=wl)
    meter.start()
    assert meter.label == "extrapolated" and meter.stop(b.space.max_mode()).label == "extrapolated"
    lt = b.twin.workload("resnet18", 8, "train").layers(b.space.max_mode())
    assert lt.label == "extrapolated" and lt.step.label == "extrapolated"
    res = run_microbench(board=b, config=TINY, precisions=["fp32"])
    assert res.label == "extrapolated" and res.roofline().source == "extrapolated"
    assert any("EXTRAPOLATED" in n for n in res.notes)
    b.close()


def test_a_board_file_is_a_simulated_board(tmp_path):
    bf = board_file("orin-nx-16gb")
    path = bf.save(tmp_path / "nx.json")
    data = json.loads(path.read_text())
    assert data["label"] == "extrapolated" and set(data["provenance"]) == set(data["params"])
    assert set(data["provenance"].values()) <= set(PROVENANCE)
    assert data["board"]["hardware"]["sms"]["value"] == 8 and "cores_source" in data["board"]
    b = get_board(f"sim:{path}")
    assert b.name == f"sim:{path}" and b.label == "extrapolated" and b.space.name == "orin-nx-16gb"
    assert b.twin.physics.p == {**bf.full_params}
    b.close()
    # another coefficient in the file: another board
    data["params"]["p_base_w"] = 9.0
    data["label"], data["provenance"]["p_base_w"] = "simulated", "simulated"
    data["provenance"] = {k: "simulated" for k in data["provenance"]}
    (tmp_path / "other.json").write_text(json.dumps(data))
    other = get_board(f"sim:{tmp_path / 'other.json'}")
    assert other.twin.physics.p["p_base_w"] == 9.0 and other.label == "simulated"
    other.close()


def test_a_board_file_with_its_own_grid_plays_that_grid(tmp_path):
    bf = board_file("orin-nano-4gb")
    bf.mode_space = {"cores": [2, 4, 6], "cpu_mhz": [729.6, 1497.6], "gpu_mhz": [306.0, 625.0],
                     "mem_mhz": [2133.0, 3199.0]}
    path = bf.save(tmp_path / "mine.json")
    b = get_board(f"sim:{path}", control="write")
    assert b.space.size == 24 and str(b.live.current_mode()) == "6c/1497.6/625/3199"
    b.controller.apply("2c/729.6/306/2133")
    assert str(b.controller.current()) == "2c/729.6/306/2133"
    b.close()


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(schema="something"), "not a lightning_edge board file"),
    (lambda d: d["params"].update(not_a_coefficient=1.0), "unknown twin parameter"),
    (lambda d: d["provenance"].pop("p_base_w"), "no provenance"),
    (lambda d: d["provenance"].update(p_base_w="guessed"), "provenance must be one of"),
    (lambda d: d["params"].update(p_base_w=float("nan")), "not a finite number"),
    (lambda d: d.update(key="orin-mega"), "not catalogued"),
])
def test_a_wrong_board_file_is_refused_saying_why(tmp_path, edit, match):
    data = board_file("orin-nano-8gb").to_dict()
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data).replace("NaN", "NaN"))
    with pytest.raises(ValueError, match=match):
        load_board_file(path)
    with pytest.raises(ValueError, match=match):
        get_board(f"sim:{path}")


def test_an_unknown_key_or_a_missing_file_says_what_exists(tmp_path):
    with pytest.raises(ValueError, match="orin-nano-8gb"):
        get_board("sim:orin-mega")
    with pytest.raises(FileNotFoundError, match="lightning-edge calibrate"):
        get_board(f"sim:{tmp_path / 'none.json'}")


def test_a_board_file_and_its_catalogue_key_have_a_state_file_each(tmp_path, capsys):
    """Issue 36 item 4: ``sim:FILE.json`` and ``sim:<its key>`` shared one state file: restoring the catalogue board
    deleted the state of the file board, whose own restore then found nothing."""
    from lightning_edge.cli import main

    path = board_file("orin-nano-8gb").save(tmp_path / "nano.json")
    sd = tmp_path / "state"
    low = "4c/729.6/306/2133"
    for device in (f"sim:{path}", "sim:orin-nano-8gb"):
        assert main(["mode", "set", low, "--device", device, "--state-dir", str(sd)]) == 0
    capsys.readouterr()
    assert main(["mode", "restore", "--device", "sim:orin-nano-8gb", "--state-dir", str(sd)]) == 0
    assert "restored" in capsys.readouterr().out.lower()
    # the file board is still in its mode, with its own state file, and its own restore puts it back
    assert main(["mode", "show", "--device", f"sim:{path}", "--state-dir", str(sd), "--json", "-"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["mode"] == low and shown["state_file"]
    assert main(["mode", "restore", "--device", f"sim:{path}", "--state-dir", str(sd)]) == 0
    assert "nothing to restore" not in capsys.readouterr().out
    assert main(["mode", "show", "--device", f"sim:{path}", "--state-dir", str(sd), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] != low
