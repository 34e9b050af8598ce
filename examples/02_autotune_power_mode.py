"""Fine-tune within a power budget and let the tool pick the power mode: one callback.

    python examples/02_autotune_power_mode.py --budget 20            # the Orin twin (simulated power and time)
    python examples/02_autotune_power_mode.py --budget 25 --device auto   # on a Jetson (needs root for the knobs)

``PowerModeTuner`` profiles power modes on the real training minibatches (the minibatches while the power settles
after each switch are discarded, then it measures until the standard error is small), runs Fulcrum's GMD started
from the modes' predicted time and power through the profile store (an SQLite file in your cache directory), then
trains on in the fastest profiled mode within the budget. Run it twice: the second run finds every profile in the
store and is in the chosen mode from its second minibatch (the first one is captured for the cost model). The board's original mode is restored at
the end, on an exception, on Ctrl-C, and (after a kill -9) by the next controller that starts.
"""

import argparse

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader

import lightning_edge
from lightning_edge import zoo
from lightning_edge.tuning import STRATEGIES
from lightning_edge.zoo.data import synthetic_images


class FineTune(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = zoo.mobilenet_v3_large(num_classes=10)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=2e-3)


class LowerBudgetLater(L.Callback):
    """Halfway through, the budget drops (e.g. the board switched to battery): the tuner re-solves at once."""

    def __init__(self, tuner, at_step, budget_w):
        self.tuner, self.at_step, self.budget_w = tuner, at_step, budget_w

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.at_step:
            self.tuner.set_power_budget(self.budget_w)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--lower-to", type=float, default=None, help="lower the budget to this halfway through")
    ap.add_argument("--device", default="sim:orin-agx")
    ap.add_argument("--strategy", default="gmd", choices=tuple(STRATEGIES), type=str.lower,
                    help="a registered tuning strategy (lightning_edge.tuning.STRATEGIES)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--store", default="default", help="'default' (SQLite in the cache dir), a URL, or 'memory'")
    args = ap.parse_args()
    tuner = lightning_edge.PowerModeTuner(args.budget, strategy=args.strategy, device=args.device,
                                          store=None if args.store == "memory" else args.store)
    callbacks = [tuner]
    if args.lower_to:
        callbacks.append(LowerBudgetLater(tuner, args.steps // 2, args.lower_to))
    data = DataLoader(synthetic_images(2048, 32), batch_size=16, shuffle=True)
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, enable_checkpointing=False,
                        default_root_dir="lightning_edge_examples", callbacks=callbacks)
    trainer.fit(FineTune(), data)
    print("chosen:", tuner.solution.describe() if tuner.solution else "no feasible mode found")


if __name__ == "__main__":
    main()
