"""Cost records: what one op, one layer and one model cost, in FLOP, MAC and bytes.

Conventions (see docs/cost-model.md): FLOP = 2 x MAC for multiply-accumulates plus one FLOP
per output element for a bias add; bytes = every tensor read + every tensor written, at the
tensor's own element size; views move nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Cost:
    """FLOP, MAC and bytes moved by some piece of work (one op, or a sum of ops)."""

    flops: int = 0
    macs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte moved (inf when nothing moves, 0 when no FLOP)."""
        if self.bytes == 0:
            return math.inf if self.flops else 0.0
        return self.flops / self.bytes

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.flops + other.flops,
            self.macs + other.macs,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
        )

    def __iadd__(self, other: Cost) -> Cost:
        self.flops += other.flops
        self.macs += other.macs
        self.bytes_read += other.bytes_read
        self.bytes_written += other.bytes_written
        return self

    def to_dict(self) -> dict:
        return {
            "flops": self.flops,
            "macs": self.macs,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "bytes": self.bytes,
            "intensity": _finite(self.intensity),
        }


def _finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else x


class Totals:
    """``flops``, ``macs``, ``bytes_read``, ``bytes_written``, ``bytes`` and ``intensity`` of ``self.total``
    (forward + backward): a layer's, or a whole model's."""

    @property
    def total(self) -> Cost:
        """Forward + backward (the subclass's)."""
        raise NotImplementedError

    @property
    def flops(self) -> int:
        return self.total.flops

    @property
    def macs(self) -> int:
        return self.total.macs

    @property
    def bytes_read(self) -> int:
        return self.total.bytes_read

    @property
    def bytes_written(self) -> int:
        return self.total.bytes_written

    @property
    def bytes(self) -> int:
        return self.total.bytes

    @property
    def intensity(self) -> float:
        return self.total.intensity


@dataclass(frozen=True)
class KernelCost:
    """One GPU kernel an op runs, as the counter saw it (``LayerCost.kernels`` counts them): the per-op detail the
    twin times kernel by kernel (``docs/twin.md``, section 3).

    ``op``: the aten op (``mm``, ``_scaled_dot_product_flash_attention_for_cpu``, ``convolution_backward``...);
    ``backward``: run by the backward pass; ``flops`` and ``bytes`` (read + written) of this kernel; ``depth``: its
    reduction depth, the multiply-accumulates per output element (``K`` of a matmul, ``C_in/groups x k x k`` of a
    convolution, the head dimension of fused attention; 0 for a kernel that reduces nothing); ``dtype``: the dtype
    it computes in (an autocast matmul's ``bfloat16``, its fp32 neighbours' ``float32``); ``internal``: issued from
    C++ without a Python-level dispatch (the input and weight casts autocast inserts)."""

    op: str
    backward: bool
    flops: int
    bytes: int
    depth: float = 0.0
    dtype: str = "float32"
    internal: bool = False


@dataclass
class LayerCost(Totals):
    """The cost of one module's own work (ops run directly inside it, not in its children).

    ``forward`` and ``backward`` are kept apart; the flat attributes (``flops``, ``bytes`` ...)
    are their sum. ``ops`` counts the aten ops attributed to the layer, by name; ``kernels`` counts the
    :class:`KernelCost` of each (identical kernels once, with their count; empty for a cost built by hand).
    """

    name: str
    kind: str
    params: int = 0
    forward: Cost = field(default_factory=Cost)
    backward: Cost = field(default_factory=Cost)
    calls: int = 0
    ops: Counter = field(default_factory=Counter)
    kernels: Counter = field(default_factory=Counter)

    @property
    def total(self) -> Cost:
        return self.forward + self.backward

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "params": self.params,
            "calls": self.calls,
            **self.total.to_dict(),
            "forward": self.forward.to_dict(),
            "backward": self.backward.to_dict(),
            "ops": dict(self.ops),
        }
