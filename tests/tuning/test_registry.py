"""Strategies register themselves on their classes, in one table (``search.STRATEGIES``), and every name a user
types resolves there: the package's own strategies, the spellings the old per-caller tables took, aliases, any case;
an unknown name is one error that lists the registered names."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import lightning_edge.tuning as tuning
from lightning_edge._lazy import Registry, UnknownName
from lightning_edge.tuning import ALS, GMD, BinarySearch, Exhaustive, NeuralBaseline, RandomSampling
from lightning_edge.tuning.search import STRATEGIES, Strategy, strategy_named


def _package_strategies() -> list[type]:
    """Every Strategy subclass defined in a module of ``lightning_edge.tuning``."""
    found = []
    for info in pkgutil.iter_modules(tuning.__path__, "lightning_edge.tuning."):
        mod = importlib.import_module(info.name)
        found += [c for _, c in inspect.getmembers(mod, inspect.isclass)
                  if issubclass(c, Strategy) and c.__module__ == mod.__name__]
    return found


def test_every_strategy_class_of_the_package_is_registered_under_its_own_name():
    classes = _package_strategies()
    leaves = [c for c in classes if not any(o is not c and issubclass(o, c) for o in classes)]
    assert {GMD, ALS, BinarySearch, Exhaustive, NeuralBaseline, RandomSampling} <= set(leaves)
    for cls in leaves:  # a base (Strategy, ExploringStrategy, the random sample) is no strategy of its own
        assert "strategy_name" in vars(cls), f"{cls.__name__} sets no strategy_name: it is in no table"
        assert STRATEGIES.get(cls.strategy_name) is cls
        assert type(strategy_named(cls.strategy_name)) is cls
    assert sorted(STRATEGIES) == sorted(c.strategy_name for c in leaves)


@pytest.mark.parametrize("spelling, cls", [
    ("gmd", GMD), ("GMD", GMD), (" Gmd ", GMD), ("als", ALS), ("ALS", ALS), ("exhaustive", Exhaustive),
    ("Exhaustive", Exhaustive), ("rnd", RandomSampling), ("RND", RandomSampling), ("randomsampling", RandomSampling),
    ("nn", NeuralBaseline), ("NN", NeuralBaseline), ("NeuralBaseline", NeuralBaseline),
    ("binary-search", BinarySearch), ("BinarySearch", BinarySearch),
])
def test_every_spelling_a_table_took_resolves(spelling, cls):
    # the old tables: search ('gmd', 'als', 'exhaustive'), serving, the demo and the online tuner (lower case), the
    # conformance suite ('GMD', 'ALS', 'RND', 'NN', 'BinarySearch', 'Exhaustive')
    assert spelling in STRATEGIES
    assert type(strategy_named(spelling)) is cls


def test_an_unknown_name_is_one_error_listing_the_registered_names():
    with pytest.raises(ValueError) as err:
        strategy_named("gdm")
    assert isinstance(err.value, KeyError) and isinstance(err.value, UnknownName)
    assert str(err.value) == f"unknown tuning strategy 'gdm': expected one of {', '.join(STRATEGIES)}"
    with pytest.raises(TypeError, match="expected a name .*gmd.* or a tuning Strategy, got int"):
        strategy_named(3)  # type: ignore[arg-type]
    gmd = GMD()
    assert strategy_named(gmd) is gmd


def test_a_subclass_registers_only_when_it_names_itself():
    class TunedGMD(GMD):  # a variant of GMD: not another entry, and "gmd" stays GMD
        pass

    assert STRATEGIES.get("gmd") is GMD and TunedGMD not in [STRATEGIES.get(n) for n in STRATEGIES]

    class Mine(GMD):
        strategy_name = "mine"
        strategy_aliases = ("my-gmd",)

    try:
        assert STRATEGIES.get("MY-GMD") is Mine and type(strategy_named("mine")) is Mine
        with pytest.raises(ValueError, match="'mine' is already registered"):
            type("Mine2", (GMD,), {"strategy_name": "Mine"})
        with pytest.raises(ValueError, match="alias 'gmd' of 'other' is already a name"):
            type("Other", (GMD,), {"strategy_name": "other", "strategy_aliases": ("gmd",)})

        class Mine(GMD):  # noqa: F811 - the same class defined again (a notebook cell run twice) replaces it
            strategy_name = "mine"

        assert STRATEGIES.get("mine") is Mine
    finally:
        STRATEGIES.unregister("mine")
        STRATEGIES.unregister("other")
    assert "mine" not in STRATEGIES and "my-gmd" not in STRATEGIES and "other" not in STRATEGIES


def test_the_registry_is_the_one_the_devices_use():
    from lightning_edge.devices.controllers import CONTROLLERS
    from lightning_edge.devices.sensors.detect import SENSORS

    assert type(STRATEGIES) is type(SENSORS) is type(CONTROLLERS) is Registry
    # the devices' names stay case-sensitive; the strategies' fold case
    assert "jetson" in SENSORS and "JETSON" not in SENSORS and "GMD" in STRATEGIES
