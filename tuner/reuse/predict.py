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
from tuner.reuse.panel import unroll_covering, widest_panel
from tuner.reuse.search import ReuseTuner, built_candidate, Candidate
from tuner.reuse.space import Growth

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
    by: str  # "kept" / "kept-parallel": β's tiles kept; "set-safe": tuner.reuse.cachesets; "panel": round
    # "panel"'s widest block; "ranker": the learned model chose; "nearest": β's block and thread sizes
    ranked: int  # candidates the choice was made among
    seconds: float
    _tuner: ReuseTuner = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
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
    tiles kept lose 2x to it on large matmuls far from β's length). On BERT-Base's operators at three
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
        kept = []
        for growth in get_args(Growth):
            cfg = tuner.space.kept_tiles(growth=growth)
            if not tuner.space.valid(cfg) or any(c.cfg == cfg for c, _ in kept):
                continue
            cand = tuner._cand(cfg)
            if built_candidate(tuner, cand):
                kept.append((cand, "kept" if growth == "outer" else f"kept-{growth}"))
        safe = set_safe_tiles(tuner.space)  # register rows that collide in L1 cut to its ways
        if safe is not None and all(c.cfg != safe for c, _ in kept):
            cand = tuner._cand(safe)
            if built_candidate(tuner, cand):
                kept.append((cand, "set-safe"))
        panel = widest_panel(tuner.space.panel_round())
        if panel is not None and tuner._fits(panel) and all(c.cfg != panel for c, _ in kept):
            cand = tuner._cand(panel, unroll=unroll_covering(panel, tuner.unroll_values))
            if built_candidate(tuner, cand):
                kept.append((cand, "panel"))
        if kept:
            secs = time.perf_counter() - start
            first, *rest = (Prediction(c.sch, c.cfg, by, 1, secs, tuner) for c, by in kept)
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
                      time.perf_counter() - start, tuner)
