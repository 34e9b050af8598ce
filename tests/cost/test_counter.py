"""analyze(): attribution to the innermost module, functional calls, training, fold_bn, dtypes."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import lightning_edge
from lightning_edge.cost import analyze


class Attention(nn.Module):
    """Functional calls inside a non-leaf module: q @ k^T style work counted here, not lost."""

    def __init__(self, d=16, h=2, fused=True):
        super().__init__()
        self.h, self.fused = h, fused
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            att = (q @ k.transpose(-1, -2)) * (d // self.h) ** -0.5
            y = att.softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.down = nn.Conv2d(3, 8, 1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)))
        y = y + self.down(x)  # residual add: counted in Net itself
        y = F.conv2d(y, self.conv.weight.new_empty(8, 8, 1, 1))  # a functional conv in forward
        y = torch.cat([y, y], 1)[:, :8]
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


def test_layers_are_named_as_named_modules_in_execution_order():
    cost = analyze(Net(), torch.randn(2, 3, 8, 8))
    names = [lc.name for lc in cost.layers]
    assert names == ["", "conv", "bn", "relu", "down", "fc"]
    modules = dict(Net().named_modules())
    for lc in cost.layers:
        assert lc.name in modules
        assert lc.kind == type(modules[lc.name]).__name__


def test_functional_calls_are_counted_where_they_happen():
    cost = analyze(Net(), torch.randn(2, 3, 8, 8))
    root = cost.layer("")
    # F.conv2d 8->8 1x1 over 2x8x8x8: 2*8*8*8*8 MAC = 8192; the add, the cat, the pooling also land here
    assert root.macs == 2 * 8 * 8 * 8 * 8
    assert root.ops["convolution"] == 1 and root.ops["add"] == 1 and root.ops["cat"] == 1
    # the module conv itself: 2*8*8*8*3*3*3 MAC
    assert cost.layer("conv").macs == 2 * 8 * 8 * 8 * 27
    assert cost.layer("conv").params == 8 * 3 * 9


def test_totals_are_sums_of_layers():
    cost = analyze(Net(), torch.randn(2, 3, 8, 8))
    assert cost.flops == sum(lc.flops for lc in cost.layers)
    assert cost.bytes == cost.bytes_read + cost.bytes_written
    assert cost.intensity == pytest.approx(cost.flops / cost.bytes)
    assert cost.params == sum(p.numel() for p in Net().parameters())


def test_attention_matmuls_counted_in_the_attention_module_fused_and_unfused():
    x = torch.randn(2, 5, 16)
    for fused in (True, False):
        cost = analyze(Attention(fused=fused), x)
        own = cost.layer("")
        # B=2, H=2, L=S=5, Dh=8: QK^T and PV are 2*2*5*5*8 MAC each = 800 + 800
        assert own.macs == 1600, fused
        assert cost.layer("qkv").macs == 2 * 5 * 16 * 48


def test_training_counts_backward_on_the_module_that_ran_forward():
    cost = analyze(Net(), torch.randn(2, 3, 8, 8), training=True)
    conv = cost.layer("conv")
    fwd = 2 * 8 * 8 * 8 * 27
    assert conv.forward.macs == fwd
    # input does not require grad: the first conv computes only its weight gradient
    assert conv.backward.macs == fwd
    assert cost.layer("down").backward.macs == 2 * 8 * 8 * 8 * 3
    fc = cost.layer("fc")
    assert fc.backward.macs == 2 * 2 * 8 * 4  # grad input (2x4 @ 4x8) + grad weight (4x2 @ 2x8)
    # the residual add and mean backward belong to Net itself, not to fc
    assert "div" not in fc.ops
    assert cost.backward.flops > 0 and cost.flops == cost.forward.flops + cost.backward.flops


def test_backward_of_inplace_relu_is_attributed():
    cost = analyze(Net(), torch.randn(2, 3, 8, 8), training=True)
    relu = cost.layer("relu")
    assert relu.ops["threshold_backward"] == 1
    assert relu.backward.flops == 2 * 8 * 8 * 8


def test_frozen_layers_get_no_weight_gradient():
    net = Net()
    for p in net.conv.parameters():
        p.requires_grad_(False)
    cost = analyze(net, torch.randn(2, 3, 8, 8), training=True)
    assert cost.layer("conv").backward.macs == 0


def test_training_with_everything_frozen_is_a_clear_error():
    net = nn.Linear(3, 3).requires_grad_(False)
    with pytest.raises(ValueError, match="requires grad"):
        analyze(net, torch.randn(1, 3), training=True)


def test_shared_module_called_twice():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(self.fc(x))

    cost = analyze(Twice(), torch.randn(3, 4))
    fc = cost.layer("fc")
    assert fc.calls == 2
    assert fc.macs == 2 * 3 * 4 * 4
    assert fc.params == 20  # counted once


def test_fold_bn_removes_bn_and_gives_the_conv_a_bias():
    x = torch.randn(2, 3, 8, 8)
    plain = analyze(Net(), x)
    folded = analyze(Net(), x, fold_bn=True)
    assert "bn" not in [lc.name for lc in folded.layers]
    conv_p, conv_f = plain.layer("conv"), folded.layer("conv")
    assert conv_f.params == conv_p.params + 8
    assert conv_f.flops == conv_p.flops + 2 * 8 * 8 * 8  # one bias add per output element
    assert conv_f.bytes_read == conv_p.bytes_read + 8 * 4
    assert folded.flops < plain.flops
    assert any("folded" in n for n in folded.notes)


def test_fold_bn_with_training_is_rejected():
    with pytest.raises(ValueError, match="fold_bn"):
        analyze(Net(), torch.randn(1, 3, 8, 8), training=True, fold_bn=True)


def test_dtype_fp16_halves_the_bytes():
    x = torch.randn(2, 3, 8, 8)
    f32 = analyze(Net(), x)
    f16 = analyze(Net(), x, dtype="fp16")
    assert f16.flops == f32.flops
    for name in ("conv", "down", "fc", "relu"):
        assert f16.layer(name).bytes * 2 == f32.layer(name).bytes, name
    # BatchNorm keeps its saved statistics in fp32 (as mixed precision does): not quite half
    assert f16.bytes * 2 == pytest.approx(f32.bytes, rel=0.01)
    assert f16.dtype == "float16"
    with pytest.raises(ValueError, match="expected one of"):
        analyze(Net(), x, dtype="fp7")


def test_model_is_not_modified_and_nothing_real_is_computed():
    net = Net().train()
    net.bn.eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    analyze(net, torch.randn(2, 3, 8, 8), training=True)
    assert net.training and not net.bn.training
    for k, v in net.state_dict().items():
        assert v.device.type == "cpu"
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in net.parameters())


def test_meta_model_and_meta_inputs():
    with torch.device("meta"):
        net = Net()
    cost = analyze(net, torch.empty(2, 3, 8, 8, device="meta"))
    assert cost.layer("conv").macs == 2 * 8 * 8 * 8 * 27


def test_unknown_op_is_listed_and_warned_once():
    class Odd(nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x) + 1  # no formula for bessel_j0

    with pytest.warns(UserWarning, match="special_bessel_j0"):
        cost = analyze(Odd(), torch.randn(4))
    assert cost.uncounted["special_bessel_j0"] == 1
    assert "uncounted" in cost.table()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        analyze(Odd(), torch.randn(4))  # second time: listed, not warned again


def test_errors_are_clear():
    with pytest.raises(TypeError, match="nn.Module"):
        analyze(lambda x: x, torch.randn(1))
    with pytest.raises(ValueError, match="example inputs"):
        analyze(Net())


def test_keyword_inputs():
    class KW(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, scale=None):
            return self.fc(x) * scale

    cost = analyze(KW(), torch.randn(3, 4), scale=torch.randn(3, 2))
    assert cost.layer("").ops["mul"] == 1


def test_lstm_is_counted_through_its_aten_ops():
    lstm = nn.LSTM(8, 16, num_layers=2)
    cost = analyze(lstm, torch.randn(5, 1, 8))
    assert not cost.uncounted
    # per step and layer: 4 gates x (input + hidden) projections
    expected = 5 * 1 * (4 * 16 * (8 + 16) + 4 * 16 * (16 + 16))
    assert cost.macs == expected


def test_table_and_json(tmp_path):
    cost = analyze(Net(), torch.randn(2, 3, 8, 8))
    table = cost.table()
    assert "conv" in table and "TOTAL" in table and "FLOP/B" in table
    assert len(cost.table(top=2, sort="flops").splitlines()) < len(table.splitlines())
    d = cost.to_dict()
    assert d["flops"] == cost.flops and d["label"] == "estimated"
    assert [lc["name"] for lc in d["layers"]] == [lc.name for lc in cost.layers]
    path = tmp_path / "c.json"
    cost.to_json(path)
    import json

    assert json.loads(path.read_text())["layers"][1]["forward"]["macs"] == cost.layer("conv").forward.macs


def test_top_level_export():
    assert lightning_edge.analyze is analyze


def test_inside_inference_mode_everything_is_counted():
    # Lightning's validate/test/predict loops run in inference_mode
    with torch.inference_mode():
        cost = analyze(Net(), torch.randn(2, 3, 8, 8))
    assert not cost.uncounted
    assert cost.layer("fc").macs == 2 * 8 * 4


def test_parameters_of_a_module_never_called_still_count():
    """A parent that reads a child's weight directly (Whisper's positional embedding in transformers 4.x): the
    child never runs, its parameters are still the model's (they were missing from the total)."""

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Embedding(16, 8)
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            return self.proj(x + self.pos.weight[: x.shape[1]])

    model = Encoder()
    cost = analyze(model, torch.randn(2, 16, 8))
    assert cost.params == sum(p.numel() for p in model.parameters()) == 16 * 8 + 8 * 8 + 8
    assert cost.layer("pos").params == 16 * 8 and cost.layer("pos").flops == 0 and cost.layer("pos").calls == 0
    assert any("never called" in n and "pos" in n for n in cost.notes)
    # the weight read counts where it is read: the parent's add
    assert cost.layer("").forward.flops == 2 * 16 * 8


def test_record_function_markers_cost_nothing_and_raise_no_warning():
    """A model that marks its regions with torch.profiler.record_function (as Lightning's PyTorchProfiler does
    around every hook) counts the same as without them, and analyze says nothing about 'profiler::' ops."""
    import warnings

    from lightning_edge.cost import analyze

    class Marked(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 8)

        def forward(self, x):
            with torch.profiler.record_function("my_region"):
                return self.fc(x)

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 8)

        def forward(self, x):
            return self.fc(x)

    x = torch.randn(4, 16)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        marked = analyze(Marked(), x, training=True)
    assert not [w for w in seen if "profiler::" in str(w.message)]
    plain = analyze(Plain(), x, training=True)
    assert marked.flops == plain.flops and marked.bytes == plain.bytes
    assert not any(k.startswith("profiler::") for k in marked.uncounted)
