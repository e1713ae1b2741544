"""Reuse pair selection for an operator set: eto's operators in, a :class:`selector.Plan` out.

``selector`` works on plain loop nests; this module translates: each catalogue operator becomes a
:class:`selector.LoopNestOp` (its sketch key as the sketch set, its frequency, whether a prior
database already has it), and a bridge operator is accepted only if the catalogue can build it
(Definition 5: stride 1, padding 0, dilation 1) and it has the same sketch key as the operators it
bridges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Literal, Mapping

from selector import LoopNestOp, Plan, replan, select_reuse_pairs
from selector.costs import analytic_cost_fn
from tuner.space import DEFAULT_STRATEGY

from .operators import Operator
from .opsets import OperatorSet

if TYPE_CHECKING:  # pragma: no cover
    from .database import Database
    from tuner.space import Strategy

    from .target import TargetKind

BridgeOption = Literal["none", "1hop", "all"]
CostModel = Literal["analytic", "estimate"]


class BridgeCatalogue:
    """The catalogue operator behind a bridge loop nest (or None if the catalogue cannot build it).

    Built once per loop nest: the selector asks while checking sketches, the estimator while
    costing edges, and the plan while naming its bridges.
    """

    def __init__(self, structural: Mapping[tuple[str, str], Mapping]) -> None:
        self.structural = dict(structural)  # (type, sketch key) -> structural parameters of the kind
        self._built: dict[tuple, Operator | None] = {}

    def __call__(self, b: LoopNestOp) -> Operator | None:
        key = (b.type, b.sketch, b.space, b.reduction)
        if key not in self._built:
            try:
                op = Operator.from_loop_nest(b.type, b.space + b.reduction,
                                             **self.structural.get((b.type, b.sketch), {}))
            except ValueError:
                op = None
            self._built[key] = op if op is not None and op.sketch_key() == b.sketch else None
        return self._built[key]


@dataclass(frozen=True)
class OperatorPlan:
    """A plan together with the catalogue operators behind its node names."""

    plan: Plan
    operators: Mapping[str, Operator]  # node name -> operator (set members and bridges)
    bridges: BridgeCatalogue | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict:
        out = self.plan.to_json()
        out["operator_keys"] = {name: op.key for name, op in self.operators.items()}
        return out

    def replan(self, tuned: Iterable[str]) -> "OperatorPlan":
        """:func:`selector.replan` after the operators named in ``tuned`` got programs.

        They become zero-cost roots and their kinds get estimated reuse costs (section 6.1).
        """
        plan = replan(self.plan, tuned=tuned)
        return OperatorPlan(plan, _with_bridges(self.operators, plan, self.bridges), self.bridges)


def _with_bridges(operators: Mapping[str, Operator], plan: Plan, bridges: BridgeCatalogue | None) -> dict:
    out = dict(operators)
    for b in plan.bridges:
        op = bridges(b) if bridges is not None and b.name not in out else None
        if op is not None:
            out[b.name] = op
    return out


def loop_nest_op(name: str, op: Operator, frequency: int, tuned: bool) -> LoopNestOp:
    return LoopNestOp(name=name, type=op.type, sketch=op.sketch_key(), space=tuple(op.space),
                      reduction=tuple(op.reduction), frequency=frequency, tuned=tuned,
                      sketch_count=op.sketch_count())


def hot_operators(opset: OperatorSet, share: float) -> frozenset[Operator]:
    """Operators whose frequency x FLOPs is at least ``share`` of the whole set's (beyond the paper).

    The paper treats every operator alike, but a network's latency is dominated by a few: these
    are the ones worth full backend tuning with extra budget rather than reuse. Before anything is
    measured, FLOPs stand in for latency. O(n).
    """
    if not 0 < share <= 1:
        raise ValueError(f"hot share must be in (0, 1], got {share}")
    total = opset.total_flops
    return frozenset(e.op for e in opset if total and e.frequency * e.op.flops >= share * total)


def estimator_cost_fn(operator_of: Callable[[LoopNestOp], "Operator | None"], target_kind: "TargetKind",
                      budget: float, *, strategy: "Strategy" = DEFAULT_STRATEGY,
                      samples: int = 8) -> Callable[[LoopNestOp, LoopNestOp], float]:
    """Edge costs from the tuner's trial estimator (paper section 6.1), capped at the backend budget.

    ``strategy`` must be the one the reuse tuner will run (the pipeline passes its own): the
    estimate counts that strategy's rounds. Loop nests (with their access patterns) are read from
    each operator's program once; an operator the catalogue cannot build costs the budget.
    """
    from tvm.ir import IRModule

    from tuner.estimate import estimate_trials
    from tuner.features import loop_nest_of, major_block

    kind = target_kind
    nests: dict[str, object] = {}

    def nest(n: LoopNestOp):
        key = f"{n.type}:{n.sketch}:{n.space}:{n.reduction}"
        if key not in nests:
            op = operator_of(n)
            if op is None:
                nests[key] = None
            else:
                mod = IRModule({"main": op.prim_func()})
                nests[key] = loop_nest_of(mod, major_block(mod))
        return nests[key]

    def cost(alpha: LoopNestOp, beta: LoopNestOp) -> float:
        a, b = nest(alpha), nest(beta)
        if a is None or b is None:
            return float(budget)
        return float(min(budget, estimate_trials(kind, a, b, samples=samples,  # type: ignore[arg-type]
                                                 strategy=strategy).mean))

    cost.__name__ = f"estimated_trials_{kind}"
    return cost


def plan_operator_set(
    opset: OperatorSet,
    *,
    budget: int = 1000,
    bridges: BridgeOption = "1hop",
    solver: Literal["auto", "exact", "approx"] = "auto",
    database: "Database | None" = None,
    target=None,
    cost_fn: Callable[[LoopNestOp, LoopNestOp], float] | None = None,
    time_limit: float | None = 30.0,
    cost: CostModel = "analytic",
    hot: Collection[Operator] = (),
    hot_budget: int | None = None,
    strategy: "Strategy" = DEFAULT_STRATEGY,
) -> OperatorPlan:
    """Select reuse pairs for ``opset``; operators already in ``database`` for ``target`` are free roots.

    ``cost_fn`` estimates the trials of tuning α from β; by default ``cost`` picks it: ``"estimate"``
    is the tuner's trial estimator for the reuse tuner's ``strategy`` (reads every operator's
    program), ``"analytic"`` the selector's TVM-free stand-in (milliseconds). The backend costs ``budget`` per operator.
    ``hot`` operators (see :func:`hot_operators`) are never derived by reuse: they are roots with a
    backend budget of ``hot_budget`` (default ``budget``), and reuse sources for the rest.
    """
    if budget < 1:
        raise ValueError(f"budget must be positive, got {budget}")
    tuned = set(database.tuned(target)) if database is not None and target is not None else set()
    names, nodes = _nodes(opset, tuned)
    catalogue = BridgeCatalogue({(n.type, n.sketch): names[n.name].structural for n in nodes})
    if cost_fn is None and cost == "estimate":
        from .target import target_kind

        def operator_of(n: LoopNestOp) -> Operator | None:
            return names.get(n.name) or catalogue(n)

        cost_fn = estimator_cost_fn(operator_of, target_kind(target) if target is not None else "cpu", budget,
                                    strategy=strategy)
    cost_fn = cost_fn or analytic_cost_fn(float(budget))
    hot_ops = set(hot)
    hot_names = {n for n, op in names.items() if op in hot_ops}
    backend_cost: "float | Callable[[LoopNestOp], float]" = float(budget)
    if hot_names:
        cost_fn, backend_cost = _hot_costs(cost_fn, hot_names, float(budget), float(hot_budget or budget))
    plan = select_reuse_pairs(nodes, cost_fn=cost_fn, backend_cost=backend_cost, bridges=bridges, solver=solver,
                              sketch_check=lambda b: catalogue(b) is not None, time_limit=time_limit)
    return OperatorPlan(plan, _with_bridges(names, plan, catalogue), catalogue)


def _nodes(opset: OperatorSet, tuned: set[Operator]) -> tuple[dict[str, Operator], list[LoopNestOp]]:
    """The set's operators as OC-graph nodes, plus prior programs of the same kinds as free roots."""
    names: dict[str, Operator] = {}
    nodes = []
    for e in opset:
        name = e.op.name
        if name in names:  # same loop nest and window text but different input size
            name = f"{name}#{sum(n.startswith(e.op.name) for n in names) + 1}"
        names[name] = e.op
        nodes.append(loop_nest_op(name, e.op, e.frequency, e.op in tuned))
    kinds = {(n.type, n.sketch) for n in nodes}
    in_set = set(names.values())
    for op in sorted(tuned - in_set, key=lambda o: o.key):
        if (op.type, op.sketch_key()) in kinds:
            name = f"prior:{op.name}"
            names[name] = op
            nodes.append(loop_nest_op(name, op, 0, True))
    return names, nodes


def _hot_costs(cost_fn: Callable[[LoopNestOp, LoopNestOp], float], hot_names: set[str], budget: float,
               hot_budget: float) -> tuple[Callable[[LoopNestOp, LoopNestOp], float], Callable[[LoopNestOp], float]]:
    """Edge costs that veto reuse into hot operators, and a root cost of ``hot_budget`` for them."""
    def edge(alpha: LoopNestOp, beta: LoopNestOp) -> float:
        return math.inf if alpha.name in hot_names else cost_fn(alpha, beta)

    def root(op: LoopNestOp) -> float:
        return hot_budget if op.name in hot_names else budget

    return edge, root
