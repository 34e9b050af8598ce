"""Issue 28, in a real browser: ``tensorboard --logdir`` on a short twin run's log dir, each dashboard screenshotted
in headless Chromium (benchmarks/tensorboard_screens.py) and checked: the PNGs are not blank, and what the pages
read from TensorBoard's HTTP data API holds the energy cards, the layer chart and the custom-scalars layout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _screens():
    spec = importlib.util.spec_from_file_location("tensorboard_screens", ROOT / "benchmarks" / "tensorboard_screens.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tensorboard_screens", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_the_dashboards_of_a_short_run_in_headless_chromium(tmp_path):
    pytest.importorskip("lightning.pytorch")
    ts = _screens()
    chromium = ts.find_chromium()
    if chromium is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run installs it): "
                    "the dashboards cannot be screenshotted")
    logdir = ts.short_run(tmp_path / "logs", steps=8)
    doc = ts.take(tmp_path / "logs", tmp_path / "screens", chromium=chromium, size=(1600, 1200))
    shots = doc["screens"]
    for tab in ts.TABS:
        assert Path(shots[tab]["file"]).stat().st_size > 10_000, tab
        assert shots[tab]["spread"] > 10, (tab, shots[tab])  # a page with content, not a blank one
    # the layer chart as TensorBoard serves it, at its own size
    from PIL import Image

    with Image.open(shots["layers/train"]["file"]) as im:
        assert im.width >= 900 and im.height >= 300
    assert shots["layers/train"]["spread"] > 20

    data = doc["dashboards"]
    assert Path(logdir).parent.name == "short"
    (run,) = [r for r in data["scalars"] if r.startswith("short")]  # the run "short/version_0" of the log dir
    tags = data["scalars"][run]
    assert {"energy_j_sim/train/step", "energy_j_sim/train/cumulative", "energy_j_sim/train/epoch"} <= set(tags)
    assert [t for t in tags if t.startswith("energy_j_sim_layer/train/")]
    assert "energy_j_sim_region/train/optimizer" in tags
    assert not [t for t in tags if t.startswith("host/")]
    assert "layers/train" in data["images"][run]
    assert any(t.startswith("energy/train_layers") for t in data["text"][run])
    titles = {c["title"] for cat in data["custom_scalars"]["category"] for c in cat["chart"]}
    assert {"step energy (J)", "cumulative energy (J)", "train: top layers, energy per step (J)",
            "train: outside the layers, energy per step (J)"} <= titles
