"""The same model gives the same FLOP, MAC and bytes on every supported torch (2.1, 2.3, 2.5 and the newest).

``data/golden_counts.json`` holds the counts of the zoo, a few Hugging Face configs, a ``torch.compile``d model, an
activation-checkpointed one and bf16 autocast, as the README's stack counts them; every stack of the CI matrix
compares its own counts with them (within 1 %). Version-specific decompositions (SDPA variants, fused norms) must
count as their older spellings do for this to hold. After a deliberate change to the cost model, regenerate on the
README's stack: ``python tests/cost/test_golden_counts.py --update``."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from lightning_edge import analyze, zoo

DATA = Path(__file__).with_name("data") / "golden_counts.json"
META = torch.device("meta")
REL = 0.01  # the tolerance; the counts are in fact equal where the ops are


def _zoo(name, training, **kw):
    def build():
        entry = zoo.get(name)
        ins = {"batch_size": 2, "device": META}
        if entry.task == "text":
            ins["seq_len"] = 16
        return entry.build(device=META), entry.inputs(**ins), {}, dict(training=training, **kw)
    return build


class Small(nn.Module):
    def __init__(self, ckpt: bool = False, reentrant: bool = False):
        super().__init__()
        self.ckpt, self.reentrant = ckpt, reentrant
        self.conv = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.GELU(), nn.Conv2d(16, 16, 1))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.conv(x)
        if self.ckpt:
            x = x + checkpoint(self.block, x, use_reentrant=self.reentrant)
        else:
            x = x + self.block(x)
        return self.head(x.mean((2, 3)))


def _small(training, compiled=False, **kw):
    def build():
        torch.manual_seed(0)
        m = Small(**kw)
        if compiled:
            m.block = torch.compile(m.block)
        return m, (torch.randn(2, 3, 16, 16, requires_grad=False),), {}, dict(training=training)
    return build


def _hf(name, training):
    def build():
        from tests.compat import hf

        torch.manual_seed(0)
        model, batch = (hf.llama_mha if name == "llama-mha" else hf.MODELS[name])()
        return model, (), batch, dict(training=training)
    return build


CASES = {
    **{f"zoo/{n}/infer": _zoo(n, False) for n in zoo.names()},
    **{f"zoo/{n}/train": _zoo(n, True) for n in zoo.names()},
    "zoo/resnet18/train-bf16-autocast": _zoo("resnet18", True, autocast="bf16"),
    "zoo/bert_base/train-bf16-autocast": _zoo("bert_base", True, autocast="bf16"),
    "zoo/mobilenet_v2/infer-fp16": _zoo("mobilenet_v2", False, dtype="fp16"),
    "zoo/resnet18/infer-fold-bn": _zoo("resnet18", False, fold_bn=True),
    "small/train": _small(True),
    "small/compiled/train": _small(True, compiled=True),
    "small/checkpoint/train": _small(True, ckpt=True),
    "small/checkpoint-reentrant/train": _small(True, ckpt=True, reentrant=True),
    "hf/bert/train": _hf("bert", True),
    "hf/gpt2/train": _hf("gpt2", True),
    # multi-head Llama: with grouped-query attention, transformers 4.x repeats the key/value heads itself (two real
    # copies a layer) on torch < 2.5 and hands them to SDPA (enable_gqa) from 2.5: not the same model code
    "hf/llama/train": _hf("llama-mha", True),
    "hf/t5/train": _hf("t5", True),
}


def counts(case: str) -> dict:
    model, args, kwargs, opts = CASES[case]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = analyze(model, *args, **opts, **kwargs)
    return {"flops": c.flops, "macs": c.macs, "bytes": c.bytes, "forward_flops": c.forward.flops,
            "forward_bytes": c.forward.bytes, "layers": len(c.layers), "uncounted": sorted(c.uncounted)}


def _transformers_major() -> str:
    """The running transformers' major.minor version: its model code changes between minor versions (GPT-2's and
    Llama's masks differ between 4.46 and 4.57), so the Hugging Face counts are kept per version."""
    import transformers

    return ".".join(transformers.__version__.split(".")[:2])


def golden() -> dict:
    """The golden counts of every case: the Hugging Face cases as counted by the newest torch with the running
    version of transformers (its model code differs between versions: 4.x on the JetPack stacks, 5.x on the newest
    torch), everything else as one."""
    doc = json.loads(DATA.read_text())
    cases = dict(doc["cases"])
    if any(c.startswith("hf/") for c in CASES):
        try:
            cases.update(doc["hf"][_transformers_major()]["cases"])
        except (ImportError, KeyError):
            pass
    return cases


@pytest.mark.parametrize("case", sorted(CASES))
def test_counts_equal_the_golden_counts(case):
    got = counts(case)  # skips the Hugging Face cases where transformers cannot run here, saying why
    want = golden().get(case)
    assert want is not None, (f"{case}: no golden counts for transformers {_transformers_major()}: run this file "
                              "with --update --hf-only on the newest torch with that transformers")
    for k in ("flops", "macs", "bytes", "forward_flops", "forward_bytes"):
        assert got[k] == pytest.approx(want[k], rel=REL), (
            f"{case}: {k} {got[k]} on torch {torch.__version__}, {want[k]} on the golden stack "
            f"({(got[k] - want[k]) / max(want[k], 1):+.2%})")
    assert got["uncounted"] == want["uncounted"]


def test_every_case_has_golden_counts():
    doc = json.loads(DATA.read_text())
    plain = sorted(c for c in CASES if not c.startswith("hf/"))
    assert sorted(doc["cases"]) == plain
    for major, part in doc["hf"].items():
        assert sorted(part["cases"]) == sorted(c for c in CASES if c.startswith("hf/")), major


def update() -> None:
    """Write the counts of the running stack: every case on the README's stack (newest torch, transformers 5); with
    ``--hf-only``, the Hugging Face cases for the running transformers version (the newest torch with each
    transformers the JetPack stacks install: 4.46 on Python 3.8, the newest 4.x on Python 3.10)."""
    import transformers

    doc = json.loads(DATA.read_text()) if DATA.exists() else {"hf": {}}
    stack = {"torch": torch.__version__, "transformers": transformers.__version__}
    if "--hf-only" not in sys.argv:
        doc.update({"about": "lightning_edge.analyze counts: tests/cost/test_golden_counts.py", **stack,
                    "cases": {c: counts(c) for c in sorted(CASES) if not c.startswith("hf/")}})
    doc.setdefault("hf", {})[_transformers_major()] = {
        **stack, "cases": {c: counts(c) for c in sorted(CASES) if c.startswith("hf/")}}
    DATA.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{DATA}: torch {torch.__version__}, transformers {transformers.__version__}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    if "--update" in sys.argv:
        update()
