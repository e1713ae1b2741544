"""Reuse-pair selection end to end, and the resulting tuning plan.

:func:`select_reuse_pairs` is the one-call entry point: bridges (Definition 5) → OC graph →
arborescence / Steiner tree → :class:`Plan`.  A plan is a tree: operators hanging off the root are
tuned by the backend (or are already tuned: ``prior``), every other operator by the reuse-based
tuner from its parent's best program, parents first (``order``).

Re-estimation (paper, end of Section 6.1).  For an operator whose sketch set has more than one
sketch (``sketch_count > 1``) the reuse cost cannot be estimated before the sketch that wins on
this hardware is known.  Until some operator of the same (type, sketch set) is tuned, such
operators get the maximum possible reuse cost -- the backend budget -- so the first plan tunes them
with the backend.  ``Plan.replan_after`` names, per such kind, the first operator in tuning order;
once it is tuned, call :func:`replan` with ``tuned=[...]``: already-tuned operators (bridges
included) become zero-cost roots, costs are re-estimated, and the rest is re-selected.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Optional, Union

import networkx as nx

from selector.bridge import SketchCheck, bridge_operators
from selector.analytic_cost import analytic_cost_fn
from selector.loopnest import LoopNestOp
from selector.ocgraph import ROOT, BackendCost, CostFn, Preference, build_oc_graph
from selector.solvers.solution import TreeSolution
from selector.solvers.steiner import SolverName, solve

__all__ = ["Plan", "PlanEdge", "SelectionRequest", "BridgeMode", "select_reuse_pairs", "replan"]

#: ``"none"`` (min-cost arborescence, no bridges), ``"1hop"`` (the paper's choice), ``"all"``
#: (closure), or a number of hops.
BridgeMode = Union[Literal["none", "1hop", "all"], int]


@dataclass(frozen=True, kw_only=True)
class PlanEdge:
    """``child`` is tuned from ``parent``'s best program (``parent == "root"``: by the backend)."""

    parent: str
    child: str
    cost: float


@dataclass(frozen=True, kw_only=True)
class SelectionRequest:
    """Everything :func:`select_reuse_pairs` was called with, kept so a plan can be re-made."""

    ops: tuple[LoopNestOp, ...]
    cost_fn: Optional[CostFn]
    backend_cost: BackendCost
    bridges: BridgeMode
    solver: SolverName
    sketch_check: Optional[SketchCheck]
    time_limit: Optional[float]
    tuned: frozenset[str] = frozenset()  # names marked tuned by replan() (bridges included)
    preference: Optional[Preference] = None


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The selected reuse pairs as a tree rooted at ``"root"``.

    ``edges`` are in tuning order (a parent always comes before its children).  ``operators`` maps
    every tree node's name to its operator.  ``bridges`` lists every bridge operator that was put
    in the OC graph (``used_bridges`` those the tree uses, which must be tuned too).
    """

    edges: tuple[PlanEdge, ...]
    operators: Mapping[str, LoopNestOp]
    bridges: tuple[LoopNestOp, ...]
    total_cost: float
    baseline_cost: float
    candidate_pairs: int
    solution: TreeSolution
    replan_after: tuple[str, ...] = ()
    request: Optional[SelectionRequest] = field(default=None, repr=False, compare=False)

    # -- views ------------------------------------------------------------------------------
    @property
    def parent(self) -> dict[str, str]:
        """Parent of every operator in the tree (``"root"`` for backend-tuned and prior ones)."""
        return {e.child: e.parent for e in self.edges}

    @property
    def edge_costs(self) -> dict[tuple[str, str], float]:
        return {(e.parent, e.child): e.cost for e in self.edges}

    @property
    def order(self) -> tuple[str, ...]:
        """Operators to tune, parents first (already-tuned ``prior`` operators omitted)."""
        return tuple(e.child for e in self.edges if not self.operators[e.child].tuned)

    def subtrees(self) -> tuple[tuple[str, ...], ...]:
        """Operators to tune grouped by the root child they descend from, each group parents first.

        Groups share nothing but the database, so they can be tuned concurrently (one device each).
        O(n) over the tree's edges, which are already in parents-first order.
        """
        top: dict[str, str] = {}
        groups: dict[str, list[str]] = {}
        for e in self.edges:
            top[e.child] = e.child if e.parent == ROOT else top[e.parent]
            if not self.operators[e.child].tuned:
                groups.setdefault(top[e.child], []).append(e.child)
        return tuple(tuple(g) for g in groups.values())

    @property
    def backend(self) -> tuple[str, ...]:
        """Operators the backend compiler tunes from scratch."""
        return tuple(e.child for e in self.edges
                     if e.parent == ROOT and not self.operators[e.child].tuned)

    @property
    def prior(self) -> tuple[str, ...]:
        """Already-tuned operators (zero-cost roots) in the tree."""
        return tuple(e.child for e in self.edges if self.operators[e.child].tuned)

    @property
    def reuse_pairs(self) -> tuple[tuple[str, str], ...]:
        """Selected reuse pairs (α, β): α is tuned from β's best program."""
        return tuple((e.child, e.parent) for e in self.edges if e.parent != ROOT)

    @property
    def used_bridges(self) -> tuple[str, ...]:
        return tuple(e.child for e in self.edges if self.operators[e.child].bridge)

    # -- output -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """JSON-ready summary (names only; operators as dicts under ``operators``)."""
        used = set(self.used_bridges)
        return {
            "total_cost": self.total_cost,
            "baseline_cost": self.baseline_cost,
            "edges": [[e.parent, e.child] for e in self.edges],
            "edge_costs": [[e.parent, e.child, e.cost] for e in self.edges],
            "backend": list(self.backend),
            "prior": list(self.prior),
            "order": list(self.order),
            "bridges": [dict(_op_json(b), used=b.name in used) for b in self.bridges],
            "bridges_used": list(self.used_bridges),
            "candidate_pairs": self.candidate_pairs,
            "replan_after": list(self.replan_after),
            "operators": {name: _op_json(op) for name, op in self.operators.items()},
            "solver": {
                "name": self.solution.solver,
                "optimal": self.solution.optimal,
                "lower_bound": self.solution.lower_bound,
                "objective": self.solution.cost,  # the costs weighed by the request's preference, if any
                "seconds": round(self.solution.seconds, 4),
            },
        }

    def format_tree(self, unit: str = "trials") -> str:
        """Indented tree, one operator per line with how it is tuned and the estimated cost (in ``unit``)."""
        children: dict[str, list[PlanEdge]] = defaultdict(list)
        for e in self.edges:
            children[e.parent].append(e)
        status = "optimal" if self.solution.optimal else (
            f"bound {self.solution.lower_bound:g}" if self.solution.lower_bound is not None else "heuristic")
        lines = [f"{ROOT}  (total {self.total_cost:.5g} {unit} vs {self.baseline_cost:.5g} all-backend; "
                 f"{self.solution.solver}, {status})"]

        def walk(name: str, prefix: str) -> None:
            kids = children.get(name, [])
            for i, e in enumerate(kids):
                last = i == len(kids) - 1
                op = self.operators[e.child]
                how = "prior" if op.tuned else ("backend" if e.parent == ROOT else "reuse")
                tag = " [bridge]" if op.bridge else ""
                lines.append(f"{prefix}{'└── ' if last else '├── '}{e.child}{tag}  "
                             f"{op.describe()}  {how} {e.cost:.4g}")
                walk(e.child, prefix + ("    " if last else "│   "))

        walk(ROOT, "")
        return "\n".join(lines)


def _op_json(op: LoopNestOp) -> dict[str, Any]:
    return {"name": op.name, "type": op.type, "sketch": op.sketch, "extents": list(op.extents),
            "space": list(op.space), "reduction": list(op.reduction), "frequency": op.frequency,
            "tuned": op.tuned, "bridge": op.bridge}


def _hops(mode: BridgeMode) -> Union[int, Literal["all"]]:
    if mode == "none":
        return 0
    if mode == "1hop":
        return 1
    if mode == "all":
        return "all"
    if isinstance(mode, int) and not isinstance(mode, bool) and mode >= 0:
        return mode
    raise ValueError(f"bridges must be 'none', '1hop', 'all' or a hop count >= 0, got {mode!r}")


def _backend(backend_cost: BackendCost, op: LoopNestOp) -> float:
    return float(backend_cost(op) if callable(backend_cost) else backend_cost)


def _tree_order(G: nx.DiGraph, sol: TreeSolution) -> list[tuple[str, str]]:
    """BFS from the root; siblings in OC-graph node order (requested operators first)."""
    rank = {v: i for i, v in enumerate(G.nodes)}
    kids: dict[str, list[str]] = defaultdict(list)
    for u, v in sol.edges:
        kids[u].append(v)
    out, queue = [], deque([ROOT])
    while queue:
        u = queue.popleft()
        for v in sorted(kids.get(u, []), key=rank.__getitem__):
            out.append((u, v))
            queue.append(v)
    return out


def select_reuse_pairs(
    ops: Iterable[LoopNestOp],
    *,
    cost_fn: Optional[CostFn] = None,
    backend_cost: BackendCost = 1000.0,
    bridges: BridgeMode = "1hop",
    solver: SolverName = "auto",
    sketch_check: Optional[SketchCheck] = None,
    time_limit: Optional[float] = 30.0,
    preference: Optional[Preference] = None,
) -> Plan:
    """Select reuse pairs for ``ops`` minimizing the estimated total tuning cost (Definition 4).

    ``cost_fn(alpha, beta)`` estimates the trials to tune ``alpha`` from ``beta`` (default:
    :func:`selector.analytic_cost.analytic_cost` capped at ``backend_cost``, which must then be a number).
    ``backend_cost`` is the backend budget per operator (a number or a function of the operator);
    ``tuned`` operators cost 0.  ``bridges`` chooses the bridge operators added as Steiner nodes;
    ``sketch_check`` may veto bridges.  ``solver`` and ``time_limit`` go to :func:`selector.solve`.
    ``preference`` weighs reuse edges in the selection (:func:`selector.distance_preference`); the
    plan's costs stay the estimates.
    """
    ops = tuple(ops)
    if cost_fn is None:
        if callable(backend_cost):
            raise ValueError("cost_fn is required when backend_cost is a function")
        cost_fn = analytic_cost_fn(float(backend_cost))
    request = SelectionRequest(ops=ops, cost_fn=cost_fn, backend_cost=backend_cost, bridges=bridges,
                               solver=solver, sketch_check=sketch_check, time_limit=time_limit,
                               preference=preference)
    return _select(request)


def _select(request: SelectionRequest, known: Optional[TreeSolution] = None) -> Plan:
    tuned = request.tuned
    hops = _hops(request.bridges)
    ops = tuple(replace(op, tuned=True) if op.name in tuned else op for op in request.ops)
    # bridges of the request as made (a replan's newly tuned operators keep theirs, which it may name)
    extra = bridge_operators(request.ops, hops=hops, sketch_check=request.sketch_check,
                             admits=getattr(request.cost_fn, "admits", None)) if hops else []
    extra = [replace(b, tuned=True) if b.name in tuned else b for b in extra]
    unknown = set(tuned) - {op.name for op in ops} - {b.name for b in extra}
    if unknown:
        raise ValueError(f"tuned names not in the operator set or its bridges: {sorted(unknown)}")

    # Paper 6.1: kinds whose sketch set has several sketches cost the maximum until one is tuned.
    pending = {(op.type, op.sketch) for op in ops if op.sketch_count > 1}
    pending -= {(op.type, op.sketch) for op in (*ops, *extra) if op.tuned}
    cost_fn = request.cost_fn
    backend_cost = request.backend_cost
    if pending:
        base = cost_fn

        def cost_fn(alpha: LoopNestOp, beta: LoopNestOp) -> float:  # noqa: F811
            if (alpha.type, alpha.sketch) in pending:
                return _backend(backend_cost, alpha)
            return base(alpha, beta)

        if hasattr(base, "prefetch"):  # keep the batch (build_oc_graph): a batch runs on every core
            cost_fn.prefetch = lambda pairs: base.prefetch(  # type: ignore[attr-defined]
                [(a, b) for a, b in pairs if (a.type, a.sketch) not in pending])

    G = build_oc_graph(ops, cost_fn=cost_fn, backend_cost=backend_cost, bridges=extra, preference=request.preference)
    sol = solve(G, solver=request.solver, time_limit=request.time_limit, known=known)
    ordered = _tree_order(G, sol)
    edges = tuple(PlanEdge(parent=u, child=v, cost=float(G.edges[u, v]["cost"])) for u, v in ordered)
    operators = {e.child: G.nodes[e.child]["op"] for e in edges}
    baseline = sum(G.edges[ROOT, t]["weight"] for t in G.graph["terminals"])
    first_of_kind: dict[tuple[str, str], str] = {}
    for e in edges:
        op = operators[e.child]
        if (op.type, op.sketch) in pending and not op.tuned:
            first_of_kind.setdefault((op.type, op.sketch), e.child)
    total = math.fsum(e.cost for e in edges)
    return Plan(edges=edges, operators=operators, bridges=tuple(extra), total_cost=total,
                baseline_cost=float(baseline), candidate_pairs=G.graph["candidate_pairs"],
                solution=sol, replan_after=tuple(first_of_kind.values()), request=request)


def replan(plan: Union[Plan, SelectionRequest], *, tuned: Iterable[str] = (),
           cost_fn: Optional[CostFn] = None) -> Plan:
    """Select again after some operators have been tuned (e.g. ``plan.replan_after``).

    Names in ``tuned`` (requested operators or bridges) become zero-cost roots, and operators of
    their (type, sketch set) get estimated reuse costs from now on.  ``cost_fn`` replaces the
    original estimator (e.g. one refined with measured data).  Operators already tuned in the
    original request stay tuned. Components of the OC graph this leaves unchanged keep
    ``plan``'s trees (not re-solved).
    """
    request = plan.request if isinstance(plan, Plan) else plan
    if request is None:
        raise ValueError("this plan carries no request to re-select from")
    request = replace(request, tuned=request.tuned | frozenset(tuned))
    if cost_fn is not None:
        request = replace(request, cost_fn=cost_fn)
    return _select(request, plan.solution if isinstance(plan, Plan) else None)
