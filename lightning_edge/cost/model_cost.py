"""ModelCost: a whole model's cost, per layer, with totals, a readable table and JSON."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lightning_edge.cost.types import Cost, LayerCost, Totals


def human(n: float, unit: str = "") -> str:
    """1.23G-style number (SI prefixes)."""
    for div, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.2f}{p}{unit}"
    return f"{n:.0f}{unit}" if float(n).is_integer() else f"{n:.2f}{unit}"


@dataclass
class ModelCost(Totals):
    """Per-layer costs (``layers``, in execution order) and their totals.

    ``uncounted`` counts the aten ops that ran with no formula (they count as zero: look at it).
    """

    layers: list[LayerCost]
    uncounted: Counter = field(default_factory=Counter)
    training: bool = False
    fold_bn: bool = False
    dtype: str = "float32"
    model: str = ""
    inputs: list[tuple] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    autocast: str | None = None  # the autocast dtype matmuls/convolutions/attention were counted at

    # -- totals (flops, macs, bytes and intensity: of ``total``, see Totals) ------------------
    @property
    def forward(self) -> Cost:
        return sum((lc.forward for lc in self.layers), Cost())

    @property
    def backward(self) -> Cost:
        return sum((lc.backward for lc in self.layers), Cost())

    @property
    def total(self) -> Cost:
        return self.forward + self.backward

    @property
    def params(self) -> int:
        return sum(lc.params for lc in self.layers)

    def layer(self, name: str) -> LayerCost:
        for lc in self.layers:
            if lc.name == name:
                return lc
        raise KeyError(f"no layer named {name!r}; layers are named as in model.named_modules(), "
                       f"e.g. {[lc.name for lc in self.layers[:3]]}")

    # -- output ----------------------------------------------------------------------------
    def table(self, top: int | None = None, sort: str | None = None) -> str:
        """A readable per-layer table: name, kind, params, FLOP, bytes, intensity.

        ``sort`` = "flops" | "bytes" orders by that column (default: execution order);
        ``top`` keeps the first N rows.
        """
        rows = list(self.layers)
        if sort:
            if sort not in ("flops", "bytes", "macs", "params"):
                raise ValueError(f"sort must be one of flops, bytes, macs, params; got {sort!r}")
            rows.sort(key=lambda lc: getattr(lc, sort), reverse=True)
        if top is not None:
            rows = rows[:top]
        head = ("layer", "kind", "params", "FLOP", "bytes", "FLOP/B")
        body = [
            (lc.name or "(root)", lc.kind, human(lc.params), human(lc.flops), human(lc.bytes, "B"),
             f"{lc.intensity:.1f}" if lc.bytes else "-")
            for lc in rows
        ]
        body.append(("TOTAL", self.model, human(self.params), human(self.flops), human(self.bytes, "B"),
                     f"{self.intensity:.2f}"))
        widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
        name_w = min(widths[0], 48)
        widths[0] = name_w

        def fmt(r):
            name = r[0] if len(r[0]) <= name_w else "..." + r[0][-(name_w - 3):]
            return "  ".join([name.ljust(name_w), r[1].ljust(widths[1])] +
                             [c.rjust(w) for c, w in zip(r[2:], widths[2:])])

        mode = "training (forward + backward)" if self.training else "inference (forward)"
        amp = f" (autocast {self.autocast})" if self.autocast else ""
        lines = [f"{self.model}: {mode}, {self.dtype}{amp}, inputs {self.inputs}" +
                 (", BatchNorm folded" if self.fold_bn else "") + " (estimated from shapes, nothing run)",
                 fmt(head), "-" * len(fmt(head))]
        lines += [fmt(r) for r in body[:-1]]
        lines += ["-" * len(fmt(head)), fmt(body[-1])]
        if self.uncounted:
            lines.append("uncounted ops (no formula, counted as zero): " +
                         ", ".join(f"{k} x{v}" for k, v in sorted(self.uncounted.items())))
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict:
        return {
            "schema": "lightning_edge.model_cost",
            "version": 1,
            "label": "estimated",  # analytical counts from shapes, not measured counters
            "model": self.model,
            "training": self.training,
            "fold_bn": self.fold_bn,
            "dtype": self.dtype,
            "autocast": self.autocast,
            "inputs": [list(s) for s in self.inputs],
            "params": self.params,
            **self.total.to_dict(),
            "forward": self.forward.to_dict(),
            "backward": self.backward.to_dict(),
            "uncounted": dict(self.uncounted),
            "notes": list(self.notes),
            "layers": [lc.to_dict() for lc in self.layers],
        }

    def to_json(self, path: str | Path | None = None, indent: int = 1) -> str:
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:  # atomically, never through a link nor over a file that is not JSON (a crash mid-write keeps the old file)
            from lightning_edge._jsonfile import is_json_file, write_file

            write_file(path, text, lambda why: ValueError(f"{path}: {why}"), ours=is_json_file, what="JSON file")
        return text
