"""The end of a time budget: every operator the run did not reach gets an instant program (beyond the paper).

A budget too small for the plan (``eto tune --time-budget`` on a model of many tasks, on few cores) stops
with operators pending. Built as they are, those run TVM's default schedules, often 10x slower than any
tuned program (MobileNetV2 on 2 cores: 196 ms against 14 ms). An instant program
(:mod:`eto.runs.instant`: the nearest tuned program of the same type and sketch with its tiles kept,
checked against numpy and timed) costs about a second. So the pipeline stops the plan's work
:func:`reserve` seconds before the deadline, and :func:`finish` spends them: the pending operators with
the most FLOPs first, each from the nearest program the run tuned (a root cut by the deadline is committed
from what it measured, so even a cut run has sources). What it leaves goes back to the plan's work
(:func:`eto.runs.pipeline._go_on`). Instant programs are served until tuned, never
counted as tuned: the next run with a budget tunes those operators as if they were not there.

With prior databases (``--prior``) the same instant programs come first instead (:func:`instant_first`):
a prior covers most of a new model's operators, and the budget is better spent searching where the
model's latency is (:mod:`eto.runs.improve`) than deriving every operator in the plan's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.analysis.kinds import is_cpu
from tuner.measure import deadline

from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.runs.derive import RunContext
from eto.runs.tuning import checkable_here

if TYPE_CHECKING:  # pragma: no cover
    from tuner.measure.measurer import Measurer

#: Seconds an instant program takes here: derive, build up to four variants, check, time, store
#: (0.3-1.0 s measured on MobileNetV2's convolutions on 2 cores).
INSTANT_S = 1.0
#: What the plan's work may run past its own deadline: a MetaSchedule search in flight (it runs in C++
#: before anything is built, where the deadline is not checked; 2-15 s on 2 cores).
SEARCH_IN_FLIGHT_S = 5.0
#: The most of a budget held back for instant programs, however many operators the set has.
MAX_RESERVE_SHARE = 0.25
#: The most of a time budget with priors the instant programs before the plan may take (:func:`instant_first`).
INSTANT_FIRST_SHARE = 0.5


def finishable(opset: OperatorSet, run: RunContext) -> list[Operator]:
    """The set's catalogue operators with no program on the target yet, most FLOPs x frequency first.
    A model's functions outside the catalogue have no instant programs (no sketch to carry over)."""
    todo = [e for e in opset if not e.op.spec.backend_only and run.database.best(e.op, run.target) is None]
    return [e.op for e in sorted(todo, key=lambda e: -e.op.flops * e.frequency)]


def reserve(opset: OperatorSet, run: RunContext, measurer: "Measurer", budget: float) -> float:
    """Seconds to hold back from the plan's work: :data:`INSTANT_S` per operator without a program and a
    search in flight (:data:`SEARCH_IN_FLIGHT_S`), at most :data:`MAX_RESERVE_SHARE` of ``budget``; none
    where every operator has a program or programs cannot be checked on this machine."""
    n = len(finishable(opset, run)) if _here(run, measurer) else 0
    return min(SEARCH_IN_FLIGHT_S + INSTANT_S * n, MAX_RESERVE_SHARE * budget) if n else 0.0


def finish(opset: OperatorSet, run: RunContext, measurer: "Measurer", *, which: str = "not reached") -> int:
    """An instant program for each operator without a program (``which`` they are, as the log says),
    until the deadline; the number stored."""
    from eto.runs.instant import instant, nearest_source

    if not _here(run, measurer):
        return 0
    todo = finishable(opset, run)
    done = 0
    for op in todo:
        if deadline.left() < INSTANT_S / 2:
            break
        src = nearest_source(op, run.database, run.target)
        if src is None:
            continue
        try:
            instant(op, run.database, run.target, source=src, timing=run.options.timing)
            done += 1
        except ValueError as exc:  # a derived program that differs from numpy is not stored
            run.say(f"finish: no instant program for {op.name}: {exc}")
    if todo:
        run.say(f"finish: instant programs for {done} of {len(todo)} operators {which}, until they are tuned")
    return done


def instant_first(opset: OperatorSet, run: RunContext, measurer: "Measurer", budget: float) -> OperatorSet:
    """A time budget with prior databases (``--prior``): an instant program first for every operator a
    prior covers (:func:`finish`: the nearest program of its type and sketch, about a second
    each, heaviest first, within :data:`INSTANT_FIRST_SHARE` of ``budget``); the set left to plan: the
    operators still without a program and the functions outside the catalogue. The instant-served
    operators are searched after the plan, where the model's latency is (:func:`eto.runs.improve.improve`
    starts with a self-reuse around each one's instant program), not in the plan's order: in the plan's
    order, a fifth of MobileNetV3's alone time with MobileNetV2 as the prior reached 3 of 44 reuses, and the
    instant programs the rest got at the end took half the budget."""
    try:
        with deadline.until(INSTANT_FIRST_SHARE * budget):
            finish(opset, run, measurer, which="before the plan (from the priors)")
    except deadline.DeadlineReached:
        pass
    return opset.filter(lambda op: op.spec.backend_only or run.database.best(op, run.target) is None)


def _here(run: RunContext, measurer: "Measurer") -> bool:
    """Instant programs are checked and timed in this process: a CPU target measured on this machine."""
    return is_cpu(run.target) and checkable_here(measurer, run.target)


__all__ = ["INSTANT_FIRST_SHARE", "INSTANT_S", "MAX_RESERVE_SHARE", "SEARCH_IN_FLIGHT_S", "finish", "finishable", "instant_first", "reserve"]
