"""Driving the Orin twin from a profiling session: one job of
:class:`~lightning_edge.lightning.session.EnergySession`.

The captured step's cost becomes the workload's one model on the twin (:meth:`TwinDriver.workload`, a
:class:`~lightning_edge.twin.timeline.TwinWorkload`: the same object, and so the same numbers, that the tuner's meter,
its prior and serving ask for the same cost): the simulated board runs it (its sensor's power follows it), and its
per-layer table (``TwinWorkload.layers``) gives every layer's and step's time and energy on the Orin in a power mode,
named as the profiler names the model's layers. The table's rows sum to the step.
"""

from __future__ import annotations

from typing import Any

from lightning_edge.twin.workload import count_param_tensors

__all__ = ["TwinDriver"]


class TwinDriver:
    """The twin of a session's device, fed with the session's analysed costs."""

    def __init__(self, twin: Any, model: Any, root_name: str, notes: list[str]) -> None:
        self.twin = twin
        self.model = model
        self.root_name = root_name
        self.notes = notes
        self.costs: dict[tuple[str, bool], Any] = {}  # (module path, training) -> its ModelCost
        self.kind: str | None = None  # the workload the twin runs now ("train" / "infer")
        self._cache: dict[tuple, Any] = {}  # (training, mode, batch, cost) -> (LayerTimes, names) or None

    def add_cost(self, cost: Any, training: bool, qual: str = "") -> None:
        self.costs[(qual, training)] = cost

    def main_cost(self, training: bool) -> tuple[Any, str] | None:
        """The largest analysed module's cost for training or inference, and its path in the model."""
        mc = [(c, key[0]) for key, c in self.costs.items() if key[1] == training]
        return max(mc, key=lambda x: x[0].flops) if mc else None

    def workload(self, training: bool, batch: int | None) -> Any:
        """The twin's one model of the captured workload (the largest analysed module's cost, its optimizer's
        parameter tensors counted from that module), or None when nothing was analysed for ``training``."""
        main = self.main_cost(training)
        if main is None:
            return None
        cost, qual = main
        try:
            n_tensors = count_param_tensors(self.model.get_submodule(qual))
        except Exception:  # noqa: BLE001 - not a module: the twin guesses from the layers
            n_tensors = None
        return self.twin.workload(cost, batch, "train" if training else "infer", param_tensors=n_tensors)

    def layer_model(self, training: bool, mode: str | None, batch: int | None) -> tuple[Any, dict[str, str]] | None:
        """The twin's per-layer model of the captured workload in ``mode`` (None: the current one):
        ``(LayerTimes, {twin row name: profiler layer name})``, or None when there is no cost or it cannot be modelled
        (a note says why)."""
        main = self.main_cost(training)
        if main is None:
            return None
        cost, qual = main
        key = (training, mode, batch, id(cost))
        if key in self._cache:
            return self._cache[key]
        out = None
        try:
            lt = self.workload(training, batch).layers(mode)
            root = qual or self.root_name
            names = {n: (f"{qual}.{n}" if qual else n) for n in lt.names if n and not n.startswith("(")}
            names["(root)"] = root
            out = (lt, names)
            others = [k for k in self.costs if k[1] == training]
            if len(others) > 1:
                self._note(f"the twin models {root!r} only ({len(others) - 1} other analysed module(s) of the step "
                           "get no simulated time)")
        except Exception as exc:  # noqa: BLE001 - the twin cannot model it: host times x simulated power
            self._note(f"the twin could not model the workload per layer ({type(exc).__name__}: {exc}): layer times "
                       "are this machine's, energies apportioned from the simulated sensor")
        self._cache[key] = out
        return out

    @property
    def times(self) -> bool:
        """True when layers' and steps' times and energies are the twin's model of the workload."""
        return any(v is not None for v in self._cache.values())

    def begin(self, training: bool, samples: int | None) -> None:
        """Let the simulated board run this workload: its power follows the same model as the per-layer table."""
        kind = "train" if training else "infer"
        if self.kind == kind or self.main_cost(training) is None:
            return
        try:
            self.twin.begin(self.workload(training, samples))
            self.kind = kind
        except Exception as exc:  # noqa: BLE001
            self.notes.append(f"the twin could not simulate this workload ({exc}): it shows idle power")

    def follow(self, training: bool, samples: int | None) -> None:
        """Switch the board's workload when the stage changes (training <-> inference) and its cost is known."""
        if self.kind is not None and self.kind != ("train" if training else "infer") and self.main_cost(training):
            self.begin(training, samples)

    def end(self) -> None:
        if self.kind is not None:
            self.twin.end()
            self.kind = None

    def _note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)
