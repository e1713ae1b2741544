"""The main job (paper Figure 3): select reuse pairs, tune, store.

:func:`tune` plans the operator set with the reuse pair selector (edge costs from the tuner's
trial estimator; operators already in the database are free roots), tunes the plan's root
operators with the backend (MetaSchedule's task scheduler, ``trials`` each) and every other
operator, bridges included, with the reuse-based tuner from its parent's best program, parents
first. Each result is committed the moment it exists, so a killed run resumes where it stopped:
operators the database has attempted are never tuned again.

An operator whose parent has no program, or whose parent's sketch turns out not to be in its
design space, falls back to the backend (the reason is kept with the result).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Literal

from .database import Database
from .operators import Operator
from .opsets import OperatorSet
from .plan import BridgeOption, CostModel, plan_operator_set
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
    measurer: "Measurer | None" = None,
    bridges: BridgeOption = "1hop",
    solver: Literal["auto", "exact", "approx"] = "auto",
    cost: CostModel = "estimate",
    strategy: Strategy = "global",
    num_trials_per_iter: int = 64,
    seed: int | None = None,
    search: str | object = "evolutionary",
    on_batch: Callable[[str, int, int, float], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> TuneReport:
    """Tune ``opset`` into ``database`` by reuse; return a report of every operator (bridges too).

    ``trials`` is the backend budget per root operator and, unless ``plan_budget`` says otherwise,
    the OC graph's root-edge cost (a small ``trials`` for a quick run would make every reuse edge
    look too dear: plan with the budget the backend would really be given);
    ``strategy`` is the reuse tuner's (``"global"``: rounds after T once; ``"per-b"``: the paper's
    loop per block count).
    """
    from tuner.measure import MeasureConfig, Measurer

    from .target import num_threads, parse_target

    if trials < 1:
        raise ValueError(f"trials must be positive, got {trials}")
    target = parse_target(target)
    os.environ.setdefault("TVM_NUM_THREADS", str(num_threads()))
    say = log or (lambda _msg: None)
    start = time.perf_counter()
    planned = plan_operator_set(opset, budget=plan_budget or trials, bridges=bridges, solver=solver, database=database,
                                target=target, cost=cost)
    plan, ops = planned.plan, planned.operators
    cached = {op for op in ops.values() if database.attempted(op, target)}
    say(f"plan: {len(plan.backend)} by the backend, {len(plan.reuse_pairs)} by reuse "
        f"({len(plan.used_bridges)} bridges), {len(plan.prior)} already tuned; "
        f"estimated {plan.total_cost:.0f} candidates vs {plan.baseline_cost:.0f} with the backend alone")
    own = measurer is None
    measurer = measurer or Measurer.local(MeasureConfig())
    try:
        roots = [ops[n] for n in plan.backend if not database.attempted(ops[n], target)]
        if roots:
            say(f"backend: {len(roots)} operators, {trials} trials each")
            tune_with_backend(roots, target, database, trials=trials, measurer=measurer,
                              num_trials_per_iter=num_trials_per_iter, seed=seed, on_batch=on_batch,
                              strategy=search)
        for name in plan.order:
            parent = plan.parent[name]
            if parent == ROOT or database.attempted(ops[name], target):
                continue
            _reuse_one(ops[name], ops[parent], target, database, measurer, strategy=strategy,
                       estimate=plan.edge_costs[(parent, name)], trials=trials, say=say,
                       num_trials_per_iter=num_trials_per_iter, seed=seed, search=search)
    finally:
        if own:
            measurer.close()
    rows = [_row(e, database, target, "cached" if e.op in cached else "tuned") for e in opset]
    in_set = {e.op for e in opset}
    rows += [_bridge_row(ops[n], database, target, "cached" if ops[n] in cached else "tuned")
             for n in plan.used_bridges if ops[n] not in in_set]
    return TuneReport(str(target), tuple(rows), time.perf_counter() - start, estimated_candidates=plan.total_cost)


def _reuse_one(alpha: Operator, beta: Operator, target, database: Database, measurer, *, strategy: Strategy,
               estimate: float, trials: int, say: Callable[[str], None], num_trials_per_iter: int,
               seed: int | None, search: str | object) -> None:
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
                database.commit(alpha, target, [res.record], method="reuse", source=beta,
                                candidates=res.candidates, seconds=res.seconds, features=[features],
                                extra={"estimate": estimate, "rounds": res.rounds,
                                       "trajectory": [[round(p.seconds, 4), p.trial, p.best_s]
                                                      for p in res.trajectory]})
                say(f"reuse: {alpha.name} <- {beta.name}: {res.candidates} candidates (estimated "
                    f"{estimate:.0f}), {res.seconds:.1f} s, {res.latency_s * 1e6:.1f} us")
                return
    say(f"backend fallback for {alpha.name}: {reason}")
    tune_with_backend([alpha], target, database, trials=trials, measurer=measurer,
                      num_trials_per_iter=num_trials_per_iter, seed=seed, strategy=search)


def _bridge_row(op: Operator, database: Database, target, status: str) -> OperatorReport:
    from .opsets import OperatorEntry

    row = _row(OperatorEntry(op, 1), database, target, status)
    return OperatorReport(**{**row.__dict__, "frequency": 0, "op": f"bridge:{row.op}"})


__all__ = ["tune", "Strategy"]
