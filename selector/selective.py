"""Selective Tuning (Yu et al., TVM RFC #4188), the paper's baseline for operator sets (section 7.2).

ST clusters operators by the overlap of their tuning spaces and tunes one representative per
cluster with the backend; every other member applies the representative's top programs (TopK,
:mod:`tuner.reuse.topk`). Unlike ETO's OC graph it has no bridges, no chains (a member only reuses its
cluster's representative) and no cost model: the clusters follow from a similarity threshold.

* :func:`similarity_rate` -- ST's similarity rate of two operators: the product over knobs of
  |overlap| / |union| of the knob's choices. MetaSchedule's knobs are its multi-level tile splits,
  one per loop; a split's choices are its inner factors (the outermost takes what is left), which
  must divide the loop's extent, so both sets and their overlap are counted in closed form.
* :func:`selective_clusters` -- ST's clustering: edges where the rate is at least the threshold
  (0.01, as in ST and the paper), maximal cliques as clusters, an operator in several cliques
  moved to the one it is most similar to, the member most similar to the rest representing each.
* :func:`selective_plan` -- the clusters as a :class:`~selector.Plan`, so ST runs on the same
  pipeline as ETO's plans.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import lru_cache

import networkx as nx

from selector.loopnest import LoopNestOp
from selector.ocgraph import ROOT
from selector.select import Plan, PlanEdge
from selector.solvers.solution import TreeSolution

__all__ = ["SIMILARITY_THRESHOLD", "similarity_rate", "selective_clusters", "selective_plan"]

#: ST's threshold (and the paper's): operators at least this similar are joined by an edge.
SIMILARITY_THRESHOLD = 0.01
#: (space, reduction) tile levels of MetaSchedule's multi-level tiling on CPU ("SSRSRS").
CPU_LEVELS = (4, 2)


@lru_cache(maxsize=4096)
def split_choices(extent: int, levels: int) -> int:
    """How many ways a loop of ``extent`` splits into ``levels`` tiles, the outermost taking the rest.

    Inner factors whose product divides the extent: Piltz's divisor function d_levels(extent),
    the product over prime powers p^e of C(e + levels - 1, levels - 1). O(sqrt(extent)).
    """
    count, n, p = 1, extent, 2
    while p * p <= n:
        e = 0
        while n % p == 0:
            n, e = n // p, e + 1
        count *= math.comb(e + levels - 1, levels - 1)
        p += 1
    if n > 1:
        count *= levels
    return count


def similarity_rate(a: LoopNestOp, b: LoopNestOp, *, levels: tuple[int, int] = CPU_LEVELS) -> float:
    """ST's similarity rate: Π over loops of |choices(a) ∩ choices(b)| / |choices(a) ∪ choices(b)|.

    0 for operators of different reuse classes (type, sketch set, loop counts): ST compares only
    tasks of one template. A split's shared choices are those whose product divides both extents,
    i.e. their gcd. O(loops x sqrt(extent)).
    """
    if a.reuse_class != b.reuse_class:
        return 0.0
    rate = 1.0
    for n, extents in ((levels[0], zip(a.space, b.space)), (levels[1], zip(a.reduction, b.reduction))):
        for x, y in extents:
            both = split_choices(math.gcd(x, y), n)
            rate *= both / (split_choices(x, n) + split_choices(y, n) - both)
    return rate


def selective_clusters(ops: Sequence[LoopNestOp], *, threshold: float = SIMILARITY_THRESHOLD,
                       levels: tuple[int, int] = CPU_LEVELS) -> dict[str, str]:
    """ST's clustering: every operator's name -> its cluster representative's name.

    Edges join operators whose :func:`similarity_rate` is at least ``threshold``; each maximal clique
    is a cluster. An operator in one clique belongs to it; one in several is moved, until nothing
    changes, to the clique whose current members it is most similar to (sum of rates). Each
    cluster's representative is the member with the largest rate sum to the others (ties: first in
    ``ops``). O(n^2) rates plus Bron-Kerbosch, exponential only in the worst case.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"similarity threshold must be in (0, 1], got {threshold}")
    n = len(ops)
    rate = [[1.0] * n for _ in range(n)]
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    for i in range(n):
        for j in range(i + 1, n):
            rate[i][j] = rate[j][i] = similarity_rate(ops[i], ops[j], levels=levels)
            if rate[i][j] >= threshold:
                graph.add_edge(i, j)
    cliques = [sorted(c) for c in nx.find_cliques(graph)]
    cliques.sort()
    of: dict[int, list[int]] = {i: [] for i in range(n)}
    for c, members in enumerate(cliques):
        for i in members:
            of[i].append(c)
    clusters: list[set[int]] = [set() for _ in cliques]
    at: dict[int, int] = {}
    for i, cs in of.items():
        if len(cs) == 1:
            at[i] = cs[0]
            clusters[cs[0]].add(i)
    for _ in range(n + 1):  # each pass moves an operator only to a strictly better clique
        changed = False
        for i in range(n):
            if len(of[i]) < 2:
                continue
            best = max(of[i], key=lambda c: (sum(rate[i][j] for j in clusters[c] if j != i), -c))
            if at.get(i) != best:
                if i in at:
                    clusters[at[i]].discard(i)
                clusters[best].add(i)
                at[i] = best
                changed = True
        if not changed:
            break
    out: dict[str, str] = {}
    for members in clusters:
        if members:
            rep = max(sorted(members), key=lambda p: sum(rate[p][q] for q in members))
            out.update({ops[m].name: ops[rep].name for m in members})
    return out


def selective_plan(ops: Sequence[LoopNestOp], *, backend_cost: Callable[[LoopNestOp], float],
                   reuse_cost: Callable[[LoopNestOp, LoopNestOp], float],
                   threshold: float = SIMILARITY_THRESHOLD, levels: tuple[int, int] = CPU_LEVELS) -> Plan:
    """ST's clusters as a plan: each representative a backend root, every other member its child.

    Operators already tuned (``tuned``) are clustered like the rest (ST does not know of earlier
    runs) but cost nothing. ``reuse_cost(α, β)``: what applying β's top programs to α costs.
    """
    start = time.perf_counter()
    rep = selective_clusters(ops, threshold=threshold, levels=levels)
    by_name = {o.name: o for o in ops}
    edges: list[PlanEdge] = []
    for o in ops:
        if rep[o.name] == o.name:
            edges.append(PlanEdge(parent=ROOT, child=o.name, cost=0.0 if o.tuned else backend_cost(o)))
    for o in ops:
        if rep[o.name] != o.name:
            beta = by_name[rep[o.name]]
            edges.append(PlanEdge(parent=beta.name, child=o.name, cost=0.0 if o.tuned else reuse_cost(o, beta)))
    total = sum(e.cost for e in edges)
    solution = TreeSolution(edges=tuple((e.parent, e.child) for e in edges), cost=total, solver="selective-tuning",
                            optimal=False, seconds=time.perf_counter() - start)
    return Plan(edges=tuple(edges), operators=dict(by_name), bridges=(), total_cost=total,
                baseline_cost=sum(0.0 if o.tuned else backend_cost(o) for o in ops),
                candidate_pairs=len(ops) - sum(1 for e in edges if e.parent == ROOT), solution=solution)
