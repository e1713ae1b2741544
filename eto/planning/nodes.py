"""The OC graph's nodes (paper section 4): the set's operators, and a prior database's stored operators as
free roots, each operator to tune bringing only its nearest few (:data:`PRIOR_SOURCES`), so that a
database grown over many models does not grow every plan with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from selector import LoopNestOp, nearest_sources

from eto.operators import Operator
from eto.operators.opsets import OperatorSet

if TYPE_CHECKING:  # pragma: no cover
    from eto.store.database import ProgramRecord

#: Prior operators an operator to tune brings into the plan: its nearest few of its kind
#: (:func:`selector.nearest_sources`), not the whole prior database.
PRIOR_SOURCES = 3


def loop_nest_op(name: str, op: Operator, frequency: int, tuned: bool) -> LoopNestOp:
    return LoopNestOp(name=name, type=op.type, sketch=op.sketch_key(), space=tuple(op.space),
                      reduction=tuple(op.reduction), frequency=frequency, tuned=tuned,
                      sketch_count=op.sketch_count())


def stored_function(op: Operator, program: "ProgramRecord") -> Operator:
    """``op`` as read from a database, a model's fused task given the function of its stored
    workload (a database reads it without; the plan reads a prior root's loop nest from it). O(1)
    for anything else, one workload read for a fused task."""
    if op.fusion and op.task is None:
        return op.with_fusion(op.fusion, program.workload.mod["main"])
    return op


def plan_nodes(opset: OperatorSet, tuned: Mapping[Operator, "ProgramRecord"]
           ) -> tuple[dict[str, Operator], list[LoopNestOp]]:
    """The set's operators as OC-graph nodes, plus prior programs of the same kinds as free roots.
    A model's functions outside the catalogue (TASK) are not planned: nothing reuses them, and the
    pipeline gives each its own backend budget."""
    names: dict[str, Operator] = {}
    nodes = []
    for e in opset:
        if e.op.spec.backend_only:
            continue
        name = e.op.name
        if name in names:  # same loop nest and window text but different input size
            name = f"{name}#{sum(n.startswith(e.op.name) for n in names) + 1}"
        names[name] = e.op
        nodes.append(loop_nest_op(name, e.op, e.frequency, e.op in tuned))
    kinds = {(n.type, n.sketch) for n in nodes}
    in_set = set(names.values())
    stored: dict[str, Operator] = {}
    for op in sorted(set(tuned) - in_set, key=lambda o: o.key):
        if (op.type, op.sketch_key()) in kinds:
            stored[f"prior:{op.name}"] = op
    sources = nearest_sources(nodes, [loop_nest_op(n, op, 0, True) for n, op in stored.items()], PRIOR_SOURCES)
    for node in sources:
        names[node.name] = op = stored_function(stored[node.name], tuned[stored[node.name]])
        nodes.append(loop_nest_op(node.name, op, 0, True))
    return names, nodes


__all__ = ["PRIOR_SOURCES", "loop_nest_op", "plan_nodes", "stored_function"]
