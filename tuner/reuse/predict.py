"""The instant program's derivation: α's program from β's best one, nothing measured (issue 16).

Beyond the paper. When only a dimension's size changed, β's tile factors kept on α's loops (the
outer factors following the new extents) are a program as good as a search's, in a fraction of
a second: :func:`predict` (used by :mod:`eto.runs.instant`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, get_args

from tuner.reuse.cachesets import set_safe_tiles
from tuner.analysis.features import TileConfig
from tuner.analysis.subsketch import INLINE
from tuner.reuse.panel import unroll_covering, widest_panel
from tuner.reuse.search import ReuseTuner, built_candidate, Candidate
from tuner.reuse.space import Growth, ReuseSpace
from tuner.analysis.tiling import MAX_INNERMOST, largest_divisor_at_most

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target
    from tvm.tirx import PrimFunc

    from tuner.reuse.cost_model import LearnedRanker
    from tuner.reuse.space import RangeName


@dataclass(frozen=True)
class Prediction:
    """α's program derived from β's without measuring anything (see :func:`predict`)."""

    schedule: Any  # the postprocessed schedule: ``schedule.mod`` builds
    config: TileConfig | None
    by: str  # "kept" / "kept-parallel" (/ "-wide"): β's tiles kept; "set-safe": tuner.reuse.cachesets;
    # "panel": round "panel"'s widest block, "panel-stageK" the same written back as α's K-th sibling sketch does
    # (tuner.reuse.search.write_stage_siblings); "vector", "vector-native": full_vector_tiles; any of them
    # "-inlined": with α's padding inlined (inlined); "ranker": the learned model chose; "nearest": β's
    # block and thread sizes
    ranked: int  # candidates the choice was made among
    seconds: float
    _tuner: ReuseTuner = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _cand: Candidate | None = field(repr=False, compare=False, default=None)  # what it was built from
    #: programs as cheap and as likely (β's tiles kept, α's growth placed otherwise, see
    #: :meth:`~tuner.reuse.space.ReuseSpace.kept_tiles`): :mod:`eto.runs.instant` times them all and keeps the fastest
    alternatives: tuple["Prediction", ...] = ()

    def record(self, seconds: float) -> "TuningRecord":
        """The prediction as α's TuningRecord, with a run time measured by the caller."""
        return self._tuner.record_of(self.schedule, seconds)


def predict(func: "PrimFunc", source_record: "TuningRecord", target: "Target", *,
            ranker: "LearnedRanker | None" = None, vector_lanes: int = 8,
            ranges: RangeName | None = None) -> Prediction:
    """α's program from β's best one with no measurement: the instant program for a new shape.

    Beyond the paper: β's tile factors kept on α's loops, only the outer factors following the new
    extents (:meth:`ReuseSpace.kept_tiles`, ``by="kept"``; on CPU the variant with α's growth inside
    the parallel loop, ``by="kept-parallel"``, comes as an alternative, and so does the widest
    register-blocked panel where round "panel" applies, ``by="panel"``: :mod:`tuner.reuse.panel`; β's
    tiles kept lose 2x to it on large matmuls far from β's length; and so do the set-safe rows, a
    full-vector innermost tile (:func:`full_vector_tiles`) and the panel through α's other write stages:
    :func:`_kept_variants`). On BERT-Base's operators at three
    new lengths they ran at a median 0.87 of the best sampled round-T candidate (worst 0.41); the
    learned ranker's pick at 0.72 (worst 0.15), the nearest BShape at 0.68
    (experiments/results/instant_choice.json).
    When those tiles do not build, round T is built (GetS) but not measured: a ``ranker`` that
    knows α's shape (:meth:`~tuner.reuse.cost_model.LearnedRanker.knows`, as in reuse) picks the
    best-ranked candidate, then ranks round M's variants of it against it; without one the
    candidate keeping β's per-block work and threads per block wins. Costs one design-space
    generation and one replay (O(d_B x d_T) replays in the fallback), well under a second on CPU.
    Raises ValueError when β's sketch is not in α's design space or nothing derived passes the
    target's checks.
    """
    start = time.perf_counter()
    tuner = ReuseTuner(func, source_record, target, vector_lanes=vector_lanes, ranges=ranges)
    if tuner.has_mlt:
        kept = _kept_variants(tuner)
        if kept:
            secs = time.perf_counter() - start
            first, *rest = (Prediction(c.sch, c.cfg, by, 1, secs, tuner, _cand=c) for c, by in kept)
            return replace(first, alternatives=tuple(rest))
    if not tuner.has_mlt:
        configs: list[TileConfig | None] = [None]
    else:
        configs = list(tuner.space.t_round()) or list(tuner._fallback())
    built = [c for c in (tuner._cand(cfg) for cfg in configs) if built_candidate(tuner, c)]
    if not built:
        raise ValueError("no program derived from the source passes the target's checks")
    learned = ranker is not None and ranker.knows(tuner.alpha_mod)
    ranked = len(built)
    if learned:
        best = built[ranker.rank(tuner.alpha_mod, [c.sch for c in built])[0]]  # type: ignore[union-attr,index]
        if tuner.has_mlt:
            variants = [v for v in (best.but(cfg=cfg) for cfg in tuner.space.m_round(best.cfg)) if built_candidate(tuner, v)]
            if variants:
                pool = [best] + variants
                ranked += len(variants)
                best = pool[ranker.rank(tuner.alpha_mod, [c.sch for c in pool])[0]]  # type: ignore[union-attr,index]
    else:
        beta = tuner.beta_cfg

        def distance(c: Candidate) -> float:
            if c.cfg is None or beta is None:
                return 0.0
            return (abs(math.log(math.prod(c.cfg.bshape) / math.prod(beta.bshape)))
                    + abs(math.log(c.cfg.threads_per_block / beta.threads_per_block)))

        best = min(built, key=distance)
    return Prediction(best.sch, best.cfg, "ranker" if learned else "nearest", ranked,
                      time.perf_counter() - start, tuner, _cand=best)


def _kept_variants(tuner: ReuseTuner) -> list[tuple[Candidate, str]]:
    """The candidates keeping β's tiles that build on α, each with its ``by``: both placements of α's
    growth, each with a free vector tile narrow and wide (``-wide``), the set-safe rows, the full-vector
    innermost tiles (near β's run, and one native register) and the widest panel (each where it applies
    and differs from those before it), the panel also through each other write stage."""
    kept: list[tuple[Candidate, str]] = []
    configs = [(tuner.space.kept_tiles(growth=g, wider=w), ("kept" if g == "outer" else f"kept-{g}") + w * "-wide")
               for w in (False, True) for g in get_args(Growth)]
    native = tuner.space.native_lanes  # the target's register width (16 float32s with AVX-512)
    configs += [(set_safe_tiles(tuner.space), "set-safe"),  # register rows that collide in L1 cut to its ways
                (full_vector_tiles(tuner.space), "vector"),
                (full_vector_tiles(tuner.space, lanes=native) if native > 1 else None, "vector-native")]
    for cfg, by in configs:
        if cfg is not None and tuner.space.valid(cfg) and all(c.cfg != cfg for c, _ in kept):
            if built_candidate(tuner, cand := tuner._cand(cfg)):
                kept.append((cand, by))
    panel = widest_panel(tuner.space.panel_round())
    if panel is not None and tuner._fits(panel) and all(c.cfg != panel for c, _ in kept):
        cand = tuner._cand(panel, unroll=unroll_covering(panel, tuner.unroll_values))
        if built_candidate(tuner, cand):
            kept.append((cand, "panel"))
            for k in range(1, len(tuner.siblings) + 1):  # its tile written back through another stage
                if built_candidate(tuner, staged := cand.but(stage=k)):
                    kept.append((staged, f"panel-stage{k}"))
    return kept


def inlined(pred: Prediction) -> Prediction | None:
    """``pred`` with α's padding-like producers inlined into their consumer (``by`` + ``-inlined``), the
    rest the same; None where it has no such producer, places them so already, or inlining does not
    replay. O(one replay).

    Beyond the paper. β's program placed its padding for β's shape: MobileNetV2's depthwise
    convolutions mostly at the root, a separate pass over a padded copy and a parallel region of its
    own, which at 7x7 and 14x14 costs as much as the convolution. Neither placement wins everywhere
    (β's kept tiles with the padding inlined ran up to 3x slower), so :mod:`eto.runs.instant` times the
    twins of the fastest variants beside them: MobileNetV3's 15 depthwise convolutions from V2's
    programs ran at a geometric mean of 0.94 of V3's own tuned programs without twins and 1.28 with
    a twin of every variant (Zen 5, 2 threads)."""
    tuner, cand = pred._tuner, pred._cand
    if cand is None:
        return None
    producers = sorted(tuner.sub.locations() & tuner.sketch.tainted_decisions())  # the padding-like stages
    if not producers or all(cand.extra.get(i) == INLINE for i in producers):
        return None
    twin = cand.but(extra={**cand.extra, **{i: INLINE for i in producers}})
    # GetS falls back to other placements where inlining does not replay: only a real twin
    if not built_candidate(tuner, twin) or not all(twin.extra.get(i) == INLINE for i in producers):
        return None
    return replace(pred, schedule=twin.sch, by=f"{pred.by}-inlined", alternatives=(), _cand=twin)


def full_vector_tiles(space: ReuseSpace, *, lanes: int | None = None) -> TileConfig | None:
    """β's kept tiles (:meth:`~tuner.reuse.space.ReuseSpace.kept_tiles`) with the innermost tile of the
    vectorised loop (CPU: the last space loop) one or two vectors wide, where the kept one is not a whole
    number of vectors and α's extent has such a divisor; else None.

    Beyond the paper. MetaSchedule's best program at one size can leave that tile at 1 and run fast
    because LLVM vectorises the loop above it; at another extent LLVM may not: BERT-Base's 12x128x128x64
    attention matmul's kept tiles at seq 40 (a 40x40 block, innermost 1) ran scalar, 132 us hot, the same
    block with an 8-wide innermost tile 14 us (Zen 5, 2 threads). Wider tiles ran little faster and took
    LLVM far longer: 16 lanes 10.2 us and 0.11 s to build, 64 lanes 10.3 us and 1.35 s (the 64x40x40
    matmul), which a search around the program pays at every candidate. The width nearest β's run along
    the loop (its two inner levels) is taken, level 2 makes a thread's block as wide as β's run or
    less (the rest of the extent goes to the parallel levels, β's outermost factor kept where it
    divides): at seq 200 a 200-wide block per thread, its accumulators past L1, ran 8x slower than a
    40-wide one. ``lanes``: exactly that width instead (the target's native register,
    ``space.native_lanes``: a second variant, see :func:`_kept_variants`). O(divisors of the extent)."""
    kept, one = space.kept_tiles(), lanes or space.vector_lanes
    if space.kind != "cpu" or not kept.space or len(kept.space[-1]) < 4 or kept.space[-1][-1] % one == 0:
        return None
    extent, last = space.alpha.space[-1], kept.space[-1]
    widths = [w for w in ((lanes,) if lanes else (one, 2 * one)) if extent % w == 0 and w <= MAX_INNERMOST]
    if not widths:
        return None
    run = math.prod(space.beta_cfg.space[-1][2:])
    inner = min(widths, key=lambda w: (abs(math.log(w / max(run, 1))), w))
    rest = extent // inner
    level2 = largest_divisor_at_most(rest, max(1, run // inner))  # a thread's block as wide as β's, or less
    parallel = rest // level2
    first = largest_divisor_at_most(parallel, last[0])
    levels = (first, parallel // first, level2, *[1] * (len(last) - 4), inner)
    cfg = TileConfig(space.kind, (*kept.space[:-1], levels), kept.reduction)
    return cfg if space.valid(cfg) else None
