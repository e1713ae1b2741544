"""Lead "set-safe" (CPU, beyond the paper): register rows that do not evict each other from L1.

A CPU program's innermost space tiles (level 3 of SSRSRS) are its register block; at each step of
the innermost reduction loop it reads one element per row of every input that a row loop indexes.
When that input's rows lie a multiple of the L1 set span apart (sets x line: 4 KB for a 32 KB 8-way
cache), every row maps to the same set: a 1x1 convolution's weights with 1,024 input channels, a
matmul's [N, K] weights with K = 1,024. With more rows than the cache has ways, the rows evict each
other's lines before the next reduction step reads them, and every step misses L1.

Measured on ResNet-50's C2D[1,256,14,14,1024,1,1] (README, "Where ResNet-50 loses"): β's tiles kept
(16 output channels per register block) ran 1,128-1,222 us at any reduction split; MetaSchedule's
program, the same tiles with the 16 channels split 2 x 8 and an inner reduction chunk of 16-64,
527-541 us (with a chunk of 2, 1,135-1,196 us). Round T keeps β's inner tiles and round M keeps
them too, so Algorithm 1 does not reach it. The lead "set-safe" is β's kept tiles with each such
row tile cut to at most ``ways`` rows (the rest one level out, outside the inner reduction loop)
and that input's contiguous reduction loop given an inner chunk of at least one cache line, so
each row's line is read whole while it is resident. It is measured first in round T beside β's
own tiles; where it wins, round T takes its inner tiles. It exists only where the rows collide.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tuner.analysis.features import Access, LoopNest, TileConfig
from tuner.analysis.host import CacheGeometry, cpu_cache
from tuner.analysis.tiling import largest_divisor_at_most

if TYPE_CHECKING:  # pragma: no cover
    from tuner.reuse.space import ReuseSpace


def colliding_rows(alpha: LoopNest, set_span: int) -> dict[int, Access]:
    """Space loops (not the vectorised last one) along which some input's rows lie a positive
    multiple of ``set_span`` bytes apart, each with that input. O(inputs x loops x dims)."""
    out: dict[int, Access] = {}
    if set_span <= 0:
        return out
    for acc in alpha.inputs:
        strides = acc.strides()
        for d in range(len(alpha.space) - 1):
            step = strides[d] * acc.dtype_bytes if d < len(strides) else 0
            if step > 0 and step % set_span == 0 and alpha.space[d] > 1:
                out.setdefault(d, acc)
    return out


def set_safe_config(kind: str, alpha: LoopNest, kept: TileConfig, cache: CacheGeometry | None) -> TileConfig | None:
    """``kept`` with every colliding row tile (:func:`colliding_rows`) cut to at most ``cache.ways``
    rows and the colliding input's contiguous reduction loop chunked to at least a cache line;
    None where no row tile collides (or not CPU, or an unknown cache). O(loops x dims)."""
    if kind != "cpu" or cache is None or not cache.ways or not cache.line:
        return None
    if any(len(f) != 4 for f in kept.space) or any(len(f) != 2 for f in kept.reduction):
        return None
    if len(kept.space) != len(alpha.space) or len(kept.reduction) != len(alpha.reduction):
        return None  # tiles of another loop nest (a source whose nest differs): nothing to cut
    space, reduction, changed = list(kept.space), list(kept.reduction), False
    for d, acc in colliding_rows(alpha, cache.set_span).items():
        f0, f1, f2, rows = space[d]
        if rows <= cache.ways:
            continue
        g = largest_divisor_at_most(rows, cache.ways)
        space[d], changed = (f0, f1, f2 * (rows // g), g), True
        strides = acc.strides()
        line = max(cache.line // acc.dtype_bytes, 1)
        for r, extent in enumerate(alpha.reduction):
            outer, chunk = reduction[r]
            if strides[len(alpha.space) + r] == 1 and chunk < line:
                c = next((c for c in range(line, extent + 1) if extent % c == 0), chunk)
                reduction[r] = (extent // c, c)
    return TileConfig(kind, tuple(space), tuple(reduction)) if changed else None


def set_safe_tiles(space: "ReuseSpace") -> TileConfig | None:
    """The lead "set-safe" of a reuse space: :func:`set_safe_config` of its kept tiles on this
    host's L1, when the target admits it and it differs from them. One source for the tuner's
    lead and the trial estimator's count."""
    if space.kind != "cpu":
        return None
    kept = space.kept_tiles()
    cfg = set_safe_config(space.kind, space.alpha, kept, cpu_cache(1))
    return cfg if cfg is not None and cfg != kept and space.valid(cfg) else None
