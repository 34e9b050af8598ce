"""``lightning-edge roofline``: measure this device's roofline, or draw one from a profile.

Examples::

    lightning-edge roofline --quick --out profile.json          # measure the current mode (time roofline
                                                                # only without a power sensor)
    lightning-edge roofline --profile orin-agx-pagoda --plot orin.png
    lightning-edge roofline --profile orin-agx-pagoda --model zoo:resnet50 --batch-size 1 --plot r50.png
    lightning-edge roofline --modes 12c/2201.6/1300.5/3199 8c/1344/726.75/2133 --out modes.json   # on a Jetson
    lightning-edge roofline --device sim:orin-agx --modes maxn 4c/1344/318.75/2133   # the twin, measured (simulated)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from lightning_edge.cli import add_json_argument, check_board_option, write_json

HELP = "measure the time/energy roofline of this device (or draw one from a profile)"

TWIN_PROFILE = "orin-agx-twin"  # the simulated Orin AGX's rooflines (lightning_edge/data)
SETTLE_S = 3.0  # Pagoda: power takes 2-3 s to stabilise after a mode change


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--torch-device", default=None, metavar="cpu|cuda[:N]",
                        help="the torch device the microbenchmarks run on (default: cuda when available, else cpu)")
    parser.add_argument("--device", default="auto", metavar="BOARD",
                        help="the board, as in every lightning-edge command: auto (this machine's board: its power "
                             "sensor measures the energy roofline, its controller switches --modes), jetson, nvml:N, "
                             "rapl, or sim:orin-agx (the twin: the same sweeps run on it, every number simulated)")
    parser.add_argument("--quick", action="store_true", help="small sweeps, 3 repeats (seconds, not minutes)")
    parser.add_argument("--out", metavar="PROFILE.json", help="write the measured (or selected) profile here")
    parser.add_argument("--modes", nargs="+", metavar="MODE",
                        help="power modes to measure (e.g. 12c/2201.6/1300.5/3199); needs a mode controller (a Jetson). "
                             "With --profile: the modes of the profile to show")
    parser.add_argument("--precision", nargs="+", metavar="P",
                        help="precisions to measure (fp32 tf32 fp16 bf16; default: fp32 plus the fast ones the device "
                             "runs); the first is the one plotted")
    parser.add_argument("--plot", metavar="OUT.png", help="draw the time and energy rooflines to this PNG")
    parser.add_argument("--model", metavar="SPEC",
                        help="place a model's layers on the rooflines: zoo:NAME (lightning_edge.zoo) or package.module:factory")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size of the --model input (default 1, or what the factory returns)")
    parser.add_argument("--profile", metavar="PATH_OR_NAME",
                        help="use this profile instead of measuring (a file, or a shipped name such as orin-agx-pagoda)")
    parser.add_argument("--device-name", help="device model name written into the profile (default: detected)")
    add_json_argument(parser, "the rooflines (per mode: peaks, balance points, energy efficiency; and the profile)")


def run(args: argparse.Namespace) -> int:
    from lightning_edge.roofline.profile import load_profile, save_profile

    spec = check_board_option(args.device)
    if spec.startswith("sim") and args.torch_device:
        raise ValueError(f"--device {args.device}: the sweeps run on the twin, not on a torch device; drop "
                         f"--torch-device (its shipped profile: --profile {TWIN_PROFILE})")
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size: expected a positive integer, got {args.batch_size}")
    precision = (args.precision or ["fp32"])[0]
    info = sys.stderr if args.json == "-" else sys.stdout  # stdout carries only the JSON then

    if args.profile:
        profile = load_profile(args.profile)
        if args.modes:
            profile = dataclasses.replace(profile, modes=[profile.entry(m) for m in args.modes])
        print(f"profile {args.profile!r}: device {profile.device}, source {profile.source}, {len(profile.modes)} mode(s)", file=info)
    else:
        profile = _measure(args, spec)

    layers = _model_layers(args.model, args.batch_size) if args.model else None

    if not any(precision in m.precision for m in profile.modes):
        have = sorted({p for m in profile.modes for p in m.precision})
        raise ValueError(f"--precision {precision}: the profile has no such roofline; it has {', '.join(have)}")
    if args.json:
        write_json({"device": profile.device, "source": profile.source, "precision": precision,
                    "modes": profile.summary_table(precision), "profile": profile.to_dict()}, args.json)
    if args.json != "-":
        _print_table(profile, precision)

    if args.out:
        path = save_profile(profile, args.out)
        print(f"wrote {path} (validated)", file=info)

    if layers is not None:
        roof = profile.roofline(profile.modes[0].mode, precision) if precision in profile.modes[0].precision \
            else next(m.roofline(precision) for m in profile.modes if precision in m.precision)
        if args.json != "-":
            _print_layers(layers, roof)

    if args.plot:
        from lightning_edge.roofline.plot import plot_rooflines

        roofs = {m.mode: m.roofline(precision, source=profile.source) for m in profile.modes if precision in m.precision}
        title = f"{profile.device} ({profile.source}, {precision})"
        if args.model:
            title += f": {args.model}" + (f", batch {args.batch_size}" if args.batch_size else "")
        fig = plot_rooflines(roofs, layers=layers, path=args.plot, title=title)
        del fig
        print(f"wrote {args.plot}", file=info)
    return 0


# ------------------------------------------------------------------------------------------ measuring
def _measure(args, spec: str):
    """The rooflines of the board (its one Board in this process): its power sensor measures the energy roofline,
    its controller switches ``--modes`` (restored at the end); on the twin every sweep runs on the simulated board."""
    from lightning_edge.calibrate.microbench import _slug, energy_meter, run_microbench
    from lightning_edge.devices.board import get_board
    from lightning_edge.roofline.profile import DeviceProfile

    info = sys.stderr if args.json == "-" else sys.stdout  # stdout carries only the JSON then

    def log(msg):
        print(msg, file=info, flush=True)

    try:
        board = get_board(spec, control="write" if args.modes else "read")
    except RuntimeError as exc:
        if not args.modes:
            raise
        raise RuntimeError(f"--modes needs a power-mode controller to switch modes, and none is available here:\n"
                           f"{exc}\nRun without --modes to measure the current mode.") from None
    try:
        device = None
        meter = None
        if not board.simulated:
            import torch

            device = args.torch_device or ("cuda" if torch.cuda.is_available() else "cpu")
            meter = energy_meter(board, device)
        kw = dict(quick=args.quick, precisions=args.precision, meter=meter, log=log, board=board)
        if args.modes:
            ctl = board.controller
            if ctl is None:
                raise RuntimeError(f"--modes needs a power-mode controller to switch modes, and {board.name} has none "
                                   f"({'; '.join(board.notes) or 'not a Jetson'}). Run without --modes to measure the "
                                   "current mode.")
            entries, result = [], None
            with ctl:  # the mode found at start is restored on exit
                for mode in args.modes:
                    log(f"switching to mode {mode} ...")
                    applied = ctl.apply(mode)
                    if not board.simulated:
                        time.sleep(SETTLE_S)
                    result = run_microbench(device, **kw)
                    entries.append(result.mode_entry(str(applied.settled or applied.requested)))
                    _compare_with_the_twin(board, result, str(applied.settled or applied.requested), log)
            profile = DeviceProfile(device=args.device_name or _slug(result.device_name), source=result.label,
                                    modes=entries, host=result.host)
        else:
            log(f"measuring the roofline of the current mode ({'quick' if args.quick else 'full'} run) ...")
            result = run_microbench(device, **kw)
            mode = board.mode() or "current"
            profile = result.to_profile(mode=mode, device=args.device_name)
            log(f"done in {result.elapsed_s:.1f} s" + (f" ({board.label})" if board.simulated else ""))
            _compare_with_the_twin(board, result, mode, log)
        if meter is not None and not meter.available:
            log(meter.reason)
        return profile
    finally:
        board.close()


def _compare_with_the_twin(board, result, mode: str, log) -> None:
    """On the twin: the measured (simulated) rooflines next to the twin's own, as ratios."""
    if board.twin is None:
        return
    for prec, p in result.precisions.items():
        own = board.twin.roofline(mode, prec)
        parts = [f"peak {p['peak_flops'] / float(own.peak_flops):.3f}", f"bandwidth {p['bandwidth'] / float(own.bandwidth):.3f}"]
        if p.get("eps_flop") is not None:
            parts += [f"eps_flop {p['eps_flop'] / float(own.eps_flop):.3f}", f"eps_mop {p['eps_mop'] / float(own.eps_mop):.3f}"]
        log(f"  {mode} {prec}: measured / the twin's own roofline: " + ", ".join(parts) + f" ({board.label})")


# ------------------------------------------------------------------------------------------ models
def _model_layers(spec: str, batch_size: int | None):
    """Build the model named by ``spec`` (the one loader of every command, ``cli.analyze.load_model``) and return its
    LayerCost list from ``lightning_edge.analyze``."""
    from lightning_edge import analyze
    from lightning_edge.cli.analyze import load_model

    model, args, kwargs = load_model(spec, batch_size, None)
    model.eval()
    cost = analyze(model, *args, **kwargs)
    layers = [x for x in cost.layers if x.flops or x.bytes]
    print(f"model {spec}: {len(layers)} layers with work")
    return layers


# ------------------------------------------------------------------------------------------ printing
def _fmt(x, scale):
    return "-" if x is None else f"{x / scale:.4g}"


def _print_table(profile, precision):
    print(f"\n{'mode':22s} {'peak TFLOP/s':>12s} {'BW GB/s':>9s} {'beta_tau':>9s} {'beta_eps':>9s} "
          f"{'beta_eps0':>9s} {'GFLOP/J':>9s} {'GFLOP/J0':>9s}   ({precision}; 0 = without static power)")
    for row in profile.summary_table(precision):
        print(f"{row['mode']:22s} {_fmt(row['peak_flops'], 1e12):>12s} {_fmt(row['bandwidth'], 1e9):>9s} "
              f"{_fmt(row['time_balance'], 1):>9s} {_fmt(row['energy_balance_static'], 1):>9s} "
              f"{_fmt(row['energy_balance_no_static'], 1):>9s} {_fmt(row['peak_energy_efficiency_static'], 1e9):>9s} "
              f"{_fmt(row['peak_energy_efficiency_no_static'], 1e9):>9s}")
    print()


def _print_layers(layers, roof, top=10):
    import numpy as np

    if not layers:
        return
    w = np.array([float(x.flops) for x in layers])
    q = np.array([float(x.bytes) for x in layers])
    t = np.asarray(roof.time(w, q), dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        inten = np.where(q > 0, w / np.where(q > 0, q, 1), np.inf)
    bound = roof.bound(inten, static=True) if roof.has_energy and np.isfinite(roof.static_power) else roof.bound(inten)
    share = t / t.sum() if t.sum() > 0 else t
    print(f"estimated layer times on {roof.label} (roofline, label: estimated): total {t.sum() * 1e3:.3f} ms; "
          f"{int((bound.time == 'memory').sum()) if np.ndim(bound.time) else 0} of {len(layers)} layers memory-bound "
          f"in time (beta_tau {roof.time_balance:.1f} FLOP/B)")
    print(f"{'layer':40s} {'kind':14s} {'FLOP/B':>8s} {'time ms':>9s} {'share':>6s} {'bound (time/energy)':>20s}")
    for i in np.argsort(-t)[:top]:
        eb = bound.energy[i] if bound.energy is not None else "-"
        print(f"{str(layers[i].name)[:40]:40s} {str(layers[i].kind)[:14]:14s} {inten[i]:8.2f} {t[i] * 1e3:9.4f} "
              f"{share[i] * 100:5.1f}% {bound.time[i] + '/' + eb:>20s}")
    print()
