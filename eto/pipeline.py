"""The main job (paper Figure 3): select reuse pairs, tune, store.

:func:`tune` plans the operator set with the reuse pair selector (edge costs from the tuner's
trial estimator; operators already in the database are free roots), tunes the plan's root
operators with the backend (MetaSchedule's task scheduler, ``trials`` each) and every other
operator, bridges included, with the reuse-based tuner from its parent's best program, parents
first. Each result is committed the moment it exists, so a killed run resumes where it stopped:
operators the database has attempted are never tuned again.

An operator whose parent has no program, or whose parent's sketch turns out not to be in its
design space, falls back to the backend (the reason is kept with the result).

Kinds with several sketches (section 6.1) cost the full budget until one of them is tuned: when
the plan names such operators (``replan_after``), they are tuned first and the set is planned
again, now with estimated reuse costs.

Two options go beyond the paper, both off by default:

- ``hot_share`` (frequency-aware tuning): operators whose frequency x FLOPs is at least this share
  of the set's are never derived by reuse; the backend tunes them with ``hot_factor`` x ``trials``.
- ``evolve_trials`` (reuse-then-evolve, the paper's future work): after the reuse tuner, MetaSchedule's
  evolutionary search continues for this many trials, its population seeded and its cost model
  trained with every candidate the reuse tuner measured; the better of the two is kept.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from .database import Database, target_key
from .operators import Operator
from .opsets import OperatorSet
from .plan import BridgeOption, CostModel, OperatorPlan, hot_operators, plan_operator_set
from .tuning import OperatorReport, TuneReport, _row, tune_with_backend

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure import Measurer

Strategy = Literal["global", "per-b"]
ROOT = "root"


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
    strategy: Strategy = "global",
    num_trials_per_iter: int = 64,
    seed: int | None = None,
    search: str | object = "evolutionary",
    on_batch: Callable[[str, int, int, float], None] | None = None,
    log: Callable[[str], None] | None = None,
    hot_share: float | None = None,
    hot_factor: float = 2.0,
    evolve_trials: int = 0,
) -> TuneReport:
    """Tune ``opset`` into ``database`` by reuse; return a report of every operator (bridges too).

    ``trials`` is the backend budget per root operator and, unless ``plan_budget`` says otherwise,
    the OC graph's root-edge cost (a small ``trials`` for a quick run would make every reuse edge
    look too dear: plan with the budget the backend would really be given);
    ``strategy`` is the reuse tuner's (``"global"``: rounds after T once; ``"per-b"``: the paper's
    loop per block count). ``hot_share``/``hot_factor`` and ``evolve_trials``: see the module doc.
    Given several measurers (e.g. one per RPC device), independent subtrees of the plan are tuned
    concurrently, one measurer each (scale-out).
    """
    from tuner.measure import MeasureConfig, Measurer

    from .target import num_threads, parse_target

    if trials < 1:
        raise ValueError(f"trials must be positive, got {trials}")
    if evolve_trials < 0:
        raise ValueError(f"evolve_trials must be >= 0, got {evolve_trials}")
    if hot_factor < 1:
        raise ValueError(f"hot_factor must be >= 1, got {hot_factor}")
    target = parse_target(target)
    os.environ.setdefault("TVM_NUM_THREADS", str(num_threads()))
    say = log or (lambda _msg: None)
    start = time.perf_counter()
    hot = hot_operators(opset, hot_share) if hot_share is not None else frozenset()
    hot_trials = max(trials, round(trials * hot_factor))
    budget = plan_budget or trials

    def make_plan() -> OperatorPlan:
        return plan_operator_set(opset, budget=budget, bridges=bridges, solver=solver, database=database,
                                 target=target, cost=cost, hot=hot, hot_budget=round(budget * hot_factor))

    tk = target_key(target)
    attempted_before = {r["op_key"] for r in database.results() if r.get("target") == tk}
    planned = make_plan()
    estimated = 0.0
    own = measurer is None
    measurers = list(measurer) if isinstance(measurer, (list, tuple)) else [measurer or Measurer.local(MeasureConfig())]
    if not measurers:
        raise ValueError("no measurers given")
    measurer = measurers[0]
    kw = dict(num_trials_per_iter=num_trials_per_iter, seed=seed, on_batch=on_batch, strategy=search)
    try:
        first = [planned.operators[n] for n in planned.plan.replan_after]
        if first:  # tune one operator of each multi-sketch kind, then plan with estimated costs
            say(f"plan: {len(first)} operators of multi-sketch kinds first, then planning again")
            _backend(first, hot, target, database, measurer, trials, hot_trials, say, kw)
            estimated = sum(planned.plan.edge_costs[(planned.plan.parent[n], n)] for n in planned.plan.replan_after)
            planned = make_plan()
        plan, ops = planned.plan, planned.operators
        say(f"plan: {len(plan.backend)} by the backend, {len(plan.reuse_pairs)} by reuse "
            f"({len(plan.used_bridges)} bridges), {len(plan.prior)} already tuned"
            + (f", {len(hot)} hot" if hot else "")
            + f"; estimated {plan.total_cost:.0f} candidates vs {plan.baseline_cost:.0f} with the backend alone")

        def run(names: Sequence[str], m: "Measurer") -> None:
            roots = [ops[n] for n in names if plan.parent[n] == ROOT and not database.attempted(ops[n], target)]
            _backend(roots, hot, target, database, m, trials, hot_trials, say, kw)
            for name in names:
                parent = plan.parent[name]
                if parent == ROOT or database.attempted(ops[name], target):
                    continue
                _reuse_one(ops[name], ops[parent], target, database, m, strategy=strategy,
                           estimate=plan.edge_costs[(parent, name)], trials=trials, say=say,
                           evolve_trials=evolve_trials, backend_kw=kw)

        if len(measurers) == 1:
            run(plan.order, measurer)
        else:
            groups = balance_subtrees(plan, len(measurers))
            say(f"scale-out: {sum(map(len, groups))} operators in {len(plan.subtrees())} subtrees "
                f"on {len(measurers)} devices")
            with ThreadPoolExecutor(len(measurers)) as pool:
                for f in [pool.submit(run, g, m) for g, m in zip(groups, measurers) if g]:
                    f.result()
    finally:
        if own:
            measurer.close()
    status = {True: "cached", False: "tuned"}
    rows = [_row(e, database, target, status[e.op.key in attempted_before]) for e in opset]
    in_set = {e.op for e in opset}
    rows += [_bridge_row(ops[n], database, target, status[ops[n].key in attempted_before])
             for n in plan.used_bridges if ops[n] not in in_set]
    return TuneReport(str(target), tuple(rows), time.perf_counter() - start,
                      estimated_candidates=estimated + plan.total_cost)


def balance_subtrees(plan, workers: int) -> list[list[str]]:
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


def _backend(ops: list[Operator], hot: frozenset[Operator], target, database: Database, measurer, trials: int,
             hot_trials: int, say: Callable[[str], None], kw: dict) -> None:
    """Tune ``ops`` with the backend's task scheduler: hot operators with ``hot_trials`` each."""
    for group, n in (([o for o in ops if o in hot], hot_trials), ([o for o in ops if o not in hot], trials)):
        if group:
            say(f"backend: {len(group)} operators, {n} trials each")
            tune_with_backend(group, target, database, trials=n, measurer=measurer, **kw)


def _reuse_one(alpha: Operator, beta: Operator, target, database: Database, measurer, *, strategy: Strategy,
               estimate: float, trials: int, say: Callable[[str], None], evolve_trials: int, backend_kw: dict) -> None:
    """Tune α from β's best program; fall back to the backend when there is nothing to reuse."""
    from tuner.btm import program_features
    from tuner.reuse import reuse_tune

    kind = "cuda" if target.kind.name == "cuda" else "cpu"
    source = database.best(beta, target)
    reason = None
    if source is None:
        reason = f"{beta.name} has no program to reuse"
    else:
        try:
            res = reuse_tune(alpha.prim_func(), source.tuning_record, target, measurer, strategy=strategy)
        except ValueError as exc:  # e.g. reuse condition 1 fails on this target
            reason = str(exc)
        else:
            if res.record is None:
                reason = f"no candidate derived from {beta.name} built and ran ({res.failed} failed)"
            else:
                features = None
                if res.config is not None:
                    cfg, nest = program_features(res.record, kind)
                    features = {"B": cfg.B, "T": cfg.T, "M": cfg.M(nest), "bshape": list(cfg.bshape),
                                "tshape": [list(x) for x in cfg.tshape], "lshape": list(cfg.lshape)}
                records, feats = [res.record], [features]
                candidates, seconds, extra = res.candidates, res.seconds, {}
                trajectory = [[round(p.seconds, 4), p.trial, p.best_s] for p in res.trajectory]
                if evolve_trials:
                    ev = _evolve(alpha, res, target, measurer, evolve_trials, backend_kw)
                    found = min((p.best_s for p in ev.trajectory), default=float("inf"))  # new programs only
                    records += list(ev.records)
                    feats += [None] * len(ev.records)
                    candidates, seconds = candidates + ev.candidates, seconds + ev.seconds
                    trajectory += [[round(res.seconds + p.seconds, 4), res.candidates + p.trial,
                                    min(res.latency_s, p.best_s)] for p in ev.trajectory]
                    extra = {"evolve": {"candidates": ev.candidates, "seconds": ev.seconds,
                                        "reuse_latency_s": res.latency_s, "best_s": found,
                                        "improved": found < res.latency_s}}
                    say(f"evolve: {alpha.name}: {ev.candidates} more candidates, {ev.seconds:.1f} s, "
                        f"reuse {res.latency_s * 1e6:.1f} us, evolve's best {found * 1e6:.1f} us")
                database.commit(alpha, target, records, method="reuse+evolve" if evolve_trials else "reuse",
                                source=beta, candidates=candidates, seconds=seconds, features=feats,
                                extra={"estimate": estimate, "rounds": res.rounds, **extra,
                                       "trajectory": trajectory})
                say(f"reuse: {alpha.name} <- {beta.name}: {res.candidates} candidates (estimated "
                    f"{estimate:.0f}), {res.seconds:.1f} s, {res.latency_s * 1e6:.1f} us")
                return
    say(f"backend fallback for {alpha.name}: {reason}")
    tune_with_backend([alpha], target, database, trials=trials, measurer=measurer, **backend_kw)


def _evolve(alpha: Operator, reused, target, measurer, trials: int, backend_kw: dict):
    """MetaSchedule's search for α, ``trials`` more candidates, continuing from the reuse tuner's.

    Every candidate the reuse tuner measured seeds the population and trains the cost model first:
    without that, the search's first batches are as blind as a fresh run's.
    """
    from tuner.backend import BackendTask, tune_backend

    return tune_backend([BackendTask(alpha.name, alpha.prim_func())], target, trials_per_task=trials,
                        measurer=measurer, warm_start=[reused.measured], **{
                            **backend_kw, "num_trials_per_iter": min(trials, backend_kw.get("num_trials_per_iter", 64))})[0]


def _bridge_row(op: Operator, database: Database, target, status: str) -> OperatorReport:
    from .opsets import OperatorEntry

    row = _row(OperatorEntry(op, 1), database, target, status)
    return OperatorReport(**{**row.__dict__, "frequency": 0, "op": f"bridge:{row.op}"})


__all__ = ["tune", "Strategy"]
