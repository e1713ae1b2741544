"""Root polish (beyond the paper): a backend root's best program improved by the reuse tuner.

Every operator of a plan's subtree derives from its root's best program, so MetaSchedule's luck on
the root is inherited by the whole subtree. Over the 52 CPU seeds of the BERT-Base set benchmark in
``experiments/results``, eto's root (the same operator, search and budget as in MetaSchedule's own
run of the set) reached a median 0.92 of MetaSchedule's throughput there, 0.55-0.78 in its worst
quarter (likely, not measured apart: MetaSchedule tunes the whole set with one cost model trained
on every task's measurements, eto's root is searched alone). The reuse tuner's B/T/M search from
the root's own best program (α = β: round T's kept and grown tiles with the runner-ups' inner
tiles, the register and panel leads, then M and unroll) is a local search that MetaSchedule's
sampling does not make; on that root it measured 38-55 candidates in 7-11 s and made the program
1.23-1.48x faster (3 seeds at N = 100, ``experiments/results/polish_roots_*.json``).

The plan counts it: a root edge costs the backend's budget plus a self-reuse's estimate
(:func:`eto.planning.planner.plan_operator_set`), and its result records all it cost (search,
side-by-side timing, gate), which the time model learns from. A polish never ends worse: the root's program leads round T,
and the two best programs are re-measured side by side before either is preferred.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Callable, Sequence

from tuner.measure.faults import kill_point
from tuner.measure.timing import timing_of

from eto.store.database import POLISH, Database, Method
from eto.planning.budget import unpolished_roots
from eto.planning.lead_sources import leads
from eto.operators import Operator
from eto.runs.tuning import checkable_here, features_of, gated

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer
    from tuner.reuse.cost_model import LearnedRanker
    from tuner.reuse.options import ReuseOptions


def needs_polish(database: Database, op: Operator, target: "Target") -> bool:
    """Whether ``op`` is a plan root not yet polished (:func:`eto.planning.budget.unpolished_roots`).
    O(results)."""
    return op.key in unpolished_roots(database, target)


def polish_root(op: Operator, database: Database, target: "Target", measurer: "Measurer",
                options: "ReuseOptions | None" = None, *, ranker: "LearnedRanker | None" = None,
                history: Callable[[], Sequence] = tuple, say: Callable[[str], None] = lambda _msg: None) -> None:
    """Polish ``op``'s best backend program by a self-reuse if it :func:`needs_polish` (another process
    on the database may be doing it: :mod:`eto.store.claims`); commit the result (method ``"polish"``).

    Each measured candidate is checkpointed, so a killed polish continues where it stopped. Every
    candidate that ran is stored, rescaled so that the database's best is the program that won side by
    side (the backend's records keep their own scale). A polish that fails leaves the backend's
    program as the root's and records why. ``options``, ``ranker``: the reuse tuner's of the
    run; ``history()``: records to train the ranker with first.
    """
    from eto.store.claims import claim

    if needs_polish(database, op, target):
        with claim(database, op, target):
            if needs_polish(database, op, target):
                polish_program(op, database, target, measurer, options, ranker=ranker, history=history, say=say)


def polish_program(op: Operator, database: Database, target: "Target", measurer: "Measurer",
                   options: "ReuseOptions | None" = None, *, ranker: "LearnedRanker | None" = None,
                   history: Callable[[], Sequence] = tuple, say: Callable[[str], None] = lambda _msg: None,
                   method: Method = POLISH) -> None:
    """A self-reuse from ``op``'s best program, whatever found it, committed as ``method`` (a root's
    polish, or a step of a time budget's spare time: :mod:`eto.runs.improve`)."""
    from tuner.measure.apply import scheduled_module
    from tuner.reuse.search import reuse_tune, trace_key

    started = time.perf_counter()  # a polish costs its search, the side-by-side timing and the gate: all recorded
    base = database.search_base(op, target)
    prior = database.progress(op, target, method)
    known = {trace_key(r.trace): s for r, s in prior.programs()}
    seeds, alternates = leads(op, op, base, database, target)

    def checkpoint(records: list, measured: int, seconds: float) -> None:
        database.checkpoint(op, target, records, method=method, trials=measured, seconds=seconds)
        kill_point("reuse.checkpointed")  # a polish is a reuse search: its kill points are the reuse's

    try:
        res = reuse_tune(op.prim_func(), base.tuning_record, target, measurer, options, history=history(), known=known,
                         on_measured=checkpoint, seeds=seeds, alternates=alternates, ranker=ranker)
        error = None if res.record is not None else f"no polish candidate built and ran ({res.failed} failed)"
    except ValueError as exc:  # the root's sketch cannot be replayed on itself (not expected)
        res, error = None, str(exc)
    if res is None or error is not None:
        database.commit(op, target, [], method=method, source=op, candidates=res.candidates if res else 0,
                        seconds=time.perf_counter() - started + prior.seconds, error=error)
        say(f"polish: {op.name}: {error}; the backend's program stays")
        return
    timed = time.perf_counter()
    before, after = measurer.remeasure([scheduled_module(base.tuning_record), scheduled_module(res.record)], target)
    side_by_side_s = time.perf_counter() - timed
    # the polish's times on the backend's recorded scale; a polished program that failed now is not kept
    f = after * record_scale(base.latency_s, before) / res.latency_s
    records = rescaled(list(res.records), f * res.latency_s) if f < math.inf else []
    feats = [res.features] + [None] * (len(records) - 1)  # the best's B/T/M, as a reuse stores them
    timed = time.perf_counter()
    kept, checked, wrong = gated(op, records, target, checkable_here(measurer, target))
    gate_s = time.perf_counter() - timed
    wrong = wrong or (None if records else "the polished program failed when re-measured")
    kill_point("reuse.result")
    seconds = time.perf_counter() - started
    phases = {**res.phases, "side_by_side_s": side_by_side_s, "gate_s": gate_s}
    phases["setup_s"] = phases.get("setup_s", 0.0) + seconds - sum(phases.values())  # and the leads' lookup
    database.commit(op, target, kept, method=method, source=op, candidates=res.candidates,
                    seconds=seconds + prior.seconds, error=wrong, features=features_of(kept, records, feats),
                    extra={"timing": timing_of(measurer.config),
                           "polish": {"backend_latency_s": before, "polished_latency_s": after,
                                      "improved": bool(records) and f * res.latency_s < base.latency_s},
                           "rounds": res.rounds, "failed": res.failed, "failures": sorted(set(res.failures)),
                           "trajectory": [[t, n, best * f] for t, n, best in (p.to_json() for p in res.trajectory)],
                           **checked,
                           "phases": {k: round(v, 3) for k, v in phases.items()},
                           **({"resumed_after": len(known)} if known else {})})
    say(f"polish: {op.name}: {res.candidates} candidates, {seconds:.1f} s; side by side "
        f"{before * 1e6:.1f} us -> {after * 1e6:.1f} us ({before / after:.2f}x)" if records else
        f"polish: {op.name}: {wrong}; the backend's program stays")


#: How far a program's recorded time may be from its time re-measured now and still be taken for the
#: machine's drift (between runner processes a program's speed differs up to 1.75x here): new programs
#: are then moved onto the record's scale. Beyond it, either way, the record was timed in a disturbed
#: moment (a ResNet-50 reuse search recorded every candidate 8.5x slower than the same programs ran
#: side by side later in the run), and new programs are stored at their times now.
MAX_DRIFT = 2.0


def record_scale(recorded_s: float, now_s: float) -> float:
    """The factor that moves a time measured now onto a record's scale: ``recorded_s / now_s`` for the
    same program, 1 where that is beyond :data:`MAX_DRIFT` either way or ``now_s`` is not a time."""
    if not 0 < now_s < math.inf:
        return 1.0
    f = recorded_s / now_s
    return f if 1 / MAX_DRIFT <= f <= MAX_DRIFT else 1.0


def rescaled(records: list, best_secs: float) -> list:
    """``records`` (best first) with their run times scaled so the first's median is ``best_secs``;
    unchanged where that is not finite. The order within them is kept."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from tuner.measure.trajectory import median_secs

    if not records or not best_secs < math.inf:
        return records
    f = best_secs / median_secs(records[0].run_secs)
    return [TuningRecord(r.trace, r.workload, [float(t) * f for t in r.run_secs], r.target, r.args_info)
            for r in records]


def side_by_side(reuse: list, evolve: list, target, measurer: "Measurer") -> tuple[list, list, float, float]:
    """Two searches' records (reuse-then-evolve's) on one scale: their bests re-measured, interleaved.

    Each side's recorded run times are multiplied by its best's re-measured / recorded ratio, so the
    database's best (the lowest stored time) is the program that won side by side, and the order
    within each search is kept. Returns both lists and the two re-measured latencies.
    """
    from tuner.measure.apply import scheduled_module

    sa, sb = measurer.remeasure([scheduled_module(reuse[0]), scheduled_module(evolve[0])], target)
    return rescaled(reuse, sa), rescaled(evolve, sb), sa, sb


__all__ = ["needs_polish", "polish_program", "polish_root", "rescaled", "side_by_side"]
