"""How the reuse-based tuner searches: one record for the search (:func:`tuner.reuse.search.reuse_tune`),
a root's polish, and the plan's estimate of what the search will cost."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.measure.finalists import DEFAULT_FINALISTS
from tuner.measure.options import OptionError, check_choice
from tuner.reuse.ranked import TopK
from tuner.reuse.space import DEFAULT_STRATEGY, RangeName, Strategy


@dataclass(frozen=True, kw_only=True)
class ReuseOptions:
    """Algorithm 1's knobs (paper section 5) and eto's measuring policy for it."""

    #: rounds after T once (``"global"``) or per block count, as in the paper (``"per-b"``)
    strategy: Strategy = DEFAULT_STRATEGY
    #: a round's best-ranked candidates measured at a time (``"auto"``: by target; None or 0: every candidate)
    top_k: TopK = "auto"
    #: the best candidates re-timed in full after a brief screening (0: every candidate in full)
    finalists: int = DEFAULT_FINALISTS
    #: the B/T/M windows (None: the target kind's, :func:`tuner.reuse.space.default_ranges`)
    ranges: RangeName | None = None
    #: cooperative-fetch vector lanes tried on a GPU
    vector_lanes: int = 8

    def __post_init__(self) -> None:
        check_choice("strategy", self.strategy, Strategy)
        if self.finalists < 0:
            raise OptionError("finalists", f"must be >= 0 (0: every candidate timed in full), got {self.finalists}")
        if not (self.top_k in ("auto", None) or (isinstance(self.top_k, int) and self.top_k >= 0)):
            raise OptionError("top_k", f"must be 'auto', None or a number >= 0, got {self.top_k!r}")
        if self.ranges is not None:
            check_choice("ranges", self.ranges, RangeName)


__all__ = ["ReuseOptions"]
