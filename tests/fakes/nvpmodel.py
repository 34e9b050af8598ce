"""A fake ``nvpmodel`` executable for a :class:`~tests.fakes.jetson_sysfs.FakeJetson` tree (any catalogued module).

``install_fake_nvpmodel(bin_dir, board)`` writes an executable ``bin_dir/nvpmodel`` (a Python
script) that behaves like NVIDIA's tool on the fake tree:

- ``nvpmodel [-f CONF] -q``: prints ``NV Power Mode: NAME`` and the ID (from ``var/lib/nvpmodel/status``);
- ``nvpmodel [-f CONF] -m ID``: reads the ``< POWER_MODEL ID=.. >`` block from CONF and writes its
  settings into the fake sysfs (:meth:`FakeJetson.nvpmodel_apply`: cores online, cluster min/max, GPU min/max, EMC
  cap), then records
  the ID in the status file. When the block's core mask differs from the running one and
  ``reboot_on_core_change`` is set, it does what nvpmodel does for a mode it can only enter at boot:
  prints the reboot warning, asks ``DO YOU WANT TO REBOOT NOW? enter YES/yes to confirm:``, and on
  any other answer stages the mode for the next boot without changing the board.

Every invocation is appended to ``bin_dir/nvpmodel.calls.jsonl`` (argv and stdin answer).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = r"""#!{python}
import json, os, re, sys
sys.path.insert(0, {repo!r})
from tests.fakes.jetson_sysfs import FakeJetson, conf_models

ROOT = {root!r}
CALLS = {calls!r}
REBOOT_ON_CORE_CHANGE = {reboot!r}

board = FakeJetson.open(ROOT)
args = sys.argv[1:]
conf = os.path.join(ROOT, "etc/nvpmodel.conf")
query = False
mode = None
i = 0
while i < len(args):
    a = args[i]
    if a == "-f":
        conf = args[i + 1]; i += 2; continue
    if a == "-q":
        query = True
    elif a == "-m":
        mode = int(args[i + 1]); i += 1
    elif a in ("--verbose", "-v"):
        pass
    else:
        print("nvpmodel: unknown option " + a, file=sys.stderr); sys.exit(1)
    i += 1

def log(**kw):
    with open(CALLS, "a") as fh:
        fh.write(json.dumps(dict(argv=sys.argv[1:], **kw)) + "\n")

status = os.path.join(ROOT, "var/lib/nvpmodel/status")
cur_id = int(re.search(r"pmode:(\d+)", open(status).read()).group(1))
models = conf_models(open(conf).read())
if query:
    log(answer=None)
    print("NV Power Mode: " + models.get(cur_id, {{"name": "UNKNOWN"}})["name"])
    print(cur_id)
    sys.exit(0)
if mode is None:
    print("usage: nvpmodel [-f conf] [-m mode | -q]", file=sys.stderr); sys.exit(1)
if mode not in models:
    log(answer=None)
    print("NVPM ERROR: Invalid mode index: %d" % mode, file=sys.stderr); sys.exit(1)
s = models[mode]["set"]
n = board.cpu_count
online_now = [0] + [c for c in range(1, n) if board.read(board.online_rel(c)) == "1"]
mask_now = sum(1 << c for c in online_now)
mask_new = sum(1 << c for c in range(n) if s.get(("CPU_ONLINE", "CORE_%d" % c), "1") == "1") | 1
if REBOOT_ON_CORE_CHANGE and mask_new != mask_now and mode != cur_id:
    print("NVPM WARN: Golden image context is already created")
    print("NVPM WARN: Reboot required for changing to this power mode: %d" % mode)
    print("NVPM WARN: DO YOU WANT TO REBOOT NOW? enter YES/yes to confirm:")
    answer = sys.stdin.readline().strip()
    log(answer=answer)
    if answer.lower() == "yes":
        print("rebooting..."); sys.exit(0)
    open(status, "w").write("pmode:%04d fmode:cool\n" % mode)  # staged for the next boot
    sys.exit(0)
log(answer=None)
board.nvpmodel_apply(s)
open(status, "w").write("pmode:%04d fmode:cool\n" % mode)
print("NVPM: power mode set to %s (%d)" % (models[mode]["name"], mode))
"""


def install_fake_nvpmodel(bin_dir: str | os.PathLike, board, *, reboot_on_core_change: bool = True) -> Path:
    """Write the fake ``nvpmodel`` into ``bin_dir`` (prepend it to PATH to use it); returns its path."""
    d = Path(bin_dir)
    d.mkdir(parents=True, exist_ok=True)
    exe = d / "nvpmodel"
    exe.write_text(
        _SCRIPT.format(
            python=sys.executable,
            repo=str(REPO),
            root=str(board.root),
            calls=str(d / "nvpmodel.calls.jsonl"),
            reboot=bool(reboot_on_core_change),
        )
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def nvpmodel_calls(bin_dir: str | os.PathLike) -> list[dict]:
    """Every recorded invocation: ``{"argv": [...], "answer": "NO" | None}``."""
    path = Path(bin_dir) / "nvpmodel.calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
