"""A table of profiled points that answers problems by lookup (Fulcrum's "observed Pareto").

``ALS().explore(...)``, ``RandomSampling().explore(...)`` and ``Exhaustive().explore(...)`` return a
:class:`ProfileTable`; ``table.solve(problem)`` returns the best profiled point that meets every
constraint of the problem, so one exploration answers many problems (section 5.3.2, step 9).
Every row carries the label of its numbers (``measured`` / ``simulated`` / ``estimated``).

Pure: numpy only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge.modes import PowerMode
from lightning_edge.tuning.pareto import best_index
from lightning_edge.tuning.problems import (
    Assessment,
    ConcurrentMeasurement,
    ConcurrentProblem,
    InferenceProblem,
    Problem,
    Solution,
    TrainingProblem,
    as_measurement,
    check_kind,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from lightning_edge.tuning.backend import ProfileKey
    from lightning_edge.tuning.search import Point, Result


def _f(x: ArrayLike | None) -> np.ndarray:
    return np.asarray(x, dtype=float).ravel()


class ProfileTable:
    """Profiled points of one workload: ``kind`` is ``"train"``, ``"infer"`` or ``"concurrent"``.

    Columns (numpy arrays, one entry per row): ``train_time_s``/``train_power_w`` (train, concurrent),
    ``infer_time_s``/``infer_power_w`` and ``batch_size`` (infer, concurrent); ``modes`` is the list of
    :class:`PowerMode`; ``labels`` the provenance of each row.
    """

    def __init__(
        self,
        kind: str,
        modes: Sequence[PowerMode],
        *,
        batch_size: Sequence[int] | None = None,
        train_time_s: Sequence[float] | None = None,
        train_power_w: Sequence[float] | None = None,
        infer_time_s: Sequence[float] | None = None,
        infer_power_w: Sequence[float] | None = None,
        labels: Sequence[str] | None = None,
        strategy: str = "",
        profiles_used: int | None = None,
        new_profiles: int = 0,
    ) -> None:
        self.kind = check_kind(kind)
        self.modes: list[PowerMode] = list(modes)
        n = len(self.modes)
        need_train = self.kind in ("train", "concurrent")
        need_infer = self.kind in ("infer", "concurrent")
        self.train_time_s = _f(train_time_s) if need_train else None
        self.train_power_w = _f(train_power_w) if need_train else None
        self.infer_time_s = _f(infer_time_s) if need_infer else None
        self.infer_power_w = _f(infer_power_w) if need_infer else None
        self.batch_size = np.asarray(batch_size, dtype=np.int64).ravel() if need_infer else None
        for name, col in (("train_time_s", self.train_time_s), ("train_power_w", self.train_power_w),
                          ("infer_time_s", self.infer_time_s), ("infer_power_w", self.infer_power_w),
                          ("batch_size", self.batch_size)):
            if col is not None and col.shape != (n,):
                raise ValueError(f"ProfileTable({self.kind}): column {name} has {col.size} entries for {n} modes")
        self.labels = list(labels) if labels is not None else ["measured"] * n
        self.strategy = strategy
        self.profiles_used = n if profiles_used is None else int(profiles_used)
        self.new_profiles = int(new_profiles)

    # ------------------------------------------------------------------------------ construction
    @classmethod
    def from_results(cls, kind: str, results: Mapping[Point | ProfileKey, Result] |
                     Iterable[tuple[Point | ProfileKey, Result]], **kw: Any) -> ProfileTable:
        """From ``{Point: Measurement | ConcurrentMeasurement}`` (what a search profiled; or a store's
        ``(ProfileKey, Measurement)`` pairs), keeping ``kind`` points."""
        kind = check_kind(kind)
        items = results.items() if isinstance(results, Mapping) else results
        modes: list[PowerMode] = []
        cols: dict[str, list] = {k: [] for k in ("bs", "tt", "tp", "it", "ip", "lab")}
        for point, res in items:
            if point.kind != kind:
                continue
            modes.append(point.mode)
            if kind == "concurrent":
                assert isinstance(res, ConcurrentMeasurement)
                tr, inf = res.train, res.infer
            else:
                tr = inf = res = as_measurement(res)
            if kind != "infer":
                cols["tt"].append(tr.time_s)
                cols["tp"].append(tr.power_w)
            if kind != "train":
                cols["bs"].append(point.batch_size)
                cols["it"].append(inf.time_s)
                cols["ip"].append(inf.power_w)
            cols["lab"].append(res.label)
        return cls(
            kind, modes, batch_size=cols["bs"], train_time_s=cols["tt"], train_power_w=cols["tp"],
            infer_time_s=cols["it"], infer_power_w=cols["ip"], labels=cols["lab"], **kw,
        )

    @classmethod
    def combine(cls, train: ProfileTable, infer: ProfileTable, **kw: Any) -> ProfileTable:
        """A concurrent table from a training table and an inference table of the same modes (joined on mode)."""
        if train.kind not in ("train", "concurrent") or infer.kind not in ("infer", "concurrent"):
            raise ValueError("combine(train, infer) needs a training table and an inference table")
        by_mode = {}
        for i, m in enumerate(train.modes):
            by_mode.setdefault(m, i)
        rows = [(j, by_mode[m]) for j, m in enumerate(infer.modes) if m in by_mode]
        j_idx = np.asarray([r[0] for r in rows], dtype=np.int64)
        i_idx = np.asarray([r[1] for r in rows], dtype=np.int64)
        labs = [train.labels[i] if train.labels[i] == infer.labels[j] else f"{train.labels[i]}+{infer.labels[j]}"
                for j, i in rows]
        return cls(
            "concurrent", [infer.modes[j] for j in j_idx], batch_size=infer.batch_size[j_idx],
            train_time_s=train.train_time_s[i_idx], train_power_w=train.train_power_w[i_idx],
            infer_time_s=infer.infer_time_s[j_idx], infer_power_w=infer.infer_power_w[j_idx], labels=labs, **kw,
        )

    # ------------------------------------------------------------------------------ views
    def __len__(self) -> int:
        return len(self.modes)

    def __repr__(self) -> str:
        return f"ProfileTable({self.kind}, {len(self)} rows, strategy={self.strategy!r})"

    def assess(self, problem: Problem) -> Assessment:
        """The problem applied to every row (see :meth:`TrainingProblem.assess` and friends)."""
        if isinstance(problem, TrainingProblem):
            if self.train_time_s is None:
                raise ValueError(f"a {self.kind} table cannot solve a training problem: it has no training profiles")
            return problem.assess(self.train_time_s, self.train_power_w)
        if isinstance(problem, InferenceProblem):
            if self.infer_time_s is None:
                raise ValueError(f"a {self.kind} table cannot solve an inference problem: it has no inference profiles")
            return problem.assess(self.infer_time_s, self.infer_power_w, self.batch_size)
        if isinstance(problem, ConcurrentProblem):
            if self.kind != "concurrent":
                raise ValueError(
                    f"a {self.kind} table cannot solve a concurrent problem: explore with kind='concurrent' "
                    "or ProfileTable.combine(train_table, infer_table)"
                )
            return problem.assess(self.train_time_s, self.train_power_w, self.infer_time_s, self.infer_power_w,
                                  self.batch_size)
        raise TypeError(f"not a tuning problem: {problem!r}")

    def solve(self, problem: Problem) -> Solution | None:
        """The best row that meets every constraint of ``problem``, as a :class:`Solution`; ``None`` if none does."""
        i = best_index(self.assess(problem)) if len(self) else None
        return None if i is None else self.solution_at(problem, i)

    def solution_at(self, problem: Problem, i: int) -> Solution:
        a, kind = self.assess(problem), problem.kind
        out: dict[str, Any] = dict(problem=problem, mode=self.modes[i], batch_size=None,
                                   power_w=float(a.power_w[i]), throughput=float(a.throughput[i]),
                                   profiles_used=self.profiles_used, new_profiles=self.new_profiles,
                                   strategy=self.strategy, label=self.labels[i])
        if kind != "infer":  # training and concurrent: the time is the training minibatch's
            out.update(time_s=float(self.train_time_s[i]), train_power_w=float(self.train_power_w[i]))
        if kind != "train":
            out.update(batch_size=int(self.batch_size[i]), latency_s=float(a.latency_s[i]),
                       infer_time_s=float(self.infer_time_s[i]), infer_power_w=float(self.infer_power_w[i]))
        if kind == "infer":
            out["time_s"] = out["infer_time_s"]
        elif kind == "concurrent":
            out["train_minibatches"] = int(a.train_minibatches[i])
        return Solution(**out)

    def points(self) -> list[tuple[PowerMode, int | None]]:
        """``(mode, batch size)`` of every row (batch size ``None`` for training rows)."""
        if self.batch_size is None:
            return [(m, None) for m in self.modes]
        return [(m, int(b)) for m, b in zip(self.modes, self.batch_size)]
