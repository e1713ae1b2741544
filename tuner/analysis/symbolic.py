"""Tuned programs on a symbolic size: literal-split replays, tile multiples, and the choice of buckets.

Beyond the paper (issue 16). MetaSchedule cannot tune a PrimFunc with a symbolic dimension: its
``SamplePerfectTile`` needs a constant extent. A program tuned at one size still describes tiles
for every size, so :func:`symbolic_module` replays its trace on a function of the same operator whose
extents may be symbolic: each tiling sampled on a symbolic loop becomes a literal ``split`` whose
outermost factor is ``None`` (TVM derives ``ceil(n / inner)``); every other decision stays as
recorded. Two ways to run such a program at a size ``n`` (``eto.shapes.dispatch`` builds both):

- ``mask``: the replay on the operator's own function. TVM masks the remainder with a block
  predicate, which keeps LLVM from vectorising the innermost loops.
- ``pad``: the replay on the operator at ``ceil(n / t) * t``, ``t`` the product of the program's
  inner tile factors on that loop (:func:`tile_multiples`), its inputs zero-padded and its output
  cropped. TVM proves the split exact, so there is no predicate; the cost is the padded work.

Which program (and which way) serves which sizes is :func:`choose_buckets`, from
measured latencies: dynamic programming over contiguous ranges of the sampled sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Mapping, Sequence

from tuner.tvm_errors import TVM_ERRORS, error_line

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.tirx import PrimFunc

Kind = Literal["pad", "mask"]
KINDS: tuple[Kind, ...] = ("pad", "mask")


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
        symbolic = [rv for rv, _ in _symbolic_loops(sch, trace)]
    except TVM_ERRORS as exc:  # a block the trace names is not in func
        raise ValueError(f"the program's trace does not fit the function: {error_line(exc)}") from None
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
    except TVM_ERRORS as exc:  # a primitive that refuses the symbolic loops
        raise ValueError(f"the program's trace does not replay on the symbolic function: {error_line(exc)}") from None
    return sch.mod


def tile_multiples(func: "PrimFunc", record: "TuningRecord") -> dict[str, int]:
    """Per symbolic variable of ``func`` (a loop extent that is a bare variable): the least common
    multiple of the inner tile products ``record`` samples on its loops, i.e. the multiple a padded
    extent must have for every split of it to be exact. Variables no tiling touches get 1. O(trace).
    """
    from tvm.ir import IRModule
    from tvm.s_tir import Schedule

    sch = Schedule(IRModule({"main": func}))
    loops = _symbolic_loops(sch, record.trace)
    out = {name: 1 for _, name in loops}
    for inst in record.trace.insts:
        if inst.kind.name != "SamplePerfectTile":
            continue
        name = next((n for rv, n in loops if inst.inputs[0].same_as(rv)), None)
        if name is not None:
            inner = math.prod(int(f) for f in record.trace.decisions[inst][1:])
            out[name] = math.lcm(out[name], inner)
    return out


def _symbolic_loops(sch, trace) -> list[tuple]:
    """(LoopRV, variable name) for the trace's ``GetLoops`` outputs, on blocks it names, whose
    loops in ``sch`` have a symbolic extent (the name is the extent's text)."""
    from tvm.tirx import IntImm

    blocks = {}
    out = []
    for inst in trace.insts:
        if inst.kind.name == "EnterPostproc":
            break  # the postprocessors see the scheduled loops, not the function's own
        if inst.kind.name == "GetSBlock":
            blocks[inst.outputs[0]] = str(inst.attrs[0])
        elif inst.kind.name == "GetLoops":
            name = next((n for rv, n in blocks.items() if rv.same_as(inst.inputs[0])), None)
            if name is None:
                continue
            loops = sch.get_loops(sch.get_sblock(name))
            out += [(rv, str(sch.get(loop).extent)) for rv, loop in zip(inst.outputs, loops)
                    if not isinstance(sch.get(loop).extent, IntImm)]
    return out


# -- the choice of buckets ------------------------------------------------------------------------
@dataclass(frozen=True)
class BucketChoice:
    """Contiguous ranges of the sampled sizes, each served by one candidate."""

    uppers: tuple[int, ...]  # the largest sampled size of each bucket, increasing
    candidates: tuple[int, ...]  # the candidate (row of the latency table) serving each bucket
    cost: float  # sum over sampled sizes of latency / the best candidate's latency at that size

    def candidate_for(self, size: int) -> int:
        """The candidate serving ``size``: the first bucket whose upper bound is >= it (the last
        bucket serves everything larger)."""
        return next((c for u, c in zip(self.uppers, self.candidates) if size <= u), self.candidates[-1])


def choose_buckets(latency: Sequence[Sequence[float]], sizes: Sequence[int], *, max_buckets: int | None = None,
                   tolerance: float = 0.05, weights: Sequence[float] | None = None) -> BucketChoice:
    """Buckets over the sorted ``sizes`` minimising the summed slowdown against the best candidate
    per size; ``latency[c][i]`` is candidate c's measured time at ``sizes[i]`` (inf: cannot run).
    ``weights[i]`` (default all 1) is how much size i counts, e.g. how often it is requested
    (:func:`traffic_weights`): a program slow only at sizes nobody asks for costs nothing.

    Each extra bucket is one more program in the function and one more branch, so the number is the
    smallest whose cost is within ``tolerance`` (relative) of the best cost with up to
    ``max_buckets`` (default: as many as sizes). Dynamic programming over (prefix, bucket count):
    O(B * n^2 * C) for n sizes, C candidates, B buckets, with prefix sums per candidate.
    """
    n, cands = len(sizes), len(latency)
    if n == 0 or cands == 0:
        raise ValueError("choose_buckets needs at least one size and one candidate")
    if list(sizes) != sorted(set(sizes)):
        raise ValueError("sizes must be increasing and distinct")
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    if len(w) != n or not all(x >= 0 and math.isfinite(x) for x in w) or not any(w):
        raise ValueError(f"weights must be {n} finite non-negative numbers, not all zero")
    best = [min(latency[c][i] for c in range(cands)) for i in range(n)]
    if not all(math.isfinite(b) and b > 0 for b in best):
        bad = [sizes[i] for i in range(n) if not (math.isfinite(best[i]) and best[i] > 0)]
        raise ValueError(f"no candidate runs at size(s) {bad}")
    # per candidate, prefix sums of its weighted slowdown and of the sizes it cannot run at (kept
    # apart: inf - inf would be nan); a weightless size must still be served, so it counts there too
    prefix, fails = [], []
    for c in range(cands):
        acc, bad, row, nrow = 0.0, 0, [0.0], [0]
        for i in range(n):
            if math.isfinite(latency[c][i]):
                acc += w[i] * latency[c][i] / best[i]
            else:
                bad += 1
            row.append(acc)
            nrow.append(bad)
        prefix.append(row)
        fails.append(nrow)

    def seg(i: int, j: int) -> tuple[float, int]:  # sizes[i:j] served by one candidate
        return min((prefix[c][j] - prefix[c][i] if fails[c][j] == fails[c][i] else math.inf, c) for c in range(cands))

    kmax = min(max_buckets or n, n)
    inf = math.inf
    # cost[k][j]: sizes[:j] in exactly k buckets; back[k][j] = (i, candidate)
    cost = [[inf] * (n + 1) for _ in range(kmax + 1)]
    back: list[list[tuple[int, int] | None]] = [[None] * (n + 1) for _ in range(kmax + 1)]
    cost[0][0] = 0.0
    for k in range(1, kmax + 1):
        for j in range(1, n + 1):
            for i in range(k - 1, j):
                if cost[k - 1][i] == inf:
                    continue
                s, c = seg(i, j)
                if cost[k - 1][i] + s < cost[k][j]:
                    cost[k][j], back[k][j] = cost[k - 1][i] + s, (i, c)
    floor = min(cost[k][n] for k in range(1, kmax + 1))
    k = next(k for k in range(1, kmax + 1) if cost[k][n] <= floor * (1 + tolerance))
    uppers, chosen, j = [], [], n
    for kk in range(k, 0, -1):
        i, c = back[kk][j]
        uppers.append(sizes[j - 1])
        chosen.append(c)
        j = i
    return BucketChoice(tuple(reversed(uppers)), tuple(reversed(chosen)), cost[k][n])


def traffic_weights(sizes: Sequence[int], traffic: Mapping[int, float]) -> list[float]:
    """Each of the sorted ``sizes``' weight from observed requests ``traffic`` (size -> count): the
    requests it stands for, those above the sampled size below it up to itself (the largest also
    takes those beyond it). O(t log n) for n sizes and t traffic entries."""
    import bisect

    out = [0.0] * len(sizes)
    for size, count in traffic.items():
        if size < 1 or not (count >= 0 and math.isfinite(count)):
            raise ValueError(f"traffic: size {size} with count {count}: sizes must be positive, counts non-negative")
        out[min(bisect.bisect_left(sizes, size), len(sizes) - 1)] += count
    return out
