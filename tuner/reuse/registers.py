"""Lead "register block" (CPU, beyond the paper): the innermost tiles a register model prefers.

A CPU program's innermost space tiles (level 3 of SSRSRS) are its register block: at each step of
the innermost reduction loop every accumulator of the block takes one multiply-add. MetaSchedule's
postprocessor vectorises the block's innermost loops fused, as long as they are contiguous in the
output (each inner loop's tile its whole extent) and their product is at most
:data:`~tuner.analysis.tiling.MAX_INNERMOST`; the other loops of the block are rows of vectors.

Every candidate of a reuse search keeps β's register block (round T's inner tiles follow β's), and β's
block suits β. Measured on ResNet-50's C2D[1,512,7,7,2048,1,1] (set benchmark, N = 100, seed 1 on
this CPU): the reuse kept its source's block of 8 output channels x 7 columns, one 7-lane vector per
row, 9 loads for 8 multiply-adds per step: 699 us; MetaSchedule's program held 4 channels x all
7 x 7 outputs, one 49-wide vector per channel, 8 loads for 16 multiply-adds: 368 us. The lead is β's
kept tiles with the register block the model below finds cheapest, the factors moved from or to the
outer levels; measured first in round T beside β's own tiles, and where it wins, round T and the
rounds after take its inner tiles. The accumulators stay in registers only while the innermost
reduction loop runs and LLVM keeps them in registers only where that loop and the block's rows
are unrolled, so the lead also gives that loop at least :data:`MIN_STEPS` steps (the reuse's inner
chunk there was 4 input channels, MetaSchedule's 32) and is measured with the smallest unroll
limit that covers rows x steps (:func:`covering_unroll`; with β's limit of 64 it ran 1,021 us, with
512 600 us).

The model, per step of the innermost reduction loop: vector multiply-adds = rows x vectors per row;
loads = per input, one vector load per row of its footprint that runs along the contiguous vector
(an input the vector loops do not index is broadcast: one load per element; one the vector indexes
with a stride is gathered: one load per element too); cycles = the larger of multiply-adds and loads
over the two ports each has on current x86 and Arm cores, and at least one multiply-add latency
(every accumulator is updated once per step). The block with the fewest cycles per useful lane
wins (ties: the larger block); blocks whose accumulators exceed the vector registers less a few for
the operands are not considered.

The lead has a second case (:func:`latency_bound`): β's vector fills a register but its block keeps
fewer accumulators than the multiply-add ports take per latency (a BERT-Base root whose search ended
on one row of four vectors). There the lead keeps β's vector and adds rows.
"""

from __future__ import annotations

import functools
import math
from itertools import product
from typing import TYPE_CHECKING, Mapping, Sequence

from tuner.analysis.features import LoopNest, TileConfig
from tuner.analysis.host import vector_registers
from tuner.analysis.tiling import accumulators, divisors, vector_extent, vector_loops

if TYPE_CHECKING:  # pragma: no cover
    from tuner.reuse.space import ReuseSpace

#: Multiply-add and load ports, and a multiply-add's latency in cycles (x86 since Skylake, Arm Neoverse).
PORTS, FMA_LATENCY = 2, 4
#: Vector registers kept free of accumulators, for the operands of a step.
OPERAND_REGISTERS = 4
#: Reduction steps per sweep of the innermost reduction loop at least: the block's accumulators are
#: loaded and stored once per sweep. X's lead ran 600 us with 16 steps, 428 us with 32 (MetaSchedule's
#: program 381-395 us, its chunk 32), both fully unrolled.
MIN_STEPS = 32


def register_cost(nest: LoopNest, inner: Sequence[int], lanes: int) -> float:
    """Cycles per useful multiply-add lane of the register block ``inner`` on ``nest`` (the model of
    the module docstring). O(inputs x dims x loops)."""
    v = vector_extent(nest.space, inner)
    vol = math.prod(inner)
    fmas = vol // v * math.ceil(v / lanes)
    vloops = vector_loops(nest.space, inner)
    step = tuple(inner) + tuple(1 for _ in nest.reduction)
    loads = 0
    for a in nest.inputs:
        elems, strides = a.elements(step), a.strides()
        run = 1  # elements the vector reads contiguously: its loops while each continues the last
        for d in vloops:
            if strides[d] == run:
                run *= inner[d]
            elif strides[d]:
                break
        loads += elems // run * math.ceil(run / lanes) if run > 1 else elems  # else broadcast or gathered
    return max(fmas / PORTS, loads / PORTS, FMA_LATENCY) / vol


def best_register_block(nest: LoopNest, lanes: int, registers: int,
                        fixed: Mapping[int, int] | None = None) -> tuple[int, ...] | None:
    """The register block (one innermost factor per space loop, each dividing its extent, ``fixed``
    ones given) of least :func:`register_cost` whose accumulators fit ``registers - OPERAND_REGISTERS``;
    ties go to the larger block, then to the first enumerated. None for a nest without space loops.
    O(prod of the divisor counts x cost)."""
    if not nest.space or lanes < 1:
        return None
    return _best_register_block(nest, lanes, registers, tuple(sorted((fixed or {}).items())))


@functools.lru_cache(maxsize=1 << 12)
def _best_register_block(nest: LoopNest, lanes: int, registers: int,
                         fixed_items: tuple[tuple[int, int], ...]) -> tuple[int, ...] | None:
    # cached: the trial estimator plans every pair's reuse, each asking for α's block again
    budget = max(registers - OPERAND_REGISTERS, 1)
    fixed = dict(fixed_items)
    best, key = None, None
    for inner in product(*((fixed[d],) if d in fixed else divisors(e) for d, e in enumerate(nest.space))):
        if accumulators(nest.space, inner, lanes) > budget:
            continue
        k = (register_cost(nest, inner, lanes), -math.prod(inner))
        if key is None or k < key:
            best, key = inner, k
    return best


def latency_bound(space: Sequence[int], inner: Sequence[int], lanes: int) -> bool:
    """Whether the register block ``inner`` keeps fewer accumulators than the multiply-add ports can
    take per latency (PORTS x FMA_LATENCY): each step then waits on its own multiply-adds. O(loops)."""
    return accumulators(space, inner, lanes) < PORTS * FMA_LATENCY


def _retile(factors: Sequence[int], inner: int) -> tuple[int, ...]:
    """One loop's four levels with innermost factor ``inner``: a smaller block gives its factor to
    level 2 (the block tile is kept); otherwise level 2 (the register blocks one reduction chunk
    sweeps) and then level 1 keep what still divides, level 0 (the parallel blocks) takes the rest.
    Level 2 first: four rows taken from it on a BERT-Base feed-forward matmul (``[1,32,1,4]``)
    ran 7.1 ms, from level 1 (``[1,8,4,4]``) 3.3 ms (the β run with one row, below)."""
    f0, f1, f2, f3 = factors
    if f3 % inner == 0:
        return f0, f1, f2 * (f3 // inner), inner
    rest = f0 * f1 * f2 * f3 // inner
    g2 = math.gcd(f2, rest)
    g1 = math.gcd(f1, rest // g2)
    return rest // g1 // g2, g1, g2, inner


def register_tiles(space: "ReuseSpace") -> TileConfig | None:
    """β's kept tiles with :func:`best_register_block`'s register block, where α's output rows are
    shorter than a vector register (only rows fused make a full vector) and β's block leaves more
    than half the lanes idle (X: 7 of 16), or where β's vector fills a register but its block is
    :func:`latency_bound`; None elsewhere, where the kept block is already the cheapest, off CPU,
    without inputs to model, or where the moved factors would leave fewer parallel blocks than
    ``min(kept's, 4 x cores)``. O(prod of α's divisor counts).

    Why the gate: on ResNet-50's pairs (`reuse_ab.py --switch register`) the lead won by
    more than 10% only on 7 x 7 convolutions (X: 453-488 against 704-718 us; C2D[1,2048,7,7,512,1,1]:
    444-476 against 600-644 us); on 28- and 56-wide rows (a narrow vector: the vector lead's case)
    it cost its compile time (a block unrolled 512 deep: 9-10 s against 4-5 s per reuse) for
    nothing. A latency-bound block is the other case: a BERT-Base root whose MetaSchedule search
    ended on one row of four vectors (538 us, 458 us with four rows) passed that row to its
    feed-forward reuses, which ran 3.1-3.3 ms against 1.7-2.1 ms from the four-row root. There the
    lead ran 3.3 and 4.7 ms where the kept tiles ran 6.3 and 6.8, though the reuses it led ended
    within noise of those without it
    (experiments/results/reuse_ab_register_bert_layer_latency_xeon.json). Not where β's vector
    gathers an input (:meth:`LoopNest.gathered`; the catalogue's ``BMM`` reads ``Y[b, j, k]``
    along its vector; a model's pre-packed weight is read contiguously, :attr:`Access.packed`):
    the lead's 16 rows of one gathered vector over a 32-step chunk ran 2.6-5.4x
    slower than the reuse's best in all five BERT-Base reuses where it fired."""
    if space.kind != "cpu" or space.native_lanes <= 1 or not space.alpha.space or not space.alpha.inputs:
        return None
    kept = space.kept_tiles()
    if any(len(f) != 4 for f in kept.space):
        return None
    now, lanes = tuple(f[-1] for f in kept.space), space.native_lanes
    v = vector_extent(space.alpha.space, now)
    short = space.alpha.space[-1] < lanes and v * 2 <= lanes  # only rows fused fill a vector
    if not short and not (v >= lanes and latency_bound(space.alpha.space, now, lanes)):
        return None  # a narrow vector on long rows is the vector lead's case; a full block is kept
    if not short and space.alpha.gathered(vector_loops(space.alpha.space, now)[0]):
        return None  # more rows over a gathered vector: slower, and slow to compile (docstring)
    # latency-bound under a full vector: β's run chose the vector; the lead adds rows around it
    fixed = None if short else {d: now[d] for d in vector_loops(space.alpha.space, now)}
    inner = best_register_block(space.alpha, lanes, space.registers or vector_registers(), fixed)
    if inner is None or inner == now:
        return None
    if register_cost(space.alpha, inner, lanes) >= register_cost(space.alpha, now, lanes):
        return None
    tiles = tuple(_retile(f, r) for f, r in zip(kept.space, inner))
    parallel = math.prod(f[0] * f[1] for f in tiles)
    if parallel < min(math.prod(f[0] * f[1] for f in kept.space), 4 * space.cores):
        return None
    cfg = TileConfig(kept.kind, tiles, long_chunk(space.alpha.reduction, kept.reduction))
    return cfg if space.valid(cfg) else None


def long_chunk(extents: Sequence[int], reduction: Sequence[Sequence[int]],
               steps: int = MIN_STEPS) -> tuple[tuple[int, ...], ...]:
    """``reduction`` with its inner chunk (the product of the innermost factors) grown to at least
    ``steps`` where the loops allow: the largest reduction loop first, its innermost factor the
    smallest divisor of its extent that reaches it (or the whole loop). O(loops x d(extent))."""
    tiles = [tuple(f) for f in reduction]
    for r in sorted(range(len(tiles)), key=lambda r: -extents[r]):
        chunk = math.prod(f[-1] for f in tiles)
        if chunk >= steps:
            break
        need = math.ceil(steps * tiles[r][-1] / chunk)
        inner = next((d for d in divisors(extents[r]) if d >= need), extents[r])
        if inner > tiles[r][-1] and len(tiles[r]) == 2:
            tiles[r] = (extents[r] // inner, inner)
    return tuple(tiles)


def covering_unroll(cfg: TileConfig, space: Sequence[int], options: Sequence[int]) -> int | None:
    """Index of the smallest of the sketch's unroll ``options`` that unrolls ``cfg``'s register
    rows times its reduction chunk, else the largest; None without options."""
    if not options:
        return None
    inner = tuple(f[-1] for f in cfg.space)
    need = math.prod(inner) // vector_extent(space, inner) * math.prod(f[-1] for f in cfg.reduction)
    return next((i for i, u in enumerate(options) if int(u) >= need), len(options) - 1)
