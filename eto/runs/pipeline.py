"""The main job (paper Figure 3): select reuse pairs, tune, store.

:func:`tune` plans the operator set with the reuse pair selector (edge costs from the tuner's
trial estimator; operators already in the database are free roots), tunes the plan's root
operators with the backend (MetaSchedule's task scheduler, ``trials`` each) and every other
operator, bridges included, with the reuse-based tuner from its parent's best program, parents
first. Each result is committed the moment it exists, so a killed run resumes where it stopped:
operators the database has attempted are never tuned again.

An operator whose parent has no program, or whose parent's sketch turns out not to be in its
design space, falls back to the backend (the reason is kept with the result).

A model's functions outside the catalogue (TASK operators, :mod:`eto.operators.task`: softmax,
norms, element-wise) stay out of the plan and are tuned after it: by reuse from the same function
tuned at another size where the database holds it, else by the backend, ``function_trials`` each
(default :data:`FUNCTION_TRIALS`, at most ``trials``; one for a design space of one program).

Kinds with several sketches (section 6.1) cost the full budget until one of them is tuned: when
the plan names such operators (``replan_after``), they are tuned first and the set is planned
again, now with estimated reuse costs.

Two options go beyond the paper, both off by default:

- ``hot_share`` (frequency-aware tuning): operators whose frequency x FLOPs is at least this share
  of the set's are never derived by reuse; the backend tunes them with ``hot_factor`` x ``trials``.
- ``evolve_trials`` (reuse-then-evolve, the paper's future work): after the reuse tuner, MetaSchedule's
  evolutionary search continues for this many trials, its population seeded and its cost model
  trained with every candidate the reuse tuner measured; the better of the two is kept.

Also beyond the paper, ``polish`` (:mod:`eto.runs.polish`; method eto): each backend root's program improved
by a self-reuse before its subtree derives from it; by default (None) where ``trials`` >= 32 trains the
ranker (with fewer, a polish would measure every candidate: more than the root's own search).

The paper's baselines run on the same pipeline (``method``): ``"topk"`` keeps eto's plan and
derives each operator by TopK (:mod:`tuner.reuse.topk`: the parent's top 3 programs applied, no search)
instead of the reuse tuner; ``"st"`` is Selective Tuning, whose plan clusters the set by the
overlap of the operators' tuning spaces (:mod:`selector.selective`) and derives each cluster's
members from its representative by TopK.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Sequence, get_args

from selector import ROOT, Plan
from tuner.measure.faults import kill_point
from tuner.measure.finalists import DEFAULT_FINALISTS
from tuner.reuse.ranked import TopK, resolve_top_k
from tuner.reuse.space import DEFAULT_STRATEGY
from eto.store.database import PREDICTED, Database
from eto.operators import Operator
from eto.operators.task import FUNCTION_TRIALS, same_function_sources
from eto.operators.opsets import OperatorEntry, OperatorSet
from eto.planning.lead_sources import leads
from eto.options import default_polish
from eto.runs.polish import polish_root, side_by_side
from eto.planning.planner import (DISTANCE_WEIGHT, MAX_REDUCTION_RATIO, BridgeOption, CostModel, OperatorPlan,
    hot_operators, plan_operator_set, plan_selective)
from eto.target import export_threads, parse_target, target_key
from eto.runs.tuning import (OperatorReport, SetProgress, TuneReport, checkable_here, features_of, gated,
    report_row, tune_with_backend)

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer
    from tuner.reuse.cost_model import LearnedRanker
    from tuner.reuse.search import ReuseResult
    from tuner.reuse.space import Strategy

#: ``"eto"``: the reuse pair selector and the reuse tuner; the paper's baselines ``"topk"`` (eto's
#: plan, TopK instead of the reuse tuner) and ``"st"`` (Selective Tuning's clusters and TopK).
Method = Literal["eto", "topk", "st"]


#: Database methods whose records train the reuse tuner's ranker (:meth:`_Run.history`).
RANKER_METHODS = frozenset({"backend", "import"})


@dataclass(frozen=True)
class _Run:
    """What every step of one pipeline run shares: where results go and how operators are tuned."""

    target: "Target"
    database: Database
    trials: int
    hot: frozenset[Operator]
    hot_trials: int
    strategy: "Strategy"
    evolve_trials: int
    say: Callable[[str], None]
    backend_kw: dict = field(default_factory=dict)
    #: ranks each reuse round's candidates (None: measure them all, as the paper does); shared by
    #: every reuse of the run, so each one trains it for the next
    ranker: "LearnedRanker | None" = None
    top_k: int | None = None
    #: a reuse search's best candidates re-timed in full after screening (tuner.measure.finalists; 0: all in full)
    finalists: int = DEFAULT_FINALISTS
    #: how a non-root operator is derived from its parent: the reuse tuner, or TopK (baselines)
    derive: Literal["reuse", "topk"] = "reuse"
    fed: set = field(default_factory=set)  # database record lines the ranker has been trained on
    polish: bool = False  # backend roots polished by a self-reuse (eto.runs.polish)

    def history(self, op_type: str) -> list:
        """Measured records of ``op_type`` on the target the ranker has not seen yet (marked seen):
        those of searches that sample their space broadly (the backend's, imported ones). A reuse's
        records are its ranked picks, all near its best: trained on them, the ranker learned to
        favour the picks' tiles on every later operator (measured on the BERT layer's
        feed-forward matmuls, derived after three others: 4.6-5.4 ms against 2.9-3.4 ms)."""
        new = [p for p in self.database.programs(target=self.target)
               if p.op.type == op_type and p.line not in self.fed and p.method in RANKER_METHODS]
        self.fed.update(p.line for p in new)
        return [p.tuning_record for p in new]

    def backend(self, ops: Sequence[Operator], measurer: "Measurer",
                estimates: Mapping[Operator, dict] | None = None) -> None:
        """Tune ``ops`` with the backend's task scheduler: hot operators with ``hot_trials`` each.

        ``estimates``: the plan's estimate per operator, stored with its result for the report.
        """
        for group, n in (([o for o in ops if o in self.hot], self.hot_trials),
                         ([o for o in ops if o not in self.hot], self.trials)):
            if group:
                self.say(f"backend: {len(group)} operators, {n} trials each")
                tune_with_backend(group, self.target, self.database, trials=n, measurer=measurer,
                                  extra={o: (estimates or {})[o] for o in group if o in (estimates or {})},
                                  **self.backend_kw)
        self.polish_roots(ops, measurer)

    def polish_roots(self, ops: Sequence[Operator], measurer: "Measurer") -> None:
        """With ``polish``, each of ``ops`` that is a plan root not yet polished (:mod:`eto.runs.polish`)."""
        kw = dict(strategy=self.strategy, ranker=self.ranker, top_k=self.top_k, finalists=self.finalists)
        for op in ops if self.polish else ():
            polish_root(op, self.database, self.target, measurer, say=self.say, reuse_kw=kw,
                        history=lambda: self.history(op.type) if self.ranker else ())


def tune(
    opset: OperatorSet,
    target: "str | Target",
    database: Database,
    *,
    trials: int = 64,
    plan_budget: int | None = None,
    measurer: "Measurer | Sequence[Measurer] | None" = None,
    bridges: BridgeOption = "1hop",
    solver: Literal["auto", "exact", "approx"] = "auto",
    cost: CostModel = "estimate",
    strategy: "Strategy" = DEFAULT_STRATEGY,
    num_trials_per_iter: int = 64,
    seed: int | None = None,
    search: str | object = "evolutionary",
    on_batch: Callable[[str, int, int, float], None] | None = None,
    log: Callable[[str], None] | None = None,
    hot_share: float | None = None,
    hot_factor: float = 2.0,
    evolve_trials: int = 0,
    top_k: TopK = "auto",
    finalists: int = DEFAULT_FINALISTS,
    method: Method = "eto",
    max_reduction_ratio: float | None = MAX_REDUCTION_RATIO,
    distance_weight: float = DISTANCE_WEIGHT,
    function_trials: int | None = None,
    polish: bool | None = None,
) -> TuneReport:
    """Tune ``opset`` into ``database`` by reuse; return a report of every operator (bridges too).

    ``trials`` is the backend budget per root operator and, unless ``plan_budget`` says otherwise,
    the OC graph's root-edge cost (a small ``trials`` for a quick run would make every reuse edge
    look too dear: plan with the budget the backend would really be given);
    ``strategy`` is the reuse tuner's (``"global"``: rounds after T once; ``"per-b"``: the paper's
    loop per block count); ``top_k``: how many of a reuse round's best-ranked candidates are measured at a
    time (:func:`tuner.reuse.ranked.resolve_top_k`; None: every candidate, as in the paper); ``finalists``: see
    :mod:`tuner.measure.finalists` (0: every reuse candidate timed in full; with method eto, roots' too).
    ``max_reduction_ratio`` (None: no cap) and ``distance_weight``: see :func:`eto.planning.planner.plan_operator_set`;
    ``hot_share``/``hot_factor``, ``evolve_trials``, ``polish``, ``method``, ``function_trials``: see the module doc.
    Given several measurers (one per RPC device), independent subtrees of the plan are tuned concurrently.
    """
    from tuner.reuse.cost_model import LearnedRanker
    from tuner.reuse.topk import DEFAULT_K

    _check_options(trials=trials, evolve_trials=evolve_trials, hot_share=hot_share, hot_factor=hot_factor,
                   method=method, finalists=finalists, function_trials=function_trials)
    target = parse_target(target)
    top_k = resolve_top_k(top_k, target)
    export_threads()
    start = time.perf_counter()
    hot, budget = hot_operators(opset, hot_share) if hot_share is not None else frozenset(), plan_budget or trials
    run = _Run(target, database, trials, hot, max(trials, round(trials * hot_factor)), strategy, evolve_trials,
               log or (lambda _msg: None),
               dict(num_trials_per_iter=num_trials_per_iter, seed=seed, on_batch=on_batch, strategy=search,
                    finalists=finalists if method == "eto" else 0, short_builds=method == "eto"),
               ranker=LearnedRanker(target) if top_k is not None and method == "eto" else None, top_k=top_k,
               finalists=finalists, derive="reuse" if method == "eto" else "topk",
               polish=(default_polish(trials) if polish is None else polish) and method == "eto")
    wall_start = time.time()
    kill_point("plan.before")
    if method == "st":
        planned = plan_selective(opset, budget=budget, k=DEFAULT_K, database=database, target=target)
    else:
        planned = plan_operator_set(opset, budget=budget, bridges=bridges, solver=solver, database=database,
                                    target=target, cost=cost, hot=hot, hot_budget=round(budget * hot_factor),
                                    strategy=strategy, top_k=top_k, max_reduction_ratio=max_reduction_ratio,
                                    distance_weight=distance_weight, polish=run.polish)
    kill_point("plan.after")
    measurers = _measurers(measurer)
    try:
        planned, estimated = _tune_multi_sketch_kinds_first(planned, run, measurers[0])
        _tune_plan(planned, run, measurers)
        _tune_functions(opset, run, measurers[0], min(trials, function_trials or FUNCTION_TRIALS))
    finally:
        if measurer is None:  # our own
            measurers[0].close()
    kill_point("tune.end")
    return _report(opset, planned, run, wall_start, (estimated[0] + planned.plan.total_cost,
                   estimated[1] + planned.total_candidates), time.perf_counter() - start)


def _measurers(measurer: "Measurer | Sequence[Measurer] | None") -> list["Measurer"]:
    """The run's measurers: those given (one per RPC device), else a local one of our own."""
    from tuner.measure.measurer import MeasureConfig, Measurer

    measurers = list(measurer) if isinstance(measurer, (list, tuple)) else [measurer or Measurer.local(MeasureConfig())]
    if not measurers:
        raise ValueError("no measurers given")
    return measurers


def _tune_functions(opset: OperatorSet, run: _Run, measurer: "Measurer", trials: int) -> None:
    """The set's functions outside the catalogue (never planned): by reuse from the same function at
    another size (:func:`same_function_sources`; the backend if that fails), else by the backend,
    ``trials`` each, one where the design space holds one (:func:`tuner.measure.backend.single_program`)."""
    from tuner.measure.backend import single_program

    todo = opset.filter(lambda op: op.spec.backend_only and not run.database.attempted(op, run.target))
    single = {e.op for e in todo if single_program(e.op.prim_func(), run.target)}
    sources = same_function_sources([e.op for e in todo if e.op not in single], run.database.tuned(run.target)) \
        if run.derive == "reuse" else {}
    for alpha, beta in sources.items():
        _reuse_one(alpha, beta, run, measurer, estimate={"estimate": None, "estimated_seconds": None},
                   fallback_trials=trials)
    for group, n in ((todo.filter(lambda op: op not in single and op not in sources), trials),
                     (todo.filter(lambda op: op in single), 1)):
        if len(group):
            run.say(f"backend: {len(group)} function{'s' * (len(group) > 1)} outside the catalogue, "
                    f"{n} trial{'s' * (n > 1)} each")
            tune_with_backend(group, run.target, run.database, trials=n, measurer=measurer, **run.backend_kw)


def _check_options(*, trials: int, evolve_trials: int, hot_share: float | None, hot_factor: float,
                   method: str, finalists: int, function_trials: int | None = None) -> None:
    if trials < 1:
        raise ValueError(f"trials must be positive, got {trials}")
    if function_trials is not None and function_trials < 1:
        raise ValueError(f"function_trials must be positive, got {function_trials}")
    if finalists < 0:
        raise ValueError(f"finalists must be >= 0 (0: every reuse candidate timed in full), got {finalists}")
    if evolve_trials < 0:
        raise ValueError(f"evolve_trials must be >= 0, got {evolve_trials}")
    if hot_factor < 1:
        raise ValueError(f"hot_factor must be >= 1, got {hot_factor}")
    if method not in get_args(Method):
        raise ValueError(f"method must be one of {', '.join(get_args(Method))}, got {method!r}")
    if method != "eto" and (hot_share is not None or evolve_trials):
        raise ValueError(f"hot_share and evolve_trials apply to method 'eto' only, not {method!r}")


def _estimate(planned: OperatorPlan, name: str) -> dict:
    """The plan's estimate for tuning ``name`` (seconds, candidates), as stored with its result."""
    parent = planned.plan.parent[name]
    return {"estimate": planned.candidates(parent, name), **({"root": True} if parent == ROOT else {}),
            "estimated_seconds": planned.plan.edge_costs[(parent, name)],
            "count_scale": planned.time_model.count_scale if planned.time_model else 1.0}


def _tune_multi_sketch_kinds_first(planned: OperatorPlan, run: _Run,
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


def _tune_plan(planned: OperatorPlan, run: _Run, measurers: Sequence["Measurer"]) -> None:
    """Roots by the backend, then the rest by reuse, parents first; subtrees spread over measurers."""
    plan, ops = planned.plan, planned.operators
    run.say(f"plan: {len(plan.backend)} by the backend, {len(plan.reuse_pairs)} by reuse "
            f"({len(plan.used_bridges)} bridges), {len(plan.prior)} already tuned"
            + (f", {len(run.hot)} hot" if run.hot else "")
            + f"; estimated {plan.total_cost:.0f} s ({planned.total_candidates:.0f} candidates) vs "
              f"{plan.baseline_cost:.0f} s with the backend alone")

    progress = SetProgress({n: plan.edge_costs[(plan.parent[n], n)] for n in plan.order}, run.say,
                           done=[n for n in plan.order if run.database.attempted(ops[n], run.target)])
    run.polish_roots([ops[n] for n in plan.prior], measurers[0])  # a run killed before a root's polish

    def tune_names(names: Sequence[str], m: "Measurer") -> None:
        roots = [n for n in names if plan.parent[n] == ROOT and not run.database.attempted(ops[n], run.target)]
        run.backend([ops[n] for n in roots], m, {ops[n]: _estimate(planned, n) for n in roots})
        progress(roots)
        for name in names:
            parent = plan.parent[name]
            if parent != ROOT and not run.database.attempted(ops[name], run.target):
                _reuse_one(ops[name], ops[parent], run, m, estimate=_estimate(planned, name))
                progress([name])
                kill_point("between.operators")

    if len(measurers) == 1:
        tune_names(plan.order, measurers[0])
        return
    groups = balance_subtrees(plan, len(measurers))
    run.say(f"scale-out: {sum(map(len, groups))} operators in {len(plan.subtrees())} subtrees "
            f"on {len(measurers)} devices")
    with ThreadPoolExecutor(len(measurers)) as pool:
        for f in [pool.submit(tune_names, g, m) for g, m in zip(groups, measurers) if g]:
            f.result()


def _report(opset: OperatorSet, planned: OperatorPlan, run: _Run, since: float,
            estimated: tuple[float, float], seconds: float) -> TuneReport:
    """One row per operator of the set, then one per bridge the plan used (frequency 0)."""
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
                      estimated_candidates=estimated[1])


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


def _reuse_one(alpha: Operator, beta: Operator, run: _Run, measurer: "Measurer", *, estimate: dict, **kw) -> None:
    """Tune α from β's best program (unless another process on the database did, see :mod:`eto.store.claims`);
    fall back to the backend (``fallback_trials``, default ``trials``) when there is nothing to reuse."""
    from eto.store.claims import claim

    with claim(run.database, alpha, run.target):
        if not run.database.attempted(alpha, run.target):
            derive = _topk_claimed if run.derive == "topk" else _reuse_claimed
            derive(alpha, beta, run, measurer, estimate=estimate, **kw)


def _reuse_claimed(alpha: Operator, beta: Operator, run: _Run, measurer: "Measurer", *, estimate: dict,
                   fallback_trials: int | None = None) -> None:
    """The reuse search, each measured batch checkpointed; an interrupted one's batches are not re-measured."""
    from tuner.reuse.search import reuse_tune, trace_key
    from tuner.measure.trajectory import median_secs

    source = run.database.best(beta, run.target, predicted=False) or run.database.best(beta, run.target)
    prior = run.database.progress(alpha, run.target, "reuse")
    known = {trace_key(r.trace): s for r, s in prior.programs()}
    # α's instant program (eto.shapes.instant) joins round T's first batch: the search never ends worse
    seeds, alternates = leads(alpha, beta, source, run.database, run.target)

    on_batch, shown = run.backend_kw.get("on_batch"), {"n": len(known), "best": min(known.values(), default=math.inf)}

    def checkpoint(records: list, measured: int, seconds: float) -> None:
        run.database.checkpoint(alpha, run.target, records, method="reuse", trials=measured, seconds=seconds)
        kill_point("reuse.checkpointed")
        if on_batch is not None:  # the progress line, against the plan's estimate as the budget
            shown["n"] += measured
            shown["best"] = min([shown["best"], *(median_secs(r.run_secs) for r in records)])
            on_batch(f"reuse {alpha.name}", shown["n"], max(shown["n"], round(estimate["estimate"] or 0)),
                     shown["best"])

    if source is None:
        reason = f"{beta.name} has no program to reuse"
    else:
        kill_point("reuse.start")
        try:
            res = reuse_tune(alpha.prim_func(), source.tuning_record, run.target, measurer, strategy=run.strategy,
                             ranker=run.ranker, history=run.history(alpha.type) if run.ranker else (),
                             top_k=run.top_k, known=known, on_measured=checkpoint, seeds=seeds,
                             alternates=alternates, finalists=run.finalists)
        except ValueError as exc:  # e.g. reuse condition 1 fails on this target
            reason = str(exc)
        else:
            if res.record is not None:
                _commit_reuse(alpha, beta, res, run, measurer, estimate={
                    **estimate, **({"resumed_after": len(known), "interrupted_seconds": prior.seconds}
                                   if known else {})})
                return
            reason = f"no candidate derived from {beta.name} built and ran ({res.failed} failed)"
    run.say(f"backend fallback for {alpha.name}: {reason}")
    tune_with_backend([alpha], run.target, run.database, trials=fallback_trials or run.trials, measurer=measurer,
                      extra={alpha: {**estimate, "fallback": reason}}, **run.backend_kw)


def _topk_claimed(alpha: Operator, beta: Operator, run: _Run, measurer: "Measurer", *, estimate: dict) -> None:
    """The baselines' derivation: β's best measured programs applied to α, the best 3 that run kept."""
    from tuner.reuse.topk import topk_tune

    records = [p.tuning_record for p in run.database.programs(target=run.target, op=beta) if p.method != PREDICTED]
    res = topk_tune(alpha.prim_func(), records, run.target, measurer) if records else None
    if res is None or res.record is None:
        reason = (f"{beta.name} has no program to apply" if res is None else
                  f"none of {beta.name}'s {len(records)} programs applies to {alpha.name} and runs")
        run.say(f"backend fallback for {alpha.name}: {reason}")
        tune_with_backend([alpha], run.target, run.database, trials=run.trials, measurer=measurer,
                          extra={alpha: {**estimate, "fallback": reason}}, **run.backend_kw)
        return
    kept, checked, wrong = gated(alpha, list(res.records), run.target, checkable_here(measurer, run.target))
    run.database.commit(alpha, run.target, kept, method="topk", source=beta, candidates=res.candidates,
                        seconds=res.seconds, error=wrong, extra={**estimate, **checked, "invalid": res.invalid,
                                                                 "trajectory": [p.to_json() for p in res.trajectory]})
    run.say(f"topk: {alpha.name} <- {beta.name}: {res.candidates} measured ({res.invalid} did not apply), "
            f"{res.seconds:.1f} s, {res.latency_s * 1e6:.1f} us")


def _commit_reuse(alpha: Operator, beta: Operator, res: "ReuseResult", run: _Run, measurer: "Measurer", *,
                  estimate: dict) -> None:
    """Store a reuse result, every measured candidate with it (and, with ``evolve_trials``, evolve's)."""
    records, feats = list(res.records), [res.features] + [None] * (len(res.records) - 1)
    # a resumed search counts the candidates measured before the kill, and their seconds
    candidates, seconds, extra = res.candidates, res.seconds + estimate.get("interrupted_seconds", 0.0), {}
    trajectory = [p.to_json() for p in res.trajectory]
    if run.evolve_trials:
        ev = _evolve(alpha, res, run, measurer)
        known = {str(r.trace) for r in res.records}  # the warm start comes back among evolve's records
        new = [r for r in ev.records if str(r.trace) not in known]
        reuse_s = found = float("inf")
        if new:  # which is better is decided side by side, not by two runs' own records
            records, new, reuse_s, found = side_by_side(records, new, run.target, measurer)
        records += new
        feats += [None] * len(new)
        candidates, seconds = candidates + ev.candidates, seconds + ev.seconds
        trajectory += [p.after(res.seconds, res.candidates, res.latency_s).to_json() for p in ev.trajectory]
        extra = {"evolve": {"candidates": ev.candidates, "seconds": ev.seconds, "reuse_latency_s": reuse_s,
                            "best_s": found, "improved": found < reuse_s, "remeasured": bool(new)}}
        run.say(f"evolve: {alpha.name}: {ev.candidates} more candidates, {ev.seconds:.1f} s; re-measured "
                f"side by side: reuse {reuse_s * 1e6:.1f} us, evolve's best {found * 1e6:.1f} us")
    # the gate re-sorts: features follow the records
    failures = sorted(set(res.failures))  # why candidates failed, each reason once
    kept, checked, wrong = gated(alpha, records, run.target, checkable_here(measurer, run.target))
    kill_point("reuse.result")
    run.database.commit(alpha, run.target, kept, method="reuse+evolve" if run.evolve_trials else "reuse",
                        source=beta, candidates=candidates, seconds=seconds, error=wrong,
                        features=features_of(kept, records, feats),
                        extra={**estimate, "rounds": res.rounds, "remeasured": res.remeasured, **extra, **checked,
                               "failed": res.failed, "failures": failures, "trajectory": trajectory,
                               "phases": {k: round(v, 3) for k, v in res.phases.items()}})
    failed = f", {res.failed} failed ({'; '.join(failures)})" if failures else ""
    est, est_s = estimate.get("estimate"), estimate.get("estimated_seconds")  # none for a function (unplanned)
    run.say(f"reuse: {alpha.name} <- {beta.name}: {res.candidates} candidates"
            f"{f' (estimated {est or 0:.0f})' if est_s is not None else ''}, {res.seconds:.1f} s"
            f"{f' (estimated {est_s:.1f} s)' if est_s is not None else ''}, {res.latency_s * 1e6:.1f} us{failed}")


def _evolve(alpha: Operator, reused: "ReuseResult", run: _Run, measurer: "Measurer"):
    """MetaSchedule's search for α, ``evolve_trials`` more candidates, continuing from the reuse tuner's.

    Every candidate the reuse tuner measured seeds the population and trains the cost model first:
    without that, the search's first batches are as blind as a fresh run's.
    """
    from tuner.measure.backend import BackendTask, tune_backend

    kw = {**run.backend_kw, "num_trials_per_iter": min(run.evolve_trials, run.backend_kw.get("num_trials_per_iter", 64))}
    return tune_backend([BackendTask(alpha.name, alpha.prim_func())], run.target, trials_per_task=run.evolve_trials,
                        measurer=measurer, warm_start=[reused.measured], **kw)[0]


__all__ = ["balance_subtrees", "tune"]
