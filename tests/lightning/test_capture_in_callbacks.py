"""EnergyProfiler and PowerModeTuner on modules written the way people write them (issue 17 item 1, issue 18 item 1):
keyword calls, dict batches, a LightningModule without ``forward``, several calls per step, Lazy modules, a
``torch.compile``d submodule. Each failed before the shared capture (``lightning_edge.cost.capture``)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

L = pytest.importorskip("lightning.pytorch")

from lightning_edge.lightning.pytorch import EnergyProfiler, PowerModeTuner  # noqa: E402

FAST = dict(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=4)
VOCAB, SEQ, DIM = 50, 12, 16


class TinyGPT(nn.Module):
    """A GPT-style block called with keyword arguments, as Hugging Face models are."""

    def __init__(self, lazy: bool = False):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.attn = nn.MultiheadAttention(DIM, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.LazyLinear(4 * DIM) if lazy else nn.Linear(DIM, 4 * DIM), nn.GELU(),
                                 nn.Linear(4 * DIM, DIM))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, input_ids=None, attention_mask=None, labels=None):
        h = self.emb(input_ids)
        pad = None if attention_mask is None else attention_mask == 0
        h = h + self.attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        h = h + self.mlp(h)
        logits = self.head(h)
        if labels is None:
            return logits
        return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


class DictData(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": ids}


class NoForward(L.LightningModule):
    """No ``forward``: the step calls the submodule with the dict batch as keyword arguments (twice: a second
    view of the batch, as contrastive and distillation steps do)."""

    def __init__(self, lazy: bool = False, twice: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.lm = TinyGPT(lazy)
        self.twice = twice

    def training_step(self, batch, i):
        loss = self.lm(**batch)
        if self.twice:
            loss = loss + self.lm(input_ids=batch["input_ids"], labels=batch["labels"])
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class WithForward(L.LightningModule):
    """A forward that takes keyword arguments, called as ``self(**batch)``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lm = TinyGPT()

    def forward(self, **kw):
        return self.lm(**kw)

    def training_step(self, batch, i):
        return self(**batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(tmp_path, callbacks, steps=6):
    return L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu", devices=1, callbacks=callbacks,
                     default_root_dir=str(tmp_path), num_sanity_val_steps=0)


def _dict_loader():
    return DataLoader(DictData(), batch_size=4)


def _flops_of(prof, layer):
    costs = prof.session.costs_for(True)
    return costs[layer].flops if layer in costs else 0


# ---------------------------------------------------------------------------------------------- EnergyProfiler
@pytest.mark.parametrize("module", [NoForward, WithForward])
def test_profiler_costs_keyword_calls_and_dict_batches(tmp_path, module):
    # before: "cost model failed on 'net' (ValueError: analyze() needs example inputs ...)", no FLOP for any layer
    prof = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=False)
    _trainer(tmp_path, [prof]).fit(module(), _dict_loader())
    s = prof.session
    assert not [n for n in s.cost_notes if "failed" in n], s.cost_notes
    # the attention's and the MLP's matmuls are there: 2 x rows x in x out FLOP forward, for 4 x 12 rows
    rows = 4 * SEQ
    costs = s.costs_for(True)
    assert costs["lm.mlp.0"].forward.flops == 2 * rows * DIM * 4 * DIM + rows * 4 * DIM
    assert costs["lm.head"].forward.macs == rows * DIM * VOCAB
    assert costs["lm.head"].backward.flops > 0


def test_profiler_sums_several_calls_per_step(tmp_path):
    prof = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=False)
    _trainer(tmp_path, [prof]).fit(NoForward(twice=True), _dict_loader())
    costs = prof.session.costs_for(True)
    rows = 4 * SEQ
    assert costs["lm.head"].forward.macs == 2 * rows * DIM * VOCAB  # two calls of lm per step
    assert costs["lm.head"].calls == 2
    assert any("several calls per step" in n for n in prof.session.cost_notes)


def test_profiler_costs_a_lazy_module_after_its_first_step(tmp_path):
    prof = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=False)
    _trainer(tmp_path, [prof]).fit(NoForward(lazy=True), _dict_loader())
    assert _flops_of(prof, "lm.mlp.0") > 0, prof.session.cost_notes


def test_profiler_with_a_torch_compiled_submodule(tmp_path):
    # before: Dynamo "AssertionError ... already tracked for mutation" from the global forward pre-hook, during fit
    class Compiled(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.enc = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16)), backend="eager")
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.enc(x))

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    ds = TensorDataset(torch.randn(48, 8), torch.randint(0, 3, (48,)))
    prof = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=False)
    torch._dynamo.reset()
    _trainer(tmp_path, [prof]).fit(Compiled(), DataLoader(ds, batch_size=8))
    costs = prof.session.costs_for(True)
    # one opaque layer, with the FLOP of both of its Linears
    assert costs["enc"].forward.macs == 8 * (8 * 16 + 16 * 16)
    assert not any(k.startswith("enc.") for k in costs)
    assert any("torch.compile" in n and "opaque" in n for n in prof.session.cost_notes)
    steps = prof.session.profiled["train"]
    assert steps and "enc" in steps[-1].timing.exclusive()


# ---------------------------------------------------------------------------------------------- PowerModeTuner
@pytest.mark.parametrize("lazy", [False, True])
def test_tuner_on_the_twin_models_a_module_without_forward_and_a_dict_batch(tmp_path, lazy):
    # before: NotImplementedError "missing the required forward function" (no forward), ValueError "could not
    # model ... got ['dict']" (dict batch), "Attempted to use an uninitialized parameter" (LazyLinear)
    tuner = PowerModeTuner(power_budget_w=25, device="sim:orin-agx", store=None, window=FAST, print_summary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # nothing it could not model
        warnings.filterwarnings("ignore", message=".*(does not have many workers|smaller than the logging).*")
        warnings.filterwarnings("ignore", message="Lazy modules are a new feature")  # torch 2.1's own, at build
        _trainer(tmp_path, [tuner], steps=40).fit(NoForward(lazy=lazy), _dict_loader())
    cost = tuner.workload_cost
    assert cost is not None and cost.training
    assert cost.layer("lm.head").forward.macs == 4 * SEQ * DIM * VOCAB
    s = tuner.summary()
    assert s.new_profiles >= 1 and s.profiling_steps >= 3  # the twin ran this workload, mode after mode
    assert "simulated" in tuner.summary_text


def test_tuner_on_the_twin_says_what_it_needs_when_it_cannot_model(tmp_path):
    class Opaque(nn.Module):  # data-dependent control flow on float values: the meta device cannot run it
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            if x.sum() > 1e9:
                return self.fc(x) * 2
            return self.fc(x)

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.m = Opaque()

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self.m(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    ds = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
    tuner = PowerModeTuner(power_budget_w=25, device="sim:orin-agx", store=None, window=FAST)
    with pytest.warns(UserWarning, match="the twin needs a cost model"):
        _trainer(tmp_path, [tuner], steps=5).fit(Lit(), DataLoader(ds, batch_size=8))
    assert tuner.workload_cost is None
    assert "cost=lightning_edge.analyze" in tuner.summary_text
    assert tuner.summary().new_profiles == 0


def test_tuner_takes_a_given_cost_model(tmp_path):
    from lightning_edge.cost import analyze

    lm = TinyGPT()
    ids = torch.randint(0, VOCAB, (4, SEQ))
    cost = analyze(lm, input_ids=ids, labels=ids, training=True)
    tuner = PowerModeTuner(power_budget_w=25, device="sim:orin-agx", store=None, window=FAST, print_summary=False,
                           cost=cost)
    _trainer(tmp_path, [tuner], steps=20).fit(NoForward(), _dict_loader())
    assert tuner.workload_cost is cost
    assert tuner.summary().new_profiles >= 1


def test_tuner_on_a_measured_board_tunes_without_a_cost_model_and_says_so(tmp_path):
    from lightning_edge.devices.sim.device import SimulatedOrin

    sim = SimulatedOrin(seed=0, settling=False)

    class Board:  # a board seen through its controller and its power sensor only (the tuner measures)
        name = "test-board"
        controller = sim.controller
        sensor = sim.sensor

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x * 2 if x.sum() > 1e9 else x)

    class Step(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.m = Branchy()

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self.m(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    tuner = PowerModeTuner(power_budget_w=25, device=Board(), store=None, print_summary=False,
                           window=dict(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=3))
    with pytest.warns(UserWarning, match="tuned from measurements only"):
        _trainer(tmp_path, [tuner], steps=12).fit(Step(), DataLoader(ds, batch_size=8))
    assert tuner.workload_cost is None
    assert "measured" in tuner.summary_text and "tuned from measurements only" in tuner.summary_text
    assert tuner.summary().profiling_steps >= 3  # it measured modes all the same


def test_profiler_and_tuner_together_capture_one_call_per_step(tmp_path):
    # the tuner analyses its capture inside the profiler's captured step: that meta run is not another call
    from lightning_edge.devices.sim.device import SimulatedOrin

    board = SimulatedOrin(seed=0)
    tuner = PowerModeTuner(power_budget_w=25, device=board, store=None, window=FAST, print_summary=False)
    prof = EnergyProfiler(device=board, every_n_steps=1, warmup_steps=1, figure=False)
    _trainer(tmp_path, [tuner, prof], steps=6).fit(WithForward(), _dict_loader())
    assert not any("several calls" in n for n in prof.session.cost_notes), prof.session.cost_notes
    assert prof.session.costs_for(True)["lm.head"].forward.macs == 4 * SEQ * DIM * VOCAB
    assert tuner.workload_cost.layer("lm.head").forward.macs == 4 * SEQ * DIM * VOCAB


def test_the_profiler_the_tuner_and_the_interleaver_share_one_capture_and_one_analysis(tmp_path, monkeypatch):
    """issue 26 item 4: with the three callbacks in one Trainer the model was captured and its step analysed three
    times (each callback its own CallCapture and step_cost). Now each asks the model's shared capture: one capture of
    the first step, one analysis, the same cost for all."""
    from lightning_edge.cost import capture as capture_mod
    from lightning_edge.cost import counter, shared
    from lightning_edge.serving.pytorch import Interleaver
    from lightning_edge.tuning import ConcurrentProblem

    starts, costs = [], []
    start, step_cost = capture_mod.CallCapture.start, counter.step_cost
    monkeypatch.setattr(capture_mod.CallCapture, "start", lambda self: (starts.append(1), start(self))[1])
    for mod in (counter, shared):  # every name step_cost is called by
        monkeypatch.setattr(mod, "step_cost", lambda *a, **k: (costs.append(1), step_cost(*a, **k))[1])
    model = NoForward()
    prof = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=False, print_summary=False)
    tuner = PowerModeTuner(power_budget_w=25, device="sim:orin-agx", store=None, window=FAST, print_summary=False)
    il = Interleaver(ConcurrentProblem(power_budget_w=25, latency_budget_s=1.0, arrival_rps=2), tuner="gmd",
                     infer_model=model.lm)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(does not have many workers|smaller than the logging).*")
        _trainer(tmp_path, [prof, tuner, il], steps=12).fit(model, _dict_loader())
    assert (len(starts), len(costs)) == (1, 1)
    assert tuner.workload_cost is not None and tuner.workload_cost is il._train_cost
    rows = 4 * SEQ
    assert prof.session.costs_for(True)["lm.head"] is tuner.workload_cost.layer("lm.head")
    assert tuner.workload_cost.layer("lm.head").forward.macs == rows * DIM * VOCAB
    assert tuner.summary().new_profiles >= 1 and il.report is not None and prof.session.profiled["train"]
