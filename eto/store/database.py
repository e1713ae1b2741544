"""The database of optimized programs: MetaSchedule's JSON files plus eto's metadata.

A database is a directory that TVM reads as it is::

    database_workload.json        MetaSchedule: one workload per line  [shash, module]
    database_tuning_record.json   MetaSchedule: one record per line    [workload_line, record]
    eto_meta.json                 eto: one line per tuning result (operator, target, method,
                                  reused source, candidates, seconds, and the record lines it owns)
    eto_progress.json             eto: one line per measured candidate of a run in flight, its record inside
                                  (TVM never reads them: no unchecked program reaches its queries)
    corrupt_lines.txt             lines eto could not read, kept verbatim with file and line

so ``ms.database.JSONDatabase(work_dir=path)`` and Relax's ``MetaScheduleApplyDatabase`` work on it.

Writes are append-only (:mod:`eto.store.jsonlines`: one ``write`` and one fsync per batch of lines),
records before the metadata line that references them, under an exclusive lock. A process killed
at any point leaves complete lines plus at most one partial last line, which the next writer moves
to ``corrupt_lines.txt`` (reported, never silently dropped). A corrupt line anywhere is
reported with file and line number and skipped, and a warning at open counts them.

Reading needs no TVM, and parses what a query needs: workload and metadata lines as JSON; a record
line's shape (``[workload, [...]]``) is checked at once and its program parsed when asked for, as
is a progress line (the records and progress of a few models' databases are tens of megabytes, which
a plan reading them as priors never looks into). A TuningRecord TVM cannot read, or whose line is
damaged inside, is an :class:`~eto.store.errors.UnreadableRecord` naming its file and line;
:meth:`Database.check_lines` parses every line (``eto db show`` and ``merge`` do). Each file is read
once: a reload (before every write, so once per measured candidate) reads only the lines appended
since the last one, so its cost does not grow with the database.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import threading
import time
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Collection, Iterator, Sequence

from tuner.measure.faults import kill_point
from tuner.measure.stop import deferred
from tuner.measure.trajectory import median_secs
from tuner.tvm_errors import TVM_ERRORS, error_line

from eto.store.checkpoints import Progress, progress_batch_ok
from eto.store.errors import DatabaseError, UnreadableRecord
from eto.store.jsonlines import (Problem, Tail, append_lines, count_lines, cut_at, dumps, parse, raw_line, record_json,
                                 skipped_lines)
from eto.store.programs import IMPROVE, POLISH, PREDICTED, Method, ProgramQueries, ProgramRecord  # noqa: F401 (re-exported)
from eto.operators import Operator
from eto.target import target_key

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
    from tvm.target import Target

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
META = "eto_meta.json"
PROGRESS = "eto_progress.json"
CORRUPT = "corrupt_lines.txt"
LOCK = ".lock"
#: The files a load reads, in the order their lines refer to each other (records to workloads, metadata to records)
_READ = (WORKLOADS, RECORDS, META, PROGRESS)
#: A record line's shape, checked without parsing its program: ``[workload line, [...]]``
_RECORD_LINE = re.compile(r"\[\s*(\d+)\s*,\s*(\[.*\])\s*\]\s*", re.S)


def _program_json(text: str) -> list | None:
    """A record line's program, ``[trace, run_secs, target, args_info]``, parsed; None if it is damaged."""
    rec = parse(text)
    return rec if isinstance(rec, list) and len(rec) == 4 else None


class Database(ProgramQueries):
    """An eto database directory (created if missing unless ``readonly``). Lines it cannot read are
    skipped and listed in :attr:`problems`; ``warn``: a warning counts them when it opens (False: the
    caller lists them itself)."""

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False, warn: bool = True) -> None:
        self.path = os.fspath(path)
        self.readonly = readonly
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise DatabaseError(f"{self.path}: not a database directory")
        if not readonly:
            os.makedirs(self.path, exist_ok=True)
        elif not os.path.isdir(self.path):
            raise DatabaseError(f"{self.path}: no such database")
        # concurrent subtrees share a Database: this keeps readers off a half-built index
        self._mutex = threading.RLock()
        self._reset()
        self.reload()
        if warn and self.problems:
            warnings.warn(f"{self.path}: {skipped_lines(self.problems)}", RuntimeWarning, stacklevel=2)

    # -- loading --------------------------------------------------------------------------
    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def _reset(self) -> None:
        self._tails = {name: Tail() for name in _READ}
        self._workloads: list[Any] = []  # parsed JSON or None, by line
        self._workload_index: dict[str, int] = {}
        self._records: list[tuple[int, str] | None] = []  # (workload line, the program's JSON text) by line
        self._programs: list[ProgramRecord] = []
        self._results, self._progress = [], []  # type: list[dict], list[dict]
        self._progress_lines: list[tuple[int, str | None]] = []  # read, not parsed yet (_parse_progress)
        self._line_problems: list[Problem] = []  # of lines read (a partial last line is not one yet)
        self._owned: set[int] = set()
        self.problems, self.orphans = [], []  # type: list[Problem], list[int]

    def reload(self) -> None:
        """Read what was appended since the last read: other processes may have committed (see
        :mod:`eto.store.claims`). O(new bytes); a file that shrank (rewritten) is read again whole."""
        with self._mutex:
            self._load_unlocked()

    def _new_lines(self) -> dict[str, list[tuple[int, str | None]]] | None:
        """Each file's lines appended since the last read; None if a file shrank."""
        out = {}
        for name, tail in self._tails.items():
            got = tail.read(self._file(name))
            if got is None:
                return None
            out[name] = got[0]
            self._line_problems += [Problem(name, n, reason) for n, reason in got[1]]
        return out

    def _load_unlocked(self) -> None:
        """Parse the new lines of the four files and publish them: a reader in another thread sees
        the old state or the new one, never a half-built list (lists by line only grow)."""
        new = self._new_lines()
        if new is None:
            self._reset()
            new = self._new_lines() or {name: [] for name in _READ}
        problems = self._line_problems
        workloads, index = self._workloads, self._workload_index  # _workload_json_line adds to them too
        for i, text in new[WORKLOADS]:
            obj = parse(text)
            if not (isinstance(obj, list) and len(obj) == 2 and isinstance(obj[0], str)):
                if text is not None:
                    problems.append(Problem(WORKLOADS, i + 1, "not a [shash, module] workload"))
                obj = None
            else:
                index.setdefault(obj[0], i)
            workloads.extend([None] * (i + 1 - len(workloads)))
            workloads[i] = obj
        records = self._records
        for i, text in new[RECORDS]:
            m = _RECORD_LINE.fullmatch(text) if text is not None else None
            entry = (int(m.group(1)), m.group(2)) if m else None
            if entry and not (entry[0] < len(workloads) and workloads[entry[0]] is not None):
                problems.append(Problem(RECORDS, i + 1, f"refers to missing workload line {entry[0] + 1}"))
                entry = None
            elif not entry and text is not None and text.strip():
                problems.append(Problem(RECORDS, i + 1, "not a [workload, record] tuning record"))
            records.append(entry)
        programs: list[ProgramRecord] = []
        results: list[dict] = []
        for i, text in new[META]:
            obj = parse(text)
            try:
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                progs = self._programs_of(obj, records)
            except (ValueError, KeyError, TypeError, OverflowError) as exc:
                if text is not None:
                    problems.append(Problem(META, i + 1, f"unreadable metadata ({exc})"))
                continue
            results.append(obj)
            programs.extend(progs)
        self._owned |= {p.line for p in programs}
        self._programs, self._results = self._programs + programs, self._results + results
        self._progress_lines = self._progress_lines + new[PROGRESS]
        self._publish_problems()
        self.orphans = [i for i, r in enumerate(records) if r is not None and i not in self._owned]

    def _publish_problems(self) -> None:
        self.problems = self._line_problems + [
            Problem(name, tail.lines + 1, "incomplete last line (interrupted write)")
            for name, tail in self._tails.items() if tail.partial]

    def _parse_progress(self) -> None:
        """Parse the progress lines read since the last call (hold the mutex); a damaged one is a problem."""
        if not self._progress_lines:
            return
        progress = []
        for i, text in self._progress_lines:
            obj = parse(text)
            if progress_batch_ok(obj, len(self._workloads)):
                progress.append(obj)
            elif text is not None:
                self._line_problems.append(Problem(PROGRESS, i + 1, "not a progress batch"))
        self._progress, self._progress_lines = self._progress + progress, []
        self._publish_problems()

    def check_lines(self) -> list[Problem]:
        """Parse every line the load only checked the shape of (records' programs, progress batches), so that
        :attr:`problems` lists every damaged line; a program whose record is damaged is dropped. O(size of
        the files); returns :attr:`problems`."""
        with self._mutex:
            self._parse_progress()
            bad = set()
            for i, entry in enumerate(self._records):
                if entry is not None and _program_json(entry[1]) is None:
                    self._records[i] = None
                    bad.add(i)
                    self._line_problems.append(Problem(RECORDS, i + 1, "not a [workload, record] tuning record"))
            if bad:
                self._programs = [p for p in self._programs if p.line not in bad]
                self.orphans = [i for i in self.orphans if i not in bad]
            self._publish_problems()
            return self.problems

    def _programs_of(self, meta: dict, records: list) -> list[ProgramRecord]:
        op = Operator.from_dict(meta["op"])
        if not (isinstance(meta["target"], str) and isinstance(parse(meta["target"]), dict)):
            raise ValueError(f"target {meta['target']!r} is not a target key")
        if not isinstance(meta["method"], str) or not isinstance(meta.get("source") or "", str):
            raise ValueError("method and source must be strings")
        out = []
        for rank, rec in enumerate(meta.get("records", [])):
            line = int(rec["line"])
            if not (0 <= line < len(records)) or records[line] is None:
                raise ValueError(f"record line {line + 1} is missing or corrupt")
            out.append(ProgramRecord(
                op=op, target=meta["target"], latency_s=float(rec["latency_s"]), method=meta["method"],
                source=meta.get("source"), candidates=int(meta.get("candidates", 0)), rank=rank,
                seconds=float(meta.get("seconds", 0.0)), features=rec.get("features"), line=line,
                created=float(meta.get("time", 0.0)), timing=str(meta.get("timing", "hot")), _db=self))
        return out

    # -- queries (the rest: ProgramQueries) ------------------------------------------------
    def program_list(self) -> list[ProgramRecord]:
        return self._programs

    def results(self) -> list[dict]:
        """The raw metadata of each tuning result, in commit order (failed ones included)."""
        with self._mutex:
            return list(self._results)

    def progress(self, op: Operator, target: "str | Target", method: str = "backend") -> Progress:
        """What an interrupted run of ``op`` measured: its batches after the operator's last result (a
        polish follows its backend result). A rerun continues from it: the trials count against the
        budget and the programs seed the search."""
        tk, key = target_key(target), op.key
        with self._mutex:
            self._parse_progress()
            last = max((r.get("time", 0.0) for r in self._results
                        if r.get("op_key") == key and r.get("target") == tk and r.get("method") != PREDICTED),
                       default=None)
            batches = [m for m in self._progress
                       if m.get("op_key") == key and m.get("target") == tk and m.get("method") == method
                       and (last is None or m.get("time", 0.0) > last)]
            entries = [e for m in batches for e in m.get("records", ())]
            return Progress(sum(int(m.get("trials", 0)) for m in batches),
                            sum(float(m.get("seconds", 0.0)) for m in batches),
                            tuple(float(e[2]) for e in entries),
                            tuple(pt for m in batches for pt in m.get("trajectory", ())),
                            tuple((e[0], e[1]) for e in entries), self, key)

    def checkpoint(self, op: Operator, target: "str | Target", records: Sequence["TuningRecord"], *,
                   method: Method, trials: int, seconds: float, trajectory: Sequence = ()) -> None:
        """Make measured candidates of a run in flight durable (see :meth:`progress`): one line, one write."""
        entries = [(rec, median_secs(rec.run_secs)) for rec in records]
        known: list = []
        with self._locked():
            line = {"v": 1, "op": op.to_dict(), "op_key": op.key, "target": target_key(target), "method": method,
                    "trials": int(trials), "seconds": float(seconds), "trajectory": list(trajectory),
                    "records": [[self._workload_line(rec.workload, known), record_json(rec), lat]
                                for rec, lat in entries if lat < math.inf], "time": time.time(), "pid": os.getpid()}
            self._append(PROGRESS, dumps(line))
            kill_point("db.progress")
            self._load_unlocked()

    # -- TVM objects ----------------------------------------------------------------------
    def workload(self, index: int) -> "Workload":
        from tvm.s_tir.meta_schedule.database import Workload

        if not hasattr(self, "_workload_objs"):
            self._workload_objs: dict[int, Workload] = {}
        if index not in self._workload_objs:
            self._workload_objs[index] = Workload.from_json(self._workloads[index])
        return self._workload_objs[index]

    def tuning_record(self, line: int) -> "TuningRecord":
        """The record on ``line`` (0-based) of database_tuning_record.json; :class:`UnreadableRecord` if TVM
        cannot read it."""
        wl, text = self._records[line]
        return self.read_record(wl, self._record_list(line, text), f"{RECORDS}:{line + 1}")

    def record_workload(self, line: int) -> "Workload":
        """The workload of the program on ``line`` (its trace not replayed, as :meth:`tuning_record` does)."""
        return self.workload(self._records[line][0])

    def stored_trace(self, line: int) -> list:
        """The trace JSON of the program on ``line`` as MetaSchedule stored it (no TVM, no replay on its
        workload: what :meth:`tuner.analysis.sketch.Sketch.from_json` reads); :class:`UnreadableRecord`
        if the line is damaged."""
        return self._record_list(line, self._records[line][1])[0]

    def _record_list(self, line: int, text: str) -> list:
        """The program's JSON on ``line`` of database_tuning_record.json, parsed now (the load checked the
        line's shape only); :class:`UnreadableRecord` naming the line if it is damaged inside."""
        rec = _program_json(text)
        if rec is None:
            raise UnreadableRecord(f"{self._file(RECORDS)}:{line + 1}: not a tuning record (the line is damaged "
                                   "inside its [workload, record] brackets); tune its operator again")
        return rec

    def read_record(self, workload: int, record: list, where: str = PROGRESS) -> "TuningRecord":
        """A record's JSON (on ``workload``'s line) as a TuningRecord; ``where``: its file and line (a checkpoint's
        entries have no line of their own), named in the :class:`UnreadableRecord` raised when TVM cannot read
        it. The load checked its shape only."""
        import tvm
        from tvm.s_tir.meta_schedule.database import TuningRecord

        try:
            return TuningRecord.from_json(record, self.workload(workload))
        except TVM_ERRORS as exc:  # another TVM version's record, or a damaged one that is still JSON
            raise UnreadableRecord(f"{self._file(where)}: TVM {tvm.__version__} cannot read this program "
                                   f"({error_line(exc)}): another TVM version wrote it, or the line is damaged; "
                                   "tune its operator again") from None

    # -- writing --------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        if self.readonly:
            raise DatabaseError(f"{self.path}: opened read-only")
        with deferred(), self._mutex:  # a stop (SIGINT, SIGTERM) waits for the end of the write
            fd = os.open(self._file(LOCK), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._load_unlocked()  # another process may have appended
                self._repair_partial_lines()
                self._line_counts = {name: tail.lines for name, tail in self._tails.items()}
                self._line_counts[CORRUPT] = count_lines(self._file(CORRUPT))
                yield
            finally:
                self._line_counts = None
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def _repair_partial_lines(self) -> None:
        """Move an interrupted write's partial last line to corrupt_lines.txt and cut it off (hold
        the lock: no writer is then in the middle of a line)."""
        for name, tail in self._tails.items():
            if tail.partial:
                cut_at(self._file(name), tail.offset)
                self._append(CORRUPT, f"{name}:{tail.lines + 1}: {tail.partial.decode('utf-8', 'replace')}")
                tail.partial = b""
        self._publish_problems()

    def _append(self, name: str, line: str) -> int:
        """Append one line with a single write; return its 0-based line number."""
        return self._append_lines(name, [line])

    def _append_lines(self, name: str, lines: Sequence[str]) -> int:
        """Append lines with a single write and one fsync; return the first one's 0-based number.

        A process killed mid-write leaves complete lines plus at most one partial last line: records
        no metadata owns yet (reported as orphans), never a wrong result.
        """
        path = self._file(name)
        counts = getattr(self, "_line_counts", None)
        n = counts[name] if counts is not None and name in counts else count_lines(path)
        append_lines(path, lines)
        if counts is not None:
            counts[name] = n + len(lines)
        return n

    def commit(self, op: Operator, target: "str | Target", records: Sequence["TuningRecord"], *, method: Method,
               source: Operator | str | None = None, candidates: int, seconds: float,
               features: Sequence[dict | None] | None = None, error: str | None = None,
               extra: dict | None = None) -> list[ProgramRecord]:
        """Store a tuning result: its programs (best first) and how they were found.

        Records without a measured time are skipped; a result with no usable record is still
        committed (with ``error``), so that a resumed run knows the operator was attempted.
        """
        tk = target_key(target)
        usable = []
        for i, rec in enumerate(records):
            latency = median_secs(rec.run_secs)
            if latency < math.inf:
                usable.append((latency, rec, features[i] if features else None))
        usable.sort(key=lambda t: t[0])
        with self._locked():
            known: list = []  # records of one run share a workload
            lines = [dumps([self._workload_line(rec.workload, known), record_json(rec)]) for _, rec, _ in usable]
            first = self._append_lines(RECORDS, lines) if lines else 0
            kill_point("db.records")
            entries = [{"latency_s": lat, "features": feat, "line": first + i} for i, (lat, _, feat) in enumerate(usable)]
            meta = {"v": 1, "op": op.to_dict(), "op_key": op.key, "target": tk, "method": method,
                    "source": source.key if isinstance(source, Operator) else source, "candidates": int(candidates),
                    "seconds": float(seconds), "records": entries, "error": error if not entries else None,
                    "time": time.time(), "pid": os.getpid(), **(extra or {})}
            self._append(META, dumps(meta))
            kill_point("db.meta")
            self.reload()
        return [p for p in self._programs if p.line in {e["line"] for e in entries}]

    def _workload_line(self, workload: "Workload", known: list) -> int:
        """The line of ``workload`` in database_workload.json, appended if new (hold the lock).

        ``known`` caches (workload, line) pairs within one call: serialising a module is not free.
        """
        from tvm.s_tir.meta_schedule.database import Workload

        idx = next((i for w, i in known if w.same_as(workload)), None)
        if idx is None:
            idx = self._workload_json_line(Workload(workload.mod).as_json())
            known.append((workload, idx))
        return idx

    def _workload_json_line(self, wl_json: list) -> int:
        idx = self._workload_index.get(wl_json[0])
        if idx is None:
            idx = self._workload_index[wl_json[0]] = self._append(WORKLOADS, dumps(wl_json))
            kill_point("db.workload")
            self._workloads.extend([None] * (idx + 1 - len(self._workloads)))
            self._workloads[idx] = wl_json
        return idx

    # -- merging --------------------------------------------------------------------------
    def merge_from(self, other: "Database", *, only: "Collection[tuple[str, str]] | None" = None) -> dict[str, int]:
        """Copy another database's results, records and problems (as corrupt lines) into this one: one write
        a file, the records before the metadata that owns them (a merge killed between leaves orphans).
        ``only``: the (operator key, target key) pairs whose results to copy, nothing else (no orphans
        or problems, and no line of ``other`` parsed beyond those results' records)."""
        problems = other.check_lines() if only is None else []
        with self._locked():
            wl_map: dict[int, int] = {}
            records: list[str] = []

            def copy_record(line: int) -> int:
                """Queue record ``line`` of ``other``; its index among the queued ones."""
                wl, text = other._records[line]
                if wl not in wl_map:
                    wl_map[wl] = self._workload_json_line(other._workloads[wl])
                records.append(f"[{wl_map[wl]},{text}]")
                return len(records) - 1

            metas = [{**meta, "merged_from": other.path,
                      "records": [{**r, "line": copy_record(int(r["line"]))} for r in meta.get("records", [])
                                  if other._records[int(r["line"])] is not None]}  # damaged inside: a problem
                     for meta in other._results if only is None or (meta.get("op_key"), meta.get("target")) in only]
            for line in other.orphans if only is None else ():
                copy_record(line)
            first = self._append_lines(RECORDS, records) if records else 0
            for meta in metas:
                meta["records"] = [{**r, "line": first + r["line"]} for r in meta["records"]]
            if metas:
                self._append_lines(META, [dumps(m) for m in metas])
            if problems:
                self._append_lines(CORRUPT, [f"{os.path.join(other.path, p.file)}:{p.line}: {p.reason}: "
                                             + raw_line(other._file(p.file), p.line) for p in problems])
            self.reload()
        return {"results": len(metas), "records": sum(len(m["records"]) for m in metas),
                "orphans": len(other.orphans) if only is None else 0, "problems": len(problems)}
