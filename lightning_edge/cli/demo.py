"""``lightning-edge demo``: fine-tune a zoo model on this CPU with EnergyProfiler + PowerModeTuner on the Orin twin.

What it shows, end to end, on the embedded defaults (the twin, an SQLite profile store in the user cache dir):

* ``PowerModeTuner`` profiles power modes of a simulated Jetson AGX Orin on the real training minibatches (GMD
  started from the modes' predicted time and power, at most 4 profiles, each within the budget by the prediction's
  own error), then trains on in the fastest profiled mode within the power budget; the board is restored at the
  end. The summary says how many minibatches tuning took and how many ran over the budget, beside a dry run of the
  settings before (no prior, a fixed settling wait); its "vs MAXN" figure comes from the store or the prior
  (labelled so), never from a MAXN window run over the budget. Run it twice: the second run finds every profile in
  the store and is in the chosen mode from its second minibatch.
* ``EnergyProfiler`` shows every layer's time and energy on the Orin in the current mode, from the twin's per-layer
  model of the workload it captured (this CPU's layer times are kept apart as ``host_time``).
* TensorBoard logs (scalars, the profiled modes, the chosen mode, per-layer energy, a roofline) and a summary.

Every power and energy figure is simulated (the twin); the training itself really runs here. Nothing is
downloaded: the model starts from random weights and the data are synthetic (:mod:`lightning_edge.zoo.data`).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any

from lightning_edge._lazy import UnknownName
from lightning_edge.tuning.search import STRATEGIES

if TYPE_CHECKING:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.utilities.types import STEP_OUTPUT

    from lightning_edge.lightning.tuner import PowerModeTunerMixin
    from lightning_edge.tuning.backend import ProfileBackend

HELP = "fine-tune a zoo model on CPU with EnergyProfiler + PowerModeTuner on the simulated Orin (the main demo)"

MODELS = ("mobilenet_v3_large", "mobilenet_v2", "resnet18")


def _strategy_name(text: str) -> str:
    """``--strategy``: any spelling the registry takes (case, aliases), as its registered name."""
    try:
        return STRATEGIES.canonical(text)
    except UnknownName as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=float, default=20.0, metavar="W",
                   help="power budget of the simulated Orin in W (default 20; MAXN draws ~21 W on this model)")
    p.add_argument("--minutes", type=float, default=2.0,
                   help="train for about this long (default 2; it goes on until tuning has finished, at most "
                        "3x or 5 min more, whichever is longer)")
    p.add_argument("--model", choices=MODELS, default="mobilenet_v3_large", help="zoo model (random initial weights)")
    p.add_argument("--image-size", type=int, default=32, help="synthetic image side in pixels (default 32)")
    p.add_argument("--batch-size", type=int, default=16, help="training minibatch size (default 16)")
    p.add_argument("--strategy", type=_strategy_name, choices=tuple(STRATEGIES), default="gmd",
                   help="tuning strategy, a name registered in lightning_edge.tuning.search.STRATEGIES (default gmd)")
    p.add_argument("--store", default="default",
                   help="profile store: 'default' (SQLite in the user cache dir), a file path (SQLite), an Optuna storage "
                        "URL (postgresql://...), or 'memory'")
    p.add_argument("--out", default="lightning_edge_demo", help="output directory for TensorBoard logs and reports")
    p.set_defaults(folder_outputs=("out",))  # --out is a folder here (created when missing), not a file
    p.add_argument("--seed", type=int, default=0)


def _lightning() -> Any:
    """``lightning.pytorch`` when installed, else ``pytorch_lightning`` (a base install has only the latter)."""
    try:
        import lightning.pytorch as L
    except ImportError:
        import pytorch_lightning as L
    return L


def _lit_module(model_name: str, classes: int, lr: float) -> Any:
    import torch
    from torch import nn

    from lightning_edge import zoo

    L = _lightning()

    class FineTune(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = getattr(zoo, model_name)(num_classes=classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            logits = self(x)
            loss = nn.functional.cross_entropy(logits, y)
            self.log("train_loss", loss, prog_bar=True)
            # a running mean over the epoch (batch-norm in training mode: this model's running statistics are
            # poor at 32x32 pixels after a few hundred minibatches, so no eval-mode validation here)
            self.log("train_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True, on_step=False,
                     on_epoch=True)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=lr)

    return FineTune()


def run(args: argparse.Namespace) -> int:
    from lightning_edge.tuning.search import open_backend

    # the store first: a path, a URL or 'default'; one that cannot be used fails here, in one line, before training
    store: ProfileBackend = open_backend(None if args.store == "memory" else args.store)
    store_text = store.describe()
    import torch
    from torch.utils.data import DataLoader

    L = _lightning()
    if L.__name__.startswith("lightning"):
        from lightning_edge.lightning.pytorch import EnergyProfiler, PowerModeTuner
    else:
        from lightning_edge.lightning.pl import EnergyProfiler, PowerModeTuner
    TensorBoardLogger = L.loggers.TensorBoardLogger

    from lightning_edge.zoo.data import synthetic_images

    if args.budget <= 0 or args.minutes <= 0 or args.batch_size < 1 or args.image_size < 16:
        raise ValueError("need --budget > 0 W, --minutes > 0, --batch-size >= 1 and --image-size >= 16")
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(os.cpu_count() or 1, 1))
    out = os.path.abspath(args.out)
    print(f"lightning_edge demo: fine-tuning {args.model} ({args.image_size}x{args.image_size}, batch "
          f"{args.batch_size}) on this CPU for ~{args.minutes:g} min; power modes of a SIMULATED Jetson AGX Orin "
          f"(the twin) under a {args.budget:g} W budget; profile store: {store_text}")

    train = synthetic_images(4096, args.image_size, 10, seed=args.seed)
    # both callbacks name the board as a user does; get_board gives them the process's one simulated Orin
    # a short fine-tune stopped by the clock (max_epochs is only a ceiling): tune from the prior's few profiles
    tuner = PowerModeTuner(args.budget, strategy=args.strategy, device="sim:orin-agx", store=store, seed=args.seed,
                           thorough=False)
    profiler = EnergyProfiler(device="sim:orin-agx", top=8)
    deadline = time.monotonic() + args.minutes * 60

    class StopWhenDone(L.Callback):
        """Stop after ``--minutes`` once tuning has finished; at the latest ``--minutes`` plus the longer of 2x
        ``--minutes`` and 5 min (a slow or busy CPU takes longer to run the profiling windows)."""

        def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT,
                               batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
            now = time.monotonic()
            t = tuner.tuner
            done = t is not None and t.phase in ("tuned", "infeasible")
            if (now > deadline and done) or now > deadline + max(2 * args.minutes * 60, 300.0):
                if not done and not trainer.should_stop:
                    print(f"the time cap ended the run before tuning finished ({len(t.profiles) if t else 0} modes "
                          "profiled, kept in the store): run again, or with more --minutes, to finish it")
                trainer.should_stop = True

    logger = TensorBoardLogger(os.path.join(out, "logs"), name=args.model)
    trainer = L.Trainer(
        max_epochs=1000, accelerator="cpu", devices=1, logger=logger, callbacks=[tuner, profiler, StopWhenDone()],
        log_every_n_steps=10,
        enable_checkpointing=False, enable_model_summary=False, default_root_dir=out)
    trainer.fit(_lit_module(args.model, 10, 5e-4), DataLoader(train, batch_size=args.batch_size, shuffle=True))
    _tuning_comparison(tuner, args)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k in ("train_loss", "train_acc")}
    if metrics:
        print("training: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(metrics.items())) +
              f" after {trainer.global_step} minibatches (real, on this CPU)")
    print(f"TensorBoard logs (simulated power and energy are labelled as such): tensorboard --logdir {logger.save_dir}")
    return 0


def _tuning_comparison(tuner: PowerModeTunerMixin, args: argparse.Namespace) -> None:
    """How many minibatches tuning took, and how many the naive settings (no prior, a fixed 2.4 s
    settling wait per profile) take for the same model and budget: a dry run of the engine on a fresh twin
    (simulated steps only, about a second)."""
    from lightning_edge.devices.meter import TwinMeter
    from lightning_edge.tuning.online import WindowSpec, simulate_tuning

    t = tuner.tuner
    if t is None or not isinstance(t.meter, TwinMeter) or t.meter.workload is None:
        return
    s = tuner.summary()  # the callback's: the capture step counts as a minibatch before the chosen mode
    took = s.tuning_steps
    try:
        before = simulate_tuning(t.meter.workload, args.budget, strategy=args.strategy, prior=None,
                                 window=WindowSpec(settle_s=2.4), seed=args.seed).tuned_at_step
    except Exception as exc:  # noqa: BLE001 - the comparison is extra: say why it is missing
        print(f"(no comparison with the earlier settings: {type(exc).__name__}: {exc})")
        return
    then = f"{before} minibatches" if before is not None else "more than 5000 minibatches"
    if took is None:
        print(f"tuning did not finish in this run ({s.progress.profiles_done} profiles measured, about "
              f"{s.progress.more_steps_needed} more minibatches needed); the settings before (no prior, a fixed 2.4 s "
              f"settling wait per profile) need {then} in all (simulated dry run)")
        return
    how = "found in the store" if not t.profiles else f"{len(t.profiles)} profiles measured"
    print(f"tuning took {took} minibatches ({how}); the settings before (no prior, a fixed 2.4 s settling wait "
          f"per profile) take {then} for the same model and budget (simulated dry run on the twin)")
