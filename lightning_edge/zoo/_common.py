"""Shared helpers for the zoo: building directly on a device (meta included) and example inputs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Union

import torch
from torch import Tensor, nn

DeviceLike = Union[torch.device, str, int, None]  # runtime alias: Python 3.8's typing

__all__ = ["DeviceLike", "on_device", "finish", "example_float", "example_tokens", "image_inputs", "count_params"]


@contextlib.contextmanager
def on_device(device: DeviceLike) -> Iterator[None]:
    """Make every parameter and buffer created inside the block live on ``device``.

    ``torch.device`` as a context manager routes tensor factory calls (the ones ``nn.Module``
    constructors make) to that device, so ``device="meta"`` allocates no storage at all.
    ``None`` leaves the current default device alone.
    """
    with contextlib.nullcontext() if device is None else torch.device(device):
        yield


def finish(model: nn.Module, dtype: torch.dtype | None) -> nn.Module:
    """Cast floating parameters/buffers to ``dtype`` (a no-op when ``None``); integer buffers are kept."""
    if dtype is not None:
        model.to(dtype=dtype)
    return model


def _device(device: DeviceLike) -> torch.device:
    return torch.device("cpu") if device is None else torch.device(device)


def example_float(
    shape: Sequence[int],
    device: DeviceLike = None,
    dtype: torch.dtype | None = None,
    seed: int = 0,
    uniform: bool = False,
) -> Tensor:
    """A deterministic random float tensor (normal, or uniform in [0, 1) when ``uniform``).

    On the meta device nothing is generated (meta tensors have no values), so no memory is used.
    """
    dev = _device(device)
    dtype = dtype or torch.get_default_dtype()
    if dev.type == "meta":
        return torch.empty(tuple(shape), device=dev, dtype=dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    fn = torch.rand if uniform else torch.randn
    return fn(tuple(shape), generator=gen, device="cpu", dtype=dtype).to(dev)


def image_inputs(
    batch_size: int = 1,
    device: DeviceLike = None,
    dtype: torch.dtype | None = None,
    image_size: int = 224,
    seed: int = 0,
) -> tuple[Tensor]:
    """One image batch ``(batch_size, 3, 224, 224)``, standard-normal (like normalised ImageNet pixels): the
    inputs of the ImageNet classifiers."""
    return (example_float((batch_size, 3, image_size, image_size), device, dtype, seed),)


def example_tokens(shape: Sequence[int], vocab_size: int, device: DeviceLike = None, seed: int = 0) -> Tensor:
    """Deterministic random token ids (int64) in ``[0, vocab_size)``."""
    dev = _device(device)
    if dev.type == "meta":
        return torch.empty(tuple(shape), device=dev, dtype=torch.long)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, vocab_size, tuple(shape), generator=gen, device="cpu", dtype=torch.long).to(dev)


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameter elements; shared (tied) parameters are counted once, as ``parameters()`` yields."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
