"""Stored programs and the queries every database answers, of one directory or of several read as one.

:class:`ProgramQueries` derives every query (the best program of an operator, the tuned ones, reuse
sources) from two lists, the programs and the results; :class:`~eto.store.database.Database` keeps
them for one directory, and :class:`DatabaseUnion` reads several databases as one without copying a
line: ``eto plan --prior A --prior B`` plans with five models' databases in the time it takes to read
their metadata (merging them into a temporary database parsed and wrote every record twice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Sequence

from eto.operators import Operator
from eto.store.jsonlines import Problem
from eto.target import target_key

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target

Method = Literal["backend", "reuse", "reuse+evolve", "topk", "import", "instant", "polish", "improve"]
#: A backend root's program improved by a self-reuse after its backend result (:mod:`eto.runs.polish`).
POLISH: Method = "polish"
IMPROVE: Method = "improve"  # a step of a time budget's spare time (:mod:`eto.runs.improve`)
#: A program derived for a new shape without a search (:mod:`eto.runs.instant`): served until tuning
#: stores a better one, but not a tuning result (the operator still counts as not attempted).
PREDICTED: Method = "instant"


@dataclass(frozen=True)
class ProgramRecord:
    """A stored program of an operator on a target, and how it was found."""

    op: Operator
    target: str
    latency_s: float
    method: str
    source: str | None  # key of the operator whose program was reused
    candidates: int  # measured by the tuning run that produced this program
    seconds: float  # wall seconds of that tuning run
    rank: int  # 0 = the run's best program
    features: dict | None
    line: int  # line of the record in database_tuning_record.json (0-based)
    created: float
    timing: str = "hot"  # how its run timed candidates (tuner.measure.timing); hot before runs recorded it
    _db: Any = field(compare=False, repr=False, hash=False, default=None)  # the Database holding its record

    @property
    def gflops(self) -> float:
        return self.op.flops / self.latency_s / 1e9 if self.latency_s > 0 else 0.0

    @property
    def tuning_record(self) -> "TuningRecord":
        """The MetaSchedule TuningRecord (imports TVM), read from the database that holds it."""
        return self._db.tuning_record(self.line)

    @property
    def workload(self):
        """The program's MetaSchedule Workload, read without replaying its trace (:meth:`Database.record_workload`)."""
        return self._db.record_workload(self.line)

    @property
    def stored_trace(self) -> list:
        """The program's trace JSON as stored, read without TVM (:meth:`Database.stored_trace`)."""
        return self._db.stored_trace(self.line)


class ProgramQueries:
    """The queries of a database, from :meth:`program_list` and :meth:`results`. An operator's programs come
    from an index by operator, rebuilt when the list changes: O(1) a query after O(programs) once."""

    def program_list(self) -> list[ProgramRecord]:
        """Every stored program, in stored order (a list a reload replaces, never changes in place)."""
        raise NotImplementedError

    def results(self) -> list[dict]:
        """The raw metadata of each tuning result, in commit order (failed ones included)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.program_list())

    def programs(self, *, target: "str | Target | None" = None, op: Operator | None = None) -> list[ProgramRecord]:
        tk = None if target is None else target_key(target)
        progs = self.program_list()
        if op is not None:
            index = self.__dict__.get("_op_index")
            if index is None or index[0] is not progs:
                by_op: dict[Operator, list[ProgramRecord]] = {}
                for p in progs:
                    by_op.setdefault(p.op, []).append(p)
                self._op_index = index = (progs, by_op)
            progs = index[1].get(op, [])
        return [p for p in progs if tk is None or p.target == tk]

    def best(self, op: Operator, target: "str | Target", *, predicted: bool = True) -> ProgramRecord | None:
        """The fastest stored program of ``op`` on ``target`` (None if never tuned there);
        ``predicted=False``: tuned programs only, not instant ones."""
        progs = [p for p in self.programs(target=target, op=op) if predicted or p.method != PREDICTED]
        return min(progs, key=lambda p: p.latency_s) if progs else None

    def search_base(self, op: Operator, target: "str | Target") -> ProgramRecord | None:
        """The program a search around ``op`` starts from (a reuse's β, a self-reuse's base): its fastest
        tuned program, else its instant one. A tuned program's search recorded its runner-ups, which
        the reuse tuner's leads read; an instant program is one derived guess. O(programs)."""
        return self.best(op, target, predicted=False) or self.best(op, target)

    def best_programs(self, target: "str | Target | None" = None, *, predicted: bool = True) -> list[ProgramRecord]:
        """The fastest stored program per (operator, target), in first-stored order; O(programs)."""
        best: dict[tuple[Operator, str], ProgramRecord] = {}
        for p in self.programs(target=target):
            k = (p.op, p.target)
            if (predicted or p.method != PREDICTED) and (k not in best or p.latency_s < best[k].latency_s):
                best[k] = p
        return list(best.values())

    def tuned(self, target: "str | Target") -> dict[Operator, ProgramRecord]:
        """Best tuned program per operator on ``target`` (instant programs are not tuned)."""
        return {p.op: p for p in self.best_programs(target, predicted=False)}

    def attempted(self, op: Operator, target: "str | Target") -> bool:
        """Whether a tuning result (successful or not) for ``op`` on ``target`` is committed."""
        tk, key = target_key(target), op.key
        return any(r.get("op_key") == key and r.get("target") == tk and r.get("method") != PREDICTED
                   for r in self.results())

    def sources(self, *, op_type: str, target: "str | Target", sketch: str | None = None) -> list[ProgramRecord]:
        """Best programs of tuned operators of one type (and sketch key): candidate reuse sources."""
        return [p for op, p in self.tuned(target).items()
                if op.type == op_type.upper() and (sketch is None or op.sketch_key() == sketch)]


class DatabaseUnion(ProgramQueries):
    """Several databases read as one, read-only: their programs and results, in the order given.
    A program's TuningRecord is read from its own database; nothing is copied or written."""

    readonly = True

    def __init__(self, databases: Sequence[ProgramQueries]) -> None:
        self.databases = tuple(databases)
        self.path = ", ".join(str(getattr(d, "path", d)) for d in self.databases)
        self._joined: tuple[list[list[ProgramRecord]], list[ProgramRecord]] = ([], [])

    def program_list(self) -> list[ProgramRecord]:
        lists = [d.program_list() for d in self.databases]
        joined_from, joined = self._joined
        if len(joined_from) != len(lists) or any(a is not b for a, b in zip(joined_from, lists)):
            self._joined = (lists, joined := [p for progs in lists for p in progs])
        return joined

    def results(self) -> list[dict]:
        return [r for d in self.databases for r in d.results()]

    @property
    def problems(self) -> list[Problem]:
        return [p for d in self.databases for p in getattr(d, "problems", [])]


class DatabaseWithPriors(DatabaseUnion):
    """The database a run writes, read together with prior databases it never writes (``--prior``).

    Every query sees them all: a prior's programs are free roots and reuse sources. Everything else
    (commits, checkpoints, progress, ``path``) is the written database's. Nothing is copied when it
    opens (five models' priors are 70 MB: copying them into every new database made each the sum of
    all before it, and a rerun copied them again); :meth:`keep` copies the results of just the
    operators a run tunes, so the written database alone builds its model.
    """

    readonly = False

    def __init__(self, database: Any, priors: Sequence[ProgramQueries]) -> None:
        super().__init__([database, *priors])
        self.database, self.priors = database, tuple(priors)
        self.path = database.path

    def __getattr__(self, name: str) -> Any:  # commit, progress, checkpoint, reload...: the written one's
        if name in ("database", "priors"):  # not set yet (unpickling, a failed __init__)
            raise AttributeError(name)
        return getattr(self.database, name)

    def keep(self, ops: Sequence[Operator], target: "str | Target") -> dict[str, int]:
        """Copy into the written database every prior result of ``ops`` on ``target`` that it has not
        attempted itself: each operator's programs as the priors hold them. O(results + copied lines)."""
        tk = target_key(target)
        wanted = {(op.key, tk) for op in ops if not self.database.attempted(op, target)}
        counts = {"results": 0, "records": 0}
        for prior in self.priors:
            have = {(r.get("op_key"), r.get("target")) for r in prior.results()} & wanted
            if have:
                copied = self.database.merge_from(prior, only=have)
                counts = {k: counts[k] + copied[k] for k in counts}
        return counts


__all__ = ["IMPROVE", "POLISH", "PREDICTED", "DatabaseUnion", "DatabaseWithPriors", "Method", "ProgramQueries",
           "ProgramRecord"]
