"""How many batches a Trainer call will run, as ``EnergyProfiler`` reads it for its overhead budget
(``analyze="auto"``, the whole-run every-N): unknown (None) whenever the Trainer cannot tell, never a guess."""

from __future__ import annotations

import math
from types import SimpleNamespace

from lightning_edge.lightning.energy_profiler import expected_batches


def test_train_counts_batches_not_optimizer_steps():
    t = SimpleNamespace(estimated_stepping_batches=40, accumulate_grad_batches=4, callbacks=[])
    assert expected_batches(t, "train") == 160


def test_unknown_lengths_are_none():
    assert expected_batches(SimpleNamespace(estimated_stepping_batches=math.inf, accumulate_grad_batches=1,
                                            callbacks=[]), "train") is None  # an iterable dataset without len
    assert expected_batches(SimpleNamespace(), "train") is None  # not a Trainer (or not set up yet)
    assert expected_batches(SimpleNamespace(num_val_batches=[math.inf]), "validate") is None
    assert expected_batches(SimpleNamespace(num_test_batches=[0]), "test") is None


def test_evaluation_stages_add_their_dataloaders():
    assert expected_batches(SimpleNamespace(num_val_batches=[3, 2]), "validate") == 5
    assert expected_batches(SimpleNamespace(num_test_batches=[7]), "test") == 7
    assert expected_batches(SimpleNamespace(num_predict_batches=[4]), "predict") == 4


def test_a_real_trainer(tmp_path):
    import lightning.pytorch as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def training_step(self, batch, i):
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    seen = {}

    class Probe(L.Callback):
        def on_train_batch_start(self, trainer, *a):
            seen.setdefault("train", expected_batches(trainer, "train"))

    dl = DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=4)  # 6 batches an epoch
    L.Trainer(max_epochs=2, accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, callbacks=[Probe()],
              default_root_dir=str(tmp_path)).fit(M(), dl)
    assert seen["train"] == 12  # 2 epochs of 6 batches (6 optimizer steps x 2 accumulated)


def test_a_real_trainer_with_a_time_limit_has_no_expected_length():
    """``Trainer(max_time=..., max_epochs=3)`` stops at whichever comes first: the batches are unknown. A real
    Trainer keeps the limit in its ``Timer`` callback (was: read from a ``max_time`` attribute no Trainer has, so a
    time-limited run was planned as its full epoch count)."""
    import lightning.pytorch as L
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.fc(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    seen: dict = {}

    class Probe(L.Callback):
        def on_train_start(self, trainer, pl_module):
            seen["n"] = expected_batches(trainer, "train")

    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    for max_time, want in ((None, 6), ("00:00:10:00", None)):
        trainer = L.Trainer(max_epochs=3, max_time=max_time, callbacks=[Probe()], logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Tiny(), data)
        assert seen["n"] == want, (max_time, seen)
