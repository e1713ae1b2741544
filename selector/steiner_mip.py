"""Exact directed Steiner tree by a multi-commodity flow MIP, solved by SCIP through OR-Tools.

For edge weights w, root r and terminals T:

    min Σ_e w_e x_e
    s.t. for every t ∈ T, one unit of flow f^t from r to t (flow conservation at every node),
         f^t_e ≤ x_e,
         in-degree(v) = 1 for v ∈ T and ≤ 1 for the other non-root nodes,
         x binary, 0 ≤ f ≤ 1.

The LP relaxation of this formulation equals the directed-cut relaxation, the strongest of the
classic compact ones.  Commodity t only gets variables on edges whose head can reach t (and none
leaving t), so the model has at most |T| · |E| flow variables (:func:`flow_variable_count`, which
:func:`selector.solve` compares with ``AUTO_EXACT_MAX_FLOW_VARS`` under ``solver="auto"``) and
about as many linking rows.  The problem is NP-hard: SCIP's branch and bound is exponential in the
worst case, so :func:`mip` is warm-started from a heuristic tree, single-threaded and
time-limited, and reports the best tree found, whether it is proven optimal, and SCIP's bound.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from ._indexed import IndexedGraph
from ._trees import is_tree, keep_rooted, prune_leaves

__all__ = ["mip", "flow_variable_count"]


def flow_variable_count(g: IndexedGraph) -> int:
    """Upper bound on the MIP's commodity-edge variables (|T| · |E|)."""
    return int(len(g.terminals) * len(g.src))


def mip(g: IndexedGraph, hint: np.ndarray, time_limit: float
        ) -> tuple[Optional[np.ndarray], bool, Optional[float]]:
    """Solve the flow MIP (module docstring) on ``g``, warm-started from the tree ``hint``.

    ``hint`` and the returned tree are parent-edge arrays (:mod:`selector._trees`); ``time_limit``
    is in seconds (``math.inf``: none).  Returns (tree or None, proven optimal, best bound or None).
    """
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:  # pragma: no cover - SCIP ships with the ortools wheel
        raise RuntimeError("OR-Tools was built without SCIP")
    x = _edge_variables(solver, g)
    parent_edge = hint.tolist()
    dst = g.dst.tolist()
    hint_vars, hint_vals = list(x), [1.0 if parent_edge[dst[e]] == e else 0.0 for e in range(len(x))]
    for t in g.terminals.tolist():
        _add_commodity(solver, g, x, t, _path_edges(g, parent_edge, t), hint_vars, hint_vals)
    solver.SetHint(hint_vars, hint_vals)
    if math.isfinite(time_limit):
        solver.SetTimeLimit(max(1, int(time_limit * 1000)))
    solver.SetNumThreads(1)
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, 0.0)
    status = solver.Solve(params)
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return None, False, None
    bound = solver.Objective().BestBound()
    pe = _read_tree(g, x)
    if not is_tree(g, pe):  # pragma: no cover - would be a formulation bug
        return None, False, None
    return pe, status == pywraplp.Solver.OPTIMAL, (bound if math.isfinite(bound) else None)


def _edge_variables(solver: Any, g: IndexedGraph) -> list:
    """Binary x_e per edge with the objective Σ w_e x_e and the in-degree rows."""
    m = len(g.src)
    dst, w = g.dst.tolist(), g.w.tolist()
    x = [solver.BoolVar(f"x{e}") for e in range(m)]
    obj = solver.Objective()
    for e in range(m):
        obj.SetCoefficient(x[e], w[e])
    obj.SetMinimization()
    is_term = g.terminal_mask()
    indeg = {}
    for v in range(g.n):
        if v != g.root:
            indeg[v] = solver.Constraint(1.0 if is_term[v] else 0.0, 1.0)
    for e in range(m):
        indeg[dst[e]].SetCoefficient(x[e], 1.0)
    return x


def _path_edges(g: IndexedGraph, parent_edge: list[int], t: int) -> set[int]:
    """Edges of the tree given by ``parent_edge`` on the path root → t."""
    src = g.src
    path = set()
    v = t
    while v != g.root:
        path.add(parent_edge[v])
        v = int(src[parent_edge[v]])
    return path


def _add_commodity(solver: Any, g: IndexedGraph, x: list, t: int, hint_path: set[int],
                   hint_vars: list, hint_vals: list) -> None:
    """Flow variables, conservation rows and f ≤ x links of commodity t; appends its flow
    variables to ``hint_vars`` with value 1 on ``hint_path`` (0 elsewhere) in ``hint_vals``."""
    src, dst = g.src.tolist(), g.dst.tolist()
    reaches_t = g.reach([t], reverse=True)
    balance: dict[int, object] = {}

    def row(v: int):
        if v not in balance:
            rhs = 1.0 if v == g.root else (-1.0 if v == t else 0.0)
            balance[v] = solver.Constraint(rhs, rhs)
        return balance[v]

    row(g.root)
    row(t)
    for e in range(len(src)):
        if not reaches_t[dst[e]] or src[e] == t:
            continue
        f = solver.NumVar(0.0, 1.0, f"f{t}_{e}")
        row(src[e]).SetCoefficient(f, 1.0)
        row(dst[e]).SetCoefficient(f, -1.0)
        link = solver.Constraint(-solver.infinity(), 0.0)
        link.SetCoefficient(f, 1.0)
        link.SetCoefficient(x[e], -1.0)
        hint_vars.append(f)
        hint_vals.append(1.0 if e in hint_path else 0.0)


def _read_tree(g: IndexedGraph, x: list) -> np.ndarray:
    """The solution's tree: selected edges, restricted to what hangs off the root (a zero-cost
    cycle could float free), without useless Steiner leaves."""
    pe = np.full(g.n, -1, dtype=np.int64)
    dst = g.dst.tolist()
    for e in range(len(x)):
        if x[e].solution_value() > 0.5:
            pe[dst[e]] = e
    return prune_leaves(g, keep_rooted(g, pe))
