"""A run's time budget turned into a plan: how many trials each backend root gets, and what the rest costs.

A user thinks in minutes ("I have 20 minutes"), the plan in trials per root. :func:`plan_within` plans
the set at a ladder of backend budgets and keeps the largest whose whole estimate -- the plan (roots,
their polish, reuses, bridges) and the model's functions outside the catalogue
(:func:`functions_seconds`) -- fits :data:`PLAN_SHARE` of the budget. The pipeline spends what is left
where the built model's latency is (:mod:`eto.runs.improve`); the deadline (:mod:`tuner.measure.deadline`)
stops the run on time whatever the estimates said.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Sequence

from tuner.measure.options import DEFAULT_TRIALS_PER_ITER

from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.operators.task import FUNCTION_TRIALS
from eto.options import TuneOptions
from eto.planning.planner import OperatorPlan, plan_operator_set, plan_selective
from eto.planning.time_model import TimeModel

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.store.database import Database

#: The share of a time budget the plan may be estimated to take; the rest goes to the tasks where the
#: model's latency is. The plan's estimates land within 0.8-1.25 of the real time on this project's sets:
#: 0.7 leaves a plan that ran 1.25x long a little time still.
PLAN_SHARE = 0.7
#: Backend budgets (trials per root) a time budget may pick from, smallest first. It stops at twice
#: MetaSchedule's batch: past that a root's trials buy less than the same seconds spent on the tasks
#: where the model's latency is (:mod:`eto.runs.improve`), which a root often is not (a plan's roots
#: are frequently small bridge operators the model does not hold).
TRIALS_LADDER: tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128)
#: The candidates a self-reuse is expected to measure: a root's polish, a time budget's self-reuse step
#: (a root's polish measured 38-55, :mod:`eto.runs.polish`).
POLISH_CANDIDATES = 40
#: Roots given fewer trials than this search with MetaSchedule's light search
#: (:func:`tuner.measure.backend.light_search`) unless another search was asked for: the default search
#: evolves a population of 512 for every batch, seconds of work a budget of one or two chunks of
#: trials does not amortise (three small batch matmuls at 8 trials on 2 cores: 31.7 s and 8 s per
#: operator after the first with it, 25.5 s and 3.2 s with the light search, at no loss in latency).
LIGHT_SEARCH_BELOW = DEFAULT_TRIALS_PER_ITER // 2


@dataclass(frozen=True)
class RunPlan:
    """A run's plan, the options it is for (a time budget picks the trials), and its estimated seconds in
    parts: the plan's own, the functions outside the catalogue after it, the prior roots' polish before it."""

    planned: OperatorPlan
    options: TuneOptions
    plan_seconds: float
    functions_seconds: float
    polish_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        return self.plan_seconds + self.functions_seconds + self.polish_seconds


def fit_trials(estimate: Callable[[int], float], seconds: float, ladder: Sequence[int] = TRIALS_LADDER) -> int:
    """The largest of ``ladder`` whose ``estimate(trials)`` is at most ``seconds`` (the smallest if none is).

    ``estimate`` is taken to grow with trials (more trials per root never make a plan cheaper), so a
    binary search asks it O(log L) times for a ladder of L rungs.
    """
    if not ladder:
        raise ValueError("an empty ladder of trials")
    rungs = sorted(ladder)
    lo, hi = 0, len(rungs) - 1  # invariant: every rung below lo fits
    if estimate(rungs[0]) > seconds:
        return rungs[0]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate(rungs[mid]) <= seconds:
            lo = mid
        else:
            hi = mid - 1
    return rungs[lo]


def function_trials(options: TuneOptions) -> int:
    """Trials for each function outside the catalogue the backend tunes (never more than a root's)."""
    return min(options.backend.trials, options.function_trials or FUNCTION_TRIALS)


def functions_seconds(functions: Collection[Operator], time_model: TimeModel, trials: int, *,
                      single: Collection[Operator] = (), reused: Collection[Operator] = ()) -> float:
    """Estimated seconds of tuning a model's ``functions`` outside the catalogue as the pipeline does:
    the backend, ``trials`` each, one trial for those in ``single`` (a space of one program), and a reuse
    of about a search's first round for those in ``reused`` (the same function tuned at another size).
    O(functions)."""
    total = 0.0
    for op in functions:
        gflops = op.flops / 1e9
        if op in reused:
            total += time_model.reuse_seconds(time_model.reuse_candidates(16), gflops, op.type)
        else:
            total += time_model.function_seconds(1 if op in single else trials)
    return total


def functions_estimator(opset: OperatorSet, database: "Database | None",
                        target: "Target") -> Callable[[TimeModel, int], float]:
    """``(time model, trials) -> seconds`` of tuning the set's functions outside the catalogue that
    ``database`` has not attempted, as the pipeline will after the plan (:func:`functions_seconds`)."""
    todo = [e.op for e in opset if e.op.spec.backend_only and not (database and database.attempted(e.op, target))]
    if not todo:  # a built-in set: nothing imports TVM here
        return lambda _tm, _n: 0.0
    from tuner.measure.backend import single_program

    from eto.operators.task import same_function_sources

    single = {op for op in todo if single_program(op.prim_func(), target)}
    tuned = database.tuned(target) if database is not None else {}
    reused = set(same_function_sources([op for op in todo if op not in single], tuned))
    return lambda tm, n: functions_seconds(todo, tm, n, single=single, reused=reused)


def unpolished_roots(database: "Database | None", target: "Target | str | None") -> frozenset[str]:
    """Keys of the operators ``database`` holds as a plan's root (a backend result the pipeline marked
    ``root``, with programs) not yet polished (a polish, or a time budget's self-reuse step, counts): a root
    tuned in this run, or in a run killed or cut by its time budget between its backend result and its
    polish. A program imported or tuned outside a plan, or by the backend after a failed reuse, is none.
    O(results)."""
    from eto.store.database import IMPROVE, POLISH
    from eto.target import target_key

    if database is None or target is None:
        return frozenset()
    tk = target_key(target)
    roots, polished = set(), set()
    for r in database.results():
        if r.get("target") != tk:
            continue
        if r.get("method") == "backend" and r.get("root") and r.get("records"):
            roots.add(r.get("op_key"))
        elif r.get("method") == POLISH or (r.get("method") == IMPROVE and "polish" in r):
            polished.add(r.get("op_key"))
    return frozenset(roots - polished)


def prior_polish_seconds(planned: OperatorPlan, unpolished: Collection[str]) -> float:
    """Estimated seconds of polishing the plan's prior operators whose keys are in ``unpolished``
    (:func:`unpolished_roots`), which the pipeline does before the plan's own work: a self-reuse of
    :data:`POLISH_CANDIDATES` each. 0 without a time model (costs not in seconds). O(prior)."""
    tm = planned.time_model
    if tm is None or not unpolished:
        return 0.0
    ops = [planned.operators[n] for n in planned.plan.prior if n in planned.operators]
    c = tm.reuse_candidates(POLISH_CANDIDATES)
    return sum(tm.polish_seconds(c, op.flops / 1e9, op.type) for op in ops if op.key in unpolished)


def _costed(planned: OperatorPlan, options: TuneOptions, functions: Callable[[TimeModel, int], float],
            unpolished: Collection[str]) -> RunPlan:
    tm = planned.time_model
    return RunPlan(planned, options, planned.plan.total_cost,
                   functions(tm, function_trials(options)) if tm is not None else 0.0,
                   prior_polish_seconds(planned, unpolished) if options.polishes else 0.0)


def plan_run(opset: OperatorSet, options: TuneOptions, *, database: "Database | None", target: "Target",
             hot: Collection[Operator] = (), seconds: float | None = None,
             time_limit: float | None = None) -> RunPlan:
    """The plan a run tunes, as ``eto tune`` makes it and ``eto plan`` previews it: Selective Tuning's
    clusters for method ``"st"``, else, with ``seconds`` (the run's time budget, or what is left of it), the
    largest plan whose whole estimate fits :data:`PLAN_SHARE` of them (:func:`plan_within`), else the plan
    at the options' trials (``time_limit``: the selector's solver's)."""
    functions = functions_estimator(opset, database, target)
    unpolished = unpolished_roots(database, target) if options.method == "eto" else frozenset()
    if options.method == "st":
        from tuner.reuse.topk import DEFAULT_K

        planned = plan_selective(opset, budget=options.plan_budget, k=DEFAULT_K, database=database, target=target)
    elif seconds is not None:
        return plan_within(opset, options, seconds * PLAN_SHARE, functions=functions, unpolished=unpolished,
                           database=database, target=target, hot=hot)
    else:
        planned = plan_operator_set(opset, options, database=database, target=target, hot=hot, time_limit=time_limit)
    return _costed(planned, options, functions, unpolished)


def plan_within(opset: OperatorSet, options: TuneOptions, seconds: float, *,
                functions: Callable[[TimeModel, int], float] = lambda _tm, _n: 0.0,
                unpolished: Collection[str] = (), database: "Database | None" = None,
                target: "Target | str | None" = None, hot: Collection[Operator] = (),
                ladder: Sequence[int] = TRIALS_LADDER) -> RunPlan:
    """The plan of ``opset`` at the largest backend budget of ``ladder`` whose estimate fits ``seconds``
    (:func:`fit_trials`), with ``functions(time_model, trials)`` the estimated seconds of the functions
    outside the catalogue and the polish of the prior roots in ``unpolished`` (where the trials polish
    roots, :attr:`eto.options.TuneOptions.polishes`). O(log L) plans."""
    made: dict[int, RunPlan] = {}

    def estimate(trials: int) -> float:
        opts = options.replace(trials=trials, plan_budget=None)
        planned = plan_operator_set(opset, opts, database=database, target=target, hot=hot)
        assert planned.time_model is not None  # the plan's costs are its seconds
        made[trials] = _costed(planned, opts, functions, unpolished)
        return made[trials].seconds

    fitted = made[fit_trials(estimate, seconds, ladder)]
    if fitted.options.backend.trials < LIGHT_SEARCH_BELOW and fitted.options.backend.search == "evolutionary":
        from tuner.measure.backend import light_search

        fitted = dataclasses.replace(fitted, options=fitted.options.replace(search=light_search()))
    return fitted


__all__ = ["LIGHT_SEARCH_BELOW", "PLAN_SHARE", "POLISH_CANDIDATES", "RunPlan", "TRIALS_LADDER", "fit_trials",
           "function_trials", "functions_estimator", "functions_seconds", "plan_run", "plan_within",
           "prior_polish_seconds", "unpolished_roots"]
