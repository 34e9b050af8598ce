"""``lightning-edge store``: look into, and tidy, the profile store (:mod:`lightning_edge.tuning.store`).

::

    lightning-edge store list                             # studies: device, workload, kind, profiles, label, claims
    lightning-edge store show WORKLOAD                    # its profiles as a table
    lightning-edge store best WORKLOAD --budget 25        # the fastest profiled mode within 25 W
    lightning-edge store export WORKLOAD --csv p.csv      # or --json p.json, or --json - (stdout)
    lightning-edge store claims                           # who is measuring what (owner, age, alive?)
    lightning-edge store clear-claims                     # fail the claims of dead or silent processes
    lightning-edge store delete WORKLOAD --yes            # remove a study

``--store`` takes what every store argument takes: ``default``, a file path (SQLite) or an Optuna storage URL.
``WORKLOAD`` is a study name (``lightning_edge/<device>/<workload>/<kind>``), a workload key, or a unique part
of one; ``--device`` and ``--kind`` narrow it down. ``--json [PATH|-]``: ``-`` (or nothing) writes to stdout.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import time
import warnings
from typing import TYPE_CHECKING, Any

from lightning_edge.cli import add_json_argument, write_json
from lightning_edge.tuning.problems import InferenceProblem, TrainingProblem

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from lightning_edge.tuning.problems import Problem
    from lightning_edge.tuning.store import ProfileStore, StudyName

HELP = "list, show, query, export and tidy the profile store (studies, profiles, claims)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="store_command", metavar="ACTION")
    sub.required = True

    def common(q: argparse.ArgumentParser, study: bool = True, json_out: bool = True) -> None:
        q.add_argument("--store", default="default",
                       help="'default' (SQLite in the user cache dir), a file path (SQLite) or an Optuna storage URL")
        if study:
            q.add_argument("workload", help="study name, workload key, or a unique part of one")
            q.add_argument("--device-model", default=None, help="device model (e.g. sim:orin-agx, orin-agx)")
            q.add_argument("--kind", choices=("train", "infer"), default=None, help="training or inference profiles")
        if json_out:
            add_json_argument(q, "the answer")

    common(sub.add_parser("list", help="every study: device, workload, kind, profiles, label, open claims"),
           study=False)
    common(sub.add_parser("show", help="a study's profiles as a table"))
    q = sub.add_parser("best", help="the fastest profiled mode within a power budget (and latency, for inference)")
    common(q)
    q.add_argument("--budget", type=float, required=True, metavar="W", help="power budget in W")
    q.add_argument("--latency-ms", type=float, default=None, help="inference: latency budget in ms")
    q.add_argument("--rate", type=float, default=None, metavar="RPS", help="inference: arrival rate in requests/s")
    q = sub.add_parser("export", help="a study's profiles as CSV or JSON")
    common(q)
    q.add_argument("--csv", default=None, metavar="PATH|-", help="write CSV to PATH, or to stdout with '-'")
    common(sub.add_parser("claims", help="open claims: who measures what, since when, whether the owner is alive"),
           study=False)
    q = sub.add_parser("clear-claims", help="fail claims whose owner is dead or silent (their points are free again)")
    common(q, study=False, json_out=False)
    q.add_argument("--force", action="store_true",
                   help="also claims that may belong to live processes (on other hosts, or still renewed)")
    q = sub.add_parser("delete", help="delete a study and its profiles")
    common(q, json_out=False)
    q.add_argument("--yes", action="store_true", help="really delete (without it, only say what would go)")


# ------------------------------------------------------------------------------------------------ helpers
def _studies(store: ProfileStore) -> list[str]:
    """The name of every profile study in the store."""
    return [w.text for w in store.workloads()]


def _parts(name: str) -> StudyName:
    from lightning_edge.tuning.store import StudyName

    parts = StudyName.parse(name)
    if parts is None:
        raise ValueError(f"{name!r} is not a profile study's name (lightning_edge/<device>/<workload>/<kind>)")
    return parts


def _find(store: ProfileStore, args: argparse.Namespace) -> str:
    """The one study name that ``args.workload`` (with ``--device`` / ``--kind``) names."""
    names = _studies(store)
    want = args.workload

    def ok(name: str) -> bool:
        dev, _, kind = _parts(name)
        # a simulated board's key carries its model's digest (sim:orin-agx+1a2b3c4d): --device-model sim:orin-agx names all
        same = args.device_model is None or dev.names(args.device_model)
        return same and (args.kind is None or kind == args.kind)

    for test in (lambda n: n == want, lambda n: _parts(n).workload_id == want, lambda n: want in n):
        found = [n for n in names if test(n) and ok(n)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise ValueError(f"{want!r} names {len(found)} studies ({', '.join(found[:4])}"
                             f"{', ...' if len(found) > 4 else ''}); give the full name or --device / --kind")
    raise ValueError(f"no study in the profile store {store.describe()} matches {want!r}"
                     f"{'' if args.device_model is None else f' on {args.device_model}'}"
                     f"{'' if args.kind is None else f' ({args.kind})'}; see lightning-edge store list")


def _rows(store: ProfileStore, name: str) -> list[dict[str, Any]]:
    """Every profile of a study (the store's answer: the owner trial of each point), sorted by mode."""
    from optuna.trial import TrialState

    from lightning_edge.tuning._optuna import constraints_of
    from lightning_edge.tuning.store import trial_measurement

    dev, wid, kind = _parts(name)
    wp = store.bind(dev, wid)
    rows = []
    for key, g in wp._groups(kind).items():
        t = g[0]
        if t.state != TrialState.COMPLETE:
            continue
        m = trial_measurement(t)
        row: dict[str, Any] = {"mode": str(key.mode), "cores": key.mode.cores, "cpu_mhz": key.mode.cpu_mhz,
                               "gpu_mhz": key.mode.gpu_mhz, "mem_mhz": key.mode.mem_mhz}
        if kind == "infer":
            row["batch_size"] = key.batch_size
        row.update(time_ms=m.time_s * 1e3, power_w=m.power_w, label=m.label, trial=t.number,
                   problem=(t.user_attrs.get("provenance") or {}).get("problem", ""),
                   constraints=constraints_of(t))
        rows.append(row)
    rows.sort(key=lambda r: (r["cores"], r["cpu_mhz"], r["gpu_mhz"], r["mem_mhz"], r.get("batch_size") or 0))
    return rows


def _table(rows: list[dict[str, Any]], cols: list[tuple[str, str, str]]) -> str:
    head = [c[1] for c in cols]
    body = [[format(r.get(c[0], ""), c[2]) if r.get(c[0]) is not None else "" for c in cols] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(b, widths))) for b in body]
    return "\n".join(lines)


def _claims(store: ProfileStore) -> list[dict[str, Any]]:
    import optuna
    from optuna.trial import TrialState

    from lightning_edge.tuning.store import CLAIM_ATTR, RENEWED_ATTR, owner_dead, unrecorded_claim

    out = []
    now = time.time()
    for name in _studies(store):
        st = optuna.load_study(study_name=name, storage=store.storage)
        for t in st.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            claim = t.system_attrs.get(CLAIM_ATTR) or {}
            since = claim.get("since") or (t.datetime_start.timestamp() if t.datetime_start else None)
            renewed = t.system_attrs.get(RENEWED_ATTR)
            dead = owner_dead(claim) if claim else unrecorded_claim(t, store.grace_period_s, now)
            out.append({"study": name, "trial": t.number, "mode": _mode_text(t),
                        "host": claim.get("host", "?"), "pid": claim.get("pid"),
                        "age_s": None if since is None else now - float(since),
                        "renewed_s_ago": None if renewed is None else now - float(renewed),
                        "owner": "dead" if dead else ("unknown" if not claim else "alive or elsewhere"),
                        "why": dead or "", "_trial": t})
    return out


def _mode_text(t: FrozenTrial) -> str:
    from lightning_edge.tuning.store import trial_key, trial_kind

    k = trial_key(trial_kind(t), t)
    return "?" if k is None else str(k.mode) + ("" if k.batch_size is None else f" bs {k.batch_size}")


# ------------------------------------------------------------------------------------------------ actions
def run(args: argparse.Namespace) -> int:
    import optuna

    from lightning_edge.tuning.store import ProfileStore

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "Using an existing study" per look-up
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna's experimental warnings; a read-only store is fine to read
        store = ProfileStore(args.store)
    return int(globals()[f"_do_{args.store_command.replace('-', '_')}"](store, args) or 0)


def _do_list(store: ProfileStore, args: argparse.Namespace) -> int:
    from optuna.trial import TrialState

    rows = []
    for name in _studies(store):
        dev, wid, kind = _parts(name)
        st = store.study(dev, wid, kind)
        trials = st.get_trials(deepcopy=False) if st is not None else []
        rows.append({"study": name, "device": dev, "workload": wid, "kind": kind,
                     "profiles": len(_rows(store, name)),
                     "claims": sum(t.state == TrialState.RUNNING for t in trials),
                     "label": (st.user_attrs.get("label") if st is not None else None) or
                     ",".join(sorted({t.user_attrs.get("label", "") for t in trials
                                      if t.state == TrialState.COMPLETE} - {""})) or "-"})
    if args.json is not None:
        write_json(json.dumps(rows, indent=2), args.json)
        return 0
    if not rows:
        print(f"profile store {store.describe()}: no studies yet")
        return 0
    print(f"profile store {store.describe()}{' (read-only)' if store.read_only else ''}")
    print(_table(rows, [("device", "device", ""), ("workload", "workload", ""), ("kind", "kind", ""),
                        ("profiles", "profiles", "d"), ("label", "label", ""), ("claims", "open claims", "d")]))
    return 0


def _profile_cols(kind: str) -> list[tuple[str, str, str]]:
    cols = [("mode", "mode", "")] + ([("batch_size", "bs", "d")] if kind == "infer" else [])
    return cols + [("time_ms", "time_ms", ".2f"), ("power_w", "power_w", ".2f"), ("label", "label", ""),
                   ("trial", "trial", "d"), ("problem", "profiled for", "")]


def _do_show(store: ProfileStore, args: argparse.Namespace) -> int:
    name = _find(store, args)
    rows = _rows(store, name)
    if args.json is not None:
        write_json(json.dumps({"study": name, "profiles": rows}, indent=2), args.json)
        return 0
    print(f"{name}: {len(rows)} profiles ({store.describe()})")
    print(_table(rows, _profile_cols(_parts(name).kind)))
    return 0


def _do_best(store: ProfileStore, args: argparse.Namespace) -> int:
    name = _find(store, args)
    dev, wid, kind = _parts(name)
    table = store.bind(dev, wid).table(kind)
    if kind == "train":
        problem: Problem = TrainingProblem(args.budget)
    else:
        if args.latency_ms is None or args.rate is None:
            raise ValueError(f"{name} holds inference profiles: give --latency-ms and --rate as well as --budget")
        problem = InferenceProblem(args.budget, args.latency_ms / 1e3, args.rate,
                                   tuple(sorted({int(b) for b in table.batch_size})) or (1,))
    sol = table.solve(problem)
    out = {"study": name, "problem": problem.describe(), "profiles": len(_rows(store, name)),
           "solution": None if sol is None else {"mode": str(sol.mode), "time_ms": sol.time_s * 1e3,
                                                 "power_w": sol.power_w, "label": sol.label,
                                                 "batch_size": sol.batch_size}}
    if args.json is not None:
        write_json(json.dumps(out, indent=2), args.json)
        return 0 if sol is not None else 1
    if sol is None:
        print(f"{name}: none of its {out['profiles']} profiled modes meets {problem.describe()}")
        return 1
    print(f"{name}: {sol.describe()} ({problem.describe()}; from {out['profiles']} profiled modes)")
    return 0


def _do_export(store: ProfileStore, args: argparse.Namespace) -> int:
    name = _find(store, args)
    rows = _rows(store, name)
    if args.csv is None and args.json is None:
        raise ValueError("export: give --csv PATH|- or --json PATH|-")
    if args.csv is not None:
        buf = io.StringIO()
        fields = [k for k in rows[0] if k != "constraints"] if rows else ["mode"]
        w = csv.DictWriter(buf, fieldnames=fields + ["constraints"], extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "constraints": json.dumps(r["constraints"])})
        write_json(buf.getvalue(), args.csv)
    if args.json is not None:
        write_json(json.dumps({"study": name, "profiles": rows}, indent=2), args.json)
    return 0


def _do_claims(store: ProfileStore, args: argparse.Namespace) -> int:
    rows = _claims(store)
    if args.json is not None:
        write_json(json.dumps([{k: v for k, v in r.items() if k != "_trial"} for r in rows], indent=2), args.json)
        return 0
    if not rows:
        print(f"profile store {store.describe()}: no open claims")
        return 0
    print(_table(rows, [("study", "study", ""), ("mode", "mode", ""), ("host", "host", ""), ("pid", "pid", "d"),
                        ("age_s", "claimed s ago", ".0f"), ("owner", "owner", ""), ("why", "", "")]))
    return 0


def _do_clear_claims(store: ProfileStore, args: argparse.Namespace) -> int:
    from lightning_edge.tuning.store import fail_claim

    if store.read_only:
        raise PermissionError(f"profile store {store.describe()} is read-only for this user: cannot clear claims")
    cleared = 0
    for r in _claims(store):
        renewed = r["renewed_s_ago"]
        silent = (r["age_s"] or 0) > store.grace_period_s and (renewed is None or renewed > store.grace_period_s)
        why = r["why"] or ("cleared by hand (--force)" if args.force else "")
        if not why and silent and not store.heartbeat:
            why = f"not renewed for {store.grace_period_s:.0f} s"
        if not why and store.heartbeat:
            dev, wid, kind = _parts(r["study"])
            store.bind(dev, wid)._fail_stale(kind)  # Optuna's heartbeat: stale ones fail here
            continue
        if why and fail_claim(store.storage, r["study"], r["_trial"], why):
            cleared += 1
            print(f"cleared {r['study']} {r['mode']} (trial {r['_trial'].number}: {why})")
    after = len(_claims(store))
    print(f"{cleared} claim(s) cleared; {after} still open" + ("" if not after else
          " (owners alive or on another host and still renewing; --force clears them too)"))
    return 0


def _do_delete(store: ProfileStore, args: argparse.Namespace) -> int:
    import optuna

    name = _find(store, args)
    n = len(_rows(store, name))
    if not args.yes:
        print(f"would delete {name} ({n} profiles) from {store.describe()}: add --yes to delete it")
        return 1
    if store.read_only:
        raise PermissionError(f"profile store {store.describe()} is read-only for this user: cannot delete {name}")
    optuna.delete_study(study_name=name, storage=store.storage)
    print(f"deleted {name} ({n} profiles) from {store.describe()}")
    return 0
