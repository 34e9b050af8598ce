"""A fleet of identical boards shares one profile store: each mode is profiled once, by one board.

    python examples/04_fleet_profile_store.py --url postgresql://user@dbhost/profiles   # your PostgreSQL
    python examples/04_fleet_profile_store.py                     # starts a throw-away local PostgreSQL server

Three "boards" (processes, each with its own Orin twin) explore the same training workload with ALS through the
shared Optuna storage: the store hands each mode to exactly one board (no profile lost or measured twice), and any
board, now or later, answers new power budgets from the shared profiles without profiling again. On real boards
pass the same URL to ``PowerModeTuner(store=...)``.

Without ``--url`` this needs the PostgreSQL server binaries (``apt-get install postgresql``) and psycopg2
(``pip install psycopg2-binary``); ``--url sqlite:////shared/nfs/profiles.db`` works too for a few boards.
"""

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import tempfile


def board(url: str, seed: int, queue) -> None:
    from lightning_edge.devices import fulcrum_space
    from lightning_edge.tuning import ALS
    from lightning_edge.twin.sim_workload import SimWorkload

    workload = SimWorkload("resnet18", train_batch_size=16, seed=seed)   # the twin plays this board
    table = ALS().explore(fulcrum_space(), workload, kind="train", store=url)
    queue.put((seed, table.new_profiles, len(table)))


def local_postgres() -> tuple[str, callable]:
    bindir = next((os.path.dirname(p) for p in (shutil.which("pg_ctl"),) if p), None)
    if bindir is None:
        raise SystemExit("no --url and no PostgreSQL server binaries: apt-get install postgresql, or pass --url")
    root = tempfile.mkdtemp(prefix="lightning-edge-fleet-")
    prefix = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        import pwd

        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = os.path.join(root, "data")
    subprocess.run(prefix + [os.path.join(bindir, "initdb"), "-D", data, "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True)
    subprocess.run(prefix + [os.path.join(bindir, "pg_ctl"), "-D", data, "-l", os.path.join(root, "log"), "-w", "-o",
                             f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"], check=True,
                   capture_output=True)

    import time

    import psycopg2

    for _ in range(150):  # wait until the server accepts connections
        try:
            psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres").close()
            break
        except psycopg2.OperationalError:
            time.sleep(0.2)

    def stop():
        subprocess.run(prefix + [os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "fast", "stop"], capture_output=True)

    return f"postgresql://postgres@127.0.0.1:{port}/postgres", stop


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", default=None)
    ap.add_argument("--boards", type=int, default=3)
    args = ap.parse_args()
    url, stop = (args.url, lambda: None) if args.url else local_postgres()
    try:
        q = mp.get_context("spawn").Queue()
        procs = [mp.get_context("spawn").Process(target=board, args=(url, i, q)) for i in range(args.boards)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise SystemExit(f"a board failed (exit codes {[p.exitcode for p in procs]}): see its traceback above")
        for _ in procs:
            seed, new, n = q.get(timeout=60)
            print(f"board {seed}: measured {new} of the {n} profiles it used (the rest came from other boards)")
        from optuna.trial import TrialState

        from lightning_edge.devices import fulcrum_space
        from lightning_edge.tuning import ALS, ProfileStore, TrainingProblem
        from lightning_edge.tuning.store import trial_key
        from lightning_edge.twin.sim_workload import SimWorkload

        # the store itself: how many measurements were recorded, and for how many distinct modes
        profiles = ProfileStore(url).profiles(SimWorkload("resnet18", train_batch_size=16))
        done = [t for t in profiles.study("train").get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
        distinct = {trial_key("train", t) for t in done}
        print(f"store: {len(done)} measurements of {len(distinct)} distinct modes "
              f"({len(done) - len(distinct)} measured twice)")

        late = ALS().explore(fulcrum_space(), SimWorkload("resnet18", train_batch_size=16, seed=99), kind="train",
                             store=url)
        for budget in (20, 30, 40):
            sol = late.solve(TrainingProblem(budget))
            print(f"a fourth board, {budget} W: {sol.describe() if sol else 'infeasible'}")
    finally:
        stop()


if __name__ == "__main__":
    main()
