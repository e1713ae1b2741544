"""Reuse pair selection for an operator set: eto's operators in, a :class:`selector.Plan` out.

``selector`` works on plain loop nests; this module translates: each catalogue operator becomes a
:class:`selector.LoopNestOp` (its sketch key as the sketch set, its frequency, whether a prior
database already has it), and a bridge operator is accepted only if the catalogue can build it
(Definition 5: stride 1, padding 0, dilation 1) and it has the same sketch key as the operators it
bridges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal, Mapping

from selector import LoopNestOp, Plan, select_reuse_pairs
from selector.costs import analytic_cost_fn

from .operators import Operator
from .opsets import OperatorSet

if TYPE_CHECKING:  # pragma: no cover
    from .database import Database

BridgeOption = Literal["none", "1hop", "all"]


@dataclass(frozen=True)
class OperatorPlan:
    """A plan together with the catalogue operators behind its node names."""

    plan: Plan
    operators: Mapping[str, Operator]  # node name -> operator (set members and bridges)

    def to_json(self) -> dict:
        out = self.plan.to_json()
        out["operator_keys"] = {name: op.key for name, op in self.operators.items()}
        return out


def sketch_count(op: Operator) -> int:
    """Size of the operator's sketch set: two where a rfactor/cross-thread sketch joins tiling."""
    return 2 if "+rf" in op.sketch_key() or op.type == "FRB" else 1


def loop_nest_op(name: str, op: Operator, frequency: int, tuned: bool) -> LoopNestOp:
    return LoopNestOp(name=name, type=op.type, sketch=op.sketch_key(), space=tuple(op.space),
                      reduction=tuple(op.reduction), frequency=frequency, tuned=tuned,
                      sketch_count=sketch_count(op))


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
) -> OperatorPlan:
    """Select reuse pairs for ``opset``; operators already in ``database`` for ``target`` are free roots.

    ``cost_fn`` estimates the trials of tuning α from β (default: selector's analytic estimate, to
    be replaced by the tuner's trial estimator); the backend costs ``budget`` per operator.
    """
    if budget < 1:
        raise ValueError(f"budget must be positive, got {budget}")
    tuned = set(database.tuned(target)) if database is not None and target is not None else set()
    names: dict[str, Operator] = {}
    nodes = []
    for e in opset:
        name = e.op.name
        if name in names:  # same loop nest and window text but different input size
            name = f"{name}#{sum(n.startswith(e.op.name) for n in names) + 1}"
        names[name] = e.op
        nodes.append(loop_nest_op(name, e.op, e.frequency, e.op in tuned))
    structural = {(n.type, n.sketch): names[n.name].structural for n in nodes}

    def build_bridge(b: LoopNestOp) -> Operator | None:
        try:
            op = Operator.from_loop_nest(b.type, b.space + b.reduction, **structural.get((b.type, b.sketch), {}))
        except ValueError:
            return None
        return op if op.sketch_key() == b.sketch else None

    plan = select_reuse_pairs(
        nodes,
        cost_fn=cost_fn or analytic_cost_fn(float(budget)),
        backend_cost=float(budget),
        bridges=bridges,
        solver=solver,
        sketch_check=lambda b: build_bridge(b) is not None,
        time_limit=time_limit,
    )
    for b in plan.bridges:
        op = build_bridge(b)
        if op is not None:
            names[b.name] = op
    return OperatorPlan(plan, names)
