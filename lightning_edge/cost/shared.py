"""The model's shared capture: one capture per module per step, and one analysis of it, for every caller.

The profiler, the tuner and the interleaver of one Trainer each need the training step's cost. Each used to run its
own :class:`~lightning_edge.cost.capture.CallCapture` and :func:`~lightning_edge.cost.counter.step_cost`: with the three
together the model was captured and analysed three times. Now each asks the model's :class:`StepCaptures`
(:func:`shared_capture`: the same object for the same module in this process). The first to ask at a step's start
starts one ``CallCapture``; the first to ask at its end stops it; the step is kept (:class:`CapturedStep`: its calls,
whether it trained, its batch size, its signature) and its cost is analysed once, by whoever asks first
(:meth:`CapturedStep.cost`), and reused by the others::

    home = shared_capture(model)
    home.begin()                              # at the step's start (a no-op when a capture is running)
    ...the step...
    step = home.end()                         # at its end: the CapturedStep (the same one for every caller)
    cost = step.cost()                        # step_cost(model, step.captured), analysed once

A caller that finds a step of the kind it needs already kept (``home.known(training)``) uses it without capturing.
:class:`FirstStep` is that routine, once, for every caller (the profiler's session, the tuner and the interleaver)::

    first = FirstStep(model)                  # the training step
    step = first.begin()                      # at the step's start: the kept step, or None (this one is captured)
    ...the step...
    step = step or first.end()                # at its end
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING

from torch import nn

from lightning_edge._compat import dtype_name
from lightning_edge.cost.capture import CallCapture, Captured, CaptureError, tensors_of
from lightning_edge.cost.counter import step_cost

if TYPE_CHECKING:
    from lightning_edge.cost.model_cost import ModelCost

__all__ = ["CapturedStep", "StepCaptures", "shared_capture", "FirstStep"]


def _signature(captured: Captured) -> str:
    """The step's call shape: each outermost call's module and its tensors' dtypes and shapes."""
    return "; ".join(f"{c.shown}(" + ",".join(f"{dtype_name(t.dtype)}{list(t.shape)}"
                                             for t in tensors_of((c.args, c.kwargs))) + ")" for c in captured.calls)


class CapturedStep:
    """One captured step of a model, shared by every caller (see the module docstring): ``captured`` (its
    outermost calls), ``training`` (a call ran with gradients), ``batch_size``, ``signature`` (the calls' modules,
    dtypes and shapes), ``module_calls`` (every module call of the step, for what an analysis of it costs).
    :meth:`cost` analyses it once, on the first ask."""

    def __init__(self, home: StepCaptures, captured: Captured) -> None:
        self._home = home
        self.captured = captured
        self.training = captured.training
        self.batch_size = next((b for b in (c.batch_size() for c in captured.calls) if b is not None), None)
        self.signature = _signature(captured)
        self.module_calls = captured.module_calls
        self.analysis_s: float | None = None  # what the analysis took (None: not run yet)
        self._cost: ModelCost | None = None
        self._error: BaseException | None = None

    @property
    def analysed(self) -> bool:
        """True once :meth:`cost` has run (whatever it found): the next ask costs nothing."""
        return self.analysis_s is not None

    def cost(self) -> ModelCost:
        """The step's :class:`~lightning_edge.cost.ModelCost` (:func:`~lightning_edge.cost.counter.step_cost`),
        analysed on the first call and kept; raises what the analysis raised (each time it is asked)."""
        if self.analysis_s is None:
            model = self._home.model
            t0 = time.perf_counter()
            try:
                if model is None:
                    raise CaptureError("the captured model no longer exists")
                self._cost = step_cost(model, self.captured, training=self.training)
            except Exception as exc:  # noqa: BLE001 - kept, and raised to every caller
                self._error = exc
            self.analysis_s = time.perf_counter() - t0
            self._home.analyses += 1
        if self._error is not None:
            raise self._error
        return self._cost

    def __repr__(self) -> str:
        return f"CapturedStep({'training' if self.training else 'inference'}, batch {self.batch_size}: " \
               f"{self.signature})"


class StepCaptures:
    """The one capture of a model's steps (:func:`shared_capture` gives the same object to every caller): the first
    captured step of each kind (training, inference), and the capture in progress.

    ``begin()`` at a step's start captures that step unless a capture is running (callbacks of one Trainer each
    ask; one :class:`CallCapture` runs); ``end()`` at its end stops it and returns the :class:`CapturedStep` (every
    caller of that step gets the same one); ``known(training)`` the step kept for that kind. Counters
    ``captures`` and ``analyses`` say how many of each were made."""

    def __init__(self, model: nn.Module) -> None:
        self._model = weakref.ref(model)  # the registry is keyed by the model: a strong reference would keep it
        self.steps: dict[bool, CapturedStep] = {}
        self.last: CapturedStep | None = None  # the step the last capture took
        self.captures = 0
        self.analyses = 0
        self._running: CallCapture | None = None

    @property
    def model(self) -> nn.Module | None:
        return self._model()

    @property
    def capturing(self) -> bool:
        return self._running is not None

    def known(self, training: bool) -> CapturedStep | None:
        """The kept step of that kind (None: none captured yet)."""
        return self.steps.get(bool(training))

    def begin(self) -> bool:
        """Capture the step that starts now, unless a capture is running; True when one is running."""
        if self._running is None:
            model = self.model
            if model is None:
                return False
            self._running = CallCapture(model).start()
        return True

    def end(self) -> CapturedStep | None:
        """Stop the capture (when running) and return the step it took, kept as its kind's step when it is the
        first of its kind (None: no capture ran, or the step called none of the model's modules)."""
        cap, self._running = self._running, None
        if cap is None:
            return self.last
        captured = cap.stop()
        self.captures += 1
        if not captured.calls:
            self.last = None
            return None
        step = CapturedStep(self, captured)
        kept = self.steps.setdefault(step.training, step)
        self.last = kept if kept.signature == step.signature else step
        return self.last

    def abort(self) -> None:
        """Drop the capture in progress (an exception in the step)."""
        if self._running is not None:
            self._running.stop()
            self._running = None

    def __repr__(self) -> str:
        kinds = ", ".join("training" if k else "inference" for k in self.steps) or "nothing"
        return f"StepCaptures({type(self.model).__name__}: {kinds} kept, {self.captures} capture(s), " \
               f"{self.analyses} analysis(es))"


_HOMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def shared_capture(model: nn.Module) -> StepCaptures:
    """The model's :class:`StepCaptures`: the same object for the same module in this process (held weakly: it
    goes with the model)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"shared_capture needs a torch.nn.Module, got {type(model).__name__}")
    home = _HOMES.get(model)
    if home is None:
        home = _HOMES[model] = StepCaptures(model)
    return home


class FirstStep:
    """One caller's first step of a kind (``training``) from the model's shared capture: :meth:`begin` at a step's
    start returns the step already kept (captured by another callback of the Trainer, or an earlier run: nothing is
    hooked), else starts capturing this step and returns None; :meth:`end` at its end returns the captured step (the
    same object for every caller; None when this caller began no capture or the step called none of the model's
    modules); :meth:`abort` drops a capture this caller began (an exception in the step)."""

    def __init__(self, model: nn.Module, training: bool = True) -> None:
        self.home = shared_capture(model)
        self.training = bool(training)
        self.capturing = False

    def begin(self) -> CapturedStep | None:
        known = self.home.known(self.training)
        if known is not None:
            return known
        self.capturing = self.home.begin()
        return None

    def end(self) -> CapturedStep | None:
        if not self.capturing:
            return None
        self.capturing = False
        return self.home.end()

    def abort(self) -> None:
        if self.capturing:
            self.capturing = False
            self.home.abort()
