"""Tuning operator sets into a database, resumably.

Every operator's result is committed the moment its tuning finishes; a rerun of the same command
skips operators the database already has a result for on that target, so a killed run loses at
most the operators that were in flight.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Literal, Mapping

from .database import Database
from .target import target_key
from .operators import Operator
from .opsets import OperatorEntry, OperatorSet

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure import Measurer


@dataclass(frozen=True)
class OperatorReport:
    """One row of a tuning report."""

    op: str
    key: str
    frequency: int
    status: Literal["tuned", "cached", "failed"]
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

    @property
    def weighted_latency_s(self) -> float | None:
        """Sum of frequency x latency (the paper's quality metric); None if any operator failed."""
        if any(r.latency_s is None for r in self.rows):
            return None
        return sum(r.frequency * r.latency_s for r in self.rows)  # type: ignore[operator]

    @property
    def failed(self) -> list[OperatorReport]:
        return [r for r in self.rows if r.status == "failed"]

    def to_json(self) -> dict:
        return {"target": self.target, "seconds": self.seconds, "weighted_latency_s": self.weighted_latency_s,
                "candidates": sum(r.candidates for r in self.rows if r.status == "tuned"),
                "estimated_candidates": self.estimated_candidates, "estimated_seconds": self.estimated_seconds,
                "operators": [asdict(r) for r in self.rows]}


def report_row(entry: OperatorEntry, db: Database, target: "Target", status: str) -> OperatorReport:
    """The operator's row as the database has it now: its best program, or its last failed result."""
    best = db.best(entry.op, target)
    tk = target_key(target)
    result = next((r for r in reversed(db.results())
                   if r.get("op_key") == entry.op.key and r.get("target") == tk), None)
    if best is None:
        return OperatorReport(entry.op.name, entry.op.key, entry.frequency, "failed",
                              (result or {}).get("method", "backend"), None,
                              int((result or {}).get("candidates", 0)), float((result or {}).get("seconds", 0.0)),
                              None, None, (result or {}).get("error") or "no valid program found")
    est = next((r for r in reversed(db.results()) if r.get("op_key") == entry.op.key and r.get("target") == tk
                and any(e["line"] == best.line for e in r.get("records", ()))), {})
    return OperatorReport(entry.op.name, entry.op.key, entry.frequency, status, best.method, best.source,
                          best.candidates, best.seconds, best.latency_s, best.gflops,
                          estimated_candidates=est.get("estimate"), estimated_seconds=est.get("estimated_seconds"))


def progress_printer(stream=sys.stderr) -> Callable[[str, int, int, float], None]:
    """A one-line-per-batch progress display: ``op  trials/budget  best``."""
    def show(name: str, trials: int, budget: int, best: float) -> None:
        best_txt = f"{best * 1e6:10.2f} us" if best != float("inf") else "        -   "
        bar = "#" * int(20 * trials / max(budget, 1))
        print(f"  {name:<44.44} [{bar:<20}] {trials:4d}/{budget:<4d} best {best_txt}", file=stream, flush=True)
    return show


def tune_with_backend(
    opset: OperatorSet | Iterable[Operator],
    target: "Target",
    database: Database,
    *,
    trials: int,
    measurer: "Measurer | None" = None,
    num_trials_per_iter: int = 64,
    seed: int | None = None,
    work_dir: str | None = None,
    on_batch: Callable[[str, int, int, float], None] | None = None,
    strategy: str | object = "evolutionary",
    verbose: bool = False,
    extra: "Mapping[Operator, dict] | None" = None,
) -> TuneReport:
    """Tune every operator not yet in ``database`` with MetaSchedule (task scheduler, ``trials`` each).

    Every measured program is stored; ``extra`` adds per operator metadata (e.g. the plan's estimate).
    """
    from tuner.backend import BackendTask, tune_backend
    from tuner.measure import MeasureConfig, Measurer

    from .target import num_threads

    if not isinstance(opset, OperatorSet):
        opset = OperatorSet.from_layers("operators", list(opset))
    os.environ.setdefault("TVM_NUM_THREADS", str(num_threads()))
    start = time.perf_counter()
    todo = [e for e in opset if not database.attempted(e.op, target)]
    by_name = {e.op.name: e for e in todo}
    if todo:
        own = measurer is None
        measurer = measurer or Measurer.local(MeasureConfig())
        try:
            tasks = [BackendTask(e.op.name, e.op.prim_func(), float(e.frequency)) for e in todo]

            def commit(res) -> None:
                e = by_name[res.name]
                database.commit(e.op, target, res.records, method="backend", candidates=res.candidates,
                                seconds=res.seconds, error="; ".join(res.errors) or None,
                                extra={**(extra or {}).get(e.op, {}),
                                       "trajectory": [p.to_json() for p in res.trajectory]})

            tune_backend(tasks, target, trials_per_task=trials, measurer=measurer,
                         num_trials_per_iter=num_trials_per_iter, seed=seed, work_dir=work_dir,
                         on_result=commit, on_batch=on_batch, strategy=strategy, verbose=verbose)
        finally:
            if own:
                measurer.close()
    tuned_now = {e.op for e in todo}
    rows = tuple(report_row(e, database, target, "tuned" if e.op in tuned_now else "cached") for e in opset)
    return TuneReport(str(target), rows, time.perf_counter() - start)
