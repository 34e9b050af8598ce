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
    "analyze": "lightning_edge.cost.cli",
    "mode": "lightning_edge.devices.cli",
    "roofline": "lightning_edge.roofline.cli",
    "latency": "lightning_edge.latency.cli",
    "demo": "lightning_edge.demo",
    "store": "lightning_edge.tuning.store_cli",
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
        return int(run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, PermissionError, RuntimeError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
