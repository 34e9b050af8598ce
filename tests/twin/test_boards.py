"""Board files and extrapolation (issue 29 item 3): the papers' coefficients moved to another module by documented
hardware ratios (SMs, memory bus width, rated power) whose facts are in the catalogue with their sources; every
coefficient carries its provenance."""

from __future__ import annotations

import pytest

from lightning_edge import catalog
from lightning_edge.twin.board_files import (
    PROVENANCE,
    RULES,
    board_file,
    extrapolate,
    install_board_file,
    installed_board_file,
    prior_board,
    seed_board,
)
from lightning_edge.twin.physics import DEFAULT_PARAMS


def test_every_catalogued_module_has_its_hardware_facts_with_sources():
    assert set(catalog.HARDWARE) == set(catalog.BOARDS)
    for key, hw in catalog.HARDWARE.items():
        for fact, (value, source) in hw.facts().items():
            assert source.cite, (key, fact)
            if value is None:
                assert source.cite.startswith("unknown") and not source.confirmed, (key, fact)
    assert catalog.hardware_of("orin-nano-4gb").sms == 4 and catalog.hardware_of("orin-nano-4gb").mem_bus_bits == 64
    assert catalog.hardware_of("thor").mem_bus_bits is None  # not found in a source read here: marked unknown


def test_the_seeds_board_says_which_coefficients_rest_on_published_figures():
    bf = seed_board()
    assert bf.key == "orin-agx" and bf.label == "simulated" and set(bf.params) == set(DEFAULT_PARAMS)
    assert bf.provenance["peak_core_tflops_per_ghz"] == "published"  # fitted to Pagoda's table
    assert bf.provenance["gpu_v_knee_mhz"] == "simulated"            # an assumption of the twin, never fitted
    assert set(bf.provenance.values()) <= set(PROVENANCE)
    raw = seed_board(calibrated=False)
    assert raw.params == DEFAULT_PARAMS and raw.params != bf.params


def test_the_nx_is_extrapolated_by_half_the_sms_half_the_bus_and_two_thirds_the_power():
    seed, nx = seed_board(), board_file("orin-nx-16gb")
    p, s = nx.params, seed.params
    assert nx.label == "extrapolated" and nx.extrapolation["from"] == "orin-agx"
    r = {k: v["value"] for k, v in nx.extrapolation["ratios"].items()}
    assert r == {"sms": 0.5, "bus": 0.5, "rated": pytest.approx(40 / 60)}
    assert p["peak_core_tflops_per_ghz"] == pytest.approx(0.5 * s["peak_core_tflops_per_ghz"])
    assert p["p_gpu_active_w"] == pytest.approx(0.5 * s["p_gpu_active_w"])
    assert p["p_emc_idle_w"] == pytest.approx(0.5 * s["p_emc_idle_w"])
    assert p["p_base_w"] == pytest.approx(40 / 60 * s["p_base_w"])
    assert p["dram_bus_bits"] == 128 and nx.provenance["dram_bus_bits"] == "published"
    for k in ("t_op_us", "e_flop_tc_pj", "eff_tc", "gpu_v_min", "cpu_freq_exp"):  # per op / FLOP at the same clocks
        assert p[k] == s[k] and nx.provenance[k] == "extrapolated"
    assert set(nx.extrapolation["rules"]) == set(RULES)
    assert not nx.extrapolation["assumptions"]  # the same SoC: nothing assumed beyond the ratios


def test_other_architectures_and_unknown_facts_are_assumptions_said_aloud():
    thor = board_file("thor")
    text = " ".join(thor.extrapolation["assumptions"])
    assert "mem_bus_bits of thor is unknown" in text and "blackwell" in text and "neoverse-v3ae" in text
    assert thor.extrapolation["ratios"]["bus"]["value"] == 1.0
    assert thor.params["dram_bus_bits"] == 256 and thor.provenance["dram_bus_bits"] == "extrapolated"
    xnx = board_file("xavier-nx")
    assert any("TF32" in a for a in xnx.extrapolation["assumptions"])
    assert any("assumption" in n for n in xnx.notes)


def test_extrapolation_goes_from_any_board_to_any_other():
    """A calibrated board is the better source: the ratios are those between the two modules."""
    nx = board_file("orin-nx-16gb")
    nx.params["p_gpu_active_w"] = 7.0
    nano4 = extrapolate(nx, "orin-nano-4gb")
    assert nano4.extrapolation["from"] == "orin-nx-16gb"
    assert nano4.params["p_gpu_active_w"] == pytest.approx(7.0 * 4 / 8)
    assert nano4.params["p_base_w"] == pytest.approx(nx.params["p_base_w"] * 25 / 40)


def test_a_prior_never_models_a_simulated_board_with_its_own_truth(tmp_path):
    assert prior_board(seed_board()).params == DEFAULT_PARAMS
    nano = board_file("orin-nano-8gb")
    assert prior_board(nano).params != nano.params  # the extrapolation of the uncalibrated coefficients
    nano.params["p_base_w"] = 1.5
    nano.save(tmp_path / "n.json")
    from lightning_edge.twin.board_files import load_board_file

    assert prior_board(load_board_file(tmp_path / "n.json")).params == board_file("orin-nano-8gb").params


def test_a_calibrated_file_installed_for_a_module_is_its_model(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTNING_EDGE_BOARDS", str(tmp_path))
    assert installed_board_file("orin-nano-8gb") is None
    bf = board_file("orin-nano-8gb")
    bf.params["p_base_w"] = 2.2
    dest = install_board_file(bf)
    assert dest == tmp_path / "orin-nano-8gb.json"
    got = installed_board_file("orin-nano-8gb")
    assert got is not None and got.params["p_base_w"] == 2.2
    (tmp_path / "orin-nx-16gb.json").write_text("{not json")
    assert installed_board_file("orin-nx-16gb") is None  # a broken file is never a model of the board


def hardware_table() -> str:
    """docs/boards.md's table of the hardware facts, from the catalogue († unconfirmed)."""
    rows = ["| module | GPU | SMs | tensor cores | CUDA cores | memory bus | memory | CPU | rated power |",
            "|---|---|---|---|---|---|---|---|---|"]
    for k, hw in catalog.HARDWARE.items():
        def c(f, unit="", hw=hw):
            v, s = getattr(hw, f), hw.sources[f]
            return "unknown" if v is None else f"{v}{unit}{'' if s.confirmed else ' †'}"

        rated = catalog.MODULE_MAX_POWER[k]
        rows.append(f"| `{k}` | {hw.gpu_arch} | {c('sms')} | {c('tensor_cores')} | {c('cuda_cores')} "
                    f"| {c('mem_bus_bits', ' bit')} | {hw.mem_type} | {hw.cpu_arch} | {rated.watts:g} W"
                    f"{'' if rated.source.confirmed else ' †'} |")
    return "\n".join(rows)


def test_the_docs_table_of_hardware_facts_is_the_catalogues():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "boards.md").read_text()
    assert hardware_table() in doc
    for k, (ratio, _why) in RULES.items():
        assert f"| `{k}` | {ratio} |" in doc


# ---------------------------------------------------------------- issue 36 item 5: a board file is checked before use
import json  # noqa: E402
import os  # noqa: E402

from lightning_edge.twin.board_files import load_board_file  # noqa: E402


def _doc():
    return board_file("orin-nano-8gb").to_dict()


def _zero_all(d):
    d["params"] = {k: 0.0 for k in d["params"]}
    return d


@pytest.mark.parametrize("edit, match", [
    (lambda d: [], "holds a list, not a board file"),
    (lambda d: None, "holds null, not a board file"),
    (lambda d: 5, "holds a number, not a board file"),
    (lambda d: {**d, "mode_space": [1, 2]}, "mode_space: expected an object"),
    (lambda d: {**d, "mode_space": {"cores": [4, 8], "gpu_mhz": [300.0], "mem_mhz": [2133.0]}},
     r"mode_space\.cpu_mhz: expected a non-empty list"),
    (lambda d: {**d, "mode_space": {"cores": [4.7, 1e20], "cpu_mhz": [729.6], "gpu_mhz": [306.0],
                                    "mem_mhz": [3199.0]}}, r"mode_space\.cores\[0\]: 4\.7 is not a whole number"),
    (lambda d: {**d, "mode_space": {"cores": [4, 1e20], "cpu_mhz": [729.6], "gpu_mhz": [306.0],
                                    "mem_mhz": [3199.0]}}, r"mode_space\.cores\[1\]: .* is outside 1\.\.1024"),
    (lambda d: {**d, "mode_space": {"cores": [8, 4], "cpu_mhz": [729.6], "gpu_mhz": [306.0], "mem_mhz": [3199.0]}},
     "sorted ascending"),
    (lambda d: {**d, "notes": 5}, "notes: expected a list of texts"),
    (lambda d: {**d, "version": [1]}, "version: expected a whole number"),
    (lambda d: {**d, "key": 7}, "key: expected a text"),
    (lambda d: {**d, "params": {**d["params"], "eff_tc": 0.0}}, r"params\.eff_tc: 0 is not > 0"),
    (lambda d: {**d, "params": {**d["params"], "e_byte_pj": -3.0}}, r"params\.e_byte_pj: -3 is negative"),
    (lambda d: {**d, "params": {**d["params"], "eff_mem": 4.0}}, r"params\.eff_mem: 4 is a fraction above 1"),
    (lambda d: {**d, "params": {**d["params"], "t_op_us": True}}, r"params\.t_op_us: expected a number"),
    (_zero_all, r"params\..*: 0 is not > 0"),
    (lambda d: {**d, "provenance": ["measured"]}, "provenance: expected an object"),
])
def test_a_hostile_board_file_is_refused_in_one_line_naming_the_field(tmp_path, edit, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(edit(_doc())))
    with pytest.raises(ValueError, match=match) as exc:
        load_board_file(path)
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_a_fifo_a_device_a_folder_and_a_huge_file_are_not_board_files(tmp_path):
    import stat

    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(ValueError, match="not a regular file"):
        load_board_file(tmp_path / "fifo.json")  # never blocks waiting for a writer
    os.mknod(tmp_path / "zero.json", stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero's numbers
    with pytest.raises(ValueError, match="not a regular file"):
        load_board_file(tmp_path / "zero.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        load_board_file(tmp_path / "dir.json")
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(200 << 20)  # 200 MB, sparse: refused by its size, never read
    with pytest.raises(ValueError, match="is larger than"):
        load_board_file(big)
    from lightning_edge.twin.board_files import MAX_BOARD_FILE_BYTES

    assert MAX_BOARD_FILE_BYTES < 200 << 20


def test_a_board_file_with_zero_coefficients_never_reaches_the_tuner(tmp_path):
    from lightning_edge.devices import get_board

    path = tmp_path / "zeros.json"
    path.write_text(json.dumps(_zero_all(_doc())))
    with pytest.raises(ValueError, match="is not > 0"):
        get_board(f"sim:{path}", control="write")
