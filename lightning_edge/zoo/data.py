"""Synthetic datasets for demos and tests: generated on the fly, nothing downloaded.

``synthetic_images(n, size=64, classes=10, seed=0)``: a ``TensorDataset`` of RGB images whose class is the
orientation of a noisy sinusoidal grating (class ``k``: ``k * 180 / classes`` degrees) with a random phase,
frequency, colour tint and gaussian noise. A small CNN learns it within a few hundred minibatches, so a
fine-tuning demo shows its loss falling; it is not a benchmark of accuracy.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import TensorDataset

__all__ = ["synthetic_images"]


def synthetic_images(n: int, size: int = 64, classes: int = 10, *, seed: int = 0, noise: float = 0.35) -> TensorDataset:
    """``n`` images ``(3, size, size)`` (float32, roughly zero mean, unit scale) and labels in ``[0, classes)``."""
    if n < 1 or size < 4 or classes < 2:
        raise ValueError(f"need n >= 1, size >= 4 and classes >= 2, got n={n}, size={size}, classes={classes}")
    g = torch.Generator().manual_seed(int(seed))
    labels = torch.randint(0, classes, (n,), generator=g)
    theta = labels.float() * (math.pi / classes) + 0.05 * torch.randn(n, generator=g)
    freq = 2 * math.pi * (2.0 + 3.0 * torch.rand(n, generator=g)) / size
    phase = 2 * math.pi * torch.rand(n, generator=g)
    coords = torch.arange(size, dtype=torch.float32)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    proj = xx[None] * torch.cos(theta)[:, None, None] + yy[None] * torch.sin(theta)[:, None, None]
    wave = torch.sin(proj * freq[:, None, None] + phase[:, None, None])
    tint = 0.5 + torch.rand(n, 3, generator=g)
    images = wave[:, None] * tint[:, :, None, None] + noise * torch.randn(n, 3, size, size, generator=g)
    return TensorDataset(images.contiguous(), labels)
