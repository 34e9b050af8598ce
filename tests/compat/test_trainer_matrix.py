"""EnergyProfiler under the Trainer settings people use every day (issue 17, item 7): one small model, seconds each.

Each case checks what a user looks at after the run: the summary's counts and labels, the files written, and the
layers' energies summing to the step's.
"""

from __future__ import annotations

import csv
import json
import os

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

PACKAGES = ["lightning.pytorch", "pytorch_lightning"]


def _pkg(name):
    if name == "lightning.pytorch":
        L = pytest.importorskip("lightning.pytorch")
        from lightning_edge.lightning.pytorch import EnergyProfiler
    else:
        L = pytest.importorskip("pytorch_lightning")
        from lightning_edge.lightning.pl import EnergyProfiler
    return L, EnergyProfiler


def _net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def _module(L, **opts):
    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _net()
            if opts.get("compile"):
                self.net[3] = torch.compile(self.net[3], backend="eager")
            if opts.get("manual"):
                self.automatic_optimization = False
                self.head = nn.Linear(4, 4)

        def forward(self, x):
            if opts.get("checkpoint"):
                from torch.utils.checkpoint import checkpoint

                h = checkpoint(self.net[:3], x, use_reentrant=False)
                return self.net[3:](h)
            return self.net(x)

        def training_step(self, batch, i):
            if opts.get("combined"):
                batch = batch[0]["a"] if isinstance(batch, tuple) else batch["a"]
            x, y = batch
            if opts.get("manual"):
                o1, o2 = self.optimizers()
                loss = nn.functional.cross_entropy(self.head(self(x)), y)
                o1.zero_grad()
                o2.zero_grad()
                self.manual_backward(loss)
                o1.step()
                o2.step()
                return loss
            return nn.functional.cross_entropy(self(x), y)

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self(x), y))

        def test_step(self, batch, i):
            x, y = batch
            self.log("test_loss", nn.functional.cross_entropy(self(x), y))

        def predict_step(self, batch, i):
            return self(batch[0])

        def configure_optimizers(self):
            if opts.get("manual"):
                return (torch.optim.SGD(self.net.parameters(), lr=0.05),
                        torch.optim.Adam(self.head.parameters(), lr=1e-3))
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Lit()


def _loader(n=48, bs=8):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 4, (n,), generator=g))
    return DataLoader(ds, batch_size=bs)


def _trainer(L, tmp_path, cb, **kw):
    args = dict(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[cb],
                default_root_dir=str(tmp_path), limit_val_batches=3, num_sanity_val_steps=0)
    args.update(kw)
    return L.Trainer(**args)


def _profiler(EnergyProfiler, tmp_path, **kw):
    # analyze=True: these runs are 6 batches of a tiny model, too short for the cost model under the default
    # analyze="auto" (tests/lightning/test_session.py checks that budget); here the cost model meets each Trainer feature
    args = dict(device="none", every_n_steps=1, warmup_steps=1, figure=False, log_dir=str(tmp_path / "energy"),
                analyze=True)
    args.update(kw)
    return EnergyProfiler(**args)


def _check(cb, stage="train", costed=("net.0",)):
    """What a user looks at: the report of the call, its layers summing to the step, the files, the labels."""
    rep = cb.call_report
    assert rep is not None and stage in rep.stages, cb.summary_text
    st = rep.stages[stage]
    assert st.profiled_steps >= 1, cb.summary_text
    layer_sum = sum(ls.energy_j for ls in st.layers.values())
    assert layer_sum == pytest.approx(st.steps.energy_j, rel=1e-6)  # the layers sum to the step
    assert {ls.label for ls in st.layers.values()} == {"estimated"}  # no sensor: said so on every row
    for name in costed:  # the cost model ran on what was called
        assert st.layers[name].flops and st.layers[name].flops > 0, (name, rep.notes)
    rows = list(csv.DictReader(open(os.path.join(cb.log_dir, "layers.csv"))))
    assert any(r["stage"] == stage and r["layer"] == costed[0] for r in rows)
    doc = json.load(open(os.path.join(cb.log_dir, "layers.json")))
    assert doc["stages"][stage]["total_steps"] >= st.total_steps
    assert f"[{stage}]" in cb.summary_text and "estimated" in cb.summary_text
    return st


@pytest.mark.parametrize("package", PACKAGES)
def test_plain_fit_in_both_lightning_flavours(package, tmp_path):
    L, EP = _pkg(package)
    cb = _profiler(EP, tmp_path, print_summary=False)
    _trainer(L, tmp_path, cb).fit(_module(L), _loader(), _loader(n=24))
    st = _check(cb)
    assert st.total_steps == 6
    _check(cb, "validate")


def test_bf16_mixed(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = _profiler(EP, tmp_path, print_summary=False)
    _trainer(L, tmp_path, cb, precision="bf16-mixed").fit(_module(L), _loader())
    _check(cb)


def test_accumulate_grad_batches_counts_batches_and_optimizer_steps(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = _profiler(EP, tmp_path, print_summary=False)
    trainer = _trainer(L, tmp_path, cb, max_steps=2, accumulate_grad_batches=4)
    trainer.fit(_module(L), _loader(n=64))
    assert trainer.global_step == 2
    st = _check(cb)
    assert st.total_steps == 8 and st.optimizer_steps == 2
    assert "of 8 batches profiled" in cb.summary_text and "2 optimizer steps" in cb.summary_text


def test_gradient_clipping(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = _profiler(EP, tmp_path, print_summary=False)
    _trainer(L, tmp_path, cb, gradient_clip_val=0.5).fit(_module(L), _loader())
    st = _check(cb)
    assert st.layers["(optimizer)"].time_s > 0 and st.layers["net.0"].bwd_s > 0


def test_manual_optimisation_with_two_optimisers(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = _profiler(EP, tmp_path, print_summary=False)
    trainer = _trainer(L, tmp_path, cb, max_steps=12)  # two optimizer steps per batch
    trainer.fit(_module(L, manual=True), _loader())
    st = _check(cb, costed=("net.0", "head"))
    assert st.layers["net.0"].bwd_s > 0 and st.layers["head"].bwd_s > 0  # manual_backward is timed
    assert st.total_steps == 6 and st.optimizer_steps == 12
    assert "12 optimizer steps" in cb.summary_text


def test_torch_compile_submodule(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = _profiler(EP, tmp_path, print_summary=False)
    _trainer(L, tmp_path, cb).fit(_module(L, compile=True), _loader())
    _check(cb, costed=("net.0",))


def test_activation_checkpointing(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = _profiler(EP, tmp_path, print_summary=False)
    _trainer(L, tmp_path, cb).fit(_module(L, checkpoint=True), _loader())
    assert not [n for n in cb.call_report.notes if "cost model failed" in n]
    st = _check(cb)
    assert st.layers["net.0"].bwd_s > 0  # the recomputed forward and the backward are timed


def test_fast_dev_run_says_how_many_batches_it_needs(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = EP(device="none", log_dir=str(tmp_path / "energy"), print_summary=False)  # defaults: warmup_steps=2
    _trainer(L, tmp_path, cb, fast_dev_run=True, max_steps=-1).fit(_module(L), _loader(), _loader())
    text = cb.summary_text
    assert "[train] 0 of 1 batches profiled" in text
    assert "too short to profile per layer: a stage needs at least 3 batches" in text and "this run had 1" in text
    assert os.path.exists(os.path.join(cb.log_dir, "layers.json"))


def test_max_steps(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = _profiler(EP, tmp_path, print_summary=False, every_n_steps=2)
    _trainer(L, tmp_path, cb, max_steps=5, max_epochs=-1).fit(_module(L), _loader(n=16))  # 2 batches an epoch
    st = _check(cb)
    assert st.total_steps == 5 and len(cb.call_report.stages["train"].epochs) >= 2


def test_resume_from_a_checkpoint_reports_the_resumed_call_only(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    from lightning.pytorch.callbacks import ModelCheckpoint

    ck = ModelCheckpoint(dirpath=str(tmp_path / "ck"), save_last=True)
    cb = _profiler(EP, tmp_path, print_summary=False)
    _trainer(L, tmp_path, cb, max_steps=4, enable_checkpointing=True, callbacks=[cb, ck]).fit(_module(L), _loader())
    last = str(tmp_path / "ck" / "last.ckpt")
    assert os.path.exists(last)
    cb2 = _profiler(EP, tmp_path, print_summary=False)
    trainer = _trainer(L, tmp_path, cb2, max_steps=8)
    trainer.fit(_module(L), _loader(), ckpt_path=last)
    st = _check(cb2)
    assert trainer.global_step == 8 and st.total_steps == 4 and st.optimizer_steps == 4


def test_combined_loader(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    from lightning.pytorch.utilities import CombinedLoader

    cb = _profiler(EP, tmp_path, print_summary=False)
    loaders = CombinedLoader({"a": _loader(), "b": _loader(bs=4)}, mode="max_size_cycle")
    _trainer(L, tmp_path, cb).fit(_module(L, combined=True), loaders)
    st = _check(cb)
    assert st.total_steps == 6


def test_validate_test_predict_after_fit_each_report_their_own_batches(tmp_path):
    L, EP = _pkg("lightning.pytorch")
    cb = _profiler(EP, tmp_path, print_summary=False)
    trainer = _trainer(L, tmp_path, cb)
    model = _module(L)
    trainer.fit(model, _loader(), _loader(n=24))  # 3 validation batches in fit
    fit_text = cb.summary_text
    assert "[train]" in fit_text and "[validate] " in fit_text
    trainer.validate(model, _loader(n=40), verbose=False)  # 3 batches again (limit_val_batches=3)
    text = cb.summary_text
    assert "[train]" not in text  # later summaries do not reprint older stages
    st = _check(cb, "validate")
    assert st.total_steps == 3, text  # this call's batches only, not the fit's 3 as well
    trainer.test(model, _loader(n=32), verbose=False)
    assert "[validate]" not in cb.summary_text and _check(cb, "test").total_steps == 4
    preds = trainer.predict(model, _loader(n=16))
    assert len(preds) == 2 and "[test]" not in cb.summary_text
    assert cb.call_report.stages["predict"].total_steps == 2
    # the files cover the whole session: every stage
    doc = json.load(open(os.path.join(cb.log_dir, "layers.json")))
    assert set(doc["stages"]) == {"train", "validate", "test", "predict"}
