"""Compatibility: ``EnergyProfiler`` and ``PowerModeTuner`` capture the cost of Hugging Face models (small configs, no
weights downloaded) fine-tuned in a LightningModule the usual way: no ``forward``, ``self.model(**batch).loss``, dict
batches. Checks the layers' FLOP the profiler shows, the notes, and the twin's workload the tuner profiles."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

transformers = pytest.importorskip("transformers")
L = pytest.importorskip("lightning.pytorch")

from lightning_edge.lightning.pytorch import EnergyProfiler, PowerModeTuner  # noqa: E402

from .test_transformers_analyze import HEADS, HIDDEN, B, V, bert, gpt2, llama, vit  # noqa: E402

logging.getLogger("transformers").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", ".*does not have many workers.*")
SEQ = 16


class Batches(Dataset):
    def __init__(self, example: dict):
        self.example = example

    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        out = {}
        for k, v in self.example.items():
            row = v[0]
            out[k] = torch.randint(3, V, row.shape, generator=g) if k in ("input_ids",) or (
                k == "labels" and row.dim() == 1) else (torch.randn(row.shape, generator=g)
                                                         if row.is_floating_point() else row.clone())
        return out


class FineTune(L.LightningModule):
    """The usual HF fine-tune: no forward, ``self.model(**batch).loss``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def training_step(self, batch, i):
        return self.model(**batch).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def _fit(tmp_path, factory, callback, steps):
    model, batch = factory()
    module = FineTune(model)
    L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[callback],
              default_root_dir=str(tmp_path)).fit(module, DataLoader(Batches(batch), batch_size=B))
    return module


@pytest.mark.parametrize("factory", [gpt2, bert], ids=["gpt2", "bert"])
def test_energy_profiler_costs_every_layer_of_a_hf_fine_tune(tmp_path, factory):
    prof = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=False)
    module = _fit(tmp_path, factory, prof, 4)
    s = prof.session
    assert not [n for n in s.cost_notes if "failed" in n or "no cost model" in n], s.cost_notes
    costs = s.costs_for(True)
    linears = [n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)
               or type(m).__name__ == "Conv1D"]
    assert linears and all(costs[n].forward.flops > 0 and costs[n].backward.flops > 0 for n in linears)
    # on the twin every layer's time and energy is the twin's model of that layer's cost (not this CPU's time x
    # simulated power, not a split by time): a matmul layer the cost model missed would get none
    layers = s.profiled["train"][-1].energy.layers
    hit = [n for n in linears if n in layers]
    assert len(hit) >= len(linears) // 2
    assert all(layers[n].energy_j > 0 and layers[n].time_s > 0 and "simulated" in layers[n].label for n in hit), \
        {n: (layers[n].energy_j, layers[n].time_s, layers[n].label) for n in hit}


def test_power_mode_tuner_models_llama_with_grouped_query_attention(tmp_path):
    tuner = PowerModeTuner(power_budget_w=25, device="sim:orin-agx", store=None, print_summary=False,
                           window=dict(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=4))
    _fit(tmp_path, llama, tuner, 12)
    cost = tuner.workload_cost
    assert cost is not None and cost.training
    hd = HIDDEN // HEADS
    assert cost.layer("model.model.layers.0.self_attn").forward.macs == B * HEADS * (SEQ * (SEQ + 1) // 2) * 2 * hd
    assert any("grouped-query" in n for n in tuner.capture_notes)
    assert tuner.summary().new_profiles >= 1 and "simulated" in tuner.summary_text


def test_power_mode_tuner_models_a_vit_fine_tune(tmp_path):
    tuner = PowerModeTuner(power_budget_w=25, device="sim:orin-agx", store=None, print_summary=False,
                           window=dict(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=4))
    _fit(tmp_path, vit, tuner, 8)
    cost = tuner.workload_cost
    assert cost.layer("model.vit.embeddings.patch_embeddings.projection").forward.macs == B * 16 * 3 * 64 * HIDDEN
    assert tuner.summary().new_profiles >= 1


def test_energy_profiler_keeps_the_cost_model_with_gradient_checkpointing(tmp_path):
    # before: analyze raised inside the profiler ("Tensor.item() cannot be called on meta tensors") and the cost model
    # was silently dropped: energy split by time only

    def checkpointed():
        model, batch = gpt2()
        model.gradient_checkpointing_enable()
        return model, batch

    prof = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=False)
    _fit(tmp_path, checkpointed, prof, 4)
    notes = prof.session.cost_notes
    assert any("activation checkpointing" in n for n in notes), notes
    assert not [n for n in notes if "failed" in n]
    costs = prof.session.costs_for(True)
    mlp = costs["model.transformer.h.0.mlp.c_fc"]
    assert mlp.backward.macs == 3 * mlp.forward.macs  # input + weight gradients, and the recomputed forward
