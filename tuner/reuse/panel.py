"""Round "panel" (CPU, beyond the paper): the register-blocked panel of a matmul-like loop nest.

MetaSchedule's CPU programs for BERT-Base's feed-forward matmul [L x 3072] x [3072 x 768] fall into
two families. Most of its 200-trial runs split the L rows between threads, so each thread streams
all 9.4 MB of weights; at seq 192 and 256 it happened on the other: all L rows in one inner tile
(level 2 of SSRSRS, inside the outer reduction loop), the threads splitting only the vectorised
columns, so a k-chunk of a column panel of the weights sits in registers while every row passes.
Replayed at every length that family runs 23-26 us per row against 41-47 for MetaSchedule's own
programs at 128 and 384 (docs/findings.md, "panel_family.py"). It wins only as a whole -- the
rows whole, an inner column tile of one or two vectors in one or two registers, an inner reduction
chunk, and an unroll that covers them -- and each part alone is slower than β's tiles, so
Algorithm 1's rounds, which change one decision at a time from β's program, do not reach it.
Round "panel" tries the combinations, ranked and measured like any other round.

The panel's second family, a *blocked* panel, is MetaSchedule's own best on the BERT-Base layer's
fused feed-forward tasks (matmul + bias, seq 128): the rows whole inside the outer reduction loop
too, but in blocks of 4-8 register rows of 2-4 vectors, with a reduction chunk of 32. A reuse
from the layer's 768 x 768 root kept the root's tiles (a fourth of the rows per thread tile,
outside the reduction loop; all 16 best programs of that root alike) and its search ended at
2.8-3.1 ms against MetaSchedule's 2.2-2.4 ms; blocked panels re-measured beside MetaSchedule's
best ran 2.16-2.26 ms (4 rows x 4 vectors and 8 rows x 2 vectors, chunk 32).

It applies where a panel can pay: some input (the weights) is larger than a core's private cache,
is read along the vectorised loop and not along another space loop (the rows), and the rows'
accumulators of the widest panel fit that cache. The blocked family only where no input is gathered
along the vectorised loop (the layer's weights ``W[k, j]`` are contiguous there; the catalogue's
``BMM`` reads ``Y[b, j, k]``): each step of a blocked panel's 32-step chunk, unrolled, then gathers
every vector of its block element by element. Measured on the BERT-Base set (N = 100, every build
of one run logged): the six blocked panels of its two feed-forward reuses ran
3.5-5.3x slower than their reuse's best or were cut at the 2 s build cap (LLVM took 13 s on those
two), while the first family, chunks of 4-8 steps, won both reuses.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

from tuner.analysis.features import LoopNest, TileConfig
from tuner.analysis.kinds import Kind

#: Vectors per inner column tile (SSRSRS level 3), inner column tiles per row (level 2), inner
#: reduction chunks: the panel's register block is (tiles x vectors) wide and runs a chunk per step.
PANEL_VECTORS = (1, 2)
PANEL_TILES = (1, 2)
PANEL_CHUNKS = (4, 8)
#: Blocked panels: register rows x vectors per row (at most ``BLOCKED_ACCUMULATORS``, half of an
#: AVX-512 or Neon register file: the rest hold a step's operands), one reduction chunk.
BLOCKED_ROWS = (4, 8)
BLOCKED_VECTORS = (2, 4)
BLOCKED_ACCUMULATORS = 16
BLOCKED_CHUNK = 32


def panel_rows(alpha: LoopNest, lanes: int, cache_bytes: int) -> int | None:
    """The space loop a panel keeps whole in one inner tile: the longest loop (not the vectorised
    last one) along which some input larger than ``cache_bytes`` is not read while it is read along
    the vectorised loop; None when there is none, or the widest panel's accumulators for it would
    not fit the cache. O(inputs x loops)."""
    last = len(alpha.space) - 1
    if last < 1 or not alpha.reduction or cache_bytes <= 0:
        return None
    rows = None
    for acc in alpha.inputs:
        if math.prod(acc.shape) * acc.dtype_bytes <= cache_bytes or not any(c[last] for c in acc.coeffs):
            continue
        for d in range(last):
            if alpha.space[d] > 1 and not any(c[d] for c in acc.coeffs) and \
                    (rows is None or alpha.space[d] > alpha.space[rows]):
                rows = d
    widest = max(PANEL_TILES) * max(PANEL_VECTORS) * lanes * 4
    return rows if rows is not None and alpha.space[rows] * widest <= cache_bytes else None


def panel_configs(kind: Kind, alpha: LoopNest, kept: TileConfig, lanes: int, cache_bytes: int,
                  register_lanes: int = 0) -> tuple[TileConfig, ...]:
    """Round "panel"'s tile configurations of α: the rows whole at level 2 (and 3: a blocked panel's
    register rows), the vectorised loop (rest, 1, tiles, vectors x ``lanes``), the last reduction
    loop (rest, chunk) and the others outer; other space loops as ``kept`` (β's tiles kept on α's
    loops). ``register_lanes`` (default ``lanes``): the width of a blocked panel's vectors, the
    target's registers; no blocked panel where the vectorised loop gathers an input
    (:meth:`LoopNest.gathered`). Only CPU configurations of four space and two reduction levels,
    and only splits that divide α's extents. O(choices)."""
    if kind != "cpu" or any(len(f) != 4 for f in kept.space) or any(len(f) != 2 for f in kept.reduction):
        return ()
    rows = panel_rows(alpha, lanes, cache_bytes)
    if rows is None:
        return ()
    last, cols, red = len(alpha.space) - 1, alpha.space[-1], alpha.reduction
    out: list[TileConfig] = []
    native = register_lanes or lanes  # a blocked panel's vectors are registers: they bound its accumulators
    blocked = [(r, 1, v * native, BLOCKED_CHUNK) for r, v in itertools.product(BLOCKED_ROWS, BLOCKED_VECTORS)
               if r * v <= BLOCKED_ACCUMULATORS and not alpha.gathered(last)]
    first = [(1, n, v * lanes, k) for v, n, k in itertools.product(PANEL_VECTORS, PANEL_TILES, PANEL_CHUNKS)]
    for r, n, v, k in first + blocked:
        width = n * v
        if cols % width or red[-1] % k or alpha.space[rows] % r:
            continue
        space = tuple((1, 1, e // r, r) if d == rows else (cols // width, 1, n, v) if d == last else f
                      for d, (e, f) in enumerate(zip(alpha.space, kept.space)))
        reduction = tuple((e // k, k) if i == len(red) - 1 else (e, 1) for i, e in enumerate(red))
        out.append(TileConfig(kind, space, reduction))
    return tuple(out)


def register_rows(cfg: TileConfig) -> int:
    """The rows of a panel's register block (1 for the first family, 4-8 for a blocked one)."""
    return math.prod(f[-1] for f in cfg.space[:-1])


def blocked_lead(configs: Sequence[TileConfig]) -> TileConfig | None:
    """The blocked panel round "panel" measures first whatever its rank: the largest register block
    (rows x vector width), then the fewer rows; None without one. The round's ranker has learned
    from β's programs, none of them a blocked panel, and in the BERT layer's run it ranked them out
    of the round's first batch (the feed-forward reuses ended at 2.6-2.9 ms where a blocked panel
    ran 2.2 ms). O(configs)."""
    return max((c for c in configs if register_rows(c) > 1),
               key=lambda c: (register_rows(c) * c.space[-1][2] * c.space[-1][3], -register_rows(c)), default=None)


def widest_panel(configs: Sequence[TileConfig]) -> TileConfig | None:
    """The panel with the widest register block (inner column tiles x vector width), then the
    longest reduction chunk; None for none. The instant program's one pick, made without measuring:
    of round "panel"'s winners on E7's eight large matmuls (seq 64-384), all eight ran two vectors
    per tile and six of them two tiles (blocked panels, measured too, are not picked
    unmeasured). O(configs)."""
    return max((c for c in configs if register_rows(c) == 1),
               key=lambda c: (c.space[-1][2] * c.space[-1][3], c.reduction[-1][-1]), default=None)


def unroll_covering(cfg: TileConfig, options: Sequence[int]) -> int | None:
    """Index of the smallest unroll option that covers the panel's register block (its register
    rows times its inner column tiles times its reduction chunk), else the largest; None without
    options."""
    if not options:
        return None
    need = register_rows(cfg) * cfg.space[-1][2] * cfg.reduction[-1][-1]
    return next((i for i, u in enumerate(options) if int(u) >= need), len(options) - 1)
