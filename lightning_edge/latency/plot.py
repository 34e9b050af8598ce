"""Figures of generated step-wise functions against the points they were generated from (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lightning_edge.latency.stepwise import Generation

__all__ = ["plot_generation", "plot_model"]


def plot_generation(gen: Generation, path: str | Path, title: str = "") -> Path:
    """One panel per 1D generation (phase): each component's measured values at the points it chose (dots) and
    its fitted step function over the whole dimension (line). Times in ms."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    phases = gen.phases
    ncomp = sum(len(ph.fns) for ph in phases)
    cols = min(4, ncomp)
    rows = int(np.ceil(ncomp / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    k = 0
    for ph, dim in zip(phases, gen.dims):
        xs = np.asarray(dim.values, dtype=float)
        if xs.size > 2000:
            xs = xs[np.unique(np.linspace(0, xs.size - 1, 2000).round().astype(int))]
        for c, fn in enumerate(ph.fns):
            ax = axes[k // cols][k % cols]
            k += 1
            ax.plot(xs, np.asarray(fn(xs)) * 1e3, "-", lw=1, label=fn.formula(ph.dim, 3) if len(ph.fns) < 3 else None)
            ax.plot(ph.points, np.asarray(ph.values[c]) * 1e3, "o", ms=4, color="C3")
            for i, x in enumerate(ph.points):
                ax.annotate(str(i + 1), (x, ph.values[c][i] * 1e3), fontsize=6, xytext=(2, 2),
                            textcoords="offset points")
            lab = ph.labels[c] if c < len(ph.labels) else f"component {c}"
            ax.set_title(f"{lab} along {ph.dim} ({fn.shape}, w={fn.w})", fontsize=8)
            ax.set_xlabel(ph.dim, fontsize=8)
            ax.set_ylabel("ms", fontsize=8)
            ax.tick_params(labelsize=7)
    for j in range(k, rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle((title + ": " if title else "") + f"{gen.n_points} points measured, {gen.elapsed_s:.1f} s "
                 "(numbers: order chosen)", fontsize=9)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def plot_model(model, out_dir: str | Path) -> list[Path]:
    """``<out_dir>/stepwise_<class>.png`` for every generated class (a sub-box ``conv/small``: ``stepwise_conv_small.png``) of a step-wise ``LatencyModel``."""
    out = []
    for cls, gen in model.stepwise.items():
        out.append(plot_generation(gen, Path(out_dir) / f"stepwise_{cls.replace('/', '_')}.png", title=f"step-wise {cls}"))
    return out
