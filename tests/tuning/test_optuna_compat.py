"""Named constraints on every supported Optuna (4.5, the last for Python 3.8, has no ``Trial.set_constraint``): the
tuner writes them the same way under both, and a store written under one reads the same under the other."""

from __future__ import annotations

import optuna
import pytest

from lightning_edge.tuning import _optuna
from lightning_edge.tuning._optuna import CONSTRAINT_PREFIX, constraints_of, create_trial, set_constraints


@pytest.fixture(params=["native", "fallback"] if _optuna._NAMED else ["fallback"])
def api(request, monkeypatch):
    """Both code paths on the running Optuna: its own named-constraint API where it has one (Optuna 5), and the
    fallback (what Optuna 4.5 runs) everywhere."""
    if request.param == "fallback":
        monkeypatch.setattr(_optuna, "_NAMED", False)
        monkeypatch.setattr(_optuna, "_CREATE_TAKES_CONSTRAINTS", False)
    return request.param


def test_set_and_read_constraints(api):
    study = optuna.create_study(directions=["minimize", "minimize"])
    trial = study.ask()
    set_constraints(trial, {"power_w": 1.5, "latency_s": -0.25})
    study.tell(trial, [1.0, 2.0])
    t = study.trials[0]
    assert constraints_of(t) == {"power_w": 1.5, "latency_s": -0.25}
    # the attributes Optuna 5 reads its named constraints from: either version reads the other's store
    assert t.system_attrs[CONSTRAINT_PREFIX + "power_w"] == 1.5
    if hasattr(t, "constraints"):  # Optuna 5 reads the names (and, from a 4.5 writer, the list as "0", "1")
        assert {"power_w": 1.5, "latency_s": -0.25}.items() <= dict(t.constraints).items()


def test_create_trial_with_constraints(api):
    dist = optuna.distributions.FloatDistribution(0, 1)
    t = create_trial(params={"x": 0.5}, distributions={"x": dist}, values=[1.0, 2.0],
                     system_attrs={"fixed_params": {"x": 0.5}}, constraints={"power_w": -2.0})
    study = optuna.create_study(directions=["minimize", "minimize"])
    study.add_trial(t)
    back = study.trials[0]
    assert constraints_of(back) == {"power_w": -2.0}
    assert back.system_attrs["fixed_params"] == {"x": 0.5}


def test_nan_constraint_is_refused(api):
    study = optuna.create_study()
    trial = study.ask()
    with pytest.raises(ValueError, match="NaN"):
        set_constraints(trial, {"power_w": float("nan")})


def test_optuna_reads_the_constraints_for_its_best_trials(api):
    # Optuna's own view of a store (best_trials: the feasible Pareto front), under 4.5 as under 5
    study = optuna.create_study(directions=["minimize", "minimize"])
    for time_s, power_w in ((1.0, 30.0), (2.0, 10.0), (3.0, 9.0)):
        trial = study.ask()
        set_constraints(trial, {"power_w": power_w - 20.0})
        study.tell(trial, [time_s, power_w])
    assert sorted(t.values[1] for t in study.best_trials) == [9.0, 10.0]  # the 30 W trial is infeasible
    assert [constraints_of(t) for t in study.trials] == [{"power_w": 10.0}, {"power_w": -10.0}, {"power_w": -11.0}]
