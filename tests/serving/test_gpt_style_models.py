"""InferenceRunner and Interleaver on a tiny GPT-style model called as Hugging Face models are (issue 18 item 8, the
capture part): keyword requests (``model(**requests)``), dict batches, a LightningModule without ``forward``."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from lightning_edge.serving import InferenceRunner
from lightning_edge.tuning import ConcurrentProblem, InferenceProblem

warnings.filterwarnings("ignore", ".*does not have many workers.*")

VOCAB, SEQ, DIM = 64, 16, 32


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(VOCAB, DIM)
        self.block = nn.TransformerEncoderLayer(DIM, 2, 2 * DIM, dropout=0.0, batch_first=True)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, input_ids, attention_mask=None, labels=None):
        causal = nn.Transformer.generate_square_subsequent_mask(input_ids.shape[1])
        pad = None if attention_mask is None else attention_mask == 0
        h = self.block(self.emb(input_ids), src_mask=causal, src_key_padding_mask=pad, is_causal=True)
        logits = self.head(h)
        if labels is None:
            return logits
        return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())


def _requests(n=32):
    g = torch.Generator().manual_seed(0)
    return {"input_ids": torch.randint(0, VOCAB, (n, SEQ), generator=g),
            "attention_mask": torch.ones(n, SEQ, dtype=torch.long)}


class Data(Dataset):
    def __len__(self):
        return 128

    def __getitem__(self, i):
        ids = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": ids}


def test_inference_runner_serves_keyword_requests_on_the_twin():
    # before: RequestInputs refused a dict ("expected a tensor of request samples"); the twin could not model it
    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.05, arrival_rps=50)
    rep = InferenceRunner(TinyGPT(), problem, request_inputs=_requests(), tuner="gmd", retune=False,
                          keep_outputs=1).run(2.0)
    assert rep.label == "simulated"
    assert rep.latency.n_requests == 100 and rep.latency.deadline_misses == 0
    out = rep.outputs
    assert out.shape[1:] == (SEQ, VOCAB) and torch.isfinite(out).all()  # the real model ran on real token ids


def test_inference_runner_takes_one_keyword_example():
    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.05, arrival_rps=20)
    one = {"input_ids": torch.zeros(SEQ, dtype=torch.long), "attention_mask": torch.ones(SEQ, dtype=torch.long)}
    rep = InferenceRunner(TinyGPT(), problem, example_input=one, tuner="gmd", retune=False).run(1.0)
    assert rep.latency.n_requests == 20


def test_inference_runner_says_a_module_without_forward_cannot_serve():
    L = pytest.importorskip("lightning.pytorch")

    class NoForward(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lm = TinyGPT()

    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.05, arrival_rps=20)
    with pytest.raises(TypeError, match=r"NoForward has no forward.*InferenceRunner\(model\.net"):
        InferenceRunner(NoForward(), problem, request_inputs=_requests(), tuner="gmd")


def _no_forward(L):
    class FineTune(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lm = TinyGPT()

        def training_step(self, batch, i):
            return self.lm(**batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return FineTune()


def _trainer(L, cb, steps):
    return L.Trainer(max_steps=steps, callbacks=[cb], logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)


def test_interleaver_with_a_module_without_forward_and_a_dict_batch():
    # before: ValueError from RequestInputs (a dict batch) / NotImplementedError (no forward) at the first batch
    L = pytest.importorskip("lightning.pytorch")
    from lightning_edge.serving.pytorch import Interleaver

    model = _no_forward(L)
    problem = ConcurrentProblem(power_budget_w=25, latency_budget_s=0.1, arrival_rps=20)
    il = Interleaver(problem, tuner="gmd", infer_model=model.lm)
    _trainer(L, il, 12).fit(model, DataLoader(Data(), batch_size=8))
    rep = il.report
    assert rep is not None and rep.label == "simulated"
    assert rep.background_minibatches == 11  # the first step was captured for the twin's training workload
    assert rep.latency.n_requests > 0 and rep.latency.deadline_misses == 0
    assert il.engine.server.runner.minibatches == rep.infer_minibatches  # real keyword inference ran
    assert il._train_cost.layer("lm.head").forward.macs == 8 * SEQ * DIM * VOCAB


def test_interleaver_says_before_training_that_it_needs_infer_model():
    L = pytest.importorskip("lightning.pytorch")
    from lightning_edge.serving.pytorch import Interleaver

    model = _no_forward(L)
    w0 = model.lm.head.weight.detach().clone()
    il = Interleaver(ConcurrentProblem(power_budget_w=25, latency_budget_s=0.1, arrival_rps=20))
    with pytest.raises(TypeError, match="FineTune has no forward.*infer_model="):
        _trainer(L, il, 3).fit(model, DataLoader(Data(), batch_size=8))
    assert torch.equal(w0, model.lm.head.weight)  # nothing trained


class _ImageDict(Dataset):
    """Dict batches as image datasets give them (Hugging Face's ``pixel_values`` / ``labels``)."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"pixel_values": torch.randn(3, 16, 16, generator=g), "labels": torch.randint(0, 4, (), generator=g)}


def _forward_x(L):
    class Classifier(L.LightningModule):
        """The most common Lightning shape: ``forward(x)``, the step unpacks a dict batch itself."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                     nn.Flatten(), nn.Linear(8, 4))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            return nn.functional.cross_entropy(self(batch["pixel_values"]), batch["labels"])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Classifier()


@pytest.mark.parametrize("given", [{}, {"infer_model": "net"}], ids=["defaults", "infer_model"])
def test_interleaver_with_forward_x_and_dict_batches(given):
    """Issue 28: forward(x) plus dict batches crashed (``TypeError: forward() got an unexpected keyword argument
    'pixel_values'``, also with infer_model= / request_inputs=): the training workload was built by calling
    ``pl_module(**batch)``; now it is the step as it ran (the shared capture), and requests are the tensor the
    forward takes."""
    L = pytest.importorskip("lightning.pytorch")
    from lightning_edge.serving.pytorch import Interleaver

    model = _forward_x(L)
    kw = {"infer_model": model.net} if given else {}
    il = Interleaver(ConcurrentProblem(power_budget_w=25, latency_budget_s=0.1, arrival_rps=20), tuner="gmd", **kw)
    try:
        _trainer(L, il, 12).fit(model, DataLoader(_ImageDict(), batch_size=8))
    except TypeError as exc:  # a clear request for what is needed is fine; the crash inside forward is not
        assert "unexpected keyword argument" not in str(exc), exc
        raise
    rep = il.report
    assert rep is not None and rep.label == "simulated" and rep.latency.n_requests > 0
    assert il._train_cost is not None and il._train_cost.layer("net.4").forward.macs == 8 * 8 * 4
