"""What a run is told, defaulted and validated in one place.

A tuning run is told four things, each a frozen record: how the plan is made (:class:`PlanOptions`),
how MetaSchedule tunes a root (:class:`tuner.measure.options.BackendOptions`), how the reuse tuner
derives the rest (:class:`tuner.reuse.options.ReuseOptions`), and what ties them together
(:class:`TuneOptions`: the method, and eto's steps beyond the paper). The CLI and the
Python API both build a :class:`TuneOptions`; :mod:`eto.planning` and :mod:`eto.runs` only read it, so
a default is written once and a value is checked once, when the record is made.

>>> TuneOptions.of(trials=32, top_k=0).backend.trials
32
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from tuner.measure.timing import DEFAULT_TIMING, Timing
from tuner.measure.options import DEFAULT_TRIALS, BackendOptions, OptionError, check_choice, check_positive
from tuner.reuse.options import ReuseOptions

#: How much larger α's reduction may be than β's for a reuse edge (:func:`eto.planning.planner.reduction_ratio`).
MAX_REDUCTION_RATIO = 4.0
#: The selection's preference for near sources: a reuse edge weighs 1 + W x (its loops' summed |log|
#: extent ratios) times its seconds (0: by cost alone, as in the paper).
DISTANCE_WEIGHT = 0.2

#: ``"eto"``: the reuse pair selector and the reuse tuner; the paper's baselines ``"topk"`` (eto's
#: plan, TopK instead of the reuse tuner) and ``"st"`` (Selective Tuning's clusters and TopK).
Method = Literal["eto", "topk", "st"]
BridgeOption = Literal["none", "1hop", "all"]
CostModel = Literal["analytic", "estimate"]
SolverOption = Literal["auto", "exact", "approx"]


@dataclass(frozen=True, kw_only=True)
class PlanOptions:
    """How the reuse pair selector plans (paper section 6)."""

    #: the root edge's trials in the OC graph (None: the backend's ``trials``; a quick run plans with the
    #: budget the backend would really be given, so that reuse edges are not made to look too dear)
    budget: int | None = None
    bridges: BridgeOption = "1hop"
    solver: SolverOption = "auto"
    cost: CostModel = "estimate"
    #: no reuse edge where α's reduction is more than this many times β's (None: no cap)
    max_reduction_ratio: float | None = MAX_REDUCTION_RATIO
    distance_weight: float = DISTANCE_WEIGHT
    #: beyond the paper: operators holding at least this share of the set's work are roots (None: none)
    hot_share: float | None = None
    #: a hot root's backend budget, as a multiple of the usual one
    hot_factor: float = 2.0

    def __post_init__(self) -> None:
        check_positive("budget", self.budget, allow_none=True)
        check_choice("bridges", self.bridges, BridgeOption)
        check_choice("solver", self.solver, SolverOption)
        check_choice("cost", self.cost, CostModel)
        if self.max_reduction_ratio is not None and not self.max_reduction_ratio >= 1:  # NaN too
            raise OptionError("max_reduction_ratio", f"must be >= 1 (inf: no cap), got {self.max_reduction_ratio}")
        if not (self.distance_weight >= 0 and not math.isinf(self.distance_weight)):
            raise OptionError("distance_weight", f"must be a finite number >= 0, got {self.distance_weight}")
        if self.hot_factor < 1:
            raise OptionError("hot_factor", f"must be >= 1, got {self.hot_factor}")
        if self.hot_share is not None and not 0 < self.hot_share <= 1:
            raise OptionError("hot_share", f"must be in (0, 1], got {self.hot_share}")

    def hot_budget(self, budget: int) -> int:
        """A hot root's trials for a usual ``budget``: the one formula the plan and the run share."""
        return max(budget, round(budget * self.hot_factor))


@dataclass(frozen=True, kw_only=True)
class TuneOptions:
    """Everything a tuning run is told besides what to tune, where, and into which database."""

    method: Method = "eto"
    backend: BackendOptions = field(default_factory=BackendOptions)
    reuse: ReuseOptions = field(default_factory=ReuseOptions)
    plan: PlanOptions = field(default_factory=PlanOptions)
    #: beyond the paper: each backend root polished by a self-reuse (None: where the budget trains the
    #: ranker, :func:`default_polish`; method eto only)
    polish: bool | None = None
    #: beyond the paper (its future work): MetaSchedule's search continued from each reuse result
    #: for this many trials (:class:`eto.runs.derive.ReuseThenEvolve`)
    evolve_trials: int = 0
    #: trials for each function outside the catalogue that cannot be reused (None: the pipeline's
    #: default, ``eto.operators.task.FUNCTION_TRIALS``, never more than the backend's trials)
    function_trials: int | None = None
    #: wall seconds the run may take (None: no limit; the trials decide): the backend's trials are
    #: chosen so the plan fits, the rest goes where the model's latency is, and the run stops on time
    #: (:mod:`eto.planning.budget`, :mod:`eto.runs.improve`; method eto only)
    time_budget: float | None = None
    #: how candidates are timed on CPU targets (:mod:`tuner.measure.timing`): ``"cold"``, as a model's
    #: layers meet their weights, or ``"hot"``, MetaSchedule's way; a measurer given to the run keeps its own
    timing: Timing = DEFAULT_TIMING

    def __post_init__(self) -> None:
        check_choice("method", self.method, Method)
        check_choice("timing", self.timing, Timing)
        check_positive("function_trials", self.function_trials, allow_none=True)
        if self.time_budget is not None and not (0 < self.time_budget < math.inf):  # NaN too
            raise OptionError("time_budget", f"must be a positive number of seconds, got {self.time_budget}")
        if self.time_budget is not None and self.method != "eto":
            raise OptionError("time_budget", f"applies to method 'eto' only, not {self.method!r}")
        if self.evolve_trials < 0:
            raise OptionError("evolve_trials", f"must be >= 0, got {self.evolve_trials}")
        if self.method != "eto" and (self.plan.hot_share is not None or self.evolve_trials):
            raise OptionError("hot_share and evolve_trials", f"apply to method 'eto' only, not {self.method!r}")

    @classmethod
    def of(cls, **flat: Any) -> "TuneOptions":
        """Options from flat keyword arguments, each routed to the record that owns it.

        ``plan_budget`` is :attr:`PlanOptions.budget`; every other name is a field of exactly one record.
        """
        return cls().replace(**flat)

    def replace(self, **flat: Any) -> "TuneOptions":
        """A copy with some flat options changed (names as in :meth:`of`)."""
        if "plan_budget" in flat:
            flat["budget"] = flat.pop("plan_budget")
        parts: dict[str, dict[str, Any]] = {"backend": {}, "reuse": {}, "plan": {}, "": {}}
        for name, value in flat.items():
            if name not in _OWNER:
                raise TypeError(f"unknown tuning option {name!r}; known: {', '.join(sorted(_OWNER))}")
            parts[_OWNER[name]][name] = value
        return dataclasses.replace(self, **parts.pop(""), **{k: dataclasses.replace(getattr(self, k), **v)
                                                            for k, v in parts.items() if v})

    @property
    def plan_budget(self) -> int:
        """The root edge's trials in the OC graph."""
        return self.plan.budget or self.backend.trials

    @property
    def polishes(self) -> bool:
        """Whether roots are polished: method eto only, by default where the budget trains the ranker."""
        wanted = default_polish(self.backend.trials) if self.polish is None else self.polish
        return wanted and self.method == "eto"


_OWNER = {f.name: owner for owner, kind in (("backend", BackendOptions), ("reuse", ReuseOptions),
                                            ("plan", PlanOptions)) for f in fields(kind)}
_OWNER.update({f.name: "" for f in fields(TuneOptions) if f.name not in ("backend", "reuse", "plan")})


def default_polish(trials: int) -> bool:
    """Whether roots are polished when the caller does not say: where the backend budget ``trials``
    trains the reuse tuner's ranker (``LearnedRanker.MIN_SAMPLES``); with fewer, a polish measures every
    candidate of its rounds, more than the root's own search. The pipeline and the plan both ask here."""
    from tuner.reuse.cost_model import LearnedRanker

    return trials >= LearnedRanker.MIN_SAMPLES


__all__ = ["BackendOptions", "BridgeOption", "CostModel", "DEFAULT_TRIALS", "DISTANCE_WEIGHT", "MAX_REDUCTION_RATIO",
           "Method", "OptionError", "PlanOptions", "ReuseOptions", "Timing", "TuneOptions", "default_polish"]
