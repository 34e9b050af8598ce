"""The README's demo and the examples/, run as a user runs them (slow: minutes of real CPU training)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(args: list[str], tmp_path: Path, timeout: int = 900) -> str:
    env = dict(os.environ, LIGHTNING_EDGE_PROFILE_STORE=f"sqlite:///{tmp_path / 'profiles.sqlite3'}",
               PYTHONPATH=str(REPO))
    r = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def test_demo_tunes_restores_prints_the_tensorboard_line_and_a_second_run_reuses_the_store(tmp_path):
    cmd = [sys.executable, "-m", "lightning_edge", "demo", "--minutes", "0.5"]
    out = _run(cmd, tmp_path)
    assert "SIMULATED Jetson AGX Orin" in out and "PowerModeTuner (simulated" in out
    assert "chosen mode" in out and "vs MAXN" in out and "board restored to 12c/2201.6/1300.5/3199" in out
    assert "EnergyProfiler summary" in out and "tensorboard --logdir" in out
    logdir = out.rsplit("tensorboard --logdir", 1)[1].split()[0]
    assert list(Path(logdir).rglob("events.out.tfevents.*"))
    again = _run(cmd, tmp_path)
    assert "0 were measured in this run" in again  # every profile came from the SQLite store


@pytest.mark.parametrize("script,args", [
    ("01_profile_existing_trainer.py", ["--steps", "12"]),
    ("02_autotune_power_mode.py", ["--steps", "500", "--store", "memory", "--budget", "20", "--lower-to", "17"]),
    ("03_concurrent_train_and_infer.py", ["--steps", "30"]),
])
def test_examples_run(script, args, tmp_path):
    out = _run([sys.executable, str(REPO / "examples" / script), *args], tmp_path)
    assert out.strip()
    if script.startswith("02"):
        assert "chosen:" in out and "re-tuned" in out
    if script.startswith("03"):
        assert "within" in out and "simulated" in out


def test_fleet_example_profiles_each_mode_once(tmp_path):
    import shutil

    if not shutil.which("pg_ctl") or not shutil.which("initdb"):
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql)")
    pytest.importorskip("psycopg2")
    out = _run([sys.executable, str(REPO / "examples" / "04_fleet_profile_store.py")], tmp_path)
    boards = [line for line in out.splitlines() if line.startswith("board ")]
    measured = [int(line.split("measured ")[1].split()[0]) for line in boards]
    used = [int(line.split("of the ")[1].split()[0]) for line in boards]
    store = next(line for line in out.splitlines() if line.startswith("store: "))
    recorded, distinct = int(store.split()[1]), int(store.split(" of ")[1].split()[0])
    # every mode any board used was measured exactly once, by one board (ALS budget: 50 per board)
    assert len(measured) == 3 and all(0 < n <= 50 for n in used)
    assert recorded == distinct == sum(measured) >= max(used), out
    late = [line for line in out.splitlines() if line.startswith("a fourth board")]
    assert len(late) == 3 and all("(0 new)" in line for line in late), out
