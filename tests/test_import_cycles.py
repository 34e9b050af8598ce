"""No import cycles in the package: every ``import`` (module level and inside functions, ``TYPE_CHECKING`` blocks
aside) between lightning_edge's modules, walked with ``ast``, must form a graph without cycles.

``from pkg import sub`` where ``sub`` is a module is an edge to ``pkg.sub``; importing a name defined in a package's
``__init__`` is an edge to the package. The implicit import of a parent package when a submodule is imported is not
an edge (every package would be in a cycle with its own modules)."""

from __future__ import annotations

import ast
from pathlib import Path

import lightning_edge

ROOT = Path(lightning_edge.__file__).parent

def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _targets(node: ast.AST, here: str, is_pkg: bool, mods: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = here.split(".") if is_pkg else here.split(".")[:-1]
            base = base[:len(base) - node.level + 1]
            mod = ".".join(base + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in mods]
        names = subs + ([mod] if len(subs) < len(node.names) else [])
    out = []
    for m in names:
        while m and m not in mods:
            m = m.rpartition(".")[0]
        if m and m != here:
            out.append(m)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
                for n in ast.walk(node)}
        graph[name] = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                       and id(node) not in skip for t in _targets(node, name, path.name == "__init__.py", mods)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_the_walker_finds_a_cycle_and_follows_lazy_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    g = import_graph()
    assert "lightning_edge.cost.counter" in g["lightning_edge.cost.capture"] or \
        "lightning_edge.cost.capture" in g["lightning_edge.cost.counter"]  # a top-level import is seen
    assert "lightning_edge.twin.sim_workload" in g["lightning_edge.tuning.online"]  # so is one inside a function


def test_no_import_cycles():
    found = [sorted(c) for c in cycles(import_graph())]
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
