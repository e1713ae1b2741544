"""Dynamic-shape retuning: a model's operators at new sizes, from what the database already holds.

``eto retune`` and :func:`retune`. For each new shape (one value of a varied dimension, see
:func:`eto.operators.opsets.vary`) every operator the database has no tuned program for gets, first, its
instant program (:mod:`eto.runs.instant`: no measurement, checked against numpy, served at once), then,
unless ``instant_only``, a tuned one: the reuse pair selector plans over the database's programs
(free sources) plus all the new operators and their bridges, and the pipeline tunes the plan
(:func:`eto.runs.pipeline.tune`): reuse wherever a source exists, the backend only where none does.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from tuner.measure.timing import DEFAULT_TIMING

from eto.store.database import PREDICTED, Database
from eto.runs.instant import instant
from eto.operators.opsets import OperatorSet
from eto.target import warn_target_mismatch

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer

    from eto.options import TuneOptions


@dataclass(frozen=True)
class ShapeRow:
    """One operator at one new size: its instant program, then its tuned program."""

    value: int
    op: str
    frequency: int
    instant_latency_s: float | None
    instant_seconds: float | None
    instant_source: str | None
    method: str | None  # how the tuned program was found (None: not tuned, e.g. instant only)
    source: str | None
    candidates: int
    seconds: float
    latency_s: float | None
    error: str | None = None
    function: bool = False  # a model's function outside the catalogue: never instant (tuned after the plan)


@dataclass(frozen=True)
class RetuneReport:
    dim: str
    rows: tuple[ShapeRow, ...]
    seconds: float  # wall time of the whole retune
    instant_seconds: float  # of which: deriving, checking and timing the instant programs

    def to_json(self) -> dict:
        return {"dim": self.dim, "seconds": self.seconds, "instant_seconds": self.instant_seconds,
                "rows": [asdict(r) for r in self.rows]}


def retune(shapes: Sequence[tuple[int, OperatorSet]], target: "Target", database: Database,
           options: "TuneOptions | None" = None, *, dim: str, instant_only: bool = False,
           measurer: "Measurer | None" = None, log: Callable[[str], None] | None = None) -> RetuneReport:
    """Instant programs for every new operator of ``shapes``, then (unless ``instant_only``) tuned ones.

    ``shapes``: (value, operator set) per new size, as :func:`eto.operators.opsets.vary` gives them. Operators
    the database already tuned are served as they are. An operator no stored program can serve
    (another type or sketch) gets no instant program, a message saying so, and the backend.
    ``options``: the tuning run's (:class:`eto.options.TuneOptions`, default its defaults). Within a
    deadline (``eto retune --time-budget``) that the instant programs leave too close to start a
    measurer and measure (:func:`eto.runs.pipeline.worth_measuring`), nothing is tuned.
    """
    say = log or (lambda _m: None)
    warn_target_mismatch(database, target)
    start = time.perf_counter()
    instants: dict = {}
    errors: dict = {}
    everything = OperatorSet.union(f"{dim}-shapes", [s for _, s in shapes])
    for e in everything:
        if database.best(e.op, target) is not None:  # tuned, or an instant program of an earlier run
            continue
        if e.op.spec.backend_only:  # nothing is derived for a function outside the catalogue
            say(f"no instant program for {e.op.name}: a function outside the catalogue"
                f"{'' if instant_only else ' (reused from itself at another size, else the backend)'}")
            continue
        try:
            r = instant(e.op, database, target, timing=DEFAULT_TIMING if options is None else options.timing)
        except ValueError as exc:
            errors[e.op] = str(exc)
            say(f"no instant program for {e.op.name}: {exc}")
            continue
        instants[e.op] = r
        say(f"instant: {e.op.name} <- {r.source.name} ({r.by} of {r.ranked}): {r.latency_s * 1e6:.1f} us "
            f"in {r.seconds:.2f} s")
    instant_s = time.perf_counter() - start
    if not instant_only:
        _tune_new_sizes(everything, target, database, options, measurer, log)
    rows = []
    for value, opset in shapes:
        for e in opset:
            inst = instants.get(e.op)
            tuned = database.best(e.op, target, predicted=False)
            if inst is None and tuned is None:
                served = database.best(e.op, target)  # an instant program of an earlier run
                inst_lat = served.latency_s if served is not None and served.method == PREDICTED else None
            else:
                inst_lat = inst.latency_s if inst else None
            rows.append(ShapeRow(
                value, e.op.name, e.frequency, inst_lat, inst.seconds if inst else None,
                inst.source.name if inst else None, tuned.method if tuned else None,
                tuned.source if tuned else None, tuned.candidates if tuned else 0,
                tuned.seconds if tuned else 0.0, tuned.latency_s if tuned else None, errors.get(e.op),
                e.op.spec.backend_only))
    return RetuneReport(dim, tuple(rows), time.perf_counter() - start, instant_s)


def _tune_new_sizes(everything: OperatorSet, target: "Target", database: Database, options: "TuneOptions | None",
                    measurer: "Measurer | None", log: Callable[[str], None] | None) -> None:
    """The pipeline over the new sizes, unless the run's deadline leaves too little time to start a
    measurer of its own and measure (:func:`eto.runs.pipeline.worth_measuring`)."""
    from tuner.measure import deadline

    from eto.runs.pipeline import tune, worth_measuring

    if measurer is not None or worth_measuring():
        tune(everything, target, database, options, measurer=measurer, log=log)
    elif log is not None:
        log(f"time budget: {max(deadline.left(), 0):.0f} s left after the instant programs, too little to start "
            "measuring and tune; every new size is served by its instant program, and the same command with a "
            "larger budget tunes them")
