"""Roofline pictures: the time roofline and the energy roofline side by side (Pagoda figs. 3, 6, 9, 13).

Left: attainable FLOP/s against arithmetic intensity (log-log), one line per mode, the time balance
point beta_tau marked. Right: energy efficiency FLOP/J against intensity, with static power (solid)
and without (dashed), energy balance points beta_eps marked. Layers, when given, are points sized
and shaded by their share of the run time (Pagoda fig. 13: darker = more time); a layer with a
measured ``time_s`` is placed at its achieved FLOP/s, otherwise on the roof (an estimate).

Uses matplotlib's Agg backend through ``matplotlib.figure.Figure`` (no display, no pyplot state),
and returns the Figure so callers can save it, log it to TensorBoard (``add_figure``) or close it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_edge.roofline.model import Roofline

__all__ = ["plot_rooflines", "layer_points"]

_COLORS = ["#1f4e9c", "#d2691e", "#2e8b57", "#8b008b", "#b22222", "#008b8b", "#6b6b00", "#444444"]


def _get(obj, name, default=None):
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def layer_points(layers: Sequence[Any], roofline: Roofline | None = None) -> dict[str, np.ndarray]:
    """Per-layer arrays for plotting: name, kind, flops, bytes, intensity, time_s, share, measured.

    ``layers`` are LayerCost-like objects or dicts with ``flops`` and ``bytes`` and optionally
    ``time_s`` (measured), ``time_share`` (0..1) and ``energy_j``. Layers with no FLOP or no bytes
    cannot be placed on a log axis and are dropped. Missing times are estimated with ``roofline``.
    """
    rows = []
    for i, layer in enumerate(layers):
        w = float(_get(layer, "flops", 0) or 0)
        q = float(_get(layer, "bytes", 0) or 0)
        if w <= 0 or q <= 0:
            continue
        t = _get(layer, "time_s")
        rows.append((str(_get(layer, "name", f"layer{i}")), str(_get(layer, "kind", "")), w, q,
                     float(t) if t is not None else math.nan, _get(layer, "time_share"), _get(layer, "energy_j")))
    if not rows:
        return {k: np.array([]) for k in ("name", "kind", "flops", "bytes", "intensity", "time_s", "share",
                                          "measured", "energy_j")}
    name, kind, w, q, t, share, e = zip(*rows)
    w, q, t = np.array(w), np.array(q), np.array(t)
    measured = np.isfinite(t)
    if roofline is not None and (~measured).any():
        est = np.asarray(roofline.time(w, q), dtype=float)
        t = np.where(measured, t, est)
    share_arr = np.array([np.nan if s is None else float(s) for s in share])
    if np.isnan(share_arr).any():
        total = np.nansum(t)
        share_arr = np.where(np.isnan(share_arr), t / total if total > 0 else 1.0 / len(t), share_arr)
    return {
        "name": np.array(name, dtype=object), "kind": np.array(kind, dtype=object), "flops": w, "bytes": q,
        "intensity": w / q, "time_s": t, "share": share_arr, "measured": measured,
        "energy_j": np.array([np.nan if x is None else float(x) for x in e]),
    }


def _fmt_si(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def plot_rooflines(rooflines: Roofline | Mapping[str, Roofline], layers: Sequence[Any] | None = None,
                   path: str | Path | None = None, static: str | bool = "both", title: str | None = None,
                   intensity_range: tuple[float, float] | None = None, dpi: int = 130, annotate: int = 5,
                   times: str | None = None):
    """Draw time and energy rooflines of one or more modes, optionally with layers as points.

    Args:
        rooflines: a Roofline or ``{label: Roofline}`` (single-mode rooflines; an array Roofline is split).
        layers: LayerCost-like objects (``flops``, ``bytes``, optional ``time_s``/``time_share``/``energy_j``),
            placed using the first roofline where a time or energy must be estimated.
        path: write a PNG there when given.
        static: ``"both"`` (with and without static power), ``True`` (with only) or ``False`` (without only).
        title: figure title.
        intensity_range: (min, max) FLOP/B of the x axis; default spans the balance points and the layers.
        annotate: label the names of the this many layers with the largest time share.
        times: what the given layer times are, for the note in the time panel (default ``measured``), e.g.
            ``"simulated (the twin's model)"``.

    Returns the ``matplotlib.figure.Figure`` (two axes: time roofline, energy roofline).
    """
    from matplotlib.figure import Figure  # Agg canvas by default when saving; no pyplot, no display

    roofs = _as_dict(rooflines)
    if static not in ("both", True, False):
        raise ValueError(f"static: expected 'both', True or False, got {static!r}")
    variants = [True, False] if static == "both" else [bool(static)]

    pts = layer_points(layers, next(iter(roofs.values()))) if layers else None
    lo, hi = _x_range(roofs, pts, intensity_range)
    x = np.logspace(math.log10(lo), math.log10(hi), 400)

    fig = Figure(figsize=(13, 5.2), dpi=dpi, layout="constrained")
    ax_t, ax_e = fig.subplots(1, 2)
    fig.suptitle(title or "Time and energy rooflines", fontsize=12)

    # ---- time roofline
    for k, (label, r) in enumerate(roofs.items()):
        c = _COLORS[k % len(_COLORS)]
        b = float(r.time_balance)
        ax_t.plot(x, np.asarray(r.attainable(x)) / 1e9, color=c, lw=2,
                  label=f"{label}: {_fmt_si(float(r.peak_flops), 'FLOP/s')}, {_fmt_si(float(r.bandwidth), 'B/s')}, "
                        f"β_τ={b:.1f}")
        ax_t.axvline(b, color=c, ls=":", lw=1)
        ax_t.plot([b], [float(r.peak_flops) / 1e9], "o", color=c, ms=6, zorder=4)
    ax_t.set_xscale("log")
    ax_t.set_yscale("log")
    ax_t.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax_t.set_ylabel("attainable performance (GFLOP/s)")
    ax_t.set_title("time roofline (Pagoda eq. 1)", fontsize=10)
    ax_t.grid(True, which="both", alpha=0.25)

    # ---- energy roofline
    has_energy = False
    for k, (label, r) in enumerate(roofs.items()):
        c = _COLORS[k % len(_COLORS)]
        for with_static in variants:
            if not r.has_energy or (with_static and not np.isfinite(r.static_power).all()):
                continue
            has_energy = True
            ls = "-" if with_static else "--"
            tag = f"π0={float(r.static_power):.3g} W" if with_static else "no static"
            be = float(r.energy_balance(static=with_static))
            ye = float(r.efficiency(be, static=with_static)) / 1e9
            ax_e.plot(x, np.asarray(r.efficiency(x, static=with_static)) / 1e9, color=c, ls=ls,
                      lw=2 if with_static else 1.4, alpha=1.0 if with_static else 0.75,
                      label=f"{label} ({tag}), β_ε={be:.1f}")
            ax_e.plot([be], [ye], "s" if with_static else "D", color=c, ms=6, mfc=c if with_static else "white",
                      zorder=4)
        if r.has_energy:
            ax_e.axvline(float(r.time_balance), color=c, ls=":", lw=1)
    ax_e.set_xscale("log")
    ax_e.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax_e.set_ylabel("energy efficiency (GFLOP/J)")
    ax_e.set_title("energy roofline (Pagoda eqs. 3, 7, 8)", fontsize=10)
    ax_e.grid(True, which="both", alpha=0.25)
    if has_energy:
        ax_e.set_yscale("log")
    else:
        ax_e.set_xlim(lo, hi)
        ax_e.set_yticks([])
        ax_e.text(0.5, 0.5, "no energy coefficients\n(measured without a power sensor:\n"
                  "the energy roofline needs INA3221, NVML or RAPL)", ha="center", va="center",
                  transform=ax_e.transAxes, fontsize=10, color="#555555")

    # ---- layers
    if pts is not None and len(pts["flops"]):
        sizes = 20 + 380 * pts["share"] / max(pts["share"].max(), 1e-12)
        perf = pts["flops"] / pts["time_s"] / 1e9
        order = np.argsort(pts["share"])  # big points last, on top
        style = {"s": sizes[order], "c": pts["share"][order], "cmap": "Greys", "vmin": 0,
                 "vmax": max(pts["share"].max(), 1e-12), "edgecolors": "black", "linewidths": 0.6, "alpha": 0.85,
                 "zorder": 3}
        sc = ax_t.scatter(pts["intensity"][order], perf[order], label="layers (size, shade: time share)", **style)
        fig.colorbar(sc, ax=ax_t, label="share of run time", shrink=0.8, pad=0.01)
        eroof = next((r for r in roofs.values() if r.has_energy), None)
        if eroof is not None:
            e = pts["energy_j"]
            est_e = np.asarray(eroof.energy(pts["flops"], pts["bytes"], time_s=pts["time_s"],
                                            static=bool(np.isfinite(eroof.static_power).all())), dtype=float)
            # a layer sits at the same time in both panels: its given energy goes with its given (measured or
            # simulated) time; a layer placed on the roof (no time of the device) gets the roof's energy for it
            e = np.where(np.isfinite(e) & pts["measured"], e, est_e)
            ax_e.scatter(pts["intensity"][order], (pts["flops"] / e / 1e9)[order], **style)
        offsets = [(-12, 10), (12, -16), (-12, -16), (12, 10)]
        for j, i in enumerate(np.argsort(-pts["share"])[: max(0, annotate)]):
            dx, dy = offsets[j % len(offsets)]
            ax_t.annotate(str(pts["name"][i]), (pts["intensity"][i], perf[i]), textcoords="offset points",
                          xytext=(dx, dy), ha="right" if dx < 0 else "left", fontsize=7, color="#222222",
                          bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.7},
                          arrowprops={"arrowstyle": "-", "color": "#888888", "lw": 0.6})
        given = times or "measured"
        kind = given if pts["measured"].all() else ("estimated" if not pts["measured"].any() else
                                                     f"{given} where known, else estimated")
        ax_t.text(0.99, 0.01, f"layer times: {kind}", transform=ax_t.transAxes, ha="right", va="bottom",
                  fontsize=7, color="#555555")

    ax_t.set_xlim(lo, hi)
    ax_e.set_xlim(lo, hi)
    ax_t.legend(fontsize=7.5, loc="lower right", bbox_to_anchor=(1.0, 0.05), framealpha=0.9)
    if has_energy:
        ax_e.legend(fontsize=7.5, loc="lower right", framealpha=0.85)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    return fig


def _as_dict(rooflines) -> dict[str, Roofline]:
    if isinstance(rooflines, Roofline):
        if rooflines.shape:
            labels = rooflines.label if isinstance(rooflines.label, tuple) else None
            return {(labels[i] if labels else str(i)): rooflines[i] for i in range(len(rooflines))}
        return {str(rooflines.label or "roofline"): rooflines}
    if not isinstance(rooflines, Mapping) or not rooflines:
        raise ValueError("plot_rooflines: expected a Roofline or a non-empty {label: Roofline} dict, "
                         f"got {type(rooflines).__name__}")
    out = {}
    for label, r in rooflines.items():
        if not isinstance(r, Roofline):
            raise ValueError(f"plot_rooflines: {label!r} is a {type(r).__name__}, expected a Roofline")
        if r.shape:
            out.update({f"{label}[{i}]": r[i] for i in range(len(r))})
        else:
            out[str(label)] = r
    return out


def _x_range(roofs, pts, given):
    if given is not None:
        lo, hi = given
        if not (0 < lo < hi):
            raise ValueError(f"intensity_range: expected 0 < min < max FLOP/B, got {given!r}")
        return float(lo), float(hi)
    marks = [float(r.time_balance) for r in roofs.values()]
    marks.append(min(marks) / 30)   # two decades of the memory-bound slope below the lowest balance point
    for r in roofs.values():
        if r.has_energy:
            marks.append(float(r.energy_balance(static=False)))
    if pts is not None and len(pts["intensity"]):
        marks += [float(pts["intensity"].min()), float(pts["intensity"].max())]
    lo = 10 ** math.floor(math.log10(max(min(marks) / 3, 1e-4)))
    hi = 10 ** math.ceil(math.log10(max(marks) * 3))
    return lo, hi
