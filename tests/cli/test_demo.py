"""``lightning-edge demo --strategy`` takes exactly the registered strategies' names (any case, aliases) and refuses
anything else with the list of them, before any work."""

from __future__ import annotations

import argparse

import pytest

from lightning_edge.cli import build_parser
from lightning_edge.cli.demo import add_arguments
from lightning_edge.tuning import GMD
from lightning_edge.tuning.search import STRATEGIES


def _strategy_option(p: argparse.ArgumentParser) -> argparse.Action:
    return next(a for a in p._actions if "--strategy" in a.option_strings)


def test_the_demo_takes_exactly_the_registered_names():
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert tuple(_strategy_option(p).choices) == tuple(STRATEGIES)
    parser = build_parser()
    for name in STRATEGIES:
        assert parser.parse_args(["demo", "--strategy", name.upper()]).strategy == name
    assert parser.parse_args(["demo", "--strategy", "BinarySearch"]).strategy == "binary-search"
    assert parser.parse_args(["demo"]).strategy == "gmd"


def test_an_unknown_strategy_is_refused_with_the_registered_names(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--strategy", "gdm"])
    err = capsys.readouterr().err
    assert f"unknown tuning strategy 'gdm': expected one of {', '.join(STRATEGIES)}" in err


def test_a_strategy_registered_later_is_a_choice_of_a_parser_built_after():
    class Mine(GMD):
        strategy_name = "mine"

    try:
        assert build_parser().parse_args(["demo", "--strategy", "MINE"]).strategy == "mine"
    finally:
        STRATEGIES.unregister("mine")
