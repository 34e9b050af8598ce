"""``lightning-edge store``: list, show, best, export (CSV/JSON, file or stdout), claims, clear-claims, delete."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import sys

import pytest

from lightning_edge.cli import main
from lightning_edge.tuning import GMD, TrainingProblem
from lightning_edge.tuning.search import ProfileKey
from lightning_edge.tuning.store import CLAIM_ATTR, ProfileStore, process_identity
from tests.tuning.workloads import HAND_SPACE, LinearWorkload


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "profiles.sqlite3"
    GMD().solve(TrainingProblem(25.0), HAND_SPACE, LinearWorkload(), store=str(path))
    return str(path)


def _run(capsys, *argv):
    rc = main(["store", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_show_best(store_path, capsys):
    rc, out, _ = _run(capsys, "list", "--store", store_path)
    assert rc == 0 and "linear-v1" in out and "unknown-device" in out and "simulated" in out
    rc, out, _ = _run(capsys, "list", "--store", store_path, "--json")
    rows = json.loads(out)
    assert rows[0]["workload"] == "linear-v1" and rows[0]["profiles"] == 10 and rows[0]["claims"] == 0
    rc, out, _ = _run(capsys, "show", "linear", "--store", store_path)
    assert rc == 0 and out.count("\n") == 12 and "4c/300/400/2000" in out and "power_w" in out
    rc, out, _ = _run(capsys, "best", "linear-v1", "--budget", "25", "--store", store_path)
    sol = GMD().solve(TrainingProblem(25.0), HAND_SPACE, LinearWorkload(), store=None)
    assert rc == 0 and str(sol.mode) in out
    rc, out, _ = _run(capsys, "best", "linear-v1", "--budget", "10", "--store", store_path)
    assert rc == 1 and "none of its 10" in out
    rc, _, err = _run(capsys, "show", "nothing-like-it", "--store", store_path)
    assert rc == 1 and "no study" in err and "store list" in err


def test_export_csv_and_json_to_files_and_stdout(store_path, capsys, tmp_path):
    rc, out, _ = _run(capsys, "export", "linear", "--csv", "-", "--store", store_path)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and len(rows) == 10 and {"mode", "time_ms", "power_w", "label", "constraints"} <= set(rows[0])
    dest = tmp_path / "p.json"
    rc, out, err = _run(capsys, "export", "linear", "--json", str(dest), "--store", store_path)
    data = json.loads(dest.read_text())
    assert rc == 0 and not out and str(dest) in err and len(data["profiles"]) == 10
    over = [r for r in data["profiles"] if r["power_w"] > 25.0]
    assert over and all(r["constraints"]["power_w"] > 0 for r in over)
    rc, out, _ = _run(capsys, "export", "linear", "--json", "--store", store_path)  # no value: stdout
    assert json.loads(out)["study"].endswith("/linear-v1/train")


def test_claims_clear_claims_and_delete(store_path, capsys):
    store = ProfileStore(store_path)
    bound = store.bind("unknown-device", "linear-v1")
    mode = HAND_SPACE.coerce("2c/100/100/1000")
    bound._enqueue(ProfileKey("train", mode, None))
    owner = bound._groups("train")[ProfileKey("train", mode, None)][0]
    assert bound._claim(owner)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    ident = process_identity(gone.pid)
    gone.wait()  # reaped: its pid is free; a claim in its name belongs to a dead process
    store.storage.set_trial_system_attr(owner._trial_id, CLAIM_ATTR, {**ident, "since": 0.0})
    rc, out, _ = _run(capsys, "claims", "--store", store_path)
    assert rc == 0 and str(mode) in out and "dead" in out
    rc, out, _ = _run(capsys, "clear-claims", "--store", store_path)
    assert rc == 0 and "1 claim(s) cleared; 0 still open" in out
    rc, out, _ = _run(capsys, "delete", "linear", "--store", store_path)
    assert rc == 1 and "--yes" in out
    rc, out, _ = _run(capsys, "delete", "linear", "--yes", "--store", store_path)
    assert rc == 0 and "deleted" in out
    rc, out, _ = _run(capsys, "list", "--store", store_path)
    assert "no studies" in out


def test_a_claim_whose_owner_was_never_recorded_is_listed_and_cleared(store_path, capsys):
    """A process lost between a claim's state change and its owner record: ``claims`` names it and ``clear-claims``
    clears it once it is older than the grace period (was: an owner 'unknown' claim nothing could clear short of
    --force, and Optuna's heartbeat never counts it as stale)."""
    from optuna.trial import TrialState

    store = ProfileStore(store_path)
    bound = store.bind("unknown-device", "linear-v1")
    mode = HAND_SPACE.coerce("2c/100/100/1000")
    bound._enqueue(ProfileKey("train", mode, None))
    owner = bound._groups("train")[ProfileKey("train", mode, None)][0]
    assert store.storage.set_trial_state_values(owner._trial_id, TrialState.RUNNING)  # the owner write never came
    rc, out, _ = _run(capsys, "claims", "--store", store_path)
    assert rc == 0 and str(mode) in out and "never recorded" not in out  # younger than the grace period: left alone
    with sqlite3.connect(store_path) as db:  # the claim has aged past the grace period
        db.execute("UPDATE trials SET datetime_start = datetime(datetime_start, '-60 seconds') WHERE trial_id = ?",
                   (owner._trial_id,))
    rc, out, _ = _run(capsys, "claims", "--store", store_path)
    assert rc == 0 and "never recorded" in out and "dead" in out, out
    rc, out, _ = _run(capsys, "clear-claims", "--store", store_path)
    assert rc == 0 and "1 claim(s) cleared; 0 still open" in out, out


def test_a_simulated_boards_key_with_its_model_digest_is_named_by_the_board(tmp_path, capsys):
    """A twin's studies are keyed sim:<module>+<digest> (OrinTwin.store_key): --device-model sim:orin-agx names
    them, another module does not."""
    path = str(tmp_path / "p.sqlite3")
    GMD().solve(TrainingProblem(25.0), HAND_SPACE, LinearWorkload(), store=path)
    GMD().solve(TrainingProblem(25.0), HAND_SPACE, LinearWorkload(), store=path, workload_id="twin-v1",
                device_model="sim:orin-agx+0123abcd")
    names = {st.study_name for st in ProfileStore(path).storage.get_all_studies()}
    assert "lightning_edge/sim:orin-agx+0123abcd/twin-v1/train" in names  # the key survives the study name as it is
    rc, out, _ = _run(capsys, "show", "twin-v1", "--device-model", "sim:orin-agx", "--store", path)
    assert rc == 0 and "4c/300/400/2000" in out
    rc, _, err = _run(capsys, "show", "twin-v1", "--device-model", "sim:orin-nx-16gb", "--store", path)
    assert rc == 1 and "no study" in err
