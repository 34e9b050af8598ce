"""Serve inference requests with a latency budget while fine-tuning: Fulcrum's managed interleaving.

    python examples/03_concurrent_train_and_infer.py --rate 60 --latency-ms 200 --budget 25

The ``Interleaver`` solves a ``ConcurrentProblem`` (GMD on the twin: power mode, inference minibatch size, and how
many training minibatches fit between two inference minibatches), then, inside ``trainer.fit``, runs that many
training minibatches between inference minibatches so that every request meets its deadline and training goes as
fast as the power budget allows. On the twin every time and power is simulated for the Orin (the models really run
on this CPU); the report gives per-request latency percentiles and the training throughput.
"""

import argparse

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader

from lightning_edge import zoo
from lightning_edge.serving import PoissonArrivals
from lightning_edge.serving.pytorch import Interleaver
from lightning_edge.tuning import ConcurrentProblem
from lightning_edge.zoo.data import synthetic_images


class Trainee(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = zoo.resnet18(num_classes=10)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=60.0, help="inference requests per second (Poisson)")
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--budget", type=float, default=25.0)
    ap.add_argument("--steps", type=int, default=150)
    args = ap.parse_args()
    problem = ConcurrentProblem(power_budget_w=args.budget, latency_budget_s=args.latency_ms / 1e3,
                                arrival_rps=args.rate)
    serving_model = zoo.mobilenet_v3_large(num_classes=10).eval()   # the model answering requests
    requests = synthetic_images(64, 32, seed=1).tensors[0]          # request payloads, cycled
    il = Interleaver(problem, device="sim:orin-agx", tuner="gmd", arrivals=PoissonArrivals(args.rate, seed=0),
                     infer_model=serving_model, request_inputs=requests)
    data = DataLoader(synthetic_images(1024, 32), batch_size=16, shuffle=True)
    L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, enable_checkpointing=False, logger=False,
              default_root_dir="lightning_edge_examples", callbacks=[il]).fit(Trainee(), data)
    print(il.report.describe() if hasattr(il.report, "describe") else il.report)


if __name__ == "__main__":
    main()
