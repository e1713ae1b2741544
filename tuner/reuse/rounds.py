"""Algorithm 1 after round T: the rounds that follow a best candidate, and the final pick.

Round T's candidates (and rounds "stage" and "panel") are grouped: under ``"per-b"`` (the paper's loop)
one group per block count B, each following its own best through rounds M, unroll and vector; under
``"global"`` one group for all. The best over the groups then goes through the sub-sketch rounds
(section 5.2), one decision at a time. The rounds' candidates are made by
:class:`tuner.reuse.search.ReuseTuner`; this module decides which best each round starts from.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Sequence

from tuner.reuse.session import Candidate
from tuner.reuse.space import Strategy

if TYPE_CHECKING:  # pragma: no cover
    from tuner.analysis.subsketch import SubSketches


def best_after_rounds(run: Callable[..., list[Candidate]], measured: list[Candidate],
                      rounds: Sequence[tuple[str, Callable[[Candidate], list[Candidate]]]],
                      strategy: Strategy) -> Candidate | None:
    """The best candidate once each of ``rounds`` (:meth:`~tuner.reuse.search.ReuseTuner.rounds`) ran from
    every group's best, the groups started by ``measured``; ``run`` measures a round (:class:`SearchSession`)."""
    groups: dict[int, Candidate] = {}
    for c in measured:
        key = _group(c, strategy)
        if key not in groups or c.latency < groups[key].latency:
            groups[key] = c
    for name, make in rounds:
        batch = []
        for best in groups.values():
            if math.isfinite(best.latency):
                batch += make(best)
        measured = run(batch, name, min((g.latency for g in groups.values()), default=math.inf)
                       if strategy != "per-b" else math.inf)
        for c in measured:
            key = _group(c, strategy)
            if c.latency < groups[key].latency:
                groups[key] = c
    return min(groups.values(), key=lambda c: c.latency, default=None)


def _group(c: Candidate, strategy: Strategy) -> int:
    """The group whose best ``c`` competes with: its B under ``"per-b"``, else the one group."""
    return c.cfg.B if strategy == "per-b" and c.cfg is not None else 0


def sub_sketch_rounds(run: Callable[..., list[Candidate]], sub: "SubSketches",
                      best: Candidate | None) -> Candidate | None:
    """``best`` with the decisions outside the major loop nest tuned, one sub-sketch at a time (section 5.2)."""
    for name, slot in sub.rounds():  # composite and other sketches: one sub-sketch at a time
        if best is None or math.isinf(best.latency):
            break
        cands = [best.but(extra={**best.extra, slot.inst: v}) for v in slot.alternatives(best.extra[slot.inst])]
        for c in run(cands, name, best.latency):
            if c.latency < best.latency:
                best = c
    return best
