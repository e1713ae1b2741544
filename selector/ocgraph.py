"""The optimization-choice (OC) graph (paper, Section 6).

Nodes: a special ``"root"``, one node per requested operator and per bridge operator (named by
``op.name``).  Edges, each with a ``weight`` (estimated number of measured trials):

* ``root → op``: ``op`` is tuned by the backend compiler; weight = backend budget, or 0 when the
  operator is already ``tuned`` in a prior database (it then serves as a free source of reuse);
* ``β → α`` for every reuse pair (α, β) (α reuses β's best program); weight = ``cost_fn(α, β)``.

Selecting reuse pairs is a min-cost arborescence problem on this graph when there are no bridges,
and a directed Steiner tree problem with the requested operators as terminals otherwise.

Beyond the paper, a ``preference`` may weigh reuse edges above their cost (each edge keeps its
``cost``; the solvers minimise ``weight``): between sources of about the same cost, the nearer one
(:func:`distance_preference`), whose programs carry over with less loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Callable, Union

import networkx as nx

from selector.loopnest import LoopNestOp
from selector.reuse_pairs import reuse_pair_indices

__all__ = ["ROOT", "CostFn", "BackendCost", "Preference", "build_oc_graph", "check_cost", "distance_preference"]

ROOT = "root"

#: ``cost_fn(alpha, beta)``: estimated trials to tune ``alpha`` reusing ``beta``'s best program.
#: Must be ≥ 0 and not NaN; ``math.inf`` vetoes the pair (the edge is left out). A cost function
#: may also have a ``prefetch(pairs)`` method: :func:`build_oc_graph` calls it once with every
#: candidate pair ``(alpha, beta)`` before asking edge by edge (and before the root edges' costs),
#: so an expensive estimator can work in a batch (in parallel, say). It may also have an
#: ``admits(alpha, beta) -> bool`` method, a cheap test of which pairs can get a finite cost at all:
#: :func:`selector.bridge.bridge_operators` asks it which operators a prior database serves.
CostFn = Callable[[LoopNestOp, LoopNestOp], float]
#: Backend tuning cost: one number for every operator, or a function of the operator.
BackendCost = Union[float, Callable[[LoopNestOp], float]]
#: ``preference(alpha, beta) >= 1``: the factor by which the reuse edge β → α weighs more in the
#: selection than it costs.
Preference = Callable[[LoopNestOp, LoopNestOp], float]


def distance_preference(weight: float) -> Preference:
    """``1 + weight * d(α, β)``, d the sum over loops of |log(α's extent / β's)|: between two sources
    of about the same cost, the nearer one is chosen (a reuse keeps β's tiles and searches near
    them, so what it finds degrades with the distance: eto's experiments/README.md, "The plan's
    preference for near sources"). ``weight`` 0: the paper's selection by cost alone. O(loops) per call."""
    if not weight >= 0 or math.isinf(weight):
        raise ValueError(f"distance weight must be a finite number >= 0, got {weight!r}")

    def preference(alpha: LoopNestOp, beta: LoopNestOp) -> float:
        return 1.0 + weight * sum(abs(math.log(a / b)) for a, b in zip(alpha.extents, beta.extents))

    return preference


def check_cost(value: object, edge: str, *, allow_inf: bool = False) -> float:
    """``value`` as a float, or ValueError naming ``edge`` when it is negative, NaN or not a number."""
    try:
        if isinstance(value, (str, bytes, bool)):
            raise TypeError
        cost = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"cost of edge {edge} is not a number: {value!r}") from None
    if math.isnan(cost):
        raise ValueError(f"cost of edge {edge} is NaN")
    if cost < 0:
        raise ValueError(f"cost of edge {edge} is negative: {cost!r}")
    if math.isinf(cost) and not allow_inf:
        raise ValueError(f"cost of edge {edge} is infinite")
    return cost


def open_reuse_pairs(ops: Sequence[LoopNestOp]) -> list[tuple[LoopNestOp, LoopNestOp]]:
    """The reuse pairs (α, β) the OC graph gets an edge for: every one whose α is not tuned. A tuned
    operator's root edge costs 0, so no tree is cheaper through a reuse into it, and a prior database
    of P stored operators (each a tuned node) would otherwise ask O(P²) estimates for nothing. O(n² k)."""
    return [(ops[a], ops[b]) for a, b in reuse_pair_indices(ops).tolist() if not ops[a].tuned]


def build_oc_graph(
    ops: Iterable[LoopNestOp],
    *,
    cost_fn: CostFn,
    backend_cost: BackendCost,
    bridges: Sequence[LoopNestOp] = (),
    preference: Preference | None = None,
) -> nx.DiGraph:
    """OC graph of ``ops`` (the terminals) expanded with ``bridges`` (Steiner nodes).

    Returns a DiGraph with ``G.graph`` holding ``root`` (``"root"``), ``terminals`` (names of the
    non-bridge operators, in input order), ``bridges`` (names) and ``candidate_pairs`` (number of
    reuse-pair edges).  Node attribute ``op`` holds the operator; edge attribute ``kind`` is
    ``"backend"`` or ``"reuse"``; edge attributes ``cost`` (the estimate) and ``weight`` (what the
    solvers minimise: the cost, times ``preference(α, β)`` on a reuse edge, at most α's backend cost
    when that is more than the reuse's).

    Raises ValueError for duplicate or reserved names and for negative or NaN costs (naming the
    edge).  A reuse cost of ``math.inf`` leaves the edge out; a tuned α gets none (:func:`open_reuse_pairs`).
    Time: O(n² k) for the pairs (vectorized) plus one ``cost_fn`` call per pair.
    """
    ops = list(ops)
    terminals = [op for op in ops if not op.bridge]
    everything = terminals + [op for op in ops if op.bridge] + list(bridges)
    seen: set[str] = set()
    for op in everything:
        if op.name == ROOT:
            raise ValueError(f"operator name {ROOT!r} is reserved for the OC graph root")
        if op.name in seen:
            raise ValueError(f"duplicate operator name {op.name!r}")
        seen.add(op.name)

    pairs = open_reuse_pairs(everything)
    prefetch = getattr(cost_fn, "prefetch", None)
    if prefetch is not None and pairs:
        prefetch(pairs)  # before the root edges: ``backend_cost`` may read what it fetched
    G = nx.DiGraph()
    G.add_node(ROOT, kind="root")
    for op in everything:
        G.add_node(op.name, op=op, kind="bridge" if op.bridge else "operator")
        if op.tuned:
            cost = 0.0
        else:
            raw = backend_cost(op) if callable(backend_cost) else backend_cost
            cost = check_cost(raw, f"{ROOT} -> {op.name}")
        G.add_edge(ROOT, op.name, weight=cost, cost=cost, kind="backend")

    n_pairs = 0
    for alpha, beta in pairs:
        cost = check_cost(cost_fn(alpha, beta), f"{beta.name} -> {alpha.name}", allow_inf=True)
        if math.isinf(cost):
            continue
        weight = cost
        if preference is not None:
            factor = check_cost(preference(alpha, beta), f"{beta.name} -> {alpha.name} (preference)")
            if factor < 1:
                raise ValueError(f"preference of edge {beta.name} -> {alpha.name} is below 1: {factor!r}")
            weight = min(cost * factor, max(cost, G.edges[ROOT, alpha.name]["weight"]))
        G.add_edge(beta.name, alpha.name, weight=weight, cost=cost, kind="reuse")
        n_pairs += 1

    G.graph.update(
        root=ROOT,
        terminals=tuple(op.name for op in terminals),
        bridges=tuple(op.name for op in everything if op.bridge),
        candidate_pairs=n_pairs,
    )
    return G
