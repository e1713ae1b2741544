"""Integer-indexed edge arrays behind the solvers (private).

networkx graphs are convenient at the API but slow in inner loops; the solvers work on node
indices ``0..n-1`` and parallel numpy edge arrays, converted once (O(V + E)).
:func:`index_instance` is that conversion plus the defaults and checks every Steiner entry point
(:func:`selector.solve`, :func:`selector.dual_ascent_bound`) applies.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Optional

import networkx as nx
import numpy as np

from selector.ocgraph import check_cost


@dataclass
class IndexedGraph:
    nodes: list                 # index -> node id
    root: int
    terminals: np.ndarray       # node indices, no duplicates, root excluded
    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray
    _out: Optional[list] = field(default=None, repr=False)
    _in: Optional[list] = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.nodes)

    @classmethod
    def from_networkx(cls, G: nx.DiGraph, root: Hashable, terminals: Iterable[Hashable],
                      *, weight: str = "weight") -> "IndexedGraph":
        if root not in G:
            raise ValueError(f"root {root!r} is not a node of the graph")
        nodes = list(G.nodes)
        index = {v: i for i, v in enumerate(nodes)}
        term: list[int] = []
        seen = set()
        for t in terminals:
            if t not in index:
                raise ValueError(f"terminal {t!r} is not a node of the graph")
            i = index[t]
            if i != index[root] and i not in seen:
                seen.add(i)
                term.append(i)
        m = G.number_of_edges()
        src = np.empty(m, dtype=np.int64)
        dst = np.empty(m, dtype=np.int64)
        w = np.empty(m, dtype=np.float64)
        for e, (u, v, data) in enumerate(G.edges(data=True)):
            if weight not in data:
                raise ValueError(f"edge {u!r} -> {v!r} has no {weight!r} attribute")
            w[e] = check_cost(data[weight], f"{u!r} -> {v!r}")
            src[e] = index[u]
            dst[e] = index[v]
        return cls(nodes, index[root], np.asarray(term, dtype=np.int64), src, dst, w)

    # -- adjacency -------------------------------------------------------------------------
    def out_adj(self) -> list[list[tuple[int, float, int]]]:
        """out_adj()[u] = [(v, w, edge index), ...]"""
        if self._out is None:
            self._out = self._adjacency(self.src, self.dst)
        return self._out

    def in_adj(self) -> list[list[tuple[int, float, int]]]:
        """in_adj()[v] = [(u, w, edge index), ...]"""
        if self._in is None:
            self._in = self._adjacency(self.dst, self.src)
        return self._in

    def _adjacency(self, tail: np.ndarray, head: np.ndarray) -> list[list[tuple[int, float, int]]]:
        """adj[tail[e]] lists (head[e], w[e], e) for every edge e, in edge order."""
        adj: list[list] = [[] for _ in range(self.n)]
        for e, (a, b, w) in enumerate(zip(tail.tolist(), head.tolist(), self.w.tolist())):
            adj[a].append((b, w, e))
        return adj

    def terminal_mask(self, *, root: bool = False) -> np.ndarray:
        """Boolean node mask of the terminals (and the root when ``root``)."""
        mask = np.zeros(self.n, dtype=bool)
        mask[self.terminals] = True
        if root:
            mask[self.root] = True
        return mask

    def edge_pairs(self, edges: Iterable[int]) -> list[tuple[Hashable, Hashable]]:
        """``(tail, head)`` node ids of the given edge indices."""
        return [(self.nodes[self.src[e]], self.nodes[self.dst[e]]) for e in edges]

    def reach(self, sources: Sequence[int], *, reverse: bool = False,
              edge_mask: Optional[np.ndarray] = None) -> np.ndarray:
        """Boolean mask of nodes reachable from ``sources`` (against edge direction if ``reverse``).

        Frontier expansion over the edge arrays: O(E · depth) numpy work.
        """
        a, b = (self.dst, self.src) if reverse else (self.src, self.dst)
        if edge_mask is not None:
            a, b = a[edge_mask], b[edge_mask]
        seen = np.zeros(self.n, dtype=bool)
        seen[np.asarray(sources, dtype=np.int64)] = True
        while True:
            hit = seen[a] & ~seen[b]
            if not hit.any():
                return seen
            seen[b[hit]] = True

    def unreachable_terminals(self) -> list:
        seen = self.reach([self.root])
        return [self.nodes[t] for t in self.terminals.tolist() if not seen[t]]

    def subgraph(self, keep_nodes: np.ndarray, edge_mask: Optional[np.ndarray] = None
                 ) -> tuple["IndexedGraph", np.ndarray, np.ndarray]:
        """Induced subgraph on ``keep_nodes`` (bool mask) further restricted by ``edge_mask``.

        Returns (subgraph, old index of each new node, old index of each new edge).
        """
        old_nodes = np.nonzero(keep_nodes)[0]
        new_index = np.full(self.n, -1, dtype=np.int64)
        new_index[old_nodes] = np.arange(len(old_nodes))
        em = keep_nodes[self.src] & keep_nodes[self.dst]
        if edge_mask is not None:
            em &= edge_mask
        old_edges = np.nonzero(em)[0]
        term = self.terminals[keep_nodes[self.terminals]]
        sub = IndexedGraph(
            nodes=[self.nodes[i] for i in old_nodes.tolist()],
            root=int(new_index[self.root]),
            terminals=new_index[term],
            src=new_index[self.src[old_edges]],
            dst=new_index[self.dst[old_edges]],
            w=self.w[old_edges],
        )
        return sub, old_nodes, old_edges


def index_instance(G: nx.DiGraph, root: Optional[Hashable], terminals: Optional[Iterable[Hashable]],
                   weight: str) -> tuple[IndexedGraph, Hashable]:
    """``G`` as an :class:`IndexedGraph` with its root (default ``G.graph["root"]``) and terminals
    (default ``G.graph["terminals"]``); ValueError naming any terminal the root cannot reach."""
    if root is None:
        root = G.graph.get("root")
        if root is None:
            raise ValueError("no root given and the graph has no 'root' graph attribute")
    if terminals is None:
        terminals = G.graph.get("terminals")
        if terminals is None:
            raise ValueError("no terminals given and the graph has no 'terminals' graph attribute")
    g = IndexedGraph.from_networkx(G, root, terminals, weight=weight)
    missing = g.unreachable_terminals()
    if missing:
        raise ValueError(f"terminal{'s' if len(missing) > 1 else ''} not reachable from root {root!r}: "
                         + ", ".join(map(repr, missing)))
    return g, root
