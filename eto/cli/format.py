"""How the command line shows operators, operator sets and targets (one copy for every command)."""

from __future__ import annotations

import json
from typing import Any

from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.report import format_table


def opset_summary(opset: OperatorSet) -> str:
    """The one-line headline of a set: distinct operators, layers and total GFLOP."""
    return (f"{opset.name}: {len(opset)} distinct operators, {sum(e.frequency for e in opset)} layers, "
            f"{opset.total_flops / 1e9:.2f} GFLOP in all")


def operator_table(opset: OperatorSet) -> str:
    """The ``eto ops show`` table: one row per operator, parameters at their defaults left out."""
    rows = []
    for i, e in enumerate(opset):
        op = e.op
        params = " ".join(f"{k}={_short(v)}" for k, v in op.params if not _is_default(op, k, v))
        rows.append((i, op.type, params, "[" + ",".join(map(str, op.space)) + " | " +
                     ",".join(map(str, op.reduction)) + "]", e.frequency, round(op.flops / 1e9, 4)))
    return format_table(("#", "type", "parameters", "loop nest [space | reduction]", "freq", "GFLOP"), rows,
                        align="rlllrr")


def short_target(key: str) -> str:
    """A database target key (TVM's JSON) in a few characters: CPU model and cores, or GPU arch."""
    d = json.loads(key)
    if d.get("kind") == "llvm":
        return f"llvm/{d.get('mcpu', 'generic')}/{d.get('num-cores', '?')}c"
    return f"{d.get('kind')}/{d.get('arch', '')}"


def _short(v: Any) -> str:
    """A window parameter: one number when every axis agrees (``stride=2``), else ``1x2``."""
    if isinstance(v, tuple):
        return str(v[0]) if len(set(v)) == 1 else "x".join(map(str, v))
    return str(v)


def _is_default(op: Operator, k: str, v: Any) -> bool:
    """Whether parameter ``k`` has its type's default (on every axis), so the table can omit it."""
    param = next(p for p in op.spec.params if p.name == k)
    if param.default is None:
        return False
    d = param.default
    return (v == (d,) * len(v)) if isinstance(v, tuple) else v == d
