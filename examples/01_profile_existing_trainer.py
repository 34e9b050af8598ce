"""Add the per-layer time/energy profiler to a Trainer you already have: one callback.

    python examples/01_profile_existing_trainer.py                # energy simulated for a Jetson AGX Orin (twin)
    python examples/01_profile_existing_trainer.py --device auto  # a real sensor: Jetson INA3221, NVML or RAPL

On a Jetson ``device="auto"`` reads the INA3221 rails; on this CPU it finds RAPL if the kernel exposes it, else no
sensor (then the energies are roofline estimates and say so). Timings are always measured on this machine.
"""

import argparse

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader

import lightning_edge
from lightning_edge import zoo
from lightning_edge.zoo.data import synthetic_images


class Classifier(L.LightningModule):  # your existing LightningModule, unchanged
    def __init__(self):
        super().__init__()
        self.model = zoo.resnet18(num_classes=10)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="sim:orin-agx")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    data = DataLoader(synthetic_images(512, 32), batch_size=32, shuffle=True)
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, enable_checkpointing=False,
                        default_root_dir="lightning_edge_examples",
                        callbacks=[lightning_edge.EnergyProfiler(device=args.device)])   # <- the one added line
    trainer.fit(Classifier(), data)
    print(f"per-layer report: {trainer.callbacks[0].log_dir}/layers.csv; "
          f"tensorboard --logdir {trainer.logger.save_dir}")


if __name__ == "__main__":
    main()
