"""Ranked rounds (beyond the paper): a reuse round's candidates, best-ranked first, measured a few at
a time until a batch stops improving; how many at a time depends on what a batch costs on the target.

:func:`ranked_batches` is the policy :meth:`tuner.reuse.search.ReuseTuner.tune` runs and
:func:`tuner.reuse.estimate.ranked_count` counts; :func:`resolve_top_k` turns the APIs' ``top_k``
(``"auto"``, a number, or None for every candidate as in the paper) into the batch size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterator, Literal, Sequence

from tuner.analysis.host import physical_cores
from tuner.analysis.kinds import is_cuda

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

#: Candidates measured at a time when a learned ranker orders a round on a CPU (see
#: :func:`ranked_batches` and :func:`default_top_k`).
DEFAULT_TOP_K = 4
#: ``top_k`` as the APIs take it: a number, None (measure every candidate, as in the paper) or
#: ``"auto"`` (:func:`default_top_k` of the target).
TopK = int | None | Literal["auto"]
#: A batch must beat the best so far by this fraction to earn the round another batch: smaller
#: gains are within the run-to-run noise of a measurement on this machine.
MIN_GAIN = 0.02


def default_top_k(target: "Target") -> int:
    """How many ranked candidates a reuse round measures at a time on ``target``.

    A batch on a CPU costs about the sum of its candidates' runs, so small batches
    (:data:`DEFAULT_TOP_K`) let a round stop after few. On a GPU a batch costs the build's latency:
    nvcc takes seconds per kernel and the builder's workers (by default the host's physical cores,
    :class:`tuner.measure.measurer.MeasureConfig`) compile a batch in parallel, while each run takes
    milliseconds (on an H100 host with 16 cores a batch of 1-4 took 2.5 s + 0.14 s per candidate,
    experiments/README.md "On a GPU"), so a batch as wide as the builder costs about what one
    candidate does.
    """
    if not is_cuda(target):
        return DEFAULT_TOP_K
    return max(DEFAULT_TOP_K, physical_cores())


def resolve_top_k(top_k: TopK, target: "Target") -> int | None:
    """``top_k`` as the tuner runs it: ``"auto"`` becomes :func:`default_top_k` of ``target``."""
    if top_k == "auto":
        return default_top_k(target)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive number, None or 'auto', got {top_k!r}")
    return top_k


def ranked_batches(ranked: Sequence[Any], k: int, incumbent: float, min_gain: float) -> Iterator[list[Any]]:
    """Batches of ``k`` of ``ranked`` (best-ranked first) while the last batch improved.

    Each yielded batch must have its ``latency`` set by the caller before the next is asked for;
    the round ends after the first batch whose best is not below ``incumbent x (1 - min_gain)``.
    Round T without a lead starts from ``incumbent = inf``, so it then always measures a second batch
    when it has one; after a lead (β's kept tiles) it starts from the lead's best.
    """
    if k < 1:
        raise ValueError(f"top_k must be positive, got {k}")
    for i in range(0, len(ranked), k):
        batch = list(ranked[i:i + k])
        yield batch
        best = min((c.latency for c in batch), default=math.inf)
        if not best < incumbent * (1 - min_gain):
            return
        incumbent = best
