"""Tests for lightning_edge.zoo: parameter counts, meta-device construction, CPU forward/backward, registry."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from lightning_edge import zoo
from lightning_edge.zoo._common import count_params

NAMES = (
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "yolov8n",
    "lstm",
    "bert_base",
    "bert_large",
)

# Exact counts of our builds (parameters() with tied weights once; BN running stats are buffers, not counted).
EXPECTED_PARAMS = {
    "resnet18": 11_689_512,  # torchvision
    "resnet50": 25_557_032,  # torchvision
    "mobilenet_v2": 3_504_872,  # torchvision
    "mobilenet_v3_large": 5_483_032,  # torchvision
    "yolov8n": 3_157_200,  # Ultralytics model.info(), incl. the 16 fixed DFL weights
    # tied 29423 x 256 = 7,532,288 + fc bias 29,423 + 2 x 4 x (256*256*2 + 2*256) = 1,052,672
    "lstm": 8_614_383,
    "bert_base": 109_482_240,  # HF BertModel bert-base-uncased, with pooler
    "bert_large": 335_141_888,  # HF BertModel bert-large-uncased, with pooler
}

# What the sources publish (Fulcrum Table 3 rounds the LSTM to 8.6M).
PUBLISHED_PARAMS = {**EXPECTED_PARAMS, "lstm": 8_600_000}

TASKS = {
    "resnet18": "vision",
    "resnet50": "vision",
    "mobilenet_v2": "vision",
    "mobilenet_v3_large": "vision",
    "yolov8n": "detection",
    "lstm": "text",
    "bert_base": "text",
    "bert_large": "text",
}

META = torch.device("meta")


def _outputs(y: object) -> list[torch.Tensor]:
    if isinstance(y, torch.Tensor):
        return [y]
    return [t for t in y if t is not None]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- registry


def test_names_are_the_eight_models_in_order() -> None:
    assert zoo.names() == NAMES
    assert [e.name for e in zoo.entries()] == list(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_entry_fields(name: str) -> None:
    e = zoo.get(name)
    assert e.name == name
    assert e.task == TASKS[name]
    assert callable(e.build) and callable(e.inputs)
    assert e.reference_params == PUBLISHED_PARAMS[name]
    assert e.params == EXPECTED_PARAMS[name]
    assert e.description and e.source and e.input_shape


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("mobilenetv3", "mobilenet_v3_large"),
        ("MobileNetV3", "mobilenet_v3_large"),
        ("mobilenet-v3-large", "mobilenet_v3_large"),
        ("MobileNet_V2", "mobilenet_v2"),
        ("bert-base", "bert_base"),
        ("BERT", "bert_base"),
        ("bert-base-uncased", "bert_base"),
        ("BERT-Large", "bert_large"),
        ("ResNet-18", "resnet18"),
        ("RESNET50", "resnet50"),
        ("YOLO", "yolov8n"),
        ("yolov8", "yolov8n"),
        (" lstm ", "lstm"),
        ("LSTM-LM", "lstm"),
    ],
)
def test_aliases_are_case_and_separator_insensitive(alias: str, name: str) -> None:
    assert zoo.get(alias).name == name


def test_aliases_map_to_canonical_names() -> None:
    mapping = zoo.aliases()
    assert set(mapping.values()) == set(NAMES)
    for spelling, name in mapping.items():
        assert zoo.get(spelling).name == name


def test_unknown_name_raises_value_error_listing_available() -> None:
    with pytest.raises(ValueError, match="unknown zoo model 'vgg16'") as info:
        zoo.get("vgg16")
    for name in NAMES:
        assert name in str(info.value)


def test_ambiguous_resnet_is_not_an_alias() -> None:
    with pytest.raises(ValueError):
        zoo.get("resnet")


# --------------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count_exact_and_within_1pct_of_published(name: str) -> None:
    model = zoo.get(name).build(device=META)
    n = count_params(model)
    assert n == EXPECTED_PARAMS[name]
    ref = PUBLISHED_PARAMS[name]
    assert abs(n - ref) / ref < 0.01, f"{name}: {n} vs published {ref}"
    assert abs(zoo.get(name).params_rel_error) < 0.01


def test_yolov8n_trainable_params_exclude_fixed_dfl() -> None:
    model = zoo.yolov8n(device=META)
    assert count_params(model, trainable_only=True) == 3_157_184  # Ultralytics: "3157184 gradients"
    assert not model.model[-1].dfl.conv.weight.requires_grad


def test_lstm_embedding_is_tied_to_decoder() -> None:
    model = zoo.lstm(device=META)
    assert model.embedding.weight is model.fc.weight
    untied = zoo.lstm(device=META, tie_weights=False)
    assert count_params(untied) == EXPECTED_PARAMS["lstm"] + 29_423 * 256


def test_num_classes_changes_the_head() -> None:
    assert zoo.resnet18(num_classes=10, device=META).fc.out_features == 10
    assert zoo.mobilenet_v3_large(num_classes=7, device=META).classifier[-1].out_features == 7
    assert zoo.yolov8n(num_classes=3, device=META).model[-1].no == 3 + 64


# --------------------------------------------------------------------------- meta device


@pytest.mark.parametrize("name", NAMES)
def test_builds_on_meta_device(name: str) -> None:
    model = zoo.get(name).build(device=META)
    tensors = list(model.parameters()) + list(model.buffers())
    assert tensors and all(t.is_meta for t in tensors)


@pytest.mark.parametrize("name", NAMES)
def test_meta_forward_with_default_inputs(name: str) -> None:
    """Every model traces at its default input size on meta tensors (no compute, no memory)."""
    e = zoo.get(name)
    model = e.build(device=META).eval()
    inputs = e.inputs(batch_size=2, device=META)
    assert all(t.is_meta for t in inputs)
    with torch.no_grad():
        out = _outputs(model(*inputs))
    expected = {
        "resnet18": [(2, 1000)],
        "resnet50": [(2, 1000)],
        "mobilenet_v2": [(2, 1000)],
        "mobilenet_v3_large": [(2, 1000)],
        "yolov8n": [(2, 84, 8400)],
        "lstm": [(2, 35, 29_423)],
        "bert_base": [(2, 128, 768), (2, 768)],
        "bert_large": [(2, 128, 1024), (2, 1024)],
    }[name]
    assert [tuple(o.shape) for o in out] == expected


def test_meta_build_honours_dtype() -> None:
    model = zoo.bert_large(device=META, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert model.embeddings.position_ids.dtype == torch.long  # integer buffers are kept


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss semantics differ off Linux")
def test_bert_large_meta_build_allocates_no_real_memory() -> None:
    """A fresh process: peak RSS may not grow by more than a fraction of BERT-large's 1.34 GB of fp32 weights."""
    code = textwrap.dedent(
        """
        import resource
        from lightning_edge.zoo import bert_base, bert_large
        bert_base(device="meta", num_hidden_layers=1)  # warm up lazy imports of torch's meta kernels
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        model = bert_large(device="meta")
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert all(p.is_meta for p in model.parameters())
        print((after - before) * 1024)
        """
    )
    root = str(Path(zoo.__file__).resolve().parents[2])  # so the child imports this checkout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    grew_bytes = int(res.stdout.strip().splitlines()[-1])
    assert grew_bytes < 100 * 2**20, f"meta build of BERT-large grew peak RSS by {grew_bytes / 2**20:.0f} MiB"


# --------------------------------------------------------------------------- example inputs


@pytest.mark.parametrize(
    ("name", "shapes", "dtypes"),
    [
        ("resnet18", [(1, 3, 224, 224)], [torch.float32]),
        ("resnet50", [(1, 3, 224, 224)], [torch.float32]),
        ("mobilenet_v2", [(1, 3, 224, 224)], [torch.float32]),
        ("mobilenet_v3_large", [(1, 3, 224, 224)], [torch.float32]),
        ("yolov8n", [(1, 3, 640, 640)], [torch.float32]),
        ("lstm", [(1, 35)], [torch.long]),
        ("bert_base", [(1, 128), (1, 128)], [torch.long, torch.long]),
        ("bert_large", [(1, 128), (1, 128)], [torch.long, torch.long]),
    ],
)
def test_default_inputs(name: str, shapes: list[tuple[int, ...]], dtypes: list[torch.dtype]) -> None:
    inputs = zoo.get(name).inputs(device=META)
    assert isinstance(inputs, tuple)
    assert [tuple(t.shape) for t in inputs] == shapes
    assert [t.dtype for t in inputs] == dtypes


def test_inputs_honour_batch_seq_len_dtype_and_seed() -> None:
    (x,) = zoo.resnet18_inputs(batch_size=3, dtype=torch.float64)
    assert x.shape == (3, 3, 224, 224) and x.dtype == torch.float64
    assert torch.equal(zoo.resnet18_inputs(2)[0], zoo.resnet18_inputs(2)[0])
    assert not torch.equal(zoo.resnet18_inputs(2, seed=1)[0], zoo.resnet18_inputs(2)[0])
    (img,) = zoo.yolov8n_inputs(1)
    assert 0.0 <= img.min() and img.max() < 1.0
    (tokens,) = zoo.lstm_inputs(batch_size=4, seq_len=20)
    assert tokens.shape == (4, 20) and 0 <= tokens.min() and tokens.max() < 29_423
    ids, mask = zoo.bert_base_inputs(batch_size=2, seq_len=64)
    assert ids.shape == mask.shape == (2, 64) and bool((mask == 1).all()) and ids.max() < 30_522
    with pytest.raises(ValueError, match="512"):
        zoo.bert_base_inputs(seq_len=513)


# --------------------------------------------------------------------------- CPU forward / backward

CLASSIFIERS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large")


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_classifier_eval_and_train_on_cpu(name: str) -> None:
    e = zoo.get(name)
    torch.manual_seed(0)
    model = e.build()
    (x,) = e.inputs(batch_size=2)
    model.eval()
    with torch.no_grad():
        y = model(x)
    assert y.shape == (2, 1000) and torch.isfinite(y).all()
    model.train()
    y = model(x)
    y.logsumexp(-1).mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_yolov8n_eval_decodes_and_train_returns_levels() -> None:
    torch.manual_seed(0)
    model = zoo.yolov8n()
    (x,) = zoo.yolov8n_inputs(batch_size=1)
    model.eval()
    with torch.no_grad():
        y = model(x)
    assert y.shape == (1, 84, 8400)  # 4 xywh + 80 class scores, 80^2 + 40^2 + 20^2 anchors
    boxes, scores = y[:, :4], y[:, 4:]
    assert torch.isfinite(boxes).all() and (boxes[:, 2:] >= 0).all()
    assert ((scores >= 0) & (scores <= 1)).all()
    # first anchor sits at the centre of the first stride-8 cell; with the untrained head it predicts
    # the DFL mean distance (7.5 bins) on each side
    assert torch.allclose(boxes[0, :2, 0], torch.tensor([4.0, 4.0]), atol=0.5)
    model.train()
    levels = model(x)
    assert [tuple(t.shape) for t in levels] == [(1, 144, 80, 80), (1, 144, 40, 40), (1, 144, 20, 20)]
    sum(t.square().mean() for t in levels).backward()
    assert model.model[0].conv.weight.grad is not None
    assert model.model[-1].dfl.conv.weight.grad is None


def test_lstm_forward_backward_and_state() -> None:
    torch.manual_seed(0)
    model = zoo.lstm()
    (tokens,) = zoo.lstm_inputs(batch_size=2)
    logits = model(tokens)
    assert logits.shape == (2, 35, 29_423)
    nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    assert model.fc.weight.grad is not None and model.lstm.weight_hh_l1.grad is not None
    model.eval()
    with torch.no_grad():
        out, (h, c) = model.step(tokens, model.init_hidden(2))
        assert h.shape == c.shape == (2, 2, 256)
        assert torch.allclose(out, model(tokens), atol=1e-5)


def test_bert_base_forward_backward_short_sequence() -> None:
    torch.manual_seed(0)
    model = zoo.bert_base()
    ids, mask = zoo.bert_base_inputs(batch_size=2, seq_len=16)
    model.eval()
    with torch.no_grad():
        out = model(ids, mask)
    assert out.last_hidden_state.shape == (2, 16, 768) and out.pooler_output.shape == (2, 768)
    assert torch.isfinite(out.last_hidden_state).all()
    model.train()
    hidden, pooled = model(ids, mask)
    (hidden.mean() + pooled.mean()).backward()
    assert model.encoder.layer[11].attention.self.query.weight.grad is not None


def test_bert_sdpa_matches_eager_attention_with_padding() -> None:
    torch.manual_seed(0)
    sdpa = zoo.bert_base(num_hidden_layers=2).eval()
    eager = zoo.bert_base(num_hidden_layers=2, attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    ids, mask = zoo.bert_base_inputs(batch_size=2, seq_len=12)
    mask[1, 7:] = 0
    with torch.no_grad():
        a, b = sdpa(ids, mask), eager(ids, mask)
        c = sdpa(ids)  # no mask: attend everywhere
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(c.last_hidden_state[0], a.last_hidden_state[0], atol=1e-4, rtol=1e-4)


def test_bert_uses_functional_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    model = zoo.bert_base(device=META, num_hidden_layers=3).eval()
    model(*zoo.bert_base_inputs(batch_size=1, seq_len=8, device=META))
    assert len(calls) == 3


# --------------------------------------------------------------------------- naming compatibility


def test_state_dict_names_follow_upstream() -> None:
    keys = {
        "resnet18": "layer4.1.bn2.running_var",
        "resnet50": "layer1.0.downsample.0.weight",
        "mobilenet_v2": "features.18.0.weight",
        "mobilenet_v3_large": "features.4.block.2.fc1.weight",
        "yolov8n": "model.22.dfl.conv.weight",
        "lstm": "lstm.weight_ih_l1",
        "bert_base": "encoder.layer.11.attention.output.LayerNorm.weight",
        "bert_large": "pooler.dense.weight",
    }
    for name, key in keys.items():
        assert key in zoo.get(name).build(device=META).state_dict(), name
