"""Issue 28: TensorBoard answers 'where does the energy go' at a glance. A short twin fit (a few seconds, the
defaults) read back from its event files: the layer chart is there and large, each layer and each row outside the
layers is its own series, non-zero, the energy cards sort first, no flat-zero series."""

from __future__ import annotations

import io
import re

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _tb_order(a: str, b: str) -> int:
    """TensorBoard's compareTagNames (the order of its Scalars and Time Series cards and card groups): numbers
    compare as numbers, '/' (and '_' in the Scalars tab) before any other character, else character codes."""
    i = j = 0
    brk = ("/", "_")
    while True:
        if i == len(a):
            return 0 if j == len(b) else -1
        if j == len(b):
            return 1
        if a[i].isdigit() and b[j].isdigit():
            ni, nj = i, j
            while i < len(a) and a[i].isdigit():
                i += 1
            while j < len(b) and b[j].isdigit():
                j += 1
            if int(a[ni:i]) != int(b[nj:j]):
                return -1 if int(a[ni:i]) < int(b[nj:j]) else 1
            continue
        if a[i] in brk and b[j] not in brk:
            return -1
        if b[j] in brk and a[i] not in brk:
            return 1
        if a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i += 1
        j += 1


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    L = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import TensorBoardLogger

    from lightning_edge.lightning.pytorch import EnergyProfiler

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                     nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                     nn.Flatten(), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def training_step(self, batch, i):
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)  # Lightning then logs its own 'epoch' scalar too
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    tmp = tmp_path_factory.mktemp("tb28")
    g = torch.Generator().manual_seed(0)
    dl = DataLoader(TensorDataset(torch.randn(64, 3, 16, 16, generator=g), torch.randint(0, 4, (64,), generator=g)),
                    batch_size=8)
    cb = EnergyProfiler(device="sim:orin-agx", print_summary=False)  # the defaults: figure="auto", the budget
    logger = TensorBoardLogger(str(tmp), name="short")
    trainer = L.Trainer(max_steps=8, logger=logger, callbacks=[cb], accelerator="cpu", devices=1,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        log_every_n_steps=2, default_root_dir=str(tmp))
    trainer.fit(Net(), dl)
    acc = EventAccumulator(logger.log_dir, size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return cb, acc


def test_a_short_run_gets_its_layer_chart_large_enough_to_read(short_run):
    import numpy as np
    from PIL import Image

    cb, acc = short_run
    assert cb.overhead.run_wall_s < 60  # a short run
    assert "layers/train" in acc.Tags()["images"], cb.report.notes
    (ev,) = acc.Images("layers/train")
    assert ev.width >= 900 and ev.height >= 300, (ev.width, ev.height)
    img = np.asarray(Image.open(io.BytesIO(ev.encoded_image_string)).convert("RGB"))
    assert img.shape[1] == ev.width and img.std() > 20  # drawn, not blank
    blue = (img[..., 2] > 150) & (img[..., 0] < 110)  # the layers' bars
    assert blue.sum() > 2000
    assert not any("bar charts not drawn" in n for n in cb.report.notes)


def test_each_layer_and_each_row_outside_the_layers_is_its_own_non_zero_series(short_run):
    cb, acc = short_run
    scalars = acc.Tags()["scalars"]
    layer_tags = [t for t in scalars if t.startswith("energy_j_sim_layer/train/")]
    region_tags = [t for t in scalars if t.startswith("energy_j_sim_region/train/")]
    layers = [t.rsplit("/", 1)[1] for t in layer_tags]
    # one tag per layer, named by the layer (the series' legend in the custom-scalars chart is its tag)
    assert len(layers) == len(set(layers)) >= 4 and all(n.startswith("net.") for n in layers), layers
    assert {"optimizer", "loss"} <= {t.rsplit("/", 1)[1] for t in region_tags}, region_tags
    assert not [t for t in scalars if "(" in t or ")" in t]  # custom scalars draw nothing for such tags
    for t in layer_tags + region_tags:
        vals = [e.value for e in acc.Scalars(t)]
        assert vals and all(v > 0 for v in vals), (t, vals)
    # distinct series: the layers' values are not one line
    firsts = {round(acc.Scalars(t)[0].value, 9) for t in layer_tags}
    assert len(firsts) > 1
    # no flat-zero series anywhere, this machine's time of the twin-only rows ((idle and CPU), (loss)) included
    for t in scalars:
        if t == "epoch":
            continue  # Lightning's own
        vals = [e.value for e in acc.Scalars(t)]
        assert any(v != 0 for v in vals), t
    assert not [t for t in scalars if t.startswith("time_ms_host") and t.endswith(("idle_and_CPU", "loss"))]
    assert not [t for t in scalars if t.startswith("host/")]


def test_the_energy_cards_come_first_and_the_layout_charts_match_their_series(short_run):
    import functools

    cb, acc = short_run
    scalars = acc.Tags()["scalars"]
    assert "epoch" in scalars and "train_loss" in scalars  # Lightning's, not ours
    ordered = sorted(scalars, key=functools.cmp_to_key(_tb_order))
    groups = list(dict.fromkeys(t.split("/", 1)[0] for t in ordered))
    assert groups[0] == "energy_j_sim", groups
    assert groups.index("energy_j_sim_layer") < groups.index("epoch")
    first = [t for t in ordered if t.startswith("energy_j_sim/")]
    assert {"energy_j_sim/train/step", "energy_j_sim/train/cumulative", "energy_j_sim/train/epoch",
            "energy_j_sim/train/per_sample"} <= set(first)
    cum = [e.value for e in acc.Scalars("energy_j_sim/train/cumulative")]
    assert len(cum) >= 3 and cum == sorted(cum) and cum[-1] > cum[0]  # a line, where the epoch's total is a point
    # every card says simulated
    assert "SIMULATED" in acc.SummaryMetadata("energy_j_sim_layer/train/net.0").summary_description

    from tensorboard.plugins.custom_scalar import layout_pb2

    lay = layout_pb2.Layout()
    lay.ParseFromString(acc.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0])
    charts = {c.title: list(c.multiline.tag) for cat in lay.category for c in cat.chart}
    layers_re = charts["train: top layers, energy per step (J)"]
    outside_re = charts["train: outside the layers, energy per step (J)"]

    def matching(regexes):
        return {t for t in scalars if any(re.search(r, t) for r in regexes)}

    assert matching(layers_re) == {t for t in scalars if t.startswith("energy_j_sim_layer/train/")}
    assert matching(outside_re) == {t for t in scalars if t.startswith("energy_j_sim_region/train/")}
    assert matching(charts["step energy (J)"]) == {"energy_j_sim/train/step"}
    assert matching(charts["cumulative energy (J)"]) == {"energy_j_sim/train/cumulative"}
