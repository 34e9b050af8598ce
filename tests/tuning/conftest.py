"""Fixtures of the tuner tests: an isolated default profile store, and a real PostgreSQL server."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_profile_store(tmp_path, monkeypatch):
    """The default profile store of every test is a temp SQLite file, never the user cache."""
    monkeypatch.setenv("LIGHTNING_EDGE_PROFILE_STORE", f"sqlite:///{tmp_path / 'default-profiles.sqlite3'}")


def _pg_bin() -> Path | None:
    for name in ("pg_ctl", "initdb"):
        found = shutil.which(name)
        if found:
            return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    return Path(dirs[-1]) if dirs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _postgres_server(restartable: bool = False):
    """A throw-away PostgreSQL server on a free localhost port: ``(url, stop)``; ``stop()`` shuts it down at once
    (``pg_ctl stop -m immediate``, as a crash would).

    Uses the Debian/Ubuntu server binaries (``apt-get install postgresql``); as root the server runs as
    the ``postgres`` system user (initdb refuses root). Skipped, with the reason, when unavailable."""
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install psycopg2-binary)")
    bindir = _pg_bin()
    if bindir is None or not (bindir / "initdb").exists():
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql)")
    # not under pytest's temp dir: its parents are private to the current user, and as root the server
    # runs as another user
    root = Path(tempfile.mkdtemp(prefix="lightning-edge-pg-"))
    data, log = root / "data", root / "server.log"
    prefix: list[str] = []
    if os.geteuid() == 0:
        try:
            import pwd

            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        os.chmod(root, 0o700)
        prefix = ["runuser", "-u", "postgres", "--"] if shutil.which("runuser") else ["su", "postgres", "-s", "/bin/sh", "-c"]
    port = _free_port()

    def run(cmd: list[str]) -> subprocess.CompletedProcess:
        if prefix and prefix[0] == "su":
            cmd = prefix + [" ".join(cmd)]
        else:
            cmd = prefix + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    r = run([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"])
    if r.returncode:
        pytest.skip(f"initdb failed: {r.stderr.strip()[:300]}")
    def start() -> subprocess.CompletedProcess:
        return run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"])

    r = start()
    if r.returncode:
        pytest.skip(f"pg_ctl start failed: {r.stderr.strip()[:300]} {log.read_text()[-300:] if log.exists() else ''}")
    url = f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    deadline = time.monotonic() + 30
    import psycopg2

    while True:
        try:
            psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres").close()
            break
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                pytest.skip("PostgreSQL did not accept connections within 30 s")
            time.sleep(0.2)

    def stop() -> None:
        run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])

    try:
        yield (url, stop, start) if restartable else (url, stop)
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url():
    """A throw-away PostgreSQL server (:func:`_postgres_server`) for the session."""
    with _postgres_server() as (url, _):
        yield url


@pytest.fixture
def postgres_server():
    """A PostgreSQL server of this test alone, ``(url, stop)``: the test may stop it."""
    with _postgres_server() as server:
        yield server


@pytest.fixture
def postgres_restartable():
    """A PostgreSQL server of this test alone, ``(url, stop, start)``: the test may stop it and start it again on the
    same port and data (a restart)."""
    with _postgres_server(restartable=True) as server:
        yield server
