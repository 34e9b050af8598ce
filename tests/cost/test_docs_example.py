"""The worked example of docs/cost-model.md, checked against analyze()."""

import torch
from torch import nn

from lightning_edge import analyze


def test_resnet18_layer1_conv1_worked_example():
    cost = analyze(nn.Conv2d(64, 64, 3, padding=1, bias=False), torch.empty(1, 64, 56, 56))
    (layer,) = cost.layers
    assert layer.macs == 1 * 64 * 56 * 56 * 64 * 3 * 3 == 115_605_504
    assert layer.flops == 231_211_008
    assert layer.bytes_read == 802_816 + 147_456 == 950_272
    assert layer.bytes_written == 802_816
    assert layer.bytes == 1_753_088
    assert round(layer.intensity, 1) == 131.9
