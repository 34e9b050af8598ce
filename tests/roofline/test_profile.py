"""Device profiles: round trip, the shipped Pagoda profile, and every validation error message."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from lightning_edge.roofline import (
    DeviceProfile,
    ModeEntry,
    ModeLookupError,
    ProfileError,
    Roofline,
    available_profiles,
    format_mode,
    load_profile,
    parse_mode,
    save_profile,
    validate_profile,
)


def minimal() -> dict:
    return {
        "schema": "lightning_edge.device_profile", "version": 1, "device": "test-board", "source": "measured",
        "created": "2025-01-02T03:04:05+00:00", "host": None,
        "modes": [{"mode": "4c/1000/500/2000", "precision": {"fp32": {"peak_flops": 1e12, "bandwidth": 1e11}},
                   "eps_flop": 2e-12, "eps_mop": 1e-10, "static_power_w": 5.0}],
    }


# ---------------------------------------------------------------- modes
def test_parse_and_format_mode():
    assert parse_mode("12c/2201/1300/3199") == (12, 2201.0, 1300.0, 3199.0)
    assert parse_mode("12c/2201.6/1300.5/3199") == (12, 2201.6, 1300.5, 3199.0)
    assert parse_mode("MAXN") is None
    assert format_mode(12, 2201.6, 1300.5, 3199) == "12c/2201.6/1300.5/3199"  # exact MHz, as PowerMode prints
    with pytest.raises(ValueError, match="CORESc/CPU_MHz/GPU_MHz/MEM_MHz"):
        parse_mode("12/2201/1300")


# ---------------------------------------------------------------- shipped profile
def test_shipped_pagoda_profile():
    assert "orin-agx-pagoda" in available_profiles()
    p = load_profile("orin-agx-pagoda")
    assert p.source == "published" and p.device == "jetson-orin-agx-32gb"
    maxn = p.roofline("12c/2201.6/1300.5/3199")
    assert maxn.source == "published"
    assert maxn.time_balance == pytest.approx(89.41606, rel=1e-6)      # spec: 89.4
    assert maxn.energy_balance() == pytest.approx(39.75312, rel=1e-6)  # Pagoda: 39.8
    assert p.roofline("12c/2201.6/1300.5/3199", "fp16").peak_flops == pytest.approx(33.0e12)
    # mode space of the spec: 12 x 29 x 13 x 4 = 18,096 modes
    space = p.mode_space
    assert len(space["cores"]) * len(space["cpu_mhz"]) * len(space["gpu_mhz"]) * len(space["mem_mhz"]) == 18096
    # 0.7 GHz GPU: 9.5e12 / 141.3e9 = 67.23 (Pagoda 67.0); 2.1 GHz memory: 11.4e12 / 103.9e9 = 109.72 (109.9)
    assert p.roofline("12c/2201.6/726.75/3199").time_balance == pytest.approx(67.2328, rel=1e-5)
    assert p.roofline("12c/2201.6/1300.5/2133").time_balance == pytest.approx(109.7209, rel=1e-5)
    assert p.entry("12c/2201.6/1300.5/2133").eps_mop == pytest.approx(174.7e-12)
    # the published-only figures are kept but never needed by the code
    assert p.reference["time_balance_flop_per_byte"]["12c/2201.6/318.75/3199"] == 69.1


def test_mode_lookup_tolerates_rounding_and_power_mode_objects():
    p = load_profile("orin-agx-pagoda")
    # 726.75 MHz written rounded (727) instead of truncated (726)
    assert p.entry("12c/2201/727/3199").mode == "12c/2201.6/726.75/3199"
    assert p.entry("12c/2202/1301/3199").mode == "12c/2201.6/1300.5/3199"

    class FakePowerMode:  # anything whose str() is a mode string works (PowerMode does)
        def __str__(self):
            return "12c/2201.6/1134.75/3199"

    assert p.roofline(FakePowerMode()).peak_flops == pytest.approx(13.7e12)


def test_mode_lookup_errors_are_readable():
    p = load_profile("orin-agx-pagoda")
    with pytest.raises(ModeLookupError, match="has no mode '8c/1/1/1'; it has 12c/2201.6/1300.5/3199"):
        p.entry("8c/1/1/1")
    with pytest.raises(ValueError, match="has 4 modes; name one of"):
        p.roofline()
    with pytest.raises(KeyError, match="no 'bf16' roofline; it has fp32, fp16"):
        p.roofline("12c/2201.6/1300.5/3199", "bf16")


def test_rooflines_vectorised():
    p = load_profile("orin-agx-pagoda")
    r = p.rooflines()
    assert r.shape == (4,)
    assert r.label == tuple(p.mode_names)
    assert np.allclose(r.time_balance, [89.41606, 86.10937, 67.23284, 109.72089], rtol=1e-6)
    e = r.energy_balance()
    assert e[0] == pytest.approx(39.75312, rel=1e-6) and np.isnan(e[1:]).all()  # eps known at MAXN only
    assert p.rooflines("fp16").shape == (1,)
    sub = p.rooflines(modes=["12c/2201.6/1300.5/3199", "12c/2201.6/726.75/3199"])
    assert np.allclose(sub.peak_flops, [14.7e12, 9.5e12])


# ---------------------------------------------------------------- round trip
def test_round_trip(tmp_path):
    p = DeviceProfile.from_dict(minimal())
    path = save_profile(p, tmp_path / "sub" / "p.json")
    back = load_profile(path)
    assert back.to_dict() == p.to_dict()
    assert json.loads(path.read_text())["schema"] == "lightning_edge.device_profile"
    r = back.roofline()
    assert isinstance(r, Roofline) and r.time_balance == pytest.approx(10.0)
    # eq. 5: (1e-10 + 5/1e11) / (2e-12 + 2*5/1e12) = 1.5e-10 / 1.2e-11 = 12.5
    assert r.energy_balance() == pytest.approx(12.5)


def test_round_trip_of_shipped_profile(tmp_path):
    p = load_profile("orin-agx-pagoda")
    out = save_profile(p, tmp_path / "copy.json")
    assert load_profile(str(out)).to_dict() == p.to_dict()


def test_save_accepts_dict_and_refuses_invalid(tmp_path):
    save_profile(minimal(), tmp_path / "ok.json")
    bad = minimal()
    bad["modes"][0]["eps_flop"] = -1
    with pytest.raises(ProfileError, match=r"modes\[0\]\.eps_flop"):
        save_profile(bad, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_per_precision_eps_override():
    d = minimal()
    d["modes"][0]["precision"]["bf16"] = {"peak_flops": 4e12, "bandwidth": 1e11, "eps_flop": 1e-12}
    p = DeviceProfile.from_dict(d)
    assert float(p.roofline(precision="bf16").eps_flop) == pytest.approx(1e-12)
    assert float(p.roofline(precision="fp32").eps_flop) == pytest.approx(2e-12)


def test_time_only_profile_has_null_coefficients():
    d = minimal()
    m = d["modes"][0]
    m["eps_flop"] = m["eps_mop"] = m["static_power_w"] = None
    r = DeviceProfile.from_dict(d).roofline()
    assert not r.has_energy


def test_mode_entry_round_trip():
    e = ModeEntry.from_dict(minimal()["modes"][0])
    assert e.knobs == (4, 1000.0, 500.0, 2000.0)
    assert ModeEntry.from_dict(e.to_dict()) == e


# ---------------------------------------------------------------- validation: every error path
def mutate(fn):
    d = minimal()
    fn(d)
    return d


ERRORS = [
    (lambda d: d.pop("device"), "device: missing"),
    (lambda d: d.update(schema="something.else"), "schema: expected 'lightning_edge.device_profile'"),
    (lambda d: d.update(version=2), "version: this profile is version 2, newer than"),
    (lambda d: d.update(version="1"), "version: expected the integer 1"),
    (lambda d: d.update(version=0), "version: expected 1, got 0"),
    (lambda d: d.update(device=""), "device: expected a non-empty device model name"),
    (lambda d: d.update(source="guessed"), "source: expected one of measured, published, simulated, got 'guessed'"),
    (lambda d: d.update(created="yesterday"), "created: expected an ISO 8601 time"),
    (lambda d: d.update(host=3), "host: expected a string, an object or null"),
    (lambda d: d.update(fit=[1, 2]), "fit: expected a JSON object or null"),
    (lambda d: d.update(notes=5), "notes: expected a string or a list"),
    (lambda d: d.update(mode_space=[1]), "mode_space: expected an object"),
    (lambda d: d.update(mode_space={"cores": []}), r"mode_space.cores: expected a non-empty list"),
    (lambda d: d.update(mode_space={"gpu_mhz": [100, -5]}), r"mode_space.gpu_mhz: expected a non-empty list of positive numbers in MHz"),
    (lambda d: d.update(mode_space={"gpu_freq": [1]}), r"mode_space.gpu_freq: unknown field; did you mean 'gpu_mhz'"),
    (lambda d: d.update(modes=[]), "modes: expected at least one mode entry"),
    (lambda d: d.update(modes={}), "modes: expected a non-empty list"),
    (lambda d: d.update(modes=["x"]), r"modes\[0\]: expected an object"),
    (lambda d: d.update(devcie="x"), "devcie: unknown field; did you mean 'device'"),
    (lambda d: d["modes"][0].pop("mode"), r"modes\[0\]\.mode: missing"),
    (lambda d: d["modes"][0].update(mode=12), r"modes\[0\]\.mode: expected a string"),
    (lambda d: d["modes"][0].update(mode="12c/fast"), r"modes\[0\]\.mode: mode '12c/fast': expected 'CORESc/CPU_MHz"),
    (lambda d: d["modes"].append(copy.deepcopy(d["modes"][0])), r"modes\[1\]\.mode: '4c/1000/500/2000' repeats modes\[0\]"),
    (lambda d: d["modes"][0].pop("precision"), r"modes\[0\]\.precision: missing"),
    (lambda d: d["modes"][0].update(precision={}), r"modes\[0\]\.precision: expected a non-empty object"),
    (lambda d: d["modes"][0]["precision"].update(FP32={"peak_flops": 1, "bandwidth": 1}),
     r"modes\[0\]\.precision\.FP32: precision names are lower case"),
    (lambda d: d["modes"][0]["precision"].update(fp16=5), r"modes\[0\]\.precision\.fp16: expected an object"),
    (lambda d: d["modes"][0]["precision"]["fp32"].pop("bandwidth"),
     r"modes\[0\]\.precision\.fp32\.bandwidth: missing; expected a positive number in B/s"),
    (lambda d: d["modes"][0]["precision"]["fp32"].update(peak_flops=0),
     r"modes\[0\]\.precision\.fp32\.peak_flops: expected a positive number in FLOP/s, got 0"),
    (lambda d: d["modes"][0]["precision"]["fp32"].update(peak_flops=None),
     r"modes\[0\]\.precision\.fp32\.peak_flops: expected a positive number in FLOP/s, got null"),
    (lambda d: d["modes"][0]["precision"]["fp32"].update(peakflops=1),
     r"modes\[0\]\.precision\.fp32\.peakflops: unknown field; did you mean 'peak_flops'"),
    (lambda d: d["modes"][0]["precision"]["fp32"].update(eps_flop=-2),
     r"modes\[0\]\.precision\.fp32\.eps_flop: expected a non-negative number in J/FLOP"),
    (lambda d: d["modes"][0].update(eps_flop=-1),
     r"modes\[0\]\.eps_flop: expected a non-negative number in J/FLOP \(or null when not measured\), got -1"),
    (lambda d: d["modes"][0].update(eps_mop="141 pJ"), r"modes\[0\]\.eps_mop: expected a non-negative number in J/B"),
    (lambda d: d["modes"][0].update(static_power_w=True), r"modes\[0\]\.static_power_w: expected a non-negative number in W"),
    (lambda d: d["modes"][0].update(eps_flop=3.86), r"modes\[0\]\.eps_flop: 3.86 J is implausibly large.*3.86e-12"),
    (lambda d: d["modes"][0].update(eps_flops=1e-12), r"modes\[0\]\.eps_flops: unknown field; did you mean 'eps_flop'"),
    (lambda d: d["modes"][0].update(cpu=[1]), r"modes\[0\]\.cpu: expected a JSON object or null"),
    (lambda d: d["modes"][0].update(note=1), r"modes\[0\]\.note: expected a string"),
    (lambda d: d["modes"][0].update(source="guess"), r"modes\[0\]\.source: expected one of"),
]


@pytest.mark.parametrize("fn, match", ERRORS)
def test_validation_errors(fn, match):
    with pytest.raises(ProfileError, match=match) as info:
        validate_profile(mutate(fn))
    assert info.value.errors  # every problem is listed
    assert "invalid device profile" in str(info.value)


def test_validation_lists_all_problems():
    d = minimal()
    d["source"] = "guessed"
    d["modes"][0]["eps_flop"] = -1
    with pytest.raises(ProfileError) as info:
        validate_profile(d, where="x.json")
    assert len(info.value.errors) == 2
    assert "x.json (2 problems)" in str(info.value)


def test_validation_rejects_non_object():
    with pytest.raises(ProfileError, match="top level: expected a JSON object, got list"):
        validate_profile([])


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="shipped: .*orin-agx-pagoda"):
        load_profile("no-such-profile")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**minimal(), "source": "x"}))
    with pytest.raises(ProfileError, match=f"{wrong}.*source"):
        load_profile(wrong)
    assert load_profile("orin-agx-pagoda.json").device == "jetson-orin-agx-32gb"


# ---------------------------------------------------------------- hostile profile files (issue 25, item 6)
def _write(tmp_path, text: str):
    p = tmp_path / "board.json"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, match", [
    # nesting the JSON parser cannot follow (it raised RecursionError)
    (json.dumps({**minimal(), "fit": "X"}).replace('"X"', "[" * 100_000 + "]" * 100_000), "nested"),
    # nesting it can parse, but that copying the mode entry could not (RecursionError)
    (json.dumps(minimal()).replace('"bandwidth": 100000000000.0', '"bandwidth": 100000000000.0, "extra": '
                                   + "[" * 600 + "]" * 600), "nested"),
    # a 5000-digit number: Python refuses to convert it
    (json.dumps(minimal()).replace("1000000000000.0", "1" + "0" * 5000), "digits"),
    # a 400-digit integer: parsed, then math.isfinite raised OverflowError
    (json.dumps(minimal()).replace("1000000000000.0", "1" + "0" * 400), "peak_flops"),
    (json.dumps(minimal()).replace('"static_power_w": 5.0', '"static_power_w": 1' + "0" * 400), "static_power_w"),
    # finite, but the balance points and efficiencies computed from them overflowed to inf
    (json.dumps(minimal()).replace("100000000000.0", "1e-300"), r"precision\.fp32\.bandwidth: .*1e-300"),
    (json.dumps(minimal()).replace("1000000000000.0", "1e300"), r"precision\.fp32\.peak_flops: .*1e\+?300"),
    (json.dumps(minimal()).replace('"static_power_w": 5.0', '"static_power_w": 1e300'), r"static_power_w: .*1e\+?300"),
    (json.dumps(minimal()).replace('"bandwidth": 100000000000.0', '"bandwidth": 100000000000.0, "eps_flop": 1e300'),
     r"precision\.fp32\.eps_flop: .*implausibly large"),
], ids=["nested-100000", "nested-600-in-extra", "5000-digits", "400-digit-peak", "400-digit-static-power",
        "bandwidth-1e-300", "peak-1e300", "static-power-1e300", "precision-eps-1e300"])
def test_a_crafted_profile_is_a_profile_error_naming_the_file(tmp_path, text, match):
    p = _write(tmp_path, text)
    with pytest.raises(ProfileError, match=match) as info:
        load_profile(p)
    assert str(p) in str(info.value)


def test_a_profile_larger_than_the_limit_is_refused_before_it_is_read(tmp_path):
    p = tmp_path / "big.json"
    with open(p, "wb") as f:
        f.truncate(100 << 20)           # sparse: nothing is written
    with pytest.raises(ProfileError, match="larger than"):
        load_profile(p)


def test_a_crafted_profile_through_the_cli_is_one_line(tmp_path, capsys):
    from lightning_edge.cli import main

    p = _write(tmp_path, json.dumps(minimal()).replace("1000000000000.0", "1" + "0" * 400))
    assert main(["roofline", "--profile", str(p)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "peak_flops" in err and "Traceback" not in err, err
