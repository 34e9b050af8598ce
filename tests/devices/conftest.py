"""Fixtures for the power-mode tests: fake Jetson trees built from the catalogue (the AGX Orin developer kit on
JetPack 5 and 6: ``orin``, ``orin5``; one tree per family and layout: ``jetson``) and an isolated state dir."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # so `tests.fakes` imports under plain `pytest` too
    sys.path.insert(0, str(REPO))

from tests.fakes.jetson_sysfs import TREES, FakeJetson, build_orin_agx, build_tree  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_state_dir(tmp_path, monkeypatch):
    """Never touch the real user state dir: the default state dir is a temp dir in every test."""
    d = tmp_path / "default-state"
    monkeypatch.setenv("LIGHTNING_EDGE_STATE_DIR", str(d))
    return d


@pytest.fixture
def state_dir(tmp_path) -> Path:
    return tmp_path / "state"


@pytest.fixture(params=[5, 6], ids=["jp5", "jp6"])
def orin(request, tmp_path) -> FakeJetson:
    """A fake Orin AGX 32GB tree, JetPack 5 and JetPack 6 layouts."""
    return build_orin_agx(tmp_path / "root", jetpack=request.param)


@pytest.fixture
def orin5(tmp_path) -> FakeJetson:
    return build_orin_agx(tmp_path / "root", jetpack=5)


@pytest.fixture(params=list(TREES))
def jetson(request, tmp_path) -> FakeJetson:
    """A fake tree of every family and layout (tests.fakes.jetson_sysfs.TREES): AGX Orin on JetPack 5 and 6, AGX Orin
    32GB, Orin NX, Orin Nano (Super), Xavier NX (JetPack 4), AGX Xavier, Thor (unconfirmed)."""
    return build_tree(tmp_path / "root", request.param)


@pytest.fixture(params=[t for t, (key, _) in TREES.items() if key != "thor"])
def jetson_conf(request, tmp_path) -> FakeJetson:
    """A fake tree of every family whose nvpmodel.conf is known (all but Thor's)."""
    return build_tree(tmp_path / "root", request.param)


@pytest.fixture
def spawn():
    """Start ``python -c SCRIPT`` with the repository importable; every child is killed at teardown."""
    import os
    import subprocess

    children: list[subprocess.Popen] = []

    def _spawn(script: str, *args: object, **kw) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        # a child starts as a run started from a shell does, whatever started these tests: a suite run under
        # nohup or as a background job ignores SIGHUP (and SIGINT, SIGQUIT), the child inherits that, and a signal
        # it ignores gets no handler of ours (safety.py); and SIGUSR1 dumps its stacks, so a child that does not
        # finish in time says where it is
        script = ("import faulthandler as _fh, signal as _sg\n_fh.register(_sg.SIGUSR1, all_threads=True)\n"
                  "_sg.signal(_sg.SIGINT, _sg.default_int_handler)\n"
                  "for _s in (_sg.SIGHUP, _sg.SIGQUIT, _sg.SIGTERM):\n    _sg.signal(_s, _sg.SIG_DFL)\n" + script)
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *map(str, args)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kw,
        )
        communicate = proc.communicate

        def communicate_or_say_where(input=None, timeout=None):
            try:
                return communicate(input, timeout)
            except subprocess.TimeoutExpired:
                import signal

                proc.send_signal(signal.SIGUSR1)
                try:
                    out, err = communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, err = communicate()
                raise AssertionError(f"the child did not finish within {timeout} s; its stacks (SIGUSR1), stdout "
                                     f"and stderr:\n{out}\n{err}") from None

        proc.communicate = communicate_or_say_where
        children.append(proc)
        return proc

    yield _spawn
    for proc in children:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def wait_for(path: Path, proc=None, timeout_s: float = 30.0) -> None:
    """Wait until ``path`` exists with its content (a child process's marker, never empty: ``write_text`` creates
    the file empty and then fills it, and a reader in between read nothing); fail early if the child died."""
    import time

    def written() -> bool:
        try:
            return Path(path).stat().st_size > 0
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + timeout_s
    while not written():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"child exited with {proc.returncode} before {path}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {path}")
        time.sleep(0.02)


@pytest.fixture
def wait():
    """``wait(path, proc=None, timeout_s=30)``: block until a child's marker file exists."""
    return wait_for
