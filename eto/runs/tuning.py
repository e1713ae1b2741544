"""Tuning operator sets into a database, resumably.

Every operator's result is committed the moment its tuning finishes and every measured candidate as
soon as it is measured; a rerun of the same command skips operators the database already has a
result for on that target and continues the others, so a killed run loses at most the candidates
being built or run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Literal, Mapping, Sequence

from tuner.measure import deadline
from tuner.measure.faults import kill_point
from tuner.measure.options import BackendOptions
from tuner.measure.timing import DEFAULT_TIMING, Timing, measure_config
from tuner.measure.trajectory import median_secs

from eto.store.database import IMPROVE, POLISH, PREDICTED, Database
from eto.target import target_key
from eto.operators import Operator
from eto.operators.opsets import OperatorEntry, OperatorSet

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target

    from tuner.measure.contention import Busy
    from tuner.measure.measurer import Measurer


@dataclass(frozen=True)
class OperatorReport:
    """One row of a tuning report."""

    op: str
    key: str
    frequency: int
    #: ``pending``: never attempted (a run stopped by its time budget before it got there); its latency is
    #: its instant program's where it has one (:mod:`eto.runs.finish`)
    status: Literal["tuned", "cached", "failed", "pending"]
    method: str
    source: str | None
    candidates: int
    seconds: float
    latency_s: float | None
    gflops: float | None
    error: str | None = None
    estimated_candidates: float | None = None  # the plan's, when the pipeline tuned it
    estimated_seconds: float | None = None


@dataclass(frozen=True)
class TuneReport:
    target: str
    rows: tuple[OperatorReport, ...]
    seconds: float
    estimated_candidates: float | None = None  # the plan's estimates (reuse pipeline only)
    estimated_seconds: float | None = None
    #: why the run ended before its plan did ("time budget"), None if it did not
    stopped: str | None = None
    time_budget: float | None = None  # seconds, where the run had one
    #: the run's set-up (its measurer's workers) and planning, measured: part of ``estimated_seconds``
    setup_seconds: float | None = None
    #: what other processes and the hypervisor took of this machine's cores during the run (its own
    #: measurer's runs only; :mod:`tuner.measure.contention`)
    busy: "Busy | None" = None

    @property
    def weighted_latency_s(self) -> float | None:
        """Sum of frequency x latency (the paper's quality metric); None if any operator failed."""
        if any(r.latency_s is None for r in self.rows):
            return None
        return sum(r.frequency * r.latency_s for r in self.rows)  # type: ignore[operator]

    @property
    def failed(self) -> list[OperatorReport]:
        return [r for r in self.rows if r.status == "failed"]

    @property
    def pending(self) -> list[OperatorReport]:
        """Operators the run did not reach (stopped by its time budget): the next run tunes them."""
        return [r for r in self.rows if r.status == "pending"]

    def to_json(self) -> dict:
        return {"target": self.target, "seconds": self.seconds, "weighted_latency_s": self.weighted_latency_s,
                "candidates": sum(r.candidates for r in self.rows if r.status == "tuned"),
                "estimated_candidates": self.estimated_candidates, "estimated_seconds": self.estimated_seconds,
                "time_budget": self.time_budget, "stopped": self.stopped, "setup_seconds": self.setup_seconds,
                "busy": asdict(self.busy) if self.busy is not None else None,
                "operators": [asdict(r) for r in self.rows]}


def report_row(entry: OperatorEntry, db: Database, target: "Target", status: str) -> OperatorReport:
    """The operator's row as the database has it now: its best program, or its last failed result.
    A polished root's row counts its backend search and its polish (:mod:`eto.runs.polish`)."""
    best = db.best(entry.op, target)
    tk = target_key(target)
    mine = [r for r in db.results() if r.get("op_key") == entry.op.key and r.get("target") == tk]
    result = next((r for r in reversed(mine) if r.get("method") != PREDICTED), None)
    if best is not None and result is None:  # an instant program until tuned (eto.runs.finish)
        return OperatorReport(entry.op.name, entry.op.key, entry.frequency, "pending", PREDICTED, best.source,
                              0, best.seconds, best.latency_s, best.gflops,
                              f"not reached: an instant program from {best.source} until the next run tunes it")
    if best is None:
        if result is None:
            return OperatorReport(entry.op.name, entry.op.key, entry.frequency, "pending", "-", None, 0, 0.0,
                                  None, None, "not reached: the run stopped first")
        return OperatorReport(entry.op.name, entry.op.key, entry.frequency, "failed",
                              (result or {}).get("method", "backend"), None,
                              int((result or {}).get("candidates", 0)), float((result or {}).get("seconds", 0.0)),
                              None, None, (result or {}).get("error") or "no valid program found")
    first = best if best.method != IMPROVE else min(
        (p for p in db.programs(target=target, op=entry.op) if p.method not in (IMPROVE, PREDICTED)),
        key=lambda p: p.latency_s, default=best)
    est = next((r for r in reversed(mine) if any(e["line"] == first.line for e in r.get("records", ()))), {})
    candidates, seconds = first.candidates, first.seconds
    steps = [next((r for r in reversed(mine) if r.get("method") == m), None) for m in ("backend", POLISH)]
    if all(steps):  # the backend's result holds the plan's estimate of both
        candidates, seconds = (sum(int(r.get("candidates", 0)) for r in steps),
                               sum(float(r.get("seconds", 0.0)) for r in steps))
        est = steps[0]
    evolved = [r for r in mine if r.get("method") == IMPROVE]  # a time budget's spare steps (eto.runs.improve)
    candidates += sum(int(r.get("candidates", 0)) for r in evolved)
    seconds += sum(float(r.get("seconds", 0.0)) for r in evolved)
    method = first.method + ("+improve" if best.method == IMPROVE and first is not best else "")
    return OperatorReport(entry.op.name, entry.op.key, entry.frequency, status, method, first.source,
                          candidates, seconds, best.latency_s, best.gflops,
                          estimated_candidates=est.get("estimate"), estimated_seconds=est.get("estimated_seconds"))


#: after each measured batch: (label, trials or candidates so far, budget, best seconds so far); a reuse
#: search's budget is the plan's estimate of its candidates (0: none)
OnBatch = Callable[[str, int, int, float], None]


def batch_total(trials: int, budget: int, step: int) -> int | None:
    """The total a progress display shows after a batch: ``budget`` (a reuse search's is the plan's
    estimate); once ``trials`` passes it, the trials so far plus one more batch of ``step``, so that a
    bar never reads full while the search goes on; None where there is no budget (0)."""
    if budget <= 0:
        return None
    return budget if trials <= budget else trials + max(step, 1)


def past_budget(trials: int, budget: int) -> str:
    """What a progress display adds once a search measures more than it planned: that the total grew."""
    return f" (more than the {budget} planned)" if 0 < budget < trials else ""


def progress_printer(say: Callable[[str], None] | None = None) -> OnBatch:
    """A one-line-per-batch progress display: ``op  [bar] trials/total  best  elapsed  ETA``, each line
    to ``say`` (default: the ``eto.progress`` logger at INFO; the command line shows it).

    The total is the budget until a search passes it (:func:`batch_total`: then it grows, and the line
    says so); none is shown without a budget. The ETA is the operator's wall time per trial since its
    first batch here (a resumed run's earlier trials are not on this clock) times the trials left; with
    the task scheduler interleaving operators, that is when this one should finish.
    """
    say = say or logging.getLogger("eto.progress").info
    seen: dict[str, tuple[float, int, int]] = {}  # name -> (first batch's time, its trials, last trials)

    def show(name: str, trials: int, budget: int, best: float) -> None:
        now = time.perf_counter()
        t0, n0, last = seen.get(name, (now, trials, trials))
        seen[name] = (t0, n0, trials)
        total = batch_total(trials, budget, trials - last)
        best_txt = f"{best * 1e6:10.2f} us" if best != float("inf") else "        -   "
        bar = "?" * 20 if total is None else "#" * int(20 * trials / total)
        eta = None
        if total is not None and trials > n0 and now > t0:
            eta = (now - t0) / (trials - n0) * (total - trials)
        say(f"  {name:<44.44} [{bar:<20}] {trials:4d}/{'?' if total is None else total:<4} best {best_txt}  "
            f"{clock(now - t0)} ETA {'-' if eta is None else clock(eta)}{past_budget(trials, budget)}")
    return show


class SetStatus(str):
    """A set's progress line (``set: 7/22 operators, 3:05 elapsed, ETA 2:40``) that carries its numbers and
    the operators just finished, so that a display can draw it as a bar and close theirs; any ``say``
    callable takes it as the text it is."""

    done: int
    total: int
    elapsed: float
    eta: float
    finished: tuple[str, ...]

    def __new__(cls, *, done: int, total: int, elapsed: float, eta: float, finished: Iterable[str] = ()) -> "SetStatus":
        line = super().__new__(cls, f"set: {done}/{total} operators, {clock(elapsed)} elapsed, ETA {clock(eta)}")
        line.done, line.total, line.elapsed, line.eta, line.finished = done, total, elapsed, eta, tuple(finished)
        return line


class SetProgress:
    """``set: k/n operators, elapsed, ETA`` (a :class:`SetStatus`) after each tuned operator of a plan
    (thread-safe: subtrees run concurrently). The ETA is the plan's estimated seconds for what is left,
    scaled by how the estimates of what finished in this run compare with its real time."""

    def __init__(self, estimated_seconds: Mapping[str, float], say: Callable[[str], None], *,
                 done: Iterable[str] = ()) -> None:
        self.cost = dict(estimated_seconds)
        self.done = set(done)  # finished before this run (resumed): not on this run's clock
        self.here = 0.0  # estimated seconds of what this run finished
        self.start = time.perf_counter()
        self.say = say
        self.lock = threading.Lock()

    def __call__(self, names: Iterable[str]) -> None:
        with self.lock:
            new = [n for n in names if n not in self.done]
            if not new:
                return
            self.done.update(new)
            self.here += sum(self.cost[n] for n in new)
            elapsed = time.perf_counter() - self.start
            left = sum(c for n, c in self.cost.items() if n not in self.done)
            eta = left * (elapsed / self.here if self.here > 0 else 1.0)
            self.say(SetStatus(done=len(self.done), total=len(self.cost), elapsed=elapsed, eta=eta, finished=new))


def clock(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss``) for progress lines."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def tune_with_backend(
    opset: OperatorSet | Iterable[Operator],
    target: "Target",
    database: Database,
    options: BackendOptions | None = None,
    *,
    measurer: "Measurer | None" = None, timing: Timing = DEFAULT_TIMING,
    work_dir: str | None = None,
    on_batch: Callable[[str, int, int, float], None] | None = None,
    finalists: int = 0,
    short_builds: bool = False,
    verbose: bool = False,
    extra: "Mapping[Operator, dict] | None" = None,
) -> TuneReport:
    """Tune every operator not yet in ``database`` with MetaSchedule as ``options`` say
    (:class:`tuner.measure.options.BackendOptions`, default its defaults: 64 trials each, evolutionary search).

    Every measured program that passes the correctness gate is stored; ``extra`` adds per operator
    metadata (e.g. the plan's estimate). ``finalists``: each operator's best few re-timed in every
    runner process (:func:`tuner.measure.finalists.settle_records`; 0, the default: MetaSchedule's own choice).
    ``short_builds``: LLVM builds cut at the reuse searches' timeout (eto's roots; see
    :func:`tuner.measure.backend.tune_backend`; False, the default: MetaSchedule's). ``timing``: its own measurer's.
    An operator another process is tuning on the same database (:mod:`eto.store.claims`) is waited for
    after the rest, and tuned here only if that process stopped without a result.
    """
    from tuner.measure.measurer import Measurer

    from eto.store.claims import claim
    from eto.target import export_threads

    if not isinstance(opset, OperatorSet):
        opset = OperatorSet.from_layers("operators", list(opset))
    export_threads()
    start = time.perf_counter()
    todo = [e for e in opset if not database.attempted(e.op, target)]
    tuned_now: set[Operator] = set()
    if todo:
        own = measurer is None
        measurer = measurer or Measurer.local(measure_config(timing, target))
        options = options or BackendOptions()
        kw = dict(measurer=measurer, work_dir=work_dir, on_batch=on_batch, finalists=finalists,
                  short_builds=short_builds, verbose=verbose)
        try:
            with ExitStack() as held:
                mine = [e for e in todo if held.enter_context(claim(database, e.op, target, wait=False))
                        and not database.attempted(e.op, target)]
                if mine:
                    _resumable_backend(mine, target, database, options, extra or {}, kw)
                tuned_now.update(e.op for e in mine)
            for e in todo:  # claimed by another writer: wait for it
                if e.op not in tuned_now:
                    with claim(database, e.op, target):
                        if not database.attempted(e.op, target):
                            _resumable_backend([e], target, database, options, extra or {}, kw)
                            tuned_now.add(e.op)
                    kill_point("between.operators")
        finally:
            if own:
                measurer.close()
    rows = tuple(report_row(e, database, target, "tuned" if e.op in tuned_now else "cached") for e in opset)
    return TuneReport(str(target), rows, time.perf_counter() - start)


def _resumable_backend(todo: list[OperatorEntry], target: "Target", database: Database, options: BackendOptions,
                       extra: "Mapping[Operator, dict]", kw: dict) -> None:
    """The backend over ``todo``, every measured candidate made durable and an interrupted run continued.

    Each candidate is checkpointed as it is measured (a batch's failed builds together); an operator
    with checkpointed candidates gets only the rest of its budget, and its earlier programs seed the
    search and train its cost model. Tasks with the same remaining budget share one task scheduler.
    """
    from tuner.measure.backend import BackendTask, tune_backend
    from tuner.measure.timing import timing_of

    trials = options.trials
    by_name = {e.op.name: e for e in todo}
    local = checkable_here(kw["measurer"], target)
    timing = timing_of(kw["measurer"].config)  # what the stored latencies mean (tuner.measure.timing)
    extra = {e.op: {**extra.get(e.op, {}), "timing": timing} for e in todo}
    before = {e.op.name: database.progress(e.op, target) for e in todo}
    best: dict[str, float] = {}
    done = {n: (p.trials, p.seconds) for n, p in before.items()}

    def checkpoint(name: str, records: list, n: int, seconds: float) -> None:
        t, s = done[name]
        done[name] = (t + n, s + seconds)
        best[name] = min([best.get(name, min(before[name].latencies, default=math.inf))]
                         + [median_secs(r.run_secs) for r in records])
        database.checkpoint(by_name[name].op, target, records, method="backend", trials=n, seconds=seconds,
                            trajectory=[[done[name][1], done[name][0], best[name]]])
        kill_point("backend.checkpointed")

    def commit(res) -> None:
        e, prior = by_name[res.name], before[res.name]
        prior_best = min(prior.latencies, default=math.inf)
        shifted = [p.after(prior.seconds, prior.trials, prior_best).to_json() for p in res.trajectory]
        records, checked, wrong = gated(e.op, res.records, target, local)
        kill_point("backend.result")
        database.commit(e.op, target, records, method="backend", candidates=prior.trials + res.candidates,
                        seconds=prior.seconds + res.seconds, error=wrong or "; ".join(res.errors) or None,
                        extra={**extra.get(e.op, {}), "trajectory": [*prior.trajectory, *shifted], **checked,
                               "phases": {k: round(v, 3) for k, v in res.phase_seconds.items()},
                               **({"resumed_after": prior.trials} if prior.trials else {})})

    groups: dict[int, list[OperatorEntry]] = {}
    for e in todo:
        groups.setdefault(max(trials - before[e.op.name].trials, 0), []).append(e)
    for left, group in sorted(groups.items(), reverse=True):
        if left == 0:  # killed after its last candidate, before its result
            _commit_measured(group, target, database, extra, local)
            continue
        tasks = [BackendTask(e.op.name, e.op.prim_func(), float(e.frequency)) for e in group]
        warm = [[r for r, _ in before[e.op.name].programs()] for e in group]
        try:
            tune_backend(tasks, target, dataclasses.replace(options, trials=left), warm_start=warm, on_result=commit,
                         on_measured=checkpoint, **kw)
        except deadline.DeadlineReached:  # a time budget's end: each search keeps the best it measured
            _commit_measured(group, target, database, extra, local, cut=True)
            raise


def _commit_measured(group: list[OperatorEntry], target: "Target", database: Database,
                     extra: "Mapping[Operator, dict]", local: bool, *, cut: bool = False) -> None:
    """Each operator's checkpointed candidates committed as its backend result (gated first): after a kill
    that left its whole budget measured, or (``cut``) a time budget's end, where one measured program suffices."""
    for e in group:
        p = database.progress(e.op, target)
        if database.attempted(e.op, target) or not p.trials or (cut and not p.latencies):
            continue
        records, checked, wrong = gated(e.op, [r for r, _ in p.programs()], target, local)
        database.commit(e.op, target, records, method="backend", candidates=p.trials, seconds=p.seconds,
                        error=wrong, extra={**extra.get(e.op, {}), "trajectory": list(p.trajectory),
                                            "resumed_after": p.trials, **checked,
                                            **({"cut": "time budget"} if cut else {})})


def checkable_here(measurer: "Measurer", target: "Target") -> bool:
    """Whether programs measured by ``measurer`` for ``target`` can be run on this machine."""
    return measurer.kind == "local" and not str(target.attrs.get("mtriple", "") or "")


def gated(op: Operator, records: "Sequence[TuningRecord]", target: "Target",
          local: bool = True) -> tuple[list, dict, str | None]:
    """:func:`eto.runs.verify.gate` on a result's records: (records to store, metadata, error if none is right)."""
    from eto.runs.verify import gate

    kept, checked = gate(op, records, target, local=local)
    wrong = None
    if not kept and checked.get("rejected"):
        wrong = f"no program matched the reference ({len(checked['rejected'])} checked): {checked['rejected'][0]['error']}"
    return kept, checked, wrong


def features_of(kept: Sequence, records: Sequence, features: Sequence[dict | None]) -> list[dict | None]:
    """The B/T/M features of ``kept``, a gate's re-sorted subset of ``records`` (matched by identity)."""
    at = {id(r): i for i, r in enumerate(records)}
    return [features[at[id(r)]] for r in kept]
