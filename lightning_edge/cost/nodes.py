"""Which module owns an autograd node: one rule for the cost counter (backward FLOP) and the timing hooks (backward time).

A node belongs to the innermost module call that created it. A call notes the autograd sequence number when it
starts (:func:`mark`); when it returns, :func:`claim_nodes` walks back from its outputs' ``grad_fn`` over the nodes
created since (sequence number at least the mark; a leaf's ``AccumulateGrad`` counts as new) and claims those not
owned yet. Inner calls return first and claim first. So an op a module runs between its children's calls is its own,
however a child later receives the result (positionally, by keyword, through an attribute), just as the op's forward
is charged to the module running it; nodes made outside every module (input preprocessing, the loss) are nobody's.
"""

from __future__ import annotations

from typing import Any

from torch._C._autograd import _get_sequence_nr as mark

__all__ = ["mark", "claim_nodes"]


def claim_nodes(roots: Any, since: int, owner: dict[int, Any], value: Any, below: dict[int, list]) -> list:
    """Record ``owner[id(node)] = value`` for every node reachable from ``roots`` (``grad_fn`` objects, ``None``
    allowed) that was created at or after the sequence number ``since`` and has no owner yet; return those nodes
    (keep them alive while ``owner`` is in use, so their ids stay unique). The walk stops at older nodes (history
    from before the call) and goes on under nodes owned already (an inner call's): ``below``, shared by all the
    claims of a run, maps each claimed node to the older nodes its call stopped at, so an outer call jumps there
    instead of walking the inner call's nodes again."""
    claimed: list = []
    older: list = []
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
            todo.extend(below.get(key, ()))
        else:
            owner[key] = value
            claimed.append(node)
            todo.extend(n for n, _ in node.next_functions if n is not None)
    below.update(dict.fromkeys(map(id, claimed), older))
    return claimed
