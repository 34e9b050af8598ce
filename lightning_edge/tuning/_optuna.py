"""Optuna's API across the versions the package supports (4.5, the last for Python 3.8, to the newest), in one place.

Optuna 5 names a trial's constraints (``Trial.set_constraint(name, value)``, ``FrozenTrial.constraints``,
``create_trial(constraints=...)``) and stores each as the system attribute ``constraints:<name>``. Before 5 there
are no named constraints: the same attributes are written here directly, so that a store written under either
version reads the same under the other, and beside them the unnamed list Optuna 4 reads its constraints from
(``constraints``, values in the order of the sorted names), so that Optuna 4's own feasibility rules
(``study.best_trials``) hold too (``tests/tuning/test_optuna_compat.py``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any, SupportsFloat

import optuna
from optuna.trial import FrozenTrial

__all__ = ["CONSTRAINT_PREFIX", "set_constraints", "constraints_of", "create_trial"]

#: the system attribute of a named constraint, as Optuna 5 writes it
CONSTRAINT_PREFIX = "constraints:"

_NAMED = hasattr(optuna.trial.Trial, "set_constraint")
_CREATE_TAKES_CONSTRAINTS = "constraints" in inspect.signature(optuna.trial.create_trial).parameters


def _checked(name: str, value: SupportsFloat) -> float:
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"constraint {name!r} is NaN: a constraint value must be a number (<= 0: feasible)")
    return v


#: the unnamed constraint list of Optuna 4 (``optuna.samplers._base._CONSTRAINTS_KEY``)
LEGACY_KEY = "constraints"


def _attrs(values: Mapping[str, Any]) -> dict[str, Any]:
    """The system attributes that carry ``values`` before Optuna 5: named, and Optuna 4's list."""
    checked = {name: _checked(name, v) for name, v in values.items()}
    out: dict[str, Any] = {CONSTRAINT_PREFIX + k: v for k, v in checked.items()}
    if checked:
        out[LEGACY_KEY] = [checked[k] for k in sorted(checked)]
    return out


def set_constraints(trial: optuna.trial.Trial, values: Mapping[str, Any]) -> None:
    """Set each named constraint of a running trial (feasible when every value is <= 0)."""
    if _NAMED:
        for name, value in values.items():
            trial.set_constraint(name, value)
        return
    for key, value in _attrs(values).items():
        trial.storage.set_trial_system_attr(trial._trial_id, key, value)


def constraints_of(trial: FrozenTrial) -> dict[str, float]:
    """A finished trial's named constraints (``FrozenTrial.constraints`` in Optuna 5, without the positional
    entries that Optuna 5 makes of the unnamed list an Optuna 4 process wrote beside the names)."""
    named = {k[len(CONSTRAINT_PREFIX):]: v for k, v in trial.system_attrs.items() if k.startswith(CONSTRAINT_PREFIX)}
    if named or not _NAMED:
        return named
    return dict(trial.constraints)


def create_trial(*, constraints: Mapping[str, Any] | None = None, system_attrs: dict | None = None,
                 **kwargs: Any) -> FrozenTrial:
    """``optuna.trial.create_trial`` with named ``constraints`` on every supported Optuna."""
    if _CREATE_TAKES_CONSTRAINTS or not constraints:
        if constraints:
            kwargs["constraints"] = dict(constraints)
        return optuna.trial.create_trial(system_attrs=system_attrs, **kwargs)
    attrs = dict(system_attrs or {})
    attrs.update(_attrs(constraints))
    return optuna.trial.create_trial(system_attrs=attrs, **kwargs)
