"""Compatibility: ``analyze`` and the shared capture (what ``EnergyProfiler`` and ``PowerModeTuner`` run) on Hugging Face
``transformers`` models built from small configs (no weights downloaded), called the way HF training loops call them:
``model(**batch)`` with ``input_ids`` / ``attention_mask`` / ``labels`` (issue 17 item 7, the ``analyze`` half).

Every test checks what a user reads: FLOP on the layers, the notes, totals against a hand count where one is cheap.
Before the shared capture, BERT, GPT-2, Llama and T5 raised ``Tensor.item() cannot be called on meta tensors`` (HF's
mask builders branch on ``attention_mask.all()``) and GPT-2 with ``gradient_checkpointing_enable()`` as well."""

from __future__ import annotations

import logging
import warnings

import pytest
from torch import nn

from .hf import transformers_or_skip  # noqa: E402

transformers = transformers_or_skip()

from lightning_edge._torchcompat import SDPA_TAKES_GQA  # noqa: E402
from lightning_edge.cost import analyze  # noqa: E402
from lightning_edge.cost.capture import CallCapture  # noqa: E402
from lightning_edge.cost.counter import step_cost  # noqa: E402

logging.getLogger("transformers").setLevel(logging.ERROR)
transformers.logging.set_verbosity_error()

from .hf import HEADS, HIDDEN, MODELS, B, L, V, bert, gpt2, llama, t5, vit, whisper  # noqa: E402,F401


def _transformers_major() -> int:
    return int(transformers.__version__.split(".")[0])


def _linears(model):
    """Every matmul layer: nn.Linear and GPT-2's Conv1D (weight (in, out))."""
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"}


def _in_out(m):
    if isinstance(m, nn.Linear):
        return m.in_features, m.out_features
    return tuple(m.weight.shape)


@pytest.mark.parametrize("name", list(MODELS))
def test_analyze_training_step_of_a_hf_model(name):
    model, batch = MODELS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "no cost formula" warning: every op is counted
        cost = analyze(model, training=True, **batch)
    assert cost.training and not cost.uncounted, cost.uncounted
    assert "loss" not in str(cost.notes)
    # every matmul layer that ran has its forward and backward FLOP, and they match a hand count: MAC = rows x in x out
    for lname, m in _linears(model).items():
        lc = cost.layer(lname)
        fin, fout = _in_out(m)
        rows, rem = divmod(lc.forward.macs, fin * fout)
        assert lc.forward.macs > 0 and rem == 0 and rows % B == 0, (lname, lc.forward.macs)
        assert lc.backward.macs == 2 * lc.forward.macs or (lc.backward.macs == lc.forward.macs and "embed" in lname), \
            (lname, lc.forward.macs, lc.backward.macs)  # input and weight gradients
    # the training step costs about 3x its forward (backward = 2x for the matmuls)
    assert 2.5 < cost.flops / cost.forward.flops < 3.6
    assert cost.intensity > 0 and cost.params == sum(p.numel() for p in model.parameters())


def test_bert_hand_count():
    model, batch = bert()
    cost = analyze(model, **batch)
    rows = B * L
    q = cost.layer("bert.encoder.layer.0.attention.self.query")
    assert q.forward.macs == rows * HIDDEN * HIDDEN
    # the attention itself (fused SDPA, not causal): B x heads x L x L pairs x (dq + dv) MAC
    attn = cost.layer("bert.encoder.layer.0.attention.self")
    assert attn.forward.macs == B * HEADS * L * L * (2 * HIDDEN // HEADS)
    assert cost.layer("classifier").forward.macs == B * HIDDEN * 3


def test_gpt2_lm_head_and_causal_attention():
    model, batch = gpt2()
    cost = analyze(model, **batch)
    hd = HIDDEN // HEADS
    causal_pairs = L * (L + 1) // 2  # the all-ones attention mask is skipped: is_causal, pairs halved
    assert cost.layer("transformer.h.0.attn").forward.macs == B * HEADS * causal_pairs * 2 * hd
    assert cost.layer("lm_head").forward.macs == B * L * HIDDEN * V
    # a padded batch keeps an explicit mask: every pair is computed
    padded = dict(batch, attention_mask=batch["attention_mask"].clone())
    padded["attention_mask"][0, -3:] = 0
    cost_pad = analyze(model, **padded)
    assert cost_pad.layer("transformer.h.0.attn").forward.macs == B * HEADS * L * L * 2 * hd


def test_llama_grouped_query_attention_is_one_fused_causal_kernel():
    model, batch = llama()
    cost = analyze(model, training=True, **batch)
    hd = HIDDEN // HEADS
    attn = cost.layer("model.layers.0.self_attn")  # its own op: the attention (projections are its children)
    assert attn.forward.macs == B * HEADS * (L * (L + 1) // 2) * 2 * hd
    assert cost.layer("model.layers.0.self_attn.k_proj").forward.macs == B * L * HIDDEN * (2 * hd)  # 2 KV heads
    # transformers 4.x repeats the key/value heads itself before torch 2.5 (no enable_gqa): then no GQA call
    assert any("grouped-query" in n for n in cost.notes) == (SDPA_TAKES_GQA or _transformers_major() >= 5)


def test_vit_and_whisper_convolutions():
    model, batch = vit()
    cost = analyze(model, **batch)
    patches = (32 // 8) ** 2
    assert cost.layer("vit.embeddings.patch_embeddings.projection").forward.macs == B * patches * 3 * 8 * 8 * HIDDEN
    model, batch = whisper()
    cost = analyze(model, **batch)
    assert cost.layer("model.encoder.conv1").forward.macs == B * 32 * 8 * 3 * HIDDEN  # k=3, padding 1, stride 1
    assert cost.layer("model.encoder.conv2").forward.macs == B * 16 * HIDDEN * 3 * HIDDEN  # stride 2


@pytest.mark.parametrize("reentrant", [False, True])
def test_gpt2_gradient_checkpointing(reentrant):
    # before: "Tensor.item() cannot be called on meta tensors"
    model, batch = gpt2()
    plain = analyze(model, training=True, **batch)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    ck = analyze(model, training=True, **batch)
    assert any("activation checkpointing" in n for n in ck.notes)
    blocks_fwd = sum(lc.forward.flops for lc in plain.layers if lc.name.startswith("transformer.h."))
    assert ck.forward.flops == pytest.approx(plain.forward.flops, rel=1e-3)
    assert ck.flops == pytest.approx(plain.flops + blocks_fwd, rel=0.01)  # each block's forward runs once more


@pytest.mark.parametrize("name", list(MODELS))
def test_shared_capture_of_a_hf_training_step(name):
    """What the profiler and the tuner do: capture the real call of a training step, then cost it."""
    model, batch = MODELS[name]()
    with CallCapture(model) as cap:
        out = model(**batch)
        out.loss.backward()
    (call,) = cap.captured.calls
    assert call.module == "" and set(call.kwargs) == set(batch) and call.grad
    cost = step_cost(model, cap.captured)
    direct = analyze(model, training=True, **batch)
    assert cost.flops == direct.flops and cost.training
    assert [lc.name for lc in cost.layers] == [lc.name for lc in direct.layers]


def test_batch_encoding_batches():
    model, batch = bert()
    enc = transformers.BatchEncoding({k: v for k, v in batch.items()})
    with CallCapture(model) as cap:
        model(**enc)
    assert step_cost(model, cap.captured, training=False).flops == analyze(model, **batch).flops
