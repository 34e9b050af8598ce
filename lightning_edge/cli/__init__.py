"""The ``lightning-edge`` command line: one entry point, one sub-command per capability.

Each sub-command lives next to the code it drives, in a module that exposes
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``. Those
modules import torch and friends inside ``run`` only, so ``lightning-edge --help``
and the hardware commands start fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# sub-command name -> module implementing it
COMMANDS: dict[str, str] = {
    "analyze": "lightning_edge.cli.analyze",
    "mode": "lightning_edge.cli.mode",
    "roofline": "lightning_edge.cli.roofline",
    "latency": "lightning_edge.cli.latency",
    "demo": "lightning_edge.cli.demo",
    "store": "lightning_edge.cli.store",
    "calibrate": "lightning_edge.cli.calibrate",
}


def _available_commands() -> dict[str, object]:
    mods = {}
    for name, path in COMMANDS.items():
        try:
            mods[name] = importlib.import_module(path)
        except ModuleNotFoundError as exc:  # a capability not built into this install
            if exc.name and path.startswith(exc.name):
                continue
            raise
    return mods


def build_parser() -> argparse.ArgumentParser:
    from lightning_edge import __version__

    parser = argparse.ArgumentParser(
        prog="lightning-edge",
        description="Per-layer time and energy, rooflines and power-mode tuning for DNNs on NVIDIA Jetson.",
    )
    parser.add_argument("--version", action="version", version=f"lightning-edge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in _available_commands().items():
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return run_command(args._run, args, f"lightning-edge {args.command}")


def run_command(run, args: argparse.Namespace, prog: str) -> int:
    """Run a sub-command; errors we raise are written to be read by a person: show them without a traceback."""
    try:
        check_output_paths(args)
        rc = int(run(args) or 0)
        sys.stdout.flush()  # a closed pipe is found here, not by the interpreter's last flush at exit
        return rc
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (``lightning-edge mode list | head``): no traceback, and none at exit either, when
        # Python flushes a stdout nobody reads
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a command killed by SIGPIPE
    except (ValueError, FileNotFoundError, PermissionError, RuntimeError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1


def check_board_option(value: str) -> str:
    """``--device`` names a board in every command (auto, jetson, nvml:N, rapl, none, sim:orin-agx); a torch device
    given there (``cuda``, ``cuda:0``, ``mps``; ``cpu`` is ambiguous) is an error that names ``--torch-device``."""
    from lightning_edge.devices.spec import BoardSpec

    try:
        return BoardSpec.parse(value, host_cpu=False).key
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None


#: the options that name a file a command writes (checked before any work: a wrong folder fails at once)
OUTPUT_OPTIONS = ("json", "out", "plot")


def check_output_paths(args: argparse.Namespace) -> None:
    """Every output file a command was given (``--json PATH``, ``--out``, ``--plot``) must go to an existing,
    writable folder: checked before the work, not after it (a table printed, then the error). An option the command
    names in ``folder_outputs`` (the demo's ``--out``) is a folder: it must be one, or be creatable."""
    import os

    folders = set(getattr(args, "folder_outputs", ()) or ())
    for opt in OUTPUT_OPTIONS:
        dest = getattr(args, opt, None)
        if not isinstance(dest, str) or dest in ("", "-"):
            continue
        if opt in folders:
            if os.path.exists(dest) and not os.path.isdir(dest):
                raise ValueError(f"--{opt} {dest}: is a file; give a folder (it is created when missing)")
            probe = os.path.abspath(dest)
            while not os.path.exists(probe):
                probe = os.path.dirname(probe)
            if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
                raise ValueError(f"--{opt} {dest}: {probe} is not a writable folder; give a folder you can write")
            continue
        folder = os.path.dirname(os.path.abspath(dest))
        if os.path.isdir(dest):
            raise ValueError(f"--{opt} {dest}: is a folder; give a file name in it")
        if os.path.lexists(dest):  # a link, a device, a FIFO: refused before any work (what the writer refuses)
            from lightning_edge._jsonfile import check_target

            check_target(dest, lambda why, o=opt, d=dest: ValueError(f"--{o} {d}: {why}"), ours=lambda _p: True)
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
            why = "does not exist" if not os.path.exists(folder) else "is not a writable folder"
            raise ValueError(f"--{opt} {dest}: {folder} {why}; give a file in an existing, writable folder")


def add_json_argument(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    """``--json [PATH|-]``, the same in every command: ``--json`` or ``--json -`` prints JSON to stdout (and
    nothing else there), ``--json PATH`` writes it to PATH."""
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH|-",
                        help=f"{what} as JSON: to PATH, or to stdout with '-' or no value (then only the JSON)")


def write_json(data, dest: str) -> None:
    """Write ``data`` (JSON-able, or JSON text) where ``--json`` said: stdout for ``-``, else the file (its name
    on stderr)."""
    import json

    text = data if isinstance(data, str) else json.dumps(data, indent=2, default=str)
    if dest == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    from lightning_edge._jsonfile import is_json_file, write_file

    # atomically (a new temporary file, renamed), never through a link, into a device or over a file that is not JSON
    write_file(dest, text, lambda why: ValueError(f"--json {dest}: {why}; give a file in an existing, writable folder, "
                                                  "or '-' for stdout"), ours=is_json_file, what="JSON file")
    print(f"wrote {dest}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
