"""Which module owns an autograd node: one rule for the cost counter (backward FLOP) and the timing hooks (time).

A node is the innermost module call's that created it: a call notes the autograd sequence number as it starts
(:func:`mark`) and, as it returns, claims the unowned nodes made since (:func:`claim_nodes`; a leaf's
``AccumulateGrad`` counts as new). Inner calls return first, so claim first. An op a module runs itself is its own
however a child receives the result (positionally, by keyword, through an attribute), as the op's forward is;
nodes made outside every module (input preprocessing, the loss) are nobody's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from lightning_edge._torchcompat import autograd_sequence_nr as mark

if TYPE_CHECKING:
    from torch.autograd.graph import Node

__all__ = ["mark", "claim_nodes"]

_Owner = TypeVar("_Owner")


def claim_nodes(roots: Iterable[Node | None], since: int, owner: dict[int, _Owner], value: _Owner,
                memo: dict[int, tuple]) -> list[Node]:
    """``owner[id(node)] = value`` for each unowned node reachable from ``roots`` (``grad_fn``s, ``None`` allowed)
    made at or after the sequence number ``since``; returns them. The walk stops at older nodes and goes on under
    owned ones (an inner call's) by jumping to where that call stopped. ``memo``, shared by a run's claims, holds
    each claimed node (alive, so ids stay unique while ``owner`` is used) and that list."""
    claimed: list[Node] = []
    older: list[Node] = []
    seen: set[int] = set()
    todo = [r for r in roots if r is not None]
    while todo:
        node = todo.pop()
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        if node._sequence_nr() < since:
            older.append(node)
        elif key in owner:
            todo.extend(memo[key][1] if key in memo else ())
        else:
            owner[key] = value
            claimed.append(node)
            todo.extend(n for n, _ in node.next_functions if n is not None)
    memo.update((id(n), (n, older)) for n in claimed)
    return claimed
