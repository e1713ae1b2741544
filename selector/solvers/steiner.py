"""Directed Steiner tree for OC graphs with bridge operators (paper, Section 6.2): :func:`solve`.

With bridges, only the requested operators (terminals) must be in the tree; bridge operators are
Steiner nodes that pay off only when enough operators reuse them.  The problem is NP-hard.
:func:`solve` validates the instance, applies exact reductions and splits it into independent
components (:mod:`selector.solvers.reduce`), then per component:

* no Steiner node left (or ``solver="arborescence"``): Edmonds' min-cost arborescence
  (:mod:`selector.solvers.arborescence`), exact, O(V·E) worst case;
* otherwise the shortest-path heuristic with local search and perturbed restarts
  (:mod:`selector.solvers.heuristic`): cost at most |T| · OPT, never worse than the optimal
  arborescence on root + terminals (so on an OC graph bridges never make the plan worse);
* certified against a lower bound, chiefly Wong's dual ascent (:mod:`selector.solvers.dual_ascent`): when
  the heuristic's tree meets it, the tree is optimal and the MIP is skipped;
* otherwise, under ``solver="exact"``, or ``"auto"`` when the component's flow formulation has at
  most ``AUTO_EXACT_MAX_FLOW_VARS`` commodity-edge variables, the multi-commodity flow MIP solved
  by HiGHS (:mod:`selector.solvers.mip`: its LP relaxation, usually integral here, then branch
  and bound), with whatever time is left (``"auto"``: at most ``AUTO_MIP_SECONDS``); the
  heuristic's tree stays when the MIP finds nothing better; it reports whether optimality was
  proven and its best bound.

The time limit is shared among components in proportion to their edge counts; within a component
that may get the MIP, the heuristic gets half of its share. A component identical to one of a
``known`` solution (same nodes, terminals, edges, weights and solver) takes that component's result
unsolved: a re-selection after a local change pays only for the components it changed.
:func:`steiner_exact` and :func:`steiner_approx` are :func:`solve` with the solver fixed;
:func:`dual_ascent_bound` (from :mod:`selector.solvers.dual_ascent`) is re-exported here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Iterable
from typing import Literal, Optional

import networkx as nx
import numpy as np

from selector.solvers.indexed import IndexedGraph, index_instance
from selector.solvers.trees import arborescence_on, improves, meets, terminals_only_tree, tree_cost, tree_pairs
from selector.solvers.dual_ascent import dual_ascent_bound
from selector.solvers.solution import TreeSolution
from selector.solvers.heuristic import Heuristic
from selector.solvers.mip import flow_variable_count, mip
from selector.solvers.reduce import TRIANGLE_MAX_NODES, components, prune, triangle_mask

__all__ = ["solve", "steiner_exact", "steiner_approx", "dual_ascent_bound", "SolverName",
           "AUTO_EXACT_MAX_FLOW_VARS", "AUTO_MIP_SECONDS"]

SolverName = Literal["auto", "exact", "approx", "arborescence"]

#: ``solver="auto"`` runs the MIP on a component only when the flow formulation has at most this
#: many commodity-edge variables (|terminals| × |edges| after pruning); larger ones keep the
#: heuristic's tree (still reporting a lower bound).
AUTO_EXACT_MAX_FLOW_VARS = 60_000
#: ``solver="auto"`` gives the MIP at most this long per component: the OC graphs of ResNet-50 and
#: MobileNetV2 are proven optimal by their LP relaxations in 0.3 s and 1 s (SCIP's branch and bound,
#: before, took 2-3 s and 15 s); a fractional relaxation's branch and bound can run for minutes, and
#: cut short it keeps the better tree and reports the gap (``optimal``, ``lower_bound``).
AUTO_MIP_SECONDS = 3.0


def _solve_component(comp: IndexedGraph, solver: str, deadline: float, exact_max_flow_vars: int
                     ) -> tuple[list, float, bool, float, str]:
    """(edges as node pairs, cost, proven optimal, lower bound, method) for one component."""
    n_steiner = comp.n - 1 - len(comp.terminals)
    if n_steiner == 0 or solver == "arborescence":
        pe = arborescence_on(comp, np.ones(comp.n, dtype=bool))
        assert pe is not None  # reachability was validated and pruning keeps paths
        cost = tree_cost(comp, pe)
        return tree_pairs(comp, pe), cost, True, cost, "arborescence"
    start = time.perf_counter()
    red = comp
    if comp.n <= TRIANGLE_MAX_NODES:
        red = comp.subgraph(np.ones(comp.n, dtype=bool), triangle_mask(comp))[0]
    budget = max(deadline - start, 0.0)
    want_mip = solver == "exact" or (
        solver == "auto" and flow_variable_count(red) <= exact_max_flow_vars)
    h = Heuristic(red, start + 0.5 * budget if want_mip else deadline)
    pe, cost = h.run()
    pairs, lb, method = tree_pairs(red, pe), h.lower_bound(), "approx"
    # The no-bridge optimum on the unreduced component: the heuristic never returns worse.
    alt = terminals_only_tree(comp)
    if alt is not None and improves(tree_cost(comp, alt), cost):
        pairs, cost = tree_pairs(comp, alt), tree_cost(comp, alt)
    optimal = meets(cost, lb)
    if optimal:
        lb = cost
    elif want_mip and time.perf_counter() < deadline:
        limit = deadline - time.perf_counter()
        mip_pe, proven, mip_bound = mip(red, limit if solver == "exact" else min(limit, AUTO_MIP_SECONDS))
        method = "exact"
        if mip_pe is not None and improves(tree_cost(red, mip_pe), cost):
            pairs, cost = tree_pairs(red, mip_pe), tree_cost(red, mip_pe)
        if proven:
            optimal, lb = True, cost
        elif mip_bound is not None:
            lb = max(lb, min(mip_bound, cost))
    return pairs, cost, optimal, lb, method


def _terminals_only(g: IndexedGraph, root: Hashable) -> IndexedGraph:
    """``g`` restricted to root + terminals (``solver="arborescence"``); ValueError naming the
    terminals that then become unreachable."""
    sub, _, _ = g.subgraph(g.terminal_mask(root=True))
    lost = sub.unreachable_terminals()
    if lost:
        raise ValueError("without Steiner nodes, not reachable from root "
                         f"{root!r}: {', '.join(map(repr, lost))}")
    return sub


def solve(
    G: nx.DiGraph,
    root: Optional[Hashable] = None,
    terminals: Optional[Iterable[Hashable]] = None,
    *,
    solver: SolverName = "auto",
    weight: str = "weight",
    time_limit: Optional[float] = 30.0,
    exact_max_flow_vars: int = AUTO_EXACT_MAX_FLOW_VARS,
    known: Optional[TreeSolution] = None,
) -> TreeSolution:
    """Cheapest arborescence rooted at ``root`` reaching every terminal (a directed Steiner tree).

    ``root`` and ``terminals`` default to ``G.graph["root"]`` / ``G.graph["terminals"]`` (set by
    :func:`selector.build_oc_graph`).  ``solver``:

    * ``"arborescence"``: ignore non-terminal nodes, Edmonds on root + terminals (exact for that
      restricted problem; the paper's no-bridge selection);
    * ``"exact"``: MIP per component (Edmonds where a component has no Steiner nodes), warm-started
      from the heuristic; ``optimal`` tells whether it finished within ``time_limit``;
    * ``"approx"``: the heuristic (guarantee in :mod:`selector.solvers.heuristic`);
    * ``"auto"``: Edmonds on Steiner-free components, otherwise the heuristic, then the MIP when
      the component is small enough (``exact_max_flow_vars``) and time is left.

    Heuristic trees are certified against :func:`dual_ascent_bound` (plus two trivial bounds):
    when they meet it, ``optimal`` is True without the MIP; otherwise ``lower_bound`` reports it.

    ``time_limit`` (seconds, None = unlimited) bounds the local search and the MIP together.
    ``known``: an earlier solution whose identical components are reused as solved (O(E) each).
    Raises ValueError when a terminal is unreachable (naming it) or a weight is missing, negative,
    NaN or infinite.
    """
    if solver not in ("auto", "exact", "approx", "arborescence"):
        raise ValueError(f"unknown solver {solver!r}; use 'auto', 'exact', 'approx' or 'arborescence'")
    t0 = time.perf_counter()
    deadline = math.inf if time_limit is None else t0 + float(time_limit)
    g, root = index_instance(G, root, terminals, weight)
    if solver == "arborescence":
        g = _terminals_only(g, root)

    pruned, _, _ = prune(g)
    comps = [pruned.subgraph(c)[0] for c in components(pruned)]
    keys = [_instance_key(c, solver, exact_max_flow_vars) for c in comps]
    reused = known.parts if known is not None else {}
    sizes = [0 if k in reused else max(1, len(c.src)) for c, k in zip(comps, keys)]
    edges: list[tuple[Hashable, Hashable]] = []
    parts: dict[Hashable, tuple] = {}
    total, bound, all_optimal, methods = 0.0, 0.0, True, set()
    for i, (comp, key) in enumerate(zip(comps, keys)):
        now = time.perf_counter()
        share = (deadline - now) * sizes[i] / max(sum(sizes[i:]), 1) if math.isfinite(deadline) else math.inf
        parts[key] = reused.get(key) or _solve_component(comp, solver, now + max(share, 0.0), exact_max_flow_vars)
        pairs, cost, optimal, lb, method = parts[key]
        edges.extend(pairs)
        methods.add(method)
        all_optimal &= optimal
        total += cost
        bound += lb
    return TreeSolution(
        edges=tuple(edges),
        cost=total,
        solver="+".join(sorted(methods)) if methods else "arborescence",
        optimal=all_optimal,
        lower_bound=min(bound, total),
        seconds=time.perf_counter() - t0,
        parts=parts,
    )


def _instance_key(comp: IndexedGraph, solver: str, exact_max_flow_vars: int) -> tuple:
    """Everything a component's result depends on but the time left (exact, not a hash)."""
    return (tuple(comp.nodes), comp.root, comp.terminals.tobytes(), comp.src.tobytes(), comp.dst.tobytes(),
            comp.w.tobytes(), solver, exact_max_flow_vars)


def steiner_exact(G: nx.DiGraph, root: Optional[Hashable] = None,
                  terminals: Optional[Iterable[Hashable]] = None, *, weight: str = "weight",
                  time_limit: Optional[float] = 60.0) -> TreeSolution:
    """Directed Steiner tree by the flow MIP (see :func:`solve`, ``solver="exact"``)."""
    return solve(G, root, terminals, solver="exact", weight=weight, time_limit=time_limit)


def steiner_approx(G: nx.DiGraph, root: Optional[Hashable] = None,
                   terminals: Optional[Iterable[Hashable]] = None, *, weight: str = "weight",
                   time_limit: Optional[float] = 10.0) -> TreeSolution:
    """Directed Steiner tree by the heuristic (see :func:`solve`, ``solver="approx"``)."""
    return solve(G, root, terminals, solver="approx", weight=weight, time_limit=time_limit)
