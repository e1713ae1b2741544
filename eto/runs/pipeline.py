"""The main job (paper Figure 3): select reuse pairs, tune, store.

:func:`tune` plans the operator set with the reuse pair selector (edge costs from the tuner's trial estimator;
operators already in the database are free roots), tunes the plan's root operators with the backend (MetaSchedule's
task scheduler, ``trials`` each) and every other operator, bridges included, with the reuse-based tuner from its
parent's best program, parents first. Each result is committed the moment it exists, so a killed run resumes where it
stopped: operators the database has attempted are never tuned again.

An operator whose parent has no program, or whose parent's sketch turns out not to be in its design space, falls back
to the backend (the reason is kept with the result).

A model's functions outside the catalogue (TASK operators, :mod:`eto.operators.task`: softmax, norms, element-wise)
stay out of the plan and are tuned after it, before it under a time budget (left unreached, they have no instant
program: MobileNetV3's seven means ran TVM's default schedule): by reuse from the same function at another size where
the database holds it, else by the backend, ``function_trials`` each (default
:data:`eto.operators.task.FUNCTION_TRIALS`, at most ``trials``; one for a design space of one program).

Kinds with several sketches (section 6.1) cost the full budget until one of them is tuned: when the plan names such
operators (``replan_after``), they are tuned first and the set is planned again, now with estimated reuse costs.

The options (:class:`eto.options.TuneOptions`) name what goes beyond the paper, off by default:

- ``hot_share`` (frequency-aware tuning): operators whose frequency x FLOPs is at least this share
  of the set's are never derived by reuse; the backend tunes them with ``hot_factor`` x ``trials``.
- ``evolve_trials`` (reuse-then-evolve, the paper's future work): after the reuse tuner, MetaSchedule's
  evolutionary search continues for this many trials, its population seeded and its cost model
  trained with every candidate the reuse tuner measured; the better of the two is kept.

Also beyond the paper, ``polish`` (:mod:`eto.runs.polish`; method eto): each backend root's program improved by a
self-reuse before its subtree derives from it; by default where ``trials`` >= 32 trains the ranker.

The paper's baselines run on the same pipeline (``method``): ``"topk"`` keeps eto's plan and derives each operator by
TopK (:mod:`tuner.reuse.topk`: the parent's top 3 programs applied, no search) instead of the reuse tuner; ``"st"``
is Selective Tuning, whose plan clusters the set by the overlap of the operators' tuning spaces
(:mod:`selector.selective`) and derives each cluster's members from its representative by TopK.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Sequence

from selector import ROOT, Plan
from tuner.analysis.kinds import is_cpu
from tuner.measure import deadline
from tuner.measure.contention import BusyMeter, busy_warning
from tuner.measure.faults import kill_point
from tuner.reuse.ranked import resolve_top_k

from eto.operators import Operator
from eto.operators.opsets import OperatorEntry, OperatorSet
from eto.operators.task import same_function_sources
from eto.options import TuneOptions
from eto.planning.budget import RunPlan, function_trials, plan_run
from eto.planning.planner import OperatorPlan, hot_operators
from eto.runs.derive import Derivation, ReuseSearch, RunContext
from eto.runs.finish import SEARCH_IN_FLIGHT_S, finish, instant_first, reserve
from eto.runs.improve import improve
from eto.runs.tuning import OperatorReport, SetProgress, TuneReport, clock, report_row
from eto.store.database import Database
from eto.target import export_threads, parse_target, target_key

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer
    from tuner.measure.timing import Timing


#: With a time budget, the plan's roots may take this many times their estimated seconds before their
#: searches are cut (:func:`_tune_roots`): more than the estimates' usual error (0.8-1.25x), less than
#: an overrun that leaves no time for the operators reusing them.
ROOT_SLACK = 1.5
#: The fewest seconds worth going on with after the instant programs (:func:`_go_on`): one reuse batch.
GO_ON_MIN_S = 5.0
#: Seconds a run's own measurer takes to start before anything is measured: its build workers and its
#: runner's worker are processes that each import TVM (3-9 s on 2 cores, the most on a busy VM).
MEASURER_START_S = 5.0


def worth_measuring() -> bool:
    """Whether the run's deadline (:mod:`tuner.measure.deadline`; none: always) leaves the time to start a
    measurer of its own and measure one reuse batch. A run that starts one with less time overruns its
    budget by the start: ``eto retune --time-budget 10s`` after its instant programs ran 13.6-18.2 s."""
    return deadline.left() >= MEASURER_START_S + GO_ON_MIN_S


def tune(
    opset: OperatorSet,
    target: "str | Target",
    database: Database,
    options: TuneOptions | None = None,
    *,
    measurer: "Measurer | Sequence[Measurer] | None" = None,
    on_batch: Callable[[str, int, int, float], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> TuneReport:
    """Tune ``opset`` into ``database`` by reuse; return a report of every operator (bridges too).

    ``options`` (:class:`eto.options.TuneOptions`, default its defaults) say how: the plan, the backend,
    the reuse tuner, the method. Given several measurers (one per RPC device), independent subtrees of the
    plan are tuned concurrently. ``on_batch(label, measured, budget, best_seconds)`` after each measured
    batch; ``log`` for progress messages.

    With ``options.time_budget`` (seconds) the backend's trials are chosen so the whole estimate fits
    :data:`~eto.planning.budget.PLAN_SHARE` of it (:func:`~eto.planning.budget.plan_within`), the time
    left after the plan goes to the operators with the most latency to gain (:mod:`eto.runs.improve`),
    and the run stops on time (:mod:`tuner.measure.deadline`): the report's ``stopped`` says so, and
    operators it did not reach are ``pending`` for the next run.
    """
    options = options or TuneOptions()
    target = parse_target(target)
    export_threads()
    start = time.perf_counter()
    log = log or (lambda _msg: None)
    busy = BusyMeter().start() if measurer is None and is_cpu(target) else None  # our own, on this CPU
    measurers = _measurers(measurer, target, options.timing)
    # the budget is the whole run's: the measurer's start (its worker pools) is part of it
    budget = None if options.time_budget is None else options.time_budget - (time.perf_counter() - start)
    try:
        with deadline.until(budget):
            report = _tune(opset, target, database, options, measurers, on_batch, log, start)
    finally:
        if measurer is None:
            measurers[0].close()
    if (warning := busy_warning(others := busy and busy.stop(), os.cpu_count() or 1)) is not None:  # even with -q
        warnings.warn(warning, RuntimeWarning, stacklevel=2)
    return dataclasses.replace(report, busy=others)


def _tune(opset: OperatorSet, target: "Target", database: Database, options: TuneOptions,
          measurers: "list[Measurer]", on_batch: Callable[[str, int, int, float], None] | None,
          log: Callable[[str], None], start: float) -> TuneReport:
    """:func:`tune` within the run's deadline (none without a time budget)."""
    from tuner.reuse.cost_model import LearnedRanker

    hot = hot_operators(opset, options.plan.hot_share) if options.plan.hot_share is not None else frozenset()
    wall_start = time.time()
    kill_point("plan.before")
    # the budget less what reading a model took
    budget_s = None if options.time_budget is None else min(options.time_budget, deadline.left())
    to_plan = opset
    if budget_s is not None and options.method == "eto" and getattr(database, "priors", ()):
        to_plan = instant_first(opset, RunContext(target, database, options, hot, log, on_batch), measurers[0],
                                budget_s)
        budget_s = min(budget_s, deadline.left())
    fitted = plan_run(to_plan, options, database=database, target=target, hot=hot, seconds=budget_s)
    planned, options, outside_s = fitted.planned, fitted.options, fitted.functions_seconds + fitted.polish_seconds
    if budget_s is not None and options.method != "st":
        log(f"time budget {clock(options.time_budget)}: {options.backend.trials} trials per backend root, "
            f"the plan estimated {clock(fitted.seconds)} of it; the rest where the latency is")
    kill_point("plan.after")
    setup_s = time.perf_counter() - start  # the measurer's start and the planning: measured, not estimated
    top_k = resolve_top_k(options.reuse.top_k, target)
    run = RunContext(target, database, options, hot, log, on_batch,
                     ranker=LearnedRanker(target) if top_k is not None and options.method == "eto" else None)
    derivation = Derivation.create(options)
    estimated, stopped = (0.0, 0.0), None
    held = reserve(opset, run, measurers[0], options.time_budget) if options.time_budget is not None else None
    try:
        try:
            with deadline.until(None if held is None else deadline.left() - held):  # the plan's work
                planned, estimated = _tune_multi_sketch_kinds_first(planned, run, measurers[0])
                run.say(plan_summary(dataclasses.replace(fitted, planned=planned), len(run.hot)))  # not again by _go_on
                _plan_work(opset, planned, run, derivation, measurers)
        except deadline.DeadlineReached:
            finish(opset, run, measurers[0])  # in the time held back: instant programs for what was not reached
            stopped = _go_on(opset, planned, run, derivation, measurers)
        if options.time_budget is not None and stopped is None:
            finish(opset, run, measurers[0])  # roots cut by their share of the budget before a program ran
            improve(opset, run, measurers[0])
    except deadline.DeadlineReached:
        stopped = "time budget"
    if stopped:
        left = [e for e in opset if not database.attempted(e.op, target)]
        log(f"time budget spent after {clock(time.perf_counter() - start)}" + (
            f": {len(left)} operators not tuned yet; the same command with a budget goes on from there"
            if left else ""))
    kill_point("tune.end")
    return _report(opset, planned, run, wall_start, (setup_s + estimated[0] + planned.plan.total_cost + outside_s,
                   estimated[1] + planned.total_candidates), time.perf_counter() - start, stopped, setup_s)


def _plan_work(opset: OperatorSet, planned: OperatorPlan, run: RunContext, derivation: Derivation,
               measurers: "list[Measurer]") -> None:
    """The plan's operators and the functions outside the catalogue, each skipping what the database has;
    the functions first under a time budget (no instant program serves one the budget does not reach)."""
    steps = [lambda: _tune_plan(planned, run, derivation, measurers),
             lambda: _tune_functions(opset, run, derivation, measurers[0], function_trials(run.options))]
    for step in steps[::-1] if run.options.time_budget is not None else steps:
        step()


def _go_on(opset: OperatorSet, planned: OperatorPlan, run: RunContext, derivation: Derivation,
           measurers: "list[Measurer]") -> str | None:
    """What :func:`finish` left of the time held back (all of it where no operator had a source) goes
    to the plan's work again, from where it was cut, up to a search in flight before the run's deadline:
    a budget spent to its end, not stopped a quarter early. ``"time budget"`` if cut again, else None."""
    if deadline.left() < GO_ON_MIN_S + SEARCH_IN_FLIGHT_S:
        return "time budget"
    run.say(f"time budget: {deadline.left():.0f} s left after the instant programs; the plan goes on")
    try:
        with deadline.until(deadline.left() - SEARCH_IN_FLIGHT_S):
            _plan_work(opset, planned, run, derivation, measurers)
    except deadline.DeadlineReached:
        return "time budget"
    return None


def _measurers(measurer: "Measurer | Sequence[Measurer] | None", target: "Target",
               timing: "Timing") -> list["Measurer"]:
    """The run's measurers: those given (one per RPC device), else a local one of our own that times as
    ``timing`` says, its workers started at once (the run's first seconds, which a short time budget
    cannot spare)."""
    from tuner.measure.measurer import Measurer
    from tuner.measure.timing import measure_config

    measurers = list(measurer) if isinstance(measurer, (list, tuple)) else [
        measurer or Measurer.local(measure_config(timing, target), warm=target)]
    if not measurers:
        raise ValueError("no measurers given")
    return measurers


def _tune_functions(opset: OperatorSet, run: RunContext, derivation: Derivation, measurer: "Measurer",
                    trials: int) -> None:
    """The set's functions outside the catalogue (never planned): by reuse from the same function at
    another size (:func:`same_function_sources`; the backend if that fails), else by the backend,
    ``trials`` each, one where the design space holds one (:func:`tuner.measure.backend.single_program`)."""
    from tuner.measure.backend import single_program

    todo = opset.filter(lambda op: op.spec.backend_only and not run.database.attempted(op, run.target))
    single = {e.op for e in todo if single_program(e.op.prim_func(), run.target)}
    sources = same_function_sources([e.op for e in todo if e.op not in single], run.database.tuned(run.target)) \
        if isinstance(derivation, ReuseSearch) else {}
    for alpha, beta in sources.items():
        _derive_one(alpha, beta, run, derivation, measurer, estimate={"estimate": None, "estimated_seconds": None},
                    fallback_trials=trials)
    # one-program functions first (a trial each), then the rest heaviest first: a time budget that ends
    # on the way leaves the cheapest to TVM's default schedule (ConvNeXt-T's 9-call pointwise matmul,
    # reached last, ran 2.3 s of a 2.7 s inference so)
    for group, n in ((todo.filter(lambda op: op in single), 1),
                     (_heaviest_first(todo.filter(lambda op: op not in single and op not in sources)), trials)):
        if len(group):
            run.say(f"backend: {len(group)} function{'s' * (len(group) > 1)} outside the catalogue, "
                    f"{n} trial{'s' * (n > 1)} each")
            run.run_backend(group, measurer, n)


def _heaviest_first(functions: OperatorSet) -> OperatorSet:
    """``functions`` by calls x output elements, most first: what each costs untuned (TVM's default
    schedule is one thread of scalar loops), and the order MetaSchedule's task scheduler first visits them."""
    entries = sorted(functions.entries, key=lambda e: -e.frequency * e.op["size"])
    return OperatorSet(functions.name, tuple(entries), functions.description)


def _estimate(planned: OperatorPlan, name: str) -> dict:
    """The plan's estimate for tuning ``name`` (seconds, candidates), as stored with its result."""
    parent = planned.plan.parent[name]
    return {"estimate": planned.candidates(parent, name), **({"root": True} if parent == ROOT else {}),
            "estimated_seconds": planned.plan.edge_costs[(parent, name)],
            "count_scale": planned.time_model.count_scale if planned.time_model else 1.0}


def _tune_multi_sketch_kinds_first(planned: OperatorPlan, run: RunContext,
                                   measurer: "Measurer") -> tuple[OperatorPlan, tuple[float, float]]:
    """Section 6.1: tune the plan's ``replan_after`` operators, then plan again with estimated costs.

    Returns the new plan and the estimated seconds and candidates of what was tuned here.
    """
    plan = planned.plan
    if not plan.replan_after:
        return planned, (0.0, 0.0)
    run.say(f"plan: {len(plan.replan_after)} operators of multi-sketch kinds first, then planning again")
    ops = {planned.operators[n]: _estimate(planned, n) for n in plan.replan_after}
    run.backend(list(ops), measurer, ops)
    estimated = (sum(e["estimated_seconds"] for e in ops.values()), sum(e["estimate"] or 0 for e in ops.values()))
    tuned = [n for n in plan.replan_after
             if run.database.best(planned.operators[n], run.target, predicted=False) is not None]
    return planned.replan(tuned), estimated


def _tune_plan(planned: OperatorPlan, run: RunContext, derivation: Derivation,
               measurers: Sequence["Measurer"]) -> None:
    """Roots by the backend, then the rest by reuse, parents first; subtrees spread over measurers."""
    plan, ops = planned.plan, planned.operators
    progress = SetProgress({n: plan.edge_costs[(plan.parent[n], n)] for n in plan.order}, run.say,
                           done=[n for n in plan.order if run.database.attempted(ops[n], run.target)])
    run.polish_roots([ops[n] for n in plan.prior], measurers[0])  # a run killed before a root's polish

    def tune_names(names: Sequence[str], m: "Measurer") -> None:
        roots = [n for n in names if plan.parent[n] == ROOT and not run.database.attempted(ops[n], run.target)]
        estimates = {ops[n]: _estimate(planned, n) for n in roots}
        _tune_roots(run, [ops[n] for n in roots], m, estimates)
        progress(roots)
        for name in names:
            parent = plan.parent[name]
            if parent != ROOT and not run.database.attempted(ops[name], run.target):
                _derive_one(ops[name], ops[parent], run, derivation, m, estimate=_estimate(planned, name))
                progress([name])
                kill_point("between.operators")

    if len(measurers) == 1:
        tune_names(plan.order, measurers[0])
        return
    groups = balance_subtrees(plan, len(measurers))
    run.say(f"scale-out: {sum(map(len, groups))} operators in {len(plan.subtrees())} subtrees "
            f"on {len(measurers)} devices")
    with ThreadPoolExecutor(len(measurers)) as pool:  # each worker under the run's deadline, nesting its own
        for f in [pool.submit(deadline.carried(tune_names), g, m) for g, m in zip(groups, measurers) if g]:
            f.result()


def _tune_roots(run: RunContext, roots: Sequence[Operator], measurer: "Measurer",
                estimates: dict[Operator, dict]) -> None:
    """The plan's roots by the backend. With a time budget they get :data:`ROOT_SLACK` x their estimate:
    a root search that overruns it (MetaSchedule's search overhead on few cores) is cut and committed
    from what it measured, so its subtree is derived in the time planned for it rather than never."""
    if run.options.time_budget is None or not roots:
        run.backend(roots, measurer, estimates)
        return
    share = ROOT_SLACK * sum(e["estimated_seconds"] for e in estimates.values())
    try:
        with deadline.until(share):
            run.backend(roots, measurer, estimates)
    except deadline.DeadlineReached:
        deadline.check()  # the run's own deadline: stop here
        run.say(f"backend: the roots' share of the time budget ({share:.0f} s) is spent; "
                "each keeps the best it measured")


def _report(opset: OperatorSet, planned: OperatorPlan, run: RunContext, since: float,
            estimated: tuple[float, float], seconds: float, stopped: str | None = None,
            setup_s: float | None = None) -> TuneReport:
    """One row per operator of the set, then one per bridge the plan used (frequency 0); the estimate
    (seconds, candidates) counts the run's measured set-up and planning (``setup_s``) too."""
    def status(op: Operator) -> str:
        return "tuned" if op.key in here else "cached"
    pid, tk = os.getpid(), target_key(run.target)
    here = {r["op_key"] for r in run.database.results()  # results this process committed in this run
            if r.get("pid") == pid and r.get("time", 0) >= since and r.get("target") == tk}

    rows = [report_row(e, run.database, run.target, status(e.op)) for e in opset]
    in_set = {e.op for e in opset}
    for name in planned.plan.used_bridges:
        op = planned.operators[name]
        if op not in in_set:
            row = report_row(OperatorEntry(op, 1), run.database, run.target, status(op))
            rows.append(OperatorReport(**{**row.__dict__, "frequency": 0, "op": f"bridge:{row.op}"}))
    return TuneReport(str(run.target), tuple(rows), seconds, estimated_seconds=estimated[0],
                      estimated_candidates=estimated[1], stopped=stopped, time_budget=run.options.time_budget,
                      setup_seconds=setup_s)


def plan_summary(fitted: RunPlan, hot: int = 0) -> str:
    """The run's plan in one line, as ``eto tune`` logs it before tuning and ``eto plan`` previews it, with
    the estimated seconds of the work around it: the functions outside the catalogue, tuned after the
    plan, and the polish of roots an earlier run left unpolished, before it."""
    plan, planned = fitted.planned.plan, fitted.planned
    around = [f"{s:.0f} s of it {what}" for s, what in ((fitted.functions_seconds, "for functions outside the catalogue"),
              (fitted.polish_seconds, "to polish roots an earlier run left unpolished")) if s]
    extra = fitted.functions_seconds + fitted.polish_seconds
    return (f"plan: {len(plan.backend)} by the backend, {len(plan.reuse_pairs)} by reuse "
            f"({len(plan.used_bridges)} bridges), {len(plan.prior)} already tuned" + (f", {hot} hot" if hot else "")
            + f"; estimated {plan.total_cost + extra:.0f} s ({planned.total_candidates:.0f} candidates"
            + "".join(f"; {a}" for a in around)
            + f") vs {plan.baseline_cost + fitted.functions_seconds:.0f} s with the backend alone")


def balance_subtrees(plan: Plan, workers: int) -> list[list[str]]:
    """Split the plan's subtrees over ``workers`` by estimated cost, largest first (LPT rule).

    Each worker's list keeps every subtree parents first. O(s log s + s w) for s subtrees.
    """
    costs = plan.edge_costs
    parent = plan.parent
    groups: list[list[str]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for tree in sorted(plan.subtrees(), key=lambda t: -sum(costs[(parent[n], n)] for n in t)):
        i = min(range(workers), key=load.__getitem__)
        groups[i].extend(tree)
        load[i] += sum(costs[(parent[n], n)] for n in tree)
    return groups


def _derive_one(alpha: Operator, beta: Operator, run: RunContext, derivation: Derivation, measurer: "Measurer", *,
                estimate: dict, fallback_trials: int | None = None) -> None:
    """α from β by ``derivation``, unless another process on the database did (:mod:`eto.store.claims`)."""
    from eto.store.claims import claim

    with claim(run.database, alpha, run.target):
        if not run.database.attempted(alpha, run.target):
            derivation.derive(alpha, beta, run, measurer, estimate=estimate, fallback_trials=fallback_trials)


__all__ = ["GO_ON_MIN_S", "MEASURER_START_S", "balance_subtrees", "plan_summary", "tune", "worth_measuring"]
