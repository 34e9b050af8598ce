"""analyze() on every zoo model: exact conv/linear MACs, agreement with FlopCounterMode, nothing uncounted."""

import math

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from lightning_edge import analyze, zoo

META = torch.device("meta")
SMALL = {"batch_size": 2}


def _inputs(entry, batch_size=2):
    kw = {"batch_size": batch_size, "device": META}
    if entry.task == "text":
        kw["seq_len"] = 16
    return entry.inputs(**kw)


def _independent_macs(model, inputs):
    """Conv and Linear MACs from the shapes seen by plain forward hooks (not our counter)."""
    macs, handles = {}, []
    names = {m: n for n, m in model.named_modules()}

    def hook(mod, args, out):
        x = args[0]
        if isinstance(mod, nn.Linear):
            # every input row meets every weight element once
            m = math.prod(x.shape[:-1]) * mod.in_features * mod.out_features
        else:  # _ConvNd: N * out spatial * C_out * C_in/groups * kernel
            m = x.shape[0] * math.prod(out.shape[2:]) * mod.out_channels * (mod.in_channels // mod.groups) \
                * math.prod(mod.kernel_size)
        macs[names[mod]] = macs.get(names[mod], 0) + m

    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            handles.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return macs


@pytest.mark.parametrize("name", zoo.names())
def test_conv_and_linear_macs_are_exact(name):
    entry = zoo.get(name)
    model = entry.build(device=META).eval()
    inputs = _inputs(entry)
    expected = _independent_macs(model, inputs)
    assert expected, "model has conv/linear layers"
    cost = analyze(model, *inputs)
    for layer, macs in expected.items():
        assert cost.layer(layer).forward.macs == macs, layer


@pytest.mark.parametrize("name", zoo.names())
def test_nothing_uncounted_and_params_match(name):
    entry = zoo.get(name)
    model = entry.build(device=META)
    infer = analyze(model, *_inputs(entry))
    assert not infer.uncounted, infer.uncounted
    # every parameter belongs to a layer that ran (YOLO's DFL runs only in inference)
    assert infer.params == sum(p.numel() for p in model.parameters())
    train = analyze(model, *_inputs(entry), training=True)
    assert not train.uncounted, train.uncounted
    assert train.backward.flops > train.forward.flops  # gradients of inputs and weights


def _flop_counter_total(model, inputs, training):
    model.train(training)
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(*inputs)
        if training:
            outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if o.requires_grad]
            torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    model.eval()
    return counter.get_total_flops()


# FlopCounterMode counts matrix products, convolutions and attention at 2 FLOP per MAC (no bias):
# compare it with 2 x our MACs. Training is compared on the CNNs without grouped convolutions:
# torch's convolution_backward formula ignores groups (MobileNet's depthwise layers come out 7-9x
# too large there), and it counts the math path of attention backward (4 products) where we count
# the fused kernel (5, with the recompute).
CROSSCHECK = [(n, False) for n in zoo.names()] + [("resnet18", True), ("resnet50", True), ("yolov8n", True),
                                                  ("lstm", True)]


@pytest.mark.parametrize("name, training", CROSSCHECK)
def test_agrees_with_flop_counter_mode(name, training):
    entry = zoo.get(name)
    model = entry.build(device=META)
    inputs = _inputs(entry)
    ours = 2 * analyze(model, *inputs, training=training).macs
    ref = _flop_counter_total(model, inputs, training)
    assert ours == pytest.approx(ref, rel=0.005)


def test_bert_large_bs64_is_fast_and_matches_pagoda_flop():
    entry = zoo.get("bert_large")
    model = entry.build(device=META)
    cost = analyze(model, *entry.inputs(batch_size=64, seq_len=128, device=META))
    # Pagoda Table 3: analytical 5064.72 GFLOP for BERT-large at batch 64 (seq 128); NCU 5835
    assert cost.flops / 1e9 == pytest.approx(5064.72, rel=0.05)
