"""``training_from_layers_json`` on damaged or crafted layers.json files (issue 25, item 6): one ValueError naming
the file and the field, never a traceback from inside the reader."""

from __future__ import annotations

import json

import pytest
import torch

from lightning_edge.latency.measure import training_from_layers_json
from tests.latency.test_model import Net


def doc(stages) -> dict:
    return {"schema": "lightning_edge.energy_profile", "version": 1, "stages": stages}


ROW = {"layer": "conv", "fwd_ms": 0.5}

BAD = [
    ("stages-a-list", doc(["predict"]), "stages"),
    ("stage-a-list", doc({"predict": [1]}), "stages.predict"),
    ("layers-a-dict", doc({"predict": {"layers": {"conv": 1}}}), "stages.predict.layers"),
    ("row-a-number", doc({"predict": {"layers": [ROW, 3]}}), "stages.predict.layers[1]"),
    ("layer-name-a-list", doc({"predict": {"layers": [{"layer": ["conv"], "fwd_ms": 0.5}]}}),
     "stages.predict.layers[0].layer"),
    ("fwd-a-string", doc({"predict": {"layers": [{"layer": "conv", "fwd_ms": "fast"}]}}),
     "stages.predict.layers[0].fwd_ms"),
    ("fwd-1e308", doc({"predict": {"layers": [{"layer": "conv", "fwd_ms": 1e308}]}}),
     "stages.predict.layers[0].fwd_ms"),
]


@pytest.mark.parametrize("name, data, field", BAD, ids=[b[0] for b in BAD])
def test_a_damaged_layers_json_is_one_error_naming_the_field(tmp_path, name, data, field):
    p = tmp_path / "layers.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError) as info:
        training_from_layers_json(p, Net().eval(), torch.randn(1, 3, 16, 16))
    msg = str(info.value)
    assert str(p) in msg and field in msg and "expected" in msg, msg


def test_nesting_the_parser_cannot_follow(tmp_path):
    p = tmp_path / "layers.json"
    p.write_text('{"schema": "lightning_edge.energy_profile", "notes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match=f"{p} .*nested"):
        training_from_layers_json(p, Net().eval(), torch.randn(1, 3, 16, 16))


def test_a_folder_is_one_error(tmp_path):
    with pytest.raises(ValueError, match="folder"):
        training_from_layers_json(tmp_path, Net().eval(), torch.randn(1, 3, 16, 16))


def test_rows_without_a_forward_time_are_still_skipped(tmp_path):
    p = tmp_path / "layers.json"
    p.write_text(json.dumps(doc({"predict": {"layers": [ROW, {"layer": "fc", "fwd_ms": None},
                                                         {"layer": "bn", "fwd_ms": 0.0}]}})))
    got = training_from_layers_json(p, Net().eval(), torch.randn(1, 3, 16, 16))
    assert [s.layer.name for s in got] == ["conv"] and got[0].time_s == pytest.approx(0.5e-3)


def test_every_class_builds_its_unit_at_the_ends_of_its_dimensions_and_maps_back_to_it():
    """For each class and box: the representative unit at the lowest and highest value of every dimension is
    built (on the meta device), described like a network's unit, and point_for maps it back to its class and
    point (element counts within a row's rounding)."""
    from lightning_edge.latency.measure import SPECS, build_unit, point_for, unit_desc_for

    for key, spec in SPECS.items():
        for pick in (0, -1):
            point = tuple(d.values[pick] for d in spec.dims)
            if spec.cls == "conv" and point[1] <= 4:
                continue  # a 3x3 convolution on 3 channels is a stem: its own class
            fn, args = build_unit(spec.cls, point, device="cpu" if spec.cls == "embedding" else "meta")
            u = unit_desc_for(fn, args)
            cls, back, mult = point_for(u)
            assert cls == spec.cls and mult == 1.0, (key, point, cls)
            if len(point) == 1:
                assert back[0] == pytest.approx(point[0], rel=0.35, abs=2), (key, point, back)
            else:
                assert back == point, (key, point, back)
