"""The CI matrix: the stacks NVIDIA ships on Jetsons, run after the README's own test command.

Each session is one Jetson software stack (see README.md, "Supported stacks"); PyPI's CUDA wheels of the same torch
versions stand in for NVIDIA's aarch64 wheels (they import on a CPU machine; about 2.5 GB each, kept in pip's cache
between runs).

    nox -l                                        # the sessions
    nox -s "tests-3.10(torch='2.3.1')"            # JetPack 6.0: Python 3.10, torch 2.3, NumPy 1.x, oldest Lightning/Optuna
    nox -s "tests-3.10(torch='2.5.1')"            # JetPack 6.1 / 6.2: Python 3.10, torch 2.5, NumPy 1.x
    nox -s "tests-3.8(torch='2.1.2')"             # JetPack 5.1: Python 3.8, torch 2.1, NumPy 1.24, Optuna 4.5
    nox -s "tests-3.10(torch='2.3.1')" -- tests/cost   # arguments after -- go to pytest

Every session runs the fast suite (``pytest -m "not slow"``, the docs' fast blocks included) and then
``lightning-edge demo --minutes 1`` on that stack.
"""

from __future__ import annotations

import glob
import os
import shutil

import nox


def _pyenv_pythons(*versions: str) -> None:
    """Put pyenv's Python X.Y on PATH where no ``pythonX.Y`` is there already (these machines, and many laptops,
    have the old Pythons through pyenv without shims for them)."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for v in versions:
        have = shutil.which(f"python{v}")
        if have and os.sep + "shims" + os.sep not in have:  # a pyenv shim fails for a version not selected
            continue
        found = sorted(glob.glob(os.path.join(root, "versions", f"{v}.*", "bin", f"python{v}")))
        if found:
            os.environ["PATH"] = os.path.dirname(found[-1]) + os.pathsep + os.environ.get("PATH", "")


_pyenv_pythons("3.8", "3.10")

nox.options.error_on_missing_interpreters = True
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

# One row per stack: Python, torch, and the pins that make it the stack a user has there. Floors of pyproject.toml
# (torch 2.1, NumPy 1.24, Lightning 2.1, Optuna 4.5) are exercised by the rows that pin them.
STACKS = {
    # JetPack 6.0 (NVIDIA's 2.3.0a0 wheel), with the oldest Lightning and Optuna that pyproject.toml allows;
    # Lightning before 2.4 imports pkg_resources, which setuptools 81 removed (Ubuntu 22.04's venvs have 59)
    # (and Lightning before 2.5's RichProgressBar breaks on rich 14: "pop from empty list")
    ("3.10", "2.3.1"): ["numpy<2", "pytorch-lightning==2.1.4", "lightning==2.1.4", "optuna==4.5.0", "setuptools<81",
                        "rich<14", "transformers>=4.46,<5", "peft>=0.13,<0.18"],
    # JetPack 6.1 / 6.2 (NVIDIA's 2.5.0a0 wheel)
    ("3.10", "2.5.1"): ["numpy<2", "transformers>=4.46,<5", "peft>=0.13,<0.18"],
    # JetPack 5.1.x, every Xavier (NVIDIA's 2.1.0a0 wheel): Python 3.8, NumPy 1.24, Optuna 4.5, Lightning <= 2.4
    ("3.8", "2.1.2"): ["numpy>=1.24,<1.25", "optuna==4.5.0", "rich<14", "transformers>=4.46,<5", "peft>=0.13,<0.14"],
}


@nox.session(python=["3.10", "3.8"], venv_backend="venv")  # virtualenv no longer seeds Python 3.8
@nox.parametrize("torch", ["2.3.1", "2.5.1", "2.1.2"])
def tests(session: nox.Session, torch: str) -> None:
    pins = STACKS.get((session.python, torch))
    if pins is None:
        session.skip(f"no stack pairs Python {session.python} with torch {torch}")
    # torch first and alone: the project's requirement must accept it without pip replacing it
    session.install(f"torch=={torch}", *[p for p in pins if p.startswith("numpy")])
    session.install("-e", ".[dev]", *pins)
    session.run("python", "-c", "import torch, numpy, optuna, lightning; "
                "print('stack: torch', torch.__version__, 'numpy', numpy.__version__, "
                "'optuna', optuna.__version__, 'lightning', lightning.__version__)")
    env = {"MPLBACKEND": "Agg"}
    session.run("python", "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider",
                *(session.posargs or []), env=env)
    if not session.posargs:
        out = session.create_tmp()
        session.run("lightning-edge", "demo", "--minutes", "1", "--store", "memory",
                    "--out", os.path.join(out, "demo"), env=env)
