"""Gathered vectors in unrolled code (CPU, beyond the paper): a static bound on what LLVM compiles.

MetaSchedule vectorises a CPU program's innermost tiles fused; an input read with a stride along
that vector (BMM's ``Y[b, j, k]`` along ``j``) is gathered lane by lane, and the auto-unroll limit
copies the loop body, gathers included, once per unrolled iteration. Past a few thousand gathered
lanes LLVM takes seconds to compile the body and the program runs slowly. The count is exact:
:func:`unrolled_gathers` matched the lowered code of all 489 candidates that ran in two logged
BERT-Base runs. Round "unroll" does not try a limit over the bound, and GetS lowers any other candidate's
limit to the largest option within it (:func:`bounded_unroll`).
"""

from __future__ import annotations

from typing import Sequence

from tuner.analysis.features import LoopNest, TileConfig
from tuner.analysis.tiling import vector_extent, vector_loops

#: Gathered lanes an unrolled loop body may hold. A vector that reads an input with a stride is
#: built lane by lane (a scalar load and an insert each), so 4,096 of them are some 8k instructions,
#: a 32 KB L1 instruction cache's worth. Measured on BERT-Base's BMMs (two runs, every build logged):
#: of the 20 candidates over it, 10 were cut at the 2 s build cap and 10 ran
#: 2.6-7.2x slower than their operator's best (alone they compiled in 0.7-13 s); the operators'
#: best programs held 0-512.
MAX_UNROLLED_GATHERS = 4096


def unrolled_gathers(nest: LoopNest, cfg: TileConfig, unroll: int) -> int:
    """Gathered lanes TVM unrolls in one loop body of the CPU program ``cfg`` (SSRSRS: space levels
    1-3 and reduction levels 0-1 below the parallel loop) under the auto-unroll limit ``unroll``:
    the iterations of the loops it unrolls, from the innermost out while their product stays
    within the limit (the vector's loops count once), times the vector's lanes, times the inputs
    the vector gathers (:meth:`LoopNest.gathers`). O(loops x inputs)."""
    if len(cfg.reduction) != len(nest.reduction) or any(len(f) != 4 for f in cfg.space) or \
            any(len(f) != 2 for f in cfg.reduction):
        return 0
    inner = tuple(f[-1] for f in cfg.space)
    vloops = vector_loops(nest.space, inner)
    gathered = nest.gathers(vloops[0]) if vloops else 0
    if not gathered:
        return 0
    rev_space, rev_red = cfg.space[::-1], cfg.reduction[::-1]
    loops = [inner[d] for d in reversed(range(len(inner))) if d not in vloops] + [f[1] for f in rev_red] + \
        [f[2] for f in rev_space] + [f[0] for f in rev_red] + [f[1] for f in rev_space]
    iterations = 1
    for extent in loops:
        if iterations * extent > unroll:
            break
        iterations *= extent
    return iterations * vector_extent(nest.space, inner) * gathered


def bounded_unroll(nest: LoopNest, cfg: TileConfig, options: Sequence[int], index: int) -> int:
    """Index of the largest unroll option up to ``options[index]`` that keeps
    :func:`unrolled_gathers` within :data:`MAX_UNROLLED_GATHERS` (``index`` itself where it does;
    the smallest option where none does). O(options x loops)."""
    fits = [i for i, u in enumerate(options) if int(u) <= int(options[index])
            and unrolled_gathers(nest, cfg, int(u)) <= MAX_UNROLLED_GATHERS]
    if index in fits:
        return index
    value = lambda i: int(options[i])  # noqa: E731
    return max(fits, key=value) if fits else min(range(len(options)), key=value)
