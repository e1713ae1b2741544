"""Trees on an :class:`~selector.solvers.indexed.IndexedGraph` as parent-edge arrays (private).

The Steiner solvers (:mod:`selector.solvers.heuristic`, :mod:`selector.solvers.mip`,
:mod:`selector.solvers.steiner`) represent a tree by ``pe``: for every node index, the index of the edge
entering it, or -1 for the root and for nodes outside the tree.  These helpers cost, re-solve,
prune and check such trees; all are O(V + E) numpy work except :func:`arborescence_on` (Edmonds,
O(V·E) worst case) and :func:`is_tree` (O(|T|·V) in Python).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Optional

import numpy as np

from selector.solvers.indexed import IndexedGraph
from selector.solvers.arborescence import Unreachable, edmonds

__all__ = ["EPS", "improves", "meets", "tree_cost", "parents", "prune_leaves", "arborescence_on",
           "terminals_only_tree", "keep_rooted", "is_tree", "tree_pairs"]

#: Relative tolerance for cost comparisons.
EPS = 1e-9


def improves(new: float, old: float) -> bool:
    """``new`` is a real improvement on ``old`` (by more than the relative tolerance)."""
    return new < old - EPS * max(1.0, old)


def meets(cost: float, bound: float) -> bool:
    """A tree of ``cost`` is optimal given the lower ``bound`` (within the relative tolerance)."""
    return cost <= bound + EPS * max(1.0, cost)


def tree_cost(g: IndexedGraph, pe: np.ndarray) -> float:
    return float(g.w[pe[pe >= 0]].sum())


def parents(g: IndexedGraph, pe: np.ndarray) -> np.ndarray:
    """Parent node index of every tree node, -1 for the root and nodes outside the tree."""
    parent = np.full(g.n, -1, dtype=np.int64)
    m = pe >= 0
    parent[m] = g.src[pe[m]]
    return parent


def prune_leaves(g: IndexedGraph, pe: np.ndarray) -> np.ndarray:
    """Drop non-terminal leaves repeatedly (never raises the cost; weights are non-negative)."""
    pe = pe.copy()
    is_term = g.terminal_mask(root=True)
    while True:
        in_tree = pe >= 0
        children = np.bincount(g.src[pe[in_tree]], minlength=g.n)
        drop = in_tree & ~is_term & (children == 0)
        if not drop.any():
            return pe
        pe[drop] = -1


def arborescence_on(g: IndexedGraph, nodes: np.ndarray) -> Optional[np.ndarray]:
    """Optimal tree spanning exactly the node mask ``nodes`` (root included), None if impossible."""
    nodes = nodes.copy()
    nodes[g.root] = True
    sub, old_nodes, old_edges = g.subgraph(nodes)
    try:
        chosen = edmonds(sub.n, sub.root, sub.src, sub.dst, sub.w)
    except Unreachable:
        return None
    pe = np.full(g.n, -1, dtype=np.int64)
    e = old_edges[chosen]
    pe[g.dst[e]] = e
    return pe


def terminals_only_tree(g: IndexedGraph) -> Optional[np.ndarray]:
    """The optimal tree on root + terminals (no Steiner node), None if some terminal needs one."""
    return arborescence_on(g, g.terminal_mask())


def keep_rooted(g: IndexedGraph, pe: np.ndarray) -> np.ndarray:
    """``pe`` restricted to the nodes that hang off the root (drops e.g. free-floating cycles)."""
    parent = parents(g, pe)
    keep = np.zeros(g.n, dtype=bool)
    keep[g.root] = True
    changed = True
    while changed:
        nxt = keep | ((parent >= 0) & keep[np.maximum(parent, 0)])
        changed = bool((nxt != keep).any())
        keep = nxt
    pe = pe.copy()
    pe[~keep] = -1
    return pe


def is_tree(g: IndexedGraph, pe: np.ndarray) -> bool:
    """Every terminal reaches the root through parent edges without cycles."""
    parent = parents(g, pe)
    for t in g.terminals.tolist():
        v, steps = t, 0
        while v != g.root:
            v = int(parent[v])
            steps += 1
            if v < 0 or steps > g.n:
                return False
    return True


def tree_pairs(g: IndexedGraph, pe: np.ndarray) -> list[tuple[Hashable, Hashable]]:
    """The tree's edges as ``(parent, child)`` node ids, in child-index order."""
    return g.edge_pairs(pe[pe >= 0].tolist())
