"""``lightning-edge mode``: show, list and switch power modes, and put the board back.

::

    lightning-edge mode show    [--device auto|jetson|nvpmodel|nvml[:N]|sim:<board>] [--json]
    lightning-edge mode list    [--all] [--subset fulcrum] [--json]   (the grid and the board's nvpmodel named modes)
    lightning-edge mode set 8c/1344/727/2133 [--dry-run]
    lightning-edge mode restore [--dry-run]

``set`` leaves the board in the new mode when the command ends (that is its point) and records
the mode found before the first change in the board's state file; ``restore`` puts that back.
On the twin (``--device sim:orin-agx``) the simulated mode persists in the state dir, so
``set`` and a later ``show`` agree. Imports nothing heavy.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from lightning_edge.cli import add_json_argument, write_json

if TYPE_CHECKING:
    from lightning_edge.catalog import BoardInfo
    from lightning_edge.devices.controllers.base import ModeController
    from lightning_edge.devices.controllers.sysfs import SysfsWriter
    from lightning_edge.modes import PowerModeSpace

HELP = "show, list and switch power modes (and put the board back)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lightning_edge.devices.controllers import DEVICES_HELP

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--device",
        default="auto",
        help=f"which board: {DEVICES_HELP} (default: auto = this Jetson; NVML is never picked by auto)",
    )
    common.add_argument(
        "--state-dir",
        default=None,
        help="where the state and lock files live (default: $LIGHTNING_EDGE_STATE_DIR or the user state dir)",
    )

    sub = parser.add_subparsers(dest="mode_command", metavar="ACTION")
    p = sub.add_parser(
        "show", parents=[common], help="print the current mode", description="Print the current mode."
    )
    add_json_argument(p)
    p.set_defaults(dry_run=False)
    p = sub.add_parser(
        "list",
        parents=[common],
        help="print the space of valid modes",
        description="Print the valid values of each knob and the size of the mode space.",
    )
    p.add_argument("--all", action="store_true", help="print every mode, one per line")
    p.add_argument("--subset", choices=["fulcrum"], help="only a named subset (fulcrum: the 441-mode grid)")
    add_json_argument(p)
    p.set_defaults(dry_run=False)
    p = sub.add_parser(
        "set",
        parents=[common],
        help="switch to a mode and leave it set",
        description="Switch to MODE and leave it set; `mode restore` puts back the original.",
    )
    p.add_argument("mode", help="CORESc/CPU/GPU/MEM in MHz (e.g. 8c/1344/727/2133), or maxn, min, mid")
    p.add_argument("--dry-run", action="store_true", help="print the exact writes or commands, change nothing")
    p = sub.add_parser(
        "restore",
        parents=[common],
        help="put back the mode found before lightning_edge changed it",
        description="Put back the mode recorded in the board's state file.",
    )
    p.add_argument("--dry-run", action="store_true", help="print the exact writes or commands, change nothing")
    parser.set_defaults(_mode_parser=parser)


def _controller(args: argparse.Namespace) -> ModeController:
    """The mode controller of the board ``--device`` names: the process's one Board's writer (``get_board``)."""
    from lightning_edge.devices.board import ControlOptions, get_board
    from lightning_edge.devices.safety import default_state_dir
    from lightning_edge.devices.spec import BoardSpec

    # the file-system root is never a command-line option: with sudo, root would follow a user's tree of
    # symbolic links. Python callers (tests on fake trees) pass it to main(argv, root=...) / run(args, root=...),
    # and the fake board's writer (the kernel's side of the tree) with writer=....
    spec = BoardSpec.parse(args.device, host_cpu=False)
    state_dir = args.state_dir
    if spec.kind == "sim" and state_dir is None:  # a simulated mode outlives the command, as a board's does
        state_dir = default_state_dir()
    options = ControlOptions(dry_run=bool(args.dry_run), state_dir=None if state_dir is None else str(state_dir),
                             writer=args._writer)
    root = args._root
    board = get_board(spec, control="write", root=None if spec.kind == "sim" or root == "/" else root,
                      options=options)
    return board.controller


def _describe_device(ctl: ModeController) -> str:
    if ctl.source == "simulated":
        from lightning_edge.catalog import BOARDS

        board = ctl.board
        name = BOARDS[board].name if board in BOARDS else board
        return f"{ctl.cli_args()[1]} - simulated {name} (the twin: values are simulated, not measured)"
    layout = ctl.layout
    if layout is not None:
        jp = f", JetPack {layout.jetpack}" if layout.jetpack else ""
        return f"{ctl.name} - {layout.board.name}{jp} ({ctl.device_id})"
    return f"{ctl.name} ({ctl.device_id})"


def _show(args: argparse.Namespace) -> int:
    ctl = _controller(args)
    mode = ctl.current()
    space = ctl.space
    state = ctl._safety.read() if ctl._safety is not None else None
    if args.json:
        out = {
            "device": ctl.device_id,
            "backend": ctl.name,
            "source": ctl.source,
            "mode": str(mode),
            "values": mode.to_dict(),
            "in_space": mode in space,
            "original": (state or {}).get("original"),
            "state_file": ctl.state_path if state else None,
        }
        write_json(out, args.json)
        return 0
    tags = [ctl.source]
    if mode == space.max_mode():
        tags.append("MAXN")
    print(f"device: {_describe_device(ctl)}")
    print(f"mode:   {mode}  ({mode.describe()})  [{', '.join(tags)}]")
    if mode in space:
        print(f"        mode {space.index(mode)} of {space.size:,} in the {space.name or 'device'} grid")
    else:
        print(
            f"        not a point of the {space.name or 'device'} grid (DVFS ranges or a mode set by another tool)"
        )
    if state:
        owner = state.get("pid")
        who = f"process {owner} is changing it" if owner else "left set by `lightning-edge mode set`"
        print(f"        {who}; the original mode {state.get('original')} is recorded in {ctl.state_path}")
        print(f"        undo with: {ctl.restore_command()}")
    return 0


def _catalogued(ctl: ModeController) -> BoardInfo | None:
    """The catalogue's entry of the board a controller drives (``None``: not catalogued)."""
    from lightning_edge.catalog import BOARDS

    return BOARDS.get(ctl.layout.board.key if ctl.layout is not None else ctl.board)


def _named_modes(ctl: ModeController, space: PowerModeSpace) -> list[dict]:
    """The board's nvpmodel named modes, each with the grid's mode under its caps (``None``: caps unknown)."""
    out = []
    for m in ctl.named_modes or ():
        mode = m.mode(space)
        out.append({"name": m.name, "id": m.id, "firmware": m.firmware, "default": m.default, "caps": m.caps(),
                    "cores": m.cores, "cpu_khz": m.cpu_khz, "gpu_hz": m.gpu_hz, "emc_hz": m.emc_hz,
                    "mode": None if mode is None else str(mode), "source": m.source.cite,
                    "confirmed": m.source.confirmed})
    return out


def _list(args: argparse.Namespace) -> int:
    from lightning_edge.catalog import fulcrum_space

    ctl = _controller(args)
    space = ctl.space
    if args.subset == "fulcrum":
        sub = fulcrum_space()
        if not sub.is_subspace_of(space):
            print(
                f"note: the Fulcrum subset is defined on the Orin AGX grid; {space.name or 'this board'} "
                "lacks some of its values",
                file=sys.stderr,
            )
        space = sub
    named = _named_modes(ctl, space)
    if args.json:
        d = space.to_dict()
        d["size"] = space.size
        d["named_modes"] = named
        if args.all:
            d["modes"] = [str(m) for m in space]
        write_json(d, args.json)
        return 0
    lines = space.describe().splitlines()
    if ctl.source == "simulated":
        lines[0] += "  [simulated board]"
    print("\n".join(lines))
    print(f"  highest (MAXN): {space.max_mode()}  ({space.max_mode().describe()})")
    print(f"  midpoint:       {space.midpoint()}  ({space.midpoint().describe()})")
    print(f"  lowest:         {space.min_mode()}  ({space.min_mode().describe()})")
    info = _catalogued(ctl)
    if info is not None and ctl.source == "simulated":
        status = ", ".join(f"{k} {'confirmed' if table.source.confirmed else 'unconfirmed'}"
                           for k, table in (("cpu", info.cpu), ("gpu", info.gpu), ("emc", info.emc)))
        print(f"  grid: the catalogue's tables of {info.name}, {info.grid_firmware} firmware ({status}; sources: "
              "docs/boards.md); a real board's available_frequencies win")
    if named:
        print("nvpmodel named modes (caps as in the board's nvpmodel.conf; the mode is the grid's highest under them):")
        sources: list[str] = []
        for d in named:
            if d["source"] not in sources:
                sources.append(d["source"])
            tags = d["firmware"] + ("" if d["confirmed"] else ", unconfirmed")
            ident = "" if d["id"] is None else f"ID {d['id']}"
            print(f"  {d['name']:<17} {d['mode'] or '-':<24} {ident:<6} [{tags}]{' (default)' if d['default'] else ''}"
                  f"  {d['caps']}  [{sources.index(d['source']) + 1}]")
        for i, src in enumerate(sources, 1):
            print(f"  [{i}] {src}")
    if args.all:
        for i, m in enumerate(space):
            print(f"{i:>6}  {str(m):<20} {m.describe()}")
    return 0


def _set(args: argparse.Namespace) -> int:
    from lightning_edge.devices.controllers.errors import ModeVerificationError

    ctl = _controller(args)
    target = ctl.space.coerce(args.mode)
    if ctl.dry_run:
        ctl.apply(target)
        return 0
    try:
        applied = ctl.apply(target)
    except ModeVerificationError:
        ctl.restore()
        print(
            "lightning-edge mode set: the board did not take the mode; the original mode was restored",
            file=sys.stderr,
        )
        raise
    except BaseException:
        if ctl.active:
            ctl.restore()
        raise
    ctl.keep()
    print(f"{ctl.device_id}: {applied.settled}  ({applied.settled.describe()})  [{applied.source}]")
    print(f"undo with: {ctl.restore_command()}")
    return 0


def _restore(args: argparse.Namespace) -> int:
    ctl = _controller(args)
    result = ctl.restore()
    if ctl.dry_run:
        return 0
    if result is None and ctl.recovered is not None:
        result = ctl.recovered
    if result is None:
        where = f" ({ctl.state_path})" if ctl.state_path else ""
        print(f"nothing to restore on {ctl.device_id}: no state file{where}; the mode is {ctl.current()}")
        return 0
    print(f"{ctl.device_id}: restored {result.settled}  ({result.settled.describe()})  [{result.source}]")
    for m in result.mismatches:
        print(f"  warning: {m}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace, *, root: str | os.PathLike = "/", writer: SysfsWriter | None = None) -> int:
    """Run a parsed ``mode`` command. ``root``: the file-system root of the board (a fake tree in tests), ``writer``:
    the :class:`~lightning_edge.devices.controllers.sysfs.SysfsWriter` its files are read and written through (the
    fake board's, in tests); Python arguments only, deliberately not command-line options."""
    args._root = str(root)
    args._writer = writer
    action = args.mode_command
    if not action:
        args._mode_parser.print_help()
        return 2
    return {"show": _show, "list": _list, "set": _set, "restore": _restore}[action](args)


def main(argv: list[str] | None = None, *, root: str | os.PathLike = "/",
         writer: SysfsWriter | None = None) -> int:
    """``lightning-edge mode ...`` on its own, without loading the other sub-commands (``python -m`` this module).

    ``root``, ``writer`` (Python only, see :func:`run`): the board's file-system root, e.g. a fake sysfs tree in
    tests, and the writer of its files."""
    parser = argparse.ArgumentParser(prog="lightning-edge mode", description=HELP)
    add_arguments(parser)
    args = parser.parse_args(argv)
    from lightning_edge.cli import run_command

    return run_command(lambda a: run(a, root=root, writer=writer), args, "lightning-edge mode")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
