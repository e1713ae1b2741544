"""Round T's leads from β's own tiles: what the reuse tuner measures first, and the estimator counts.

Algorithm 1 starts from β's tile configuration; a few variants of β's tiles kept on α's loops
(:meth:`~tuner.reuse.space.ReuseSpace.kept_tiles`) are measured before round T's enumeration, each
where β's tuning could not have told α what it needs (beyond the paper). One list
(:func:`lead_tiles`) for the tuner (:meth:`tuner.reuse.search.ReuseTuner.tune`) and the trial estimator
(:func:`tuner.reuse.estimate.count_trials`), so the two cannot count different leads. Leads from other
programs (other operators', β's runner-ups) are the database's: :mod:`eto.planning.lead_sources`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tuner.reuse.cachesets import set_safe_tiles
from tuner.analysis.features import TileConfig
from tuner.reuse.registers import register_tiles
from tuner.analysis.tiling import divisors

if TYPE_CHECKING:  # pragma: no cover
    from tuner.reuse.space import ReuseSpace


def vector_tiles(space: "ReuseSpace", *, same_block: bool = False) -> TileConfig | None:
    """β's kept tiles with the vectorised loop's innermost tile widened to the widest multiple of it
    that divides α's extent and fits one native vector register (``space.native_lanes``); the
    factor comes from the outer levels, outermost first. ``same_block``: the register block keeps
    its size, reshaped: the other loops' innermost tiles, nearest the vectorised loop first, give
    up as much to their outermost level (2 rows of 7 become 1 row of 14). None when there is no
    wider tile, off CPU, or when the target does not admit it. O(d(extent) + loops x levels).

    Beyond the paper. A small source's vector tile reflects its own short rows: MobileNetV2's 1x1
    convolutions derived from a 14x14 bridge that split its 14 columns 2 x 7 kept 7-wide tiles on
    14-112 columns, where MetaSchedule's own programs tile 14 or 16 on this 16-lane (AVX-512) CPU;
    in a set benchmark at N = 100 the nine 1x1 reuses with narrower vector tiles than
    MetaSchedule's ran at 0.69-0.81 of its throughput, the ten with the same width at 0.85-1.11
    (recorded latencies; README, "What a small source cannot teach"). A register block made wider
    and kept as tall may no longer fit the registers; MetaSchedule's programs of those 14-column
    convolutions keep one row in registers where the bridge kept two. With both leads, that set's
    1x1 reuses went from 0.82 to 1.00 of MetaSchedule (median, re-measured side by side).
    """
    if space.kind != "cpu" or space.native_lanes <= 1 or not space.alpha.space:
        return None
    kept = space.kept_tiles()
    tiles = [list(f) for f in kept.space]
    factors, inner = tiles[-1], tiles[-1][-1]
    wide = max(d for d in divisors(space.alpha.space[-1]) if d % inner == 0 and d <= max(inner, space.native_lanes))
    if wide == inner or len(factors) < 2:
        return None
    need = wide // inner
    for i in range(len(factors) - 1):  # need divides the outer levels' product, prime by prime
        take = math.gcd(factors[i], need)
        factors[i], need = factors[i] // take, need // take
    factors[-1] = wide
    if same_block:
        need = wide // inner
        for f in reversed(tiles[:-1]):
            take = math.gcd(f[-1], need)
            f[0], f[-1], need = f[0] * take, f[-1] // take, need // take
        if need == wide // inner:  # no other loop had a register tile to give
            return None
    cfg = TileConfig(kept.kind, tuple(tuple(f) for f in tiles), kept.reduction)
    return cfg if space.valid(cfg) else None


def lead_tiles(space: "ReuseSpace") -> list[TileConfig]:
    """Round T's leads, distinct, in the order measured: β's kept tiles (also when round T holds
    them: it is ranked), with the inner tiles β's extents capped grown, with a native-width vector
    tile in a taller and in a same-size register block (:func:`vector_tiles`), with register
    rows cut to L1's ways (:func:`set_safe_tiles`), and with the register block a register model
    prefers (:func:`~tuner.reuse.registers.register_tiles`)."""
    out: list[TileConfig] = []
    for cfg in (space.kept_lead(), space.grown_tiles(), vector_tiles(space), vector_tiles(space, same_block=True),
                set_safe_tiles(space), register_tiles(space)):
        if cfg is not None and cfg not in out:
            out.append(cfg)
    return out
