"""A workload's measurements on the twin, as tuners see them: :class:`SimWorkload` (``train(mode)`` / ``infer(mode,
batch_size)``) gives a :class:`Measurement` (``time_s``, ``power_w``, ``label="simulated"``) with seeded
measurement noise around the step of the workload's one model
(:class:`~lightning_edge.twin.workload_model.TwinWorkload`, one per kind and batch size, from ``OrinTwin.workload``).
It adds the noise and the bookkeeping a tuner needs (fingerprint, call counts); the time and power are the model's.
No board runs here: the live simulated board is :class:`~lightning_edge.devices.sim.live.LiveTwin`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from lightning_edge.records import Measurement
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.workload import is_cost, precision_of
from lightning_edge.twin.workload_model import TwinWorkload

__all__ = ["Measurement", "SimWorkload"]


class SimWorkload:
    """What a tuner profiles: one model, training and/or inference, on the twin.

    ``SimWorkload("resnet18", twin=None, train_batch_size=16, noise=True, seed=0, time_noise=0.025,
    power_noise=0.02, seq_len=None, precision=None, example_inputs=None, param_tensors=None, dataloader=None)``

    ``model`` is a zoo name (``"resnet18"``), a captured :class:`~lightning_edge.cost.ModelCost` (its
    ``param_tensors``: the optimizer's parameter tensors, counted from the module that ran it) or an ``nn.Module``;
    ``precision``: for a name or a module ``"fp32"`` unless given (``"fp16"`` analyses it in half precision); for a
    cost, the cost's own (:func:`~lightning_edge.twin.workload.precision_of`). A module needs ``example_inputs``: one
    minibatch (a tensor or a tuple of tensors, batch dimension first; a dict of tensors for a model called as
    ``model(**batch)``; or a captured :class:`~lightning_edge.cost.capture.Call`). Only their shapes and dtypes are used
    (the twin analyses the module on meta tensors of the same shapes, with the batch dimension set to
    the batch size asked for), so the module's weights are never touched.

    ``train(mode)`` and ``infer(mode, batch_size)`` return a :class:`Measurement`; with ``noise`` each
    call draws seeded gaussian noise (relative sd ``time_noise`` on time, ``power_noise`` on power), so
    the same seed gives the same sequence of measurements. ``noise=False`` returns the model's values.
    ``calls`` counts the profiling calls (a tuner's cost). :meth:`twin_workload` is the model behind them.
    """

    @property
    def label(self) -> str:
        """``simulated`` (``extrapolated`` on the twin of an extrapolated board)."""
        return str(getattr(self.twin, "label", "simulated"))

    @property
    def device_model(self) -> str:
        """The twin's key in a profile store (:attr:`~lightning_edge.twin.model.OrinTwin.store_key`): apart from a
        real board's, and from another model of the board."""
        return self.twin.store_key

    def __init__(
        self,
        model: Any,
        twin: OrinTwin | None = None,
        *,
        train_batch_size: int | None = None,
        noise: bool = True,
        seed: int | None = 0,
        time_noise: float = 0.025,
        power_noise: float = 0.02,
        seq_len: int | None = None,
        precision: str | None = None,
        example_inputs: Any = None,
        param_tensors: int | None = None,
        dataloader: bool | None = None,
    ) -> None:
        self.example_call = None  # a model called with keywords or a dict: its call form (cost.capture.Call)
        if example_inputs is not None and not isinstance(example_inputs, (tuple, list)) \
                and not hasattr(example_inputs, "shape"):
            from collections.abc import Mapping

            from lightning_edge.cost.capture import Call, tensors_of, to_meta

            if isinstance(example_inputs, Mapping):  # a dict batch: model(**batch)
                example_inputs = Call("", (), dict(example_inputs))
            if isinstance(example_inputs, Call):
                self.example_call = Call(example_inputs.module, to_meta(example_inputs.args),
                                         to_meta(example_inputs.kwargs))
                example_inputs = tuple(tensors_of((self.example_call.args, self.example_call.kwargs)))
                if train_batch_size is None and self.example_call.batch_size() is not None:
                    train_batch_size = self.example_call.batch_size()
        if not isinstance(model, str) and not is_cost(model):
            if example_inputs is None:
                raise ValueError(
                    f"SimWorkload({type(model).__name__}): an nn.Module needs example_inputs=(one minibatch,) "
                    "so the twin knows its input shapes; or pass a zoo model name such as 'resnet18'")
            example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
            if not example_inputs or not all(hasattr(x, "shape") and len(x.shape) >= 1 for x in example_inputs):
                raise ValueError("example_inputs must be tensors with a batch dimension first, "
                                 f"got {[type(x).__name__ for x in example_inputs]}")
            if train_batch_size is None:
                train_batch_size = int(example_inputs[0].shape[0])
        self.example_inputs = example_inputs
        if train_batch_size is None:
            train_batch_size = 16
        if twin is None:
            twin = OrinTwin()
        self.twin = twin
        self.model = model
        self.train_batch_size = int(train_batch_size)
        self.noise = bool(noise)
        self.seed = seed
        self.time_noise = float(time_noise)
        self.power_noise = float(power_noise)
        self.seq_len = seq_len
        self.param_tensors = param_tensors
        self.dataloader = dataloader  # None: the twin's default (a data loader for training, none for inference)
        self._cost_precision = precision is None and is_cost(model)  # a cost: its own precision
        self.precision = (precision_of(model) if self._cost_precision else "fp32") if precision is None else precision
        self.calls = Counter()
        self._rng = np.random.default_rng(seed)
        self._expected: dict[tuple, tuple[float, float]] = {}

    @property
    def space(self):
        return self.twin.space

    @property
    def model_name(self) -> str:
        if isinstance(self.model, str):
            return self.model
        return str(getattr(self.model, "model", None) or type(self.model).__name__)

    @property
    def fingerprint(self) -> str:
        """The key of this workload's profiles in a store: model (and, for a module, its parameter count and input
        shapes), training batch size, precision and sequence length; the same workload gets the same key in
        every process."""
        parts = [self.model_name]
        if self.example_inputs is not None:
            n_params = sum(int(p.numel()) for p in self.model.parameters()) if hasattr(self.model, "parameters") else 0
            shapes = "x".join("-".join(str(int(d)) for d in tuple(x.shape)[1:]) or "0" for x in self.example_inputs)
            parts += [f"p{n_params}", f"in{shapes}"]
        parts += [f"train-bs{self.train_batch_size}", self.precision]
        if self.seq_len is not None:
            parts.append(f"seq{self.seq_len}")
        return "-".join(parts)

    def inputs_for(self, batch_size: int) -> tuple | None:
        """Meta tensors shaped like ``example_inputs`` with ``batch_size`` rows (``None`` for a zoo name)."""
        if self.example_inputs is None:
            return None
        if self.example_call is not None:  # keyword inputs, resized (kept integer values repeated)
            return self.example_call.resized(int(batch_size))
        import torch

        return tuple(torch.empty((int(batch_size), *tuple(x.shape)[1:]), dtype=x.dtype, device="meta")
                     for x in self.example_inputs)

    def reset(self, seed: int | None = None) -> None:
        """Restart the noise sequence (same seed: same measurements again)."""
        self._rng = np.random.default_rng(self.seed if seed is None else seed)
        self.calls.clear()

    def twin_workload(self, kind: str = "train", batch_size: int | None = None) -> TwinWorkload:
        """The one model of this workload's ``kind`` minibatch of ``batch_size`` (default ``train_batch_size``) on
        the twin (memoised by the twin: the profiler, the prior and this workload share it)."""
        bs = self.train_batch_size if batch_size is None else int(batch_size)
        return self.twin.workload(self.model, bs, kind, seq_len=self.seq_len,
                                  precision=None if self._cost_precision else self.precision,
                                  inputs=self.inputs_for(bs), param_tensors=self.param_tensors,
                                  dataloader=self.dataloader)

    def expected(self, kind: str, mode: Any, batch_size: int | None = None) -> tuple[float, float]:
        """Noise-free ``(time_s, power_w)`` of one minibatch on ``mode``: :meth:`twin_workload`'s step (cached per
        kind, mode and batch size, so repeated measurements do not run the twin again). ``batch_size`` defaults to
        ``train_batch_size``."""
        bs = self.train_batch_size if batch_size is None else int(batch_size)
        # the user's run on this twin (OrinTwin.set_run) is part of a captured workload's model
        key = (kind, self.twin.space.coerce(mode), bs, None if isinstance(self.model, str) else self.twin.runs.get(kind))
        hit = self._expected.get(key)
        if hit is None:
            step = self.twin_workload(kind, bs).step(key[1])
            hit = (float(step.time_s), float(step.power_w))
            self._expected[key] = hit
        return hit

    def draw(self, kind: str, mode: Any, batch_size: int | None = None, rng: Any = None,
             noise: bool | None = None) -> tuple[float, float, float]:
        """One noisy minibatch: ``(time_s, power_w, noise-free power_w)``, the noise drawn from ``rng`` (default:
        the workload's own generator) when ``noise`` (default: the workload's setting); the step meter
        (:class:`~lightning_edge.devices.meter.TwinMeter`) draws its steps here too."""
        t, clean = self.expected(kind, mode, batch_size)
        p = clean
        if self.noise if noise is None else noise:
            rng = self._rng if rng is None else rng
            t *= max(1.0 + self.time_noise * float(rng.standard_normal()), 0.5)
            p *= max(1.0 + self.power_noise * float(rng.standard_normal()), 0.5)
        return t, p, clean

    def _measure(self, kind: str, mode: Any, batch_size: int) -> Measurement:
        t, p, _ = self.draw(kind, mode, batch_size)
        self.calls[kind] += 1
        return Measurement(t, p, self.label)

    def train(self, mode: Any) -> Measurement:
        """Time per training minibatch (``train_batch_size``) and power on ``mode``."""
        return self._measure("train", mode, self.train_batch_size)

    def infer(self, mode: Any, batch_size: int = 1) -> Measurement:
        """Time per inference minibatch of ``batch_size`` and power on ``mode``."""
        return self._measure("infer", mode, int(batch_size))

    def sweep(self, kind: str = "train", batch_size: int | None = None, modes: Any = None):
        """Noise-free step over many modes (default: the whole space), as a twin ``Prediction``."""
        return self.twin_workload(kind, batch_size).step(modes)

    def __repr__(self) -> str:
        return f"SimWorkload({self.fingerprint}, simulated)"
