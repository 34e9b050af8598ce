"""pyproject.toml's requirements are the stacks users have (README, "Supported stacks"): NVIDIA's own torch wheels
satisfy the torch requirement, so ``pip install lightning-edge`` on a Jetson never replaces the user's CUDA torch
with PyPI's; the Python floor admits JetPack 5's Python 3.8."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "pyproject.toml").read_text()


def _list(key: str) -> list[str]:
    """The strings of a ``key = [...]`` array of pyproject.toml (no TOML parser before Python 3.11)."""
    m = re.search(rf"^{re.escape(key)} = \[(.*?)^\]", TEXT, re.S | re.M)
    assert m, f"pyproject.toml has no {key} array"
    return re.findall(r'^\s*"([^"]+)"', m.group(1), re.M)


def requirement(name: str, key: str = "dependencies") -> Requirement:
    for r in map(Requirement, _list(key)):
        if r.name == name:
            return r
    raise AssertionError(f"pyproject.toml: no {name} in {key}")


#: torch version strings of NVIDIA's Jetson wheels (JetPack 5.1.2 to 6.2), and community JetPack 6/7 wheels
NVIDIA_TORCH = [
    "2.1.0a0+41361538.nv23.06",     # JetPack 5.1.2 (Python 3.8)
    "2.2.0a0+81ea7a4.nv24.01",      # JetPack 6.0 developer preview
    "2.3.0a0+40ec155e58.nv24.03",   # JetPack 6.0
    "2.4.0a0+07cecf4168.nv24.05",   # JetPack 6.0
    "2.5.0a0+872d972e41.nv24.08",   # JetPack 6.1 / 6.2
    "2.7.0", "2.8.0",               # jetson-ai-lab wheels for JetPack 6, JetPack 7
]


@pytest.mark.parametrize("version", NVIDIA_TORCH)
def test_nvidia_torch_wheels_satisfy_the_requirement(version):
    spec = requirement("torch").specifier
    # pip's test for an installed torch, with and without pre-releases allowed (the spec itself must allow them)
    assert spec.contains(version), f"pip would replace NVIDIA's torch {version}: requirement torch{spec}"
    assert spec.contains(version, prereleases=True)


def test_torch_older_than_the_floor_is_refused():
    # JetPack 5.1.1's torch 2.0 is below the tested floor (2.1): pip must say so rather than run untested code
    assert not requirement("torch").specifier.contains("2.0.0+nv23.05", prereleases=True)


def test_a_plain_release_floor_would_replace_nvidia_torch():
    # why the floor is written as a pre-release: 2.3.0a0 sorts below 2.3
    assert not SpecifierSet(">=2.3").contains("2.3.0a0+40ec155e58.nv24.03", prereleases=True)


def test_python_floor_admits_jetpack_5():
    m = re.search(r'^requires-python = "([^"]+)"', TEXT, re.M)
    assert m
    spec = SpecifierSet(m.group(1))
    for v in ("3.8.10", "3.10.12", "3.12.3"):  # JetPack 5, JetPack 6, JetPack 7 system Pythons
        assert spec.contains(v), f"requires-python {spec} refuses Python {v}"


def test_floors_are_the_tested_stacks():
    # the oldest versions the CI matrix installs (noxfile.py STACKS) are the floors written in pyproject.toml
    nox = (ROOT / "noxfile.py").read_text()
    floors = {r.name: min(Version(s.version) for s in r.specifier if s.operator == ">=")
              for r in map(Requirement, _list("dependencies")) if any(s.operator == ">=" for s in r.specifier)}
    assert floors["torch"] <= Version("2.1.2") and floors["torch"].release[:2] == (2, 1)
    assert floors["numpy"] == Version("1.24")
    assert f'"optuna=={floors["optuna"]}.0"' in nox or f'"optuna=={floors["optuna"]}"' in nox
    assert f'"pytorch-lightning=={floors["pytorch-lightning"]}' in nox
    assert '("3.8", "2.1.2")' in nox and '("3.10", "2.3.1")' in nox and '("3.10", "2.5.1")' in nox


#: imported by lightning_edge, installed by a requirement of another name, or by one of the requirements themselves
IMPORT_NAMES = {"jtop": "jetson-stats", "pynvml": "nvidia-ml-py", "sklearn": "scikit-learn", "psycopg2": "psycopg2-binary"}
TRANSITIVE = {"PIL": "matplotlib", "sqlalchemy": "optuna"}


@pytest.mark.skipif(not hasattr(__import__("sys"), "stdlib_module_names"), reason="sys.stdlib_module_names: Python 3.10+")
def test_every_module_the_package_imports_is_installed_by_a_requirement_a_user_has():
    """A plain ``pip install lightning-edge`` (or with the extra a feature names) has every module its code imports,
    lazily or not: a development extra is not one a user installs. scipy was in the dev extra only, while the tuner's
    prior search and the calibration kit import it: a tune on the twin failed with ModuleNotFoundError."""
    import ast
    import sys

    declared = {r.name.lower() for r in map(Requirement, _list("dependencies"))}
    for extra in ("lightning", "jetson", "nvml", "postgres", "latency"):  # one-line arrays (_list reads many lines)
        m = re.search(rf"^{extra} = \[([^\]\n]*)\]", TEXT, re.M)
        assert m, f"pyproject.toml has no one-line extra {extra}"
        declared |= {Requirement(x).name.lower() for x in re.findall(r'"([^"]+)"', m.group(1))}
    missing = {}
    for path in sorted((ROOT / "lightning_edge").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for top in {m.split(".")[0] for m in mods}:
                if top in sys.stdlib_module_names or top == "lightning_edge":
                    continue
                name = TRANSITIVE.get(top) or IMPORT_NAMES.get(top, top.replace("_", "-"))
                if name.lower() not in declared:
                    missing.setdefault(top, path.relative_to(ROOT).as_posix())
    assert not missing, f"imported but installed by no user-facing requirement: {missing}"
