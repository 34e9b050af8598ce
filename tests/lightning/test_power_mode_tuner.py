"""PowerModeTuner in real Trainers of both Lightning packages, on the twin: convergence, store reuse, restore,
re-tuning, checkpoints; TensorBoard read back from the event files; a SIGKILL mid-profiling recovered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_edge.devices.sim.device import SimulatedOrin

PACKAGES = ["lightning.pytorch", "pytorch_lightning"]
FAST = dict(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=5)


def _pkg(name):
    if name == "lightning.pytorch":
        L = pytest.importorskip("lightning.pytorch")
        from lightning.pytorch.loggers import TensorBoardLogger

        from lightning_edge.lightning.pytorch import PowerModeTuner
    else:
        L = pytest.importorskip("pytorch_lightning")
        from pytorch_lightning.loggers import TensorBoardLogger

        from lightning_edge.lightning.pl import PowerModeTuner
    return L, TensorBoardLogger, PowerModeTuner


def _module(L, fail_at=None):
    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1),
                                     nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
            self.steps = 0

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, i):
            self.steps += 1
            if fail_at is not None and self.steps == fail_at:
                raise RuntimeError("training step failed on purpose")
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Lit()


def _loader(n=128, bs=16):
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 10, (n,), generator=g)),
                      batch_size=bs)


def _trainer(L, tmp_path, callbacks, logger=False, **kw):
    args = dict(max_steps=120, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False, accelerator="cpu", devices=1, callbacks=callbacks,
                default_root_dir=str(tmp_path), num_sanity_val_steps=0)
    args.update(kw)
    return L.Trainer(**args)


def _scalars(log_dir):
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


@pytest.mark.parametrize("package", PACKAGES)
def test_tunes_on_the_twin_trains_on_in_the_chosen_mode_restores_and_reuses_the_store(package, tmp_path, capsys):
    L, TensorBoardLogger, PowerModeTuner = _pkg(package)
    if package == "lightning.pytorch":  # the embedded default kind of store: an SQLite file
        store = f"sqlite:///{tmp_path / 'profiles.db'}"
    else:  # a store shared in memory by the two runs (faster; the SQLite store is covered above)
        from lightning_edge.tuning import MemoryStore

        store = MemoryStore()
    board = SimulatedOrin(settling=False, seed=0)
    original = board.controller.current()
    budget = 16.0
    cb = PowerModeTuner(budget, device=board, store=store, window=FAST, log_every_n_steps=1)
    logger = TensorBoardLogger(str(tmp_path / "logs"), name="run")
    _trainer(L, tmp_path, [cb], logger=logger).fit(_module(L), _loader())
    t = cb.tuner
    sol = cb.solution
    assert sol is not None and sol.power_w <= budget and sol.label == "simulated"
    assert sol.profiles_used <= 10 and 1 <= len(t.profiles) <= 11  # GMD's cap, plus MAXN for the summary
    tuned = [r for r in t.records if r.window is None and r.phase == "tuned"]
    assert len(tuned) > 20 and all(r.mode == sol.mode for r in tuned[1:])
    assert board.controller.current() == original  # restored at the end of fit
    out = capsys.readouterr().out
    assert "PowerModeTuner (simulated" in out and f"chosen mode {sol.mode}" in out and "vs MAXN" in out
    assert f"board restored to {original}" in out

    acc = _scalars(logger.log_dir)
    tags = set(acc.Tags()["scalars"])
    assert {"tuner/simulated/step_time_ms", "tuner/simulated/power_w", "tuner/simulated/profile_power_w",
            "tuner/power_budget_w", "tuner/mode/gpu_mhz", "tuner/simulated/epoch_energy_j"} <= tags
    profiled = [e.value for e in acc.Scalars("tuner/simulated/profile_power_w")]
    assert len(profiled) == len(t.profiles) and profiled == pytest.approx([p["power_w"] for p in t.profiles], rel=1e-6)
    assert {e.value for e in acc.Scalars("tuner/power_budget_w")} == {budget}
    texts = set(acc.Tags()["tensors"])
    assert {"tuner/profiles/text_summary", "tuner/solution/text_summary", "tuner/summary/text_summary"} <= texts

    # second run, same device model and workload: every profile comes from the store, right mode from step 1 (the
    # first step shows the module's inputs, from which the prior is built; the same prior asks for the same modes)
    board2 = SimulatedOrin(settling=False, seed=1)
    cb2 = PowerModeTuner(budget, device=board2, store=store, window=FAST, print_summary=False)
    _trainer(L, tmp_path, [cb2], max_steps=10).fit(_module(L), _loader())
    assert cb2.tuner.profiles == []
    assert cb2.solution.mode == sol.mode and cb2.tuner.records[1].mode == sol.mode
    assert cb2.summary().tuning_steps == 1
    assert board2.controller.current() == original


def test_an_exception_mid_profiling_restores_the_board_and_keeps_the_profiles(tmp_path):
    L, _, PowerModeTuner = _pkg("lightning.pytorch")
    board = SimulatedOrin(settling=False)
    original = board.controller.current()
    store = f"sqlite:///{tmp_path / 'profiles.db'}"
    cb = PowerModeTuner(16.0, device=board, store=store, window=FAST)
    with pytest.raises(RuntimeError, match="on purpose"):
        _trainer(L, tmp_path, [cb]).fit(_module(L, fail_at=12), _loader())
    assert board.controller.current() == original and cb.tuner.phase == "closed"
    kept = len(cb.tuner.profiles)
    assert kept >= 1
    # the partial profile is kept: a new run starts from it
    cb2 = PowerModeTuner(16.0, device=SimulatedOrin(settling=False), store=store, window=FAST, print_summary=False)
    _trainer(L, tmp_path, [cb2]).fit(_module(L), _loader())
    assert cb2.solution is not None and cb2.solution.profiles_used - len(cb2.tuner.profiles) >= kept - 1


def test_budget_change_during_fit_retunes(tmp_path):
    L, _, PowerModeTuner = _pkg("lightning.pytorch")
    board = SimulatedOrin(settling=False)
    cb = PowerModeTuner(20.0, device=board, store=None, window=FAST, print_summary=False)

    class Lower(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 80:
                cb.set_power_budget(14.5)

    _trainer(L, tmp_path, [cb, Lower()], max_steps=200).fit(_module(L), _loader())
    assert cb.solution is not None and cb.solution.power_w <= 14.5
    assert cb.tuner.retunes and cb.tuner.retunes[0]["to_w"] == 14.5
    assert cb.tuner.records[-1].mode == cb.solution.mode


def test_checkpoint_resume_keeps_budget_and_needs_no_new_profiles(tmp_path):
    L, _, PowerModeTuner = _pkg("lightning.pytorch")
    cb = PowerModeTuner(16.0, device=SimulatedOrin(settling=False), store=None, window=FAST, print_summary=False)
    tr = _trainer(L, tmp_path, [cb], max_steps=100, enable_checkpointing=True)
    tr.fit(_module(L), _loader())
    ckpt = tr.checkpoint_callback.best_model_path or tr.checkpoint_callback.last_model_path
    assert ckpt and os.path.exists(ckpt)
    state = torch.load(ckpt, weights_only=False)["callbacks"]["PowerModeTuner"]
    assert state["mode"] == str(cb.solution.mode) and state["budget_w"] == 16.0
    cb2 = PowerModeTuner(30.0, device=SimulatedOrin(settling=False), store=None, window=FAST, print_summary=False)
    _trainer(L, tmp_path, [cb2], max_steps=110, enable_checkpointing=True).fit(_module(L), _loader(), ckpt_path=ckpt)
    assert cb2.tuner.problem.power_budget_w == 16.0
    assert cb2.solution.mode == cb.solution.mode
    assert len(cb2.tuner.profiles) == len(state["profiles"])  # nothing measured again


def test_bad_arguments_are_clear_errors():
    _, _, PowerModeTuner = _pkg("lightning.pytorch")
    with pytest.raises(ValueError, match="power_budget_w"):
        PowerModeTuner(-3)
    with pytest.raises(ValueError, match="switch_at"):
        PowerModeTuner(20, switch_at="sometimes")
    with pytest.raises(ValueError, match="min_steps"):
        PowerModeTuner(20, window={"min_step": 3})
    from lightning_edge.devices import get_board

    with pytest.raises(TypeError, match="controller"):
        get_board(object(), control="write")
    with pytest.raises(ValueError, match="sim:orin-agx"):
        get_board("sim:orin-nano", control="write")


KILLED = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    import lightning.pytorch as L
    from lightning_edge.devices.sim.device import SimulatedOrin
    from lightning_edge.lightning.pytorch import PowerModeTuner

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                     nn.Linear(8, 10))
        def forward(self, x):
            return self.net(x)
        def training_step(self, batch, i):
            import time
            time.sleep(0.05)
            return nn.functional.cross_entropy(self(batch[0]), batch[1])
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    class Announce(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            t = tuner.tuner
            if t.phase == "profiling" and len(t.profiles) >= 1:
                print("PROFILING", t.controller.current(), flush=True)

    board = SimulatedOrin(board_file=sys.argv[1], settling=False)
    tuner = PowerModeTuner(16.0, device=board, store=None, window=dict(settle_s=0, min_steps=3, max_steps=5))
    ds = TensorDataset(torch.randn(64, 3, 16, 16), torch.randint(0, 10, (64,)))
    L.Trainer(max_steps=100000, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              callbacks=[tuner, Announce()]).fit(Lit(), DataLoader(ds, batch_size=8))
""")


def test_killed_mid_profiling_the_next_start_restores_the_original_mode(tmp_path):
    pytest.importorskip("lightning.pytorch")
    board_file = tmp_path / "board.json"
    script = tmp_path / "train.py"
    script.write_text(KILLED)
    repo = str(Path(__file__).resolve().parents[2])  # the child runs this checkout's lightning_edge
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    proc = subprocess.Popen([sys.executable, str(script), str(board_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("PROFILING") or proc.poll() is not None:
                break
        assert line.startswith("PROFILING"), f"the training never reached its second profile window: {line!r}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    changed = json.loads(board_file.read_text())
    original = SimulatedOrin().controller.space.coerce("12c/2201.6/1300.5/3199")  # a fresh board powers on in MAXN
    assert str(changed.get("mode", changed)) != str(original)  # the kill left the board in a profiled mode
    # the next start of a controller for this board (e.g. the next PowerModeTuner) recovers the original mode
    nxt = SimulatedOrin(board_file=board_file, settling=False)
    assert nxt.controller.recovered is not None
    assert nxt.controller.current() == original
    nxt.close()


def test_a_short_fine_tune_says_where_tuning_stands(tmp_path, capsys):
    """Issue 18: a 96-step fine-tune of a small CNN on the twin printed only "0 profiles used, 0 measured"."""
    L, _, PowerModeTuner = _pkg("lightning.pytorch")
    cb = PowerModeTuner(20.0, device="sim:orin-agx", store=None)  # default windows, the twin's power settling
    _trainer(L, tmp_path, [cb], max_steps=96).fit(_module(L), _loader(n=96 * 16))
    out = capsys.readouterr().out
    s = cb.summary()
    p = s.progress
    assert "0 profiles used, 0 measured" not in out
    assert p.profiles_planned >= p.profiles_done >= 0 and p.profiles_planned >= 1
    assert p.minibatches_per_profile > 0 and p.settle_steps >= 0 and p.window_steps > 0
    if s.phase in ("tuned", "infeasible"):
        assert "tuning took" in out
    else:
        assert p.more_steps_needed > 0
        assert f"about {p.more_steps_needed} more minibatches" in out
    assert "profiles done" in out and "planned" in out and "minibatches per profile" in out


def test_the_summary_is_not_followed_by_a_stale_progress_bar_line(tmp_path, capsys):
    """Issue 28: the rich progress bar's last frame came after the summaries printed at the end of fit."""
    L = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.callbacks import RichProgressBar

    from lightning_edge.lightning.pytorch import PowerModeTuner

    cb = PowerModeTuner(20.0, device="sim:orin-agx", store=None, window=dict(settle_s=0, min_steps=3, max_steps=5))
    bar = RichProgressBar()
    trainer = L.Trainer(max_steps=40, logger=False, enable_checkpointing=False, enable_model_summary=False,
                        accelerator="cpu", devices=1, callbacks=[cb, bar], default_root_dir=str(tmp_path))
    trainer.fit(_module(L), _loader(n=40 * 16))
    out = capsys.readouterr().out
    tail = out[out.index("lightning_edge PowerModeTuner"):]
    assert "it/s" not in tail and "Epoch 0" not in tail, tail[-500:]
