"""analyze() on LightningModules of both class hierarchies (they are nn.Modules)."""

import pytest
import torch
from torch import nn

from lightning_edge import analyze


def _make(base):
    class Classifier(base):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Classifier()


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_lightning_module(package):
    mod = pytest.importorskip(package)
    model = _make(mod.LightningModule)
    cost = analyze(model, torch.randn(2, 3, 8, 8), training=True)
    names = [lc.name for lc in cost.layers]
    assert names == ["net.0", "net.1", "net.2", "net.3"]
    conv = cost.layer("net.0")
    assert conv.forward.macs == 2 * 4 * 6 * 6 * 3 * 9
    assert cost.layer("net.3").forward.macs == 2 * 144 * 10
    assert model.training  # left as it was
