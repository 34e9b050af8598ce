"""Subpackages import one way (docs/architecture.md, "Floors"): a module imports only from its own floor or below,
and the subpackages of one floor form no loop. Every import counts: module level and inside functions
(``TYPE_CHECKING`` blocks aside), and the parent packages an import loads (importing
``lightning_edge.devices.sim.controller`` runs ``lightning_edge/devices/__init__.py``: an edge to ``devices``).

Commands are one subpackage, ``cli``, on the top floor: a module's floor is its subpackage's, whatever the file is
named."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_import_cycles import ROOT, _modules, _targets, cycles

DOC = ROOT.parent / "docs" / "architecture.md"


def doc_floors(text: str) -> dict[int, tuple[str, ...]]:
    """The floor table of docs/architecture.md ("| floor | packages | ..."): floor -> its packages."""
    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    out: dict[int, tuple[str, ...]] = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if m:
            out[int(m.group(1))] = tuple(re.findall(r"`([\w.]+)`", m.group(2)))
    return out


FLOORS: dict[int, tuple[str, ...]] = doc_floors(DOC.read_text())
FLOOR = {unit: floor for floor, units in FLOORS.items() for unit in units}


def unit(module: str) -> str:
    """What a module belongs to: its subpackage (``devices``) or a top-level module (``records``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "lightning_edge"


def floor_of(u: str) -> int:
    if u == "lightning_edge":
        return 9
    if u not in FLOOR:
        raise AssertionError(f"{u!r} is on no floor: add it to the floor table of docs/architecture.md")
    return FLOOR[u]


def edges(mods: dict[str, Path] | None = None) -> dict[tuple[str, str], list[str]]:
    """(unit, unit it imports) -> the imports that make it, as 'module -> module'."""
    mods = mods if mods is not None else _modules()
    out: dict[tuple[str, str], list[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
                for n in ast.walk(node)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in skip:
                continue
            for target in _targets(node, name, path.name == "__init__.py", mods):
                parts = target.split(".")
                # the target and every parent package it loads (the top-level package aside: see below)
                for k in range(2, len(parts) + 1):
                    t = ".".join(parts[:k])
                    if t in mods:
                        a, b = unit(name), unit(t)
                        if a != b:
                            out.setdefault((a, b), []).append(f"{name} -> {t}")
    return out


def upward(mods: dict[str, Path] | None = None) -> list[str]:
    return [f"{a} (floor {floor_of(a)}) imports {b} (floor {floor_of(b)}): {', '.join(sorted(set(why))[:3])}"
            for (a, b), why in sorted(edges(mods).items()) if floor_of(b) > floor_of(a)]


def test_every_import_goes_down_or_across():
    up = upward()
    assert not up, "imports that go up a floor:\n" + "\n".join(up)


def test_the_subpackages_form_no_loop():
    graph: dict[str, set[str]] = {}
    for a, b in edges():
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    loops = cycles(graph)
    assert not loops, f"subpackages that import each other: {[sorted(c) for c in loops]}"


def test_the_top_level_package_loads_nothing_heavy():
    """Every module loads ``lightning_edge/__init__.py`` (its parent): it must import only floor 0 eagerly (its
    public names load lazily), or every floor would depend on the top one."""
    tree = ast.parse((ROOT / "__init__.py").read_text())
    mods = _modules()
    eager = {t for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
             for t in _targets(node, "lightning_edge", True, mods)}
    assert all(floor_of(unit(t)) == 0 for t in eager), eager


@pytest.mark.parametrize("bad", ["lightning_edge.tuning.gmd", "lightning_edge.devices.sim.controller"])
def test_the_check_sees_a_function_level_import_that_goes_up(bad, tmp_path):
    """The check itself: a function-level import from the twin (floor 4) into tuning, or into devices (through
    its parent package), is reported."""
    p = tmp_path / "bad.py"
    p.write_text(f"def f():\n    import {bad}\n")
    found = upward({**_modules(), "lightning_edge.twin._bad": p})
    assert any(line.startswith("twin (floor 4) imports") and "lightning_edge.twin._bad" in line for line in found)


def test_the_floor_table_is_the_documented_one_and_names_every_subpackage():
    """The floors come from docs/architecture.md's table: ten floors, each package on exactly one, and every
    subpackage and top-level module of lightning_edge on one (a package the page forgets fails here)."""
    assert sorted(FLOORS) == list(range(10)), FLOORS
    named = [u for units in FLOORS.values() for u in units]
    assert len(named) == len(set(named)), named
    units = {unit(m) for m in _modules()} - {"lightning_edge"}
    assert units <= set(named), sorted(units - set(named))
    assert set(named) <= units, sorted(set(named) - units)  # nothing on the page that is not in the package

