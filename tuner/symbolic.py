"""A tuned program on a symbolic size: its trace with literal splits, the outer factor left symbolic.

Beyond the paper (issue 16). MetaSchedule cannot tune a PrimFunc with a symbolic dimension: its
``SamplePerfectTile`` needs a constant extent. A program tuned at one size still describes tiles
for every size, so :func:`symbolic_module` replays its trace on the operator's function with that
dimension symbolic: each tiling sampled on a symbolic loop becomes a literal ``split`` whose
outermost factor is ``None`` (TVM derives ``ceil(n / inner)`` and masks the remainder with a block
predicate); every other decision stays as recorded. The result is correct at every size; the
predicate costs throughput, which a dispatch over sizes must weigh (not built yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.tirx import PrimFunc


def symbolic_module(func: "PrimFunc", record: "TuningRecord") -> "IRModule":
    """``record``'s program replayed on ``func``, a PrimFunc of the same operator whose loop
    extents may be symbolic (same block names, same loop order). O(trace length).

    Raises ValueError when the trace cannot be replayed on ``func`` (another operator, or a
    symbolic loop the program transforms in a way a literal split cannot express).
    """
    from tvm.ir import IRModule
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Instruction, Trace
    from tvm.tirx import IntImm

    sch = Schedule(IRModule({"main": func}))
    trace = record.trace
    try:
        symbolic = _symbolic_loops(sch, trace)
    except Exception as exc:  # a block the trace names is not in func
        raise ValueError(f"the program's trace does not fit the function: {_last_line(exc)}") from None
    insts, decisions = [], {}
    literal: list = []  # (ExprRV, literal factor): pairs, since an ExprRV's == builds an expression
    for inst in trace.insts:
        kind = inst.kind.name
        if kind == "SamplePerfectTile" and any(inst.inputs[0].same_as(s) for s in symbolic):
            factors = [int(f) for f in trace.decisions[inst]]
            literal += [(rv, None if f is None else IntImm("int32", f))
                        for rv, f in zip(inst.outputs, [None] + factors[1:])]
            continue
        if kind == "Split" and any(i.same_as(rv) for i in inst.inputs[1:] for rv, _ in literal):
            inputs = [inst.inputs[0]] + [next((v for rv, v in literal if i.same_as(rv)), i)
                                         for i in inst.inputs[1:]]
            inst = Instruction(inst.kind, inputs, inst.attrs, inst.outputs)
        elif inst in trace.decisions:
            decisions[inst] = trace.decisions[inst]
        insts.append(inst)
    try:
        Trace(insts, decisions).apply_to_schedule(sch, remove_postproc=False)
    except Exception as exc:  # TVM raises its own error types for a trace that does not fit
        raise ValueError(f"the program's trace does not replay on the symbolic function: {_last_line(exc)}") from None
    return sch.mod


def _last_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


def _symbolic_loops(sch, trace) -> list:
    """The trace's LoopRVs (outputs of ``GetLoops`` on a block) whose loops are symbolic in ``sch``."""
    from tvm.tirx import IntImm

    blocks = {}
    out = []
    for inst in trace.insts:
        if inst.kind.name == "GetSBlock":
            blocks[inst.outputs[0]] = str(inst.attrs[0])
        elif inst.kind.name == "GetLoops":
            name = next((n for rv, n in blocks.items() if rv.same_as(inst.inputs[0])), None)
            if name is None:
                continue
            loops = sch.get_loops(sch.get_sblock(name))
            out += [rv for rv, loop in zip(inst.outputs, loops) if not isinstance(sch.get(loop).extent, IntImm)]
    return out
