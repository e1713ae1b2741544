"""A program cache for serving changing shapes: a compiled function at once, a tuned one soon.

:class:`ProgramCache` ``.get(op)`` returns a compiled function for ``op`` immediately: the
database's best program, else an instant program (:mod:`eto.runs.instant`, derived and checked in well
under a second). Operators served without a tuned program are queued for background tuning
(:func:`eto.runs.pipeline.tune`: reuse from the database's programs, the backend where nothing can be
reused); when a faster program lands, the next ``get`` returns it. Everything learned goes into
the database, so a restarted process serves the tuned programs straight away. Thread-safe.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from tuner.measure.options import DEFAULT_TRIALS
from eto.store.database import PREDICTED, Database, ProgramRecord
from eto.runs.instant import instant
from eto.operators import Operator

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer


@dataclass(frozen=True)
class Served:
    """What :meth:`ProgramCache.get` hands out for an operator."""

    function: Any  # the compiled module: ``function(*inputs, output)``
    program: ProgramRecord

    @property
    def tuned(self) -> bool:
        return self.program.method != PREDICTED


class ProgramCache:
    """Compiled programs per operator, upgraded in the background as tuning finds better ones.

    ``tune``: queue operators without a tuned program for background tuning (``trials`` backend
    trials where nothing can be reused). ``log`` receives one line per event.
    """

    def __init__(self, database: Database, target: "str | Target" = "cpu", *, tune: bool = True, trials: int = DEFAULT_TRIALS,
                 measurer: "Measurer | None" = None, log: Callable[[str], None] | None = None) -> None:
        from eto.target import parse_target, use_threads, warn_target_mismatch

        use_threads()  # the served functions run in this process
        self.database = database
        self.target = parse_target(target) if isinstance(target, str) else target
        warn_target_mismatch(database, self.target)
        self.tune, self.trials, self.measurer = tune, trials, measurer
        self.log = log or (lambda _m: None)
        self._served: dict[Operator, Served] = {}
        self._lock = threading.Lock()
        self._locks: dict[Operator, threading.Lock] = {}
        self._queued: set[Operator] = set()
        self._queue: queue.Queue[Operator | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self.errors: dict[Operator, str] = {}

    def get(self, op: Operator) -> Served:
        """The best program for ``op`` now, compiled (instant if nothing is stored; ValueError if the
        database has nothing of ``op``'s type and sketch to derive one from)."""
        served = self._served.get(op)
        if served is not None and served.tuned:  # the hot path: no database scan once tuned
            return served
        with self._lock:  # one lock per operator: deriving one instant program never blocks another's get
            op_lock = self._locks.setdefault(op, threading.Lock())
        with op_lock:
            served = self._served.get(op)
            best = self.database.best(op, self.target)
            if served is None or (best is not None and best.latency_s < served.program.latency_s):
                if best is None:
                    best = instant(op, self.database, self.target).program
                    self.log(f"instant program for {op.name}: {best.latency_s * 1e6:.1f} us")
                served = Served(self._build(best), best)
                self._served[op] = served
            if self.tune and not served.tuned and op not in self._queued:
                self._queued.add(op)
                self._queue.put(op)
                self._start()
            return served

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background queue is done (True) or ``timeout`` seconds pass (False)."""
        done = threading.Event()

        def drained() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=drained, daemon=True).start()
        return done.wait(timeout)

    def close(self) -> None:
        """Finish the queued tuning and stop the worker."""
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None

    def __enter__(self) -> "ProgramCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _build(self, program: ProgramRecord):
        from tuner.measure.apply import build, scheduled_module

        return build(scheduled_module(program.tuning_record), self.target)

    def _start(self) -> None:
        with self._lock:
            if self._worker is not None:
                return
            self._worker = threading.Thread(target=self._work, name="eto-serve-tuning", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        from eto.operators.opsets import OperatorSet
        from eto.options import TuneOptions
        from eto.runs.pipeline import tune

        while True:
            op = self._queue.get()
            if op is None:
                self._queue.task_done()
                return
            try:
                tune(OperatorSet.from_layers(f"serve:{op.name}", [op]), self.target, self.database,
                     TuneOptions.of(trials=self.trials), measurer=self.measurer, log=self.log)
                self.get(op)  # swap the tuned program in when it is faster
                self.log(f"tuned {op.name}: {self._served[op].program.latency_s * 1e6:.1f} us")
            except Exception as exc:  # noqa: BLE001 -- any failure of a run: logged, kept in errors; the program stays
                self.errors[op] = str(exc)
                self.log(f"tuning {op.name} failed: {exc}")
            finally:
                self._queue.task_done()
