"""``lightning-edge calibrate``: measure this board once and write its board file (the twin's coefficients, fitted).

Examples::

    lightning-edge calibrate --device jetson --out my-nano.json               # ~30 min, the board restored after
    lightning-edge calibrate --device jetson --out my-nano.json --minutes 10  # fewer modes
    lightning-edge calibrate --device sim:orin-nano-8gb --out nano.json --modes 15   # the same on the twin (seconds)
    lightning-edge mode list --device sim:my-nano.json                         # then every tool takes the file

Interrupted (Ctrl-C, a lost session)? Run the same command again: it resumes from ``my-nano.json.partial``.
"""

from __future__ import annotations

import argparse
import sys

from lightning_edge.cli import add_json_argument, check_board_option, write_json

HELP = "measure this board's time and energy at a few modes and fit its twin (writes a board file)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", metavar="BOARD",
                        help="the board: auto or jetson (this Jetson: its controller switches modes, its power sensor "
                             "measures), or sim:<key> / sim:FILE.json (a simulated board: every measurement simulated)")
    parser.add_argument("--out", required=True, metavar="FILE.json", help="the board file to write")
    parser.add_argument("--modes", type=int, default=None, metavar="N",
                        help="how many power modes to measure (default: as many as --minutes allows)")
    parser.add_argument("--minutes", type=float, default=None, metavar="M",
                        help="the time budget (default 30): about 1.5 minutes per mode on a Jetson")
    parser.add_argument("--seed", type=int, default=0, help="the design's (and a simulated board's noise) seed")
    parser.add_argument("--force", action="store_true",
                        help="replace --out even when it is a file that is not a board file (a link, a device, a FIFO "
                             "or a folder is refused all the same)")
    parser.add_argument("--restart", action="store_true",
                        help="ignore a partial calibration left by an interrupted run (FILE.json.partial)")
    parser.add_argument("--no-install", action="store_true",
                        help="on a real board, do not install the file as the board's model (the tuner's prior and "
                             "the profiler's estimates then keep the catalogue's)")
    parser.add_argument("--fit-iterations", type=int, default=30, metavar="K",
                        help="iterations of the fit (default 30; more: a closer fit to the measurements, slower)")
    parser.add_argument("--torch-device", default=None, metavar="cuda|cpu",
                        help="where the reference steps and microbenchmarks run on a real board (default: cuda)")
    add_json_argument(parser, "the calibration summary (modes, fitted coefficients, residuals)")


def run(args: argparse.Namespace) -> int:
    from lightning_edge.calibrate.kit import DEFAULT_MINUTES, calibrate
    from lightning_edge.devices.board import get_board

    spec = check_board_option(args.device)
    if args.modes is not None and args.modes < 1:
        raise ValueError(f"--modes {args.modes}: measure at least one mode")
    if args.minutes is not None and args.minutes <= 0:
        raise ValueError(f"--minutes {args.minutes}: give a positive time budget")
    if spec.startswith("sim") and args.torch_device:
        raise ValueError(f"--device {args.device}: a simulated board runs its steps on the twin; drop --torch-device")
    from lightning_edge._jsonfile import check_target, json_schema_is
    from lightning_edge.twin.board_files import SCHEMA

    # before the board is opened (and minutes of measuring): --out must take a board file
    check_target(args.out, lambda why: ValueError(f"--out {args.out}: {why}"), ours=json_schema_is(SCHEMA),
                 force=args.force, what="board file")
    board = get_board(spec, control="write", seed=args.seed)
    try:
        quiet = args.json == "-"
        res = calibrate(board, args.out, modes=args.modes, minutes=args.minutes or DEFAULT_MINUTES, seed=args.seed,
                        restart=args.restart, install=False if args.no_install else None, force=args.force,
                        torch_device=args.torch_device, progress=not quiet, max_nfev=max(args.fit_iterations, 1),
                        log=(lambda m: print(m, file=sys.stderr)))
    finally:
        board.close()
    if args.json is not None:
        bf = res.board_file
        write_json({"path": str(res.path), "label": bf.label, "board": bf.key, "modes": res.modes,
                    "resumed": res.resumed, "installed": None if res.installed is None else str(res.installed),
                    "calibration": bf.calibration, "params": bf.params, "provenance": bf.provenance,
                    "notes": res.notes}, args.json)
    if args.json != "-":
        print(res.summary())
    return 0
