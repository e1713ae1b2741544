"""A time budget's spare time spent where the built model's latency is (beyond the paper).

With a time budget (``eto tune --time-budget``), the plan is sized to fit most of it
(:mod:`eto.planning.budget`); what is left after the plan and the functions outside the catalogue
goes here, one step at a time, to the set's operator with the most to gain: its share of the model's
latency (frequency x latency) times its headroom under the roofline of the cores in use (1 - achieved
/ attainable FLOP/s, the attainable bounded, for an operator with few FLOPs per byte, by the memory
bandwidth at its working set, the peak no lower than the set's fastest program:
:func:`eto.models.roofline.reached_peak`), halved for each step it already had (:func:`priority`).

An operator's step is a self-reuse from its best program (the reuse tuner's local B/T/M search
around it, as a root's polish: :func:`eto.runs.polish.polish_program`) where no self-reuse has searched
around that program yet: its first step, and the step after a search that found a faster one. The
reuse tuner's leads (the register block, the vector) are what MetaSchedule's sampling misses next to
its own best: on ResNet-50's 1x1 convolutions expanding 64 channels to 256, the program a search step
settled on held 7 accumulators, and the same trace with 16 ran 1.22x faster. Other steps
continue MetaSchedule's evolutionary search from every program the database holds for the operator
(the reused program and its search's candidates seed the population and train the cost model),
:data:`STEP_TRIALS` trials or what the time left affords (:func:`evolve_step`). Either step's best is
re-measured side by side with the operator's best before it is stored (method ``"improve"``), so the
database's best is the faster of the two. Operators whose design space holds one program get no step,
nor does an operator whose search step gained less than :data:`MIN_STEP_GAIN`: its search has settled,
and the time goes to the others; when every operator has settled, the run ends before its budget.
A step the deadline cuts keeps what it measured; a rerun with more budget goes on from there.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Sequence

from tuner.analysis.kinds import is_cpu
from tuner.measure import deadline
from tuner.measure.timing import timing_of

from eto.models.roofline import fp32_peak, reached_peak, working_set_bandwidth
from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.planning.budget import POLISH_CANDIDATES
from eto.runs.derive import RunContext
from eto.runs.polish import polish_program, record_scale, rescaled
from eto.runs.tuning import checkable_here, gated
from eto.store.database import IMPROVE, POLISH, PREDICTED

if TYPE_CHECKING:  # pragma: no cover
    from eto.store.database import ProgramRecord
    from tuner.measure.measurer import Measurer

#: Trials of one step: half of MetaSchedule's default batch, so that the time left is shared among
#: several operators rather than spent on the first.
STEP_TRIALS = 32
#: The fewest trials worth a step (one measured chunk, :data:`tuner.measure.timed.MEASURE_CHUNK`).
MIN_STEP_TRIALS = 8
#: The headroom of an operator without FLOPs: a search can shorten its memory traffic only so much.
DATA_MOVEMENT_HEADROOM = 0.25
#: A search step that shortens its operator's best by less than this has found what the search finds
#: there (within the side-by-side timing's noise): the operator gets no more steps in this run. On
#: ResNet-50's 7x7 convolutions, three more search steps after one such gained nothing, 0.6% at most.
MIN_STEP_GAIN = 0.02
#: A MetaSchedule step's fixed cost beyond the time model's seconds per trial: its design space, warm
#: start, cost-model training and first evolutionary search (15-20 s measured on the quick start's
#: 3x3 convolutions on 2 cores, against 0.6 s per trial).
STEP_OVERHEAD_S = 15.0


#: Bytes per second of memory traffic as a function of the bytes moved (its working set):
#: :func:`eto.models.roofline.working_set_bandwidth` on this machine.
Bandwidth = Callable[[int], float]


def attainable_flops(op: Operator, peak_flops: float, bandwidth: Bandwidth | None) -> float:
    """FLOP/s the roofline allows ``op``: the peak, or its FLOPs per byte moved (inputs and output read
    or written once, fp32) times the bandwidth at that many bytes where that is lower."""
    if bandwidth is None:
        return peak_flops
    nbytes = 4 * (sum(math.prod(s) for s in op.input_shapes) + math.prod(op.output_shape))
    return min(peak_flops, bandwidth(nbytes) * op.flops / max(nbytes, 1))


def headroom(op: Operator, achieved_flops: float, peak_flops: float | None, bandwidth: Bandwidth | None) -> float:
    """The share of ``op``'s roofline its program leaves unused (1 without a roofline: a GPU). An operator
    without FLOPs (a layout or data-movement function) has no FLOP roofline: :data:`DATA_MOVEMENT_HEADROOM`."""
    if peak_flops is None:
        return 1.0
    if op.flops <= 0:
        return DATA_MOVEMENT_HEADROOM
    return 1 - achieved_flops / attainable_flops(op, peak_flops, bandwidth)


def priority(share: float, headroom: float, steps: int) -> float:
    """What a step on an operator is worth: its latency share times its headroom, halved per step it had."""
    return share * max(headroom, 0.0) / (1 << steps)


def improve(opset: OperatorSet, run: RunContext, measurer: "Measurer") -> int:
    """Steps on the set's operators, best :func:`priority` first, until the run's deadline
    (:mod:`tuner.measure.deadline`) or until none can gain; the number of steps taken."""
    from tuner.measure.backend import single_program

    peak, bandwidth = _roofline(run)
    steps: Counter = Counter()
    done: set[Operator] = set()  # no more steps: a design space of one program, or a search that settled
    polished: dict[Operator, int] = {}  # the line of the best program each self-reuse of this run started from
    searched: set[Operator] = set()  # design spaces of more than one program
    last_search: tuple[Operator, float] | None = None  # the operator of the last search step, its best before
    while True:
        best = serving(run)
        if last_search is not None:
            op, was = last_search
            if was / best[op].latency_s - 1 < MIN_STEP_GAIN:
                done.add(op)
                run.say(f"improve: {op.name}: its search has settled (less than {MIN_STEP_GAIN:.0%} faster); "
                        "no more steps")
            last_search = None
        weights = latency_weights(opset, best)
        total = sum(weights.values())
        top = reached_peak(peak, (best[op].gflops * 1e9 for op in weights))
        ranked = sorted(((priority(w / total, headroom(op, best[op].gflops * 1e9, top, bandwidth), steps[op]), op)
                         for op, w in weights.items() if op not in done), key=lambda t: -t[0]) if total > 0 else []
        ranked = [(p, op) for p, op in ranked if p > 0]
        if not ranked:  # nothing left to gain
            if steps:
                run.say("improve: every operator's search has settled; the run ends before its budget")
            return sum(steps.values())
        for _, op in ranked:  # the first whose step the time left affords
            if op not in searched and single_program(op.prim_func(), run.target):
                done.add(op)
                continue
            searched.add(op)
            if kind := _step(op, run, measurer, weights[op] / total, polished):
                steps[op] += 1
                if kind == "search":  # settled or not: told by the database's best at the next round
                    last_search = (op, best[op].latency_s)
                break
        else:
            run.say(f"improve: {max(deadline.left(), 0):.0f} s left, too little for another step")
            return sum(steps.values())


def _step(op: Operator, run: RunContext, measurer: "Measurer", share: float,
          polished: dict[Operator, int]) -> Literal["self-reuse", "search", None]:
    """One step on ``op``: a self-reuse from its best program (:func:`eto.runs.polish.polish_program`) if
    :func:`self_reuse_due`, else :func:`evolve_step`; which it took, None if the time left affords neither."""
    from eto.planning.time_priors import learn_time_model
    from eto.target import target_kind

    tm = learn_time_model(run.database, run.target, target_kind(run.target), run.options.timing)
    gflops = op.flops / 1e9
    best = run.database.search_base(op, run.target)
    if best is not None and self_reuse_due(best, run.database.results(), polished):
        if tm.polish_seconds(tm.reuse_candidates(POLISH_CANDIDATES), gflops, op.type) <= deadline.left():
            polished[op] = best.line
            run.say(f"improve: {op.name} ({share:.0%} of the latency): a self-reuse from its best program")
            polish_program(op, run.database, run.target, measurer, run.options.reuse, ranker=run.ranker,
                           history=lambda: run.history(op.type) if run.ranker else (), say=run.say, method=IMPROVE)
            return "self-reuse"
    trials = _affordable(tm.backend.per_candidate(gflops), max(STEP_OVERHEAD_S, tm.backend.fixed))
    if trials < MIN_STEP_TRIALS:
        return None
    evolve_step(op, run, measurer, trials, share=share)
    return "search"


def self_reuse_due(best: "ProgramRecord", results: Sequence[Mapping], polished: Mapping[Operator, int]) -> bool:
    """Whether no self-reuse has searched around ``best`` (an operator's best program) yet: none of this
    run started from it (``polished``: operator -> the line of the best a self-reuse started from, whether
    or not it stored anything), and no self-reuse result (a root's polish, an earlier step's) was committed
    for its operator since ``best`` was (``results``: the database's, in commit order; the best of a
    self-reuse is its own result's). O(results)."""
    if polished.get(best.op) == best.line:
        return False
    return not any(r.get("op_key") == best.op.key and r.get("target") == best.target and "polish" in r
                   and r.get("method") in (POLISH, IMPROVE) and r.get("time", 0.0) >= best.created for r in results)


def _roofline(run: RunContext) -> tuple[float | None, Bandwidth | None]:
    """The cores' fp32 peak and memory bandwidth at each working set, measured now (CPU targets; None
    elsewhere)."""
    if not is_cpu(run.target):
        return None, None
    from eto.target import use_threads

    peak = fp32_peak(use_threads())
    run.say(f"improve: {deadline.left():.0f} s left for the tasks with the most latency to gain "
            f"(roofline {peak / 1e9:.0f} GFLOP/s; memory {working_set_bandwidth(1 << 20) / 1e9:.0f} GB/s at 1 MiB, "
            f"{working_set_bandwidth(1 << 26) / 1e9:.0f} at 64 MiB)")
    return peak, working_set_bandwidth


def _affordable(per_trial: float, overhead: float = STEP_OVERHEAD_S) -> int:
    """:data:`STEP_TRIALS`, or the chunks of trials the time left affords at ``per_trial`` seconds each
    after ``overhead``."""
    from tuner.measure.timed import MEASURE_CHUNK

    fits = int((deadline.left() - overhead) / max(per_trial, 1e-3))
    return min(STEP_TRIALS, fits // MEASURE_CHUNK * MEASURE_CHUNK)


def evolve_step(op: Operator, run: RunContext, measurer: "Measurer", trials: int, *, share: float = 0.0) -> None:
    """``trials`` more of MetaSchedule's search for ``op``, seeded with every program the database holds
    for it; the new programs stored (method ``"evolve"``) on the scale of the operator's best, after the
    two bests were re-measured side by side. Cut by the deadline, it stores what it measured and raises."""
    from tuner.measure.apply import scheduled_module
    from tuner.measure.backend import BackendTask, tune_backend

    target, db = run.target, run.database
    base = db.best(op, target, predicted=False)
    prior = db.progress(op, target, IMPROVE)
    warm = [p.tuning_record for p in db.programs(target=target, op=op) if p.method != PREDICTED]
    warm += [r for r, _ in prior.programs()]
    known = {str(r.trace) for r in warm}
    b = run.options.backend
    options = dataclasses.replace(b, trials=trials, num_trials_per_iter=min(trials, b.num_trials_per_iter))

    def checkpoint(_name: str, records: list, n: int, seconds: float) -> None:
        db.checkpoint(op, target, records, method=IMPROVE, trials=n, seconds=seconds)

    run.say(f"improve: {op.name} ({share:.0%} of the latency): {trials} more trials of MetaSchedule's search")
    cut = None
    try:
        res = tune_backend([BackendTask(op.name, op.prim_func())], target, options, measurer=measurer,
                           warm_start=[warm], on_batch=run.on_batch, on_measured=checkpoint, short_builds=True)[0]
        new, candidates, seconds = [r for r in res.records if str(r.trace) not in known], res.candidates, res.seconds
    except deadline.DeadlineReached as exc:  # what the step measured is in its checkpoints
        cut, p = exc, db.progress(op, target, IMPROVE)
        new = sorted((r for r, _ in p.programs() if str(r.trace) not in known), key=_median)
        candidates, seconds = p.trials, p.seconds
    before = after = math.inf
    if new and base is not None and cut is None:  # on the best's recorded scale, as a polish stores its programs
        before, after = measurer.remeasure([scheduled_module(base.tuning_record), scheduled_module(new[0])], target)
        ok = before < math.inf and after < math.inf
        new = rescaled(new, after * record_scale(base.latency_s, before)) if ok else []
    kept, checked, wrong = gated(op, new, target, checkable_here(measurer, target))
    db.commit(op, target, kept, method=IMPROVE, source=op, candidates=candidates, seconds=seconds,
              error=wrong or (None if kept else "no new program ran"),
              extra={"evolve": {"before_s": before, "after_s": after, "cut_by_deadline": cut is not None},
                     "timing": timing_of(measurer.config), **checked})
    run.say(f"improve: {op.name}: {candidates} candidates, {seconds:.1f} s" + (
        f"; side by side {before * 1e6:.1f} us -> {after * 1e6:.1f} us" if after < math.inf else "")
        + ("; cut by the time budget" if cut is not None else ""))
    if cut is not None:
        raise cut


def _median(record) -> float:
    from tuner.measure.trajectory import median_secs

    return median_secs(record.run_secs)


def serving(run: RunContext) -> dict[Operator, "ProgramRecord"]:
    """The program each operator runs now: its best tuned one, else its instant program (which a first
    self-reuse step searches around: :func:`eto.runs.finish.instant_first`)."""
    tuned = run.database.tuned(run.target)
    return {**{p.op: p for p in run.database.best_programs(run.target) if p.method == PREDICTED}, **tuned}


def latency_weights(opset: OperatorSet, best: Mapping[Operator, object]) -> dict[Operator, float]:
    """frequency x latency of each of the set's tuned operators: its part of the model's latency."""
    return {e.op: e.frequency * best[e.op].latency_s for e in opset if e.op in best and e.frequency}  # type: ignore[attr-defined]


__all__ = ["MIN_STEP_GAIN", "MIN_STEP_TRIALS", "STEP_TRIALS", "attainable_flops", "evolve_step", "headroom", "improve",
           "priority", "self_reuse_due", "serving"]
