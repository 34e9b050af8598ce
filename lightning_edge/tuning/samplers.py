"""GMD, ALS and the baselines as Optuna samplers, for ``study.optimize``.

The algorithm decides the next point; the sampler hands it to Optuna's trial through
``sample_relative`` (all parameters at once: the four knobs and, for inference, the batch size)::

    sampler = GMDSampler(TrainingProblem(30.0), space)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(sampler.objective(workload), n_trials=100, callbacks=[sampler.stop_callback])
    sampler.result().solution

Each trial profiles one point: objective values ``[time_s, power_w]`` (concurrent points:
training time and the larger power, with both profiles in user attributes), constraints of the
problem via ``Trial.set_constraint``, the search stops itself when the algorithm is done.
(``solve`` / ``explore`` need no sampler: they drive the algorithm against a profile backend, see
:mod:`lightning_edge.tuning.search`.)
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning._optuna import set_constraints
from lightning_edge.tuning.als import ALS
from lightning_edge.tuning.backend import ProfileKey
from lightning_edge.tuning.gmd import GMD
from lightning_edge.tuning.problems import ConcurrentMeasurement, Problem, Workload, as_measurement
from lightning_edge.tuning.search import ExploreSpec, Point, Result, SearchContext, SearchResult, Strategy
from lightning_edge.tuning.store import (
    PARAM_DISTRIBUTIONS,
    constraint_values,
    distributions,
    key_params,
    params_key,
    suggest,
    trial_measurement,
)
from lightning_edge.tuning.table import ProfileTable


def _point_params(point: Point) -> dict[str, Any]:
    kind = "train" if point.kind == "train" else "infer"
    return key_params(ProfileKey(kind, point.mode, point.batch_size))


class StrategySampler(BaseSampler):
    """A strategy (GMD, ALS, RND, NN, binary search, exhaustive) as an Optuna sampler (for ``study.optimize``).

    ``target`` is the problem (per-problem strategies and ``solve``) or an :class:`ExploreSpec`
    (exploring strategies' ``explore``). ``space`` is needed only for standalone use.
    """

    def __init__(self, strategy: Strategy, target: Problem | ExploreSpec, space: PowerModeSpace | None = None, *,
                 seed: int | None = 0) -> None:
        self._fallback = RandomSampler(seed=0)  # parameters the algorithm does not set (none of the profile's)
        self.strategy = strategy
        self.target = target
        self.space = space
        self.seed = seed
        self.ctx: SearchContext | None = None
        # standalone state
        self._gen: Generator | None = None
        self._request: list[Point] | None = None
        self._single = False
        self._answers: dict[Point, Result] = {}
        self.done = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.strategy!r}, {self.target!r})"

    @property
    def kind(self) -> str:
        return self.target.kind

    def _start(self) -> None:
        if self.space is None:
            raise ValueError(f"{type(self).__name__}: pass the power-mode space to use the sampler with study.optimize")
        if isinstance(self.target, ExploreSpec):
            self.ctx = SearchContext(self.strategy.budget_for(self.target, self.space))
            self._gen = self.strategy.explore_search(self.ctx, self.target, self.space)
        else:
            self.ctx = SearchContext(self.strategy.budget(self.target, self.space))
            self._gen = self.strategy.search(self.ctx, self.target, self.space, self.seed)
        self._advance_gen(None, first=True)

    def _advance_gen(self, answer: Result | list[Result] | None, first: bool = False) -> None:
        try:
            req = next(self._gen) if first else self._gen.send(answer)
        except StopIteration:
            self.done = True
            self._request = None
            return
        self._single = isinstance(req, Point)
        self._request = [req] if self._single else list(req)

    def _completed(self, study: Study) -> dict[tuple, FrozenTrial]:
        out = {}
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            out.setdefault(tuple(sorted(t.params.items())), t)
        return out

    @staticmethod
    def _result_of(point: Point, t: FrozenTrial) -> Result:
        if point.kind == "concurrent":
            return ConcurrentMeasurement(trial_measurement(t, "train_"), trial_measurement(t, "infer_"))
        return trial_measurement(t)

    def _next_point(self, study: Study) -> Point | None:
        """Feed finished trials to the algorithm; the next point it wants that nobody is profiling."""
        if self._gen is None:
            self._start()
        while not self.done:
            done = self._completed(study)
            running = {tuple(sorted(t.params.items())) for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
            for p in self._request or []:
                key = tuple(sorted(_point_params(p).items()))
                if p not in self._answers and key in done:
                    self._answers[p] = self._result_of(p, done[key])
            todo = [p for p in self._request or [] if p not in self._answers]
            if todo:
                free = [p for p in todo if tuple(sorted(_point_params(p).items())) not in running]
                return free[0] if free else None
            answers = [self._answers[p] for p in self._request or []]
            self._advance_gen(answers[0] if self._single else answers)
        return None

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return distributions("train" if self.kind == "train" else "infer")

    def sample_relative(self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict:
        p = self._next_point(study)
        if p is None:
            return {}
        return {k: v for k, v in _point_params(p).items() if k in search_space}

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def objective(self, workload: Workload) -> Callable[[optuna.Trial], Sequence[float]]:
        """An objective for ``study.optimize`` that profiles the point this sampler proposes."""
        kind = self.target.kind

        def _objective(trial: optuna.Trial) -> Sequence[float]:
            if self.done:
                raise optuna.TrialPruned("the search is finished")
            if not trial.relative_params:
                raise optuna.TrialPruned("no point left to profile now")
            profile_kind = "train" if kind == "train" else "infer"
            key = params_key(profile_kind, suggest(trial, profile_kind))
            mode, bs = key.mode, key.batch_size
            problem = None if isinstance(self.target, ExploreSpec) else self.target
            if kind == "concurrent":
                mt, mi = as_measurement(workload.train(mode)), as_measurement(workload.infer(mode, bs))
                for name, m in (("train", mt), ("infer", mi)):
                    trial.set_user_attr(f"{name}_time_s", m.time_s)
                    trial.set_user_attr(f"{name}_power_w", m.power_w)
                trial.set_user_attr("label", mi.label)
                set_constraints(trial, constraint_values(problem, mi.time_s, max(mt.power_w, mi.power_w), bs))
                return [mt.time_s, max(mt.power_w, mi.power_w)]
            m = as_measurement(workload.train(mode) if kind == "train" else workload.infer(mode, bs))
            trial.set_user_attr("time_s", m.time_s)
            trial.set_user_attr("power_w", m.power_w)
            trial.set_user_attr("label", m.label)
            set_constraints(trial, constraint_values(problem, m.time_s, m.power_w, bs))
            return [m.time_s, m.power_w]

        return _objective

    def stop_callback(self, study: Study, trial: FrozenTrial) -> None:
        """``study.optimize(..., callbacks=[sampler.stop_callback])``: stop when the algorithm is done."""
        self._next_point(study)
        if self.done:
            study.stop()

    def result(self, new_profiles: int | None = None) -> SearchResult | ProfileTable:
        """The answer (standalone mode): a :class:`SearchResult`, or a table for an exploration."""
        if self.ctx is None:
            raise RuntimeError("the sampler has not run yet")
        n_new = self.ctx.used if new_profiles is None else new_profiles
        if isinstance(self.target, ExploreSpec):
            return self.strategy.make_table(self.ctx, self.target, self.space, n_new)
        return self.strategy.answer(self.ctx, self.target, self.space, n_new)


class GMDSampler(StrategySampler):
    """GMD (Algorithm 1) as an Optuna sampler: ``GMDSampler(problem, space, **GMD options)``."""

    def __init__(self, problem: Problem, space: PowerModeSpace | None = None, *, strategy: Strategy | None = None,
                 seed: int | None = 0,
                 **gmd_options: Any) -> None:
        super().__init__(strategy if strategy is not None else GMD(**gmd_options), problem, space, seed=seed)


class ALSSampler(StrategySampler):
    """ALS (Algorithm 2) as an Optuna sampler: ``ALSSampler("train" | ExploreSpec | problem, space, **ALS options)``."""

    def __init__(self, target: str | ExploreSpec | Problem, space: PowerModeSpace | None = None, *,
                 strategy: Strategy | None = None, seed: int | None = 0,
                 **als_options: Any) -> None:
        if isinstance(target, str):
            target = ExploreSpec(target, seed=seed)
        super().__init__(strategy if strategy is not None else ALS(**als_options), target, space, seed=seed)


__all__ = ["StrategySampler", "GMDSampler", "ALSSampler", "PARAM_DISTRIBUTIONS"]
