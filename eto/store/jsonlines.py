"""Append-only JSON-lines files, the storage under :mod:`eto.store.database`.

A line goes out in one ``write`` on an ``O_APPEND`` descriptor and is fsync'ed, so a process killed
at any point leaves complete lines plus at most one partial last line; readers report that line
(and any line that is not UTF-8) by number instead of failing, and the next writer cuts it off.
Reading from an offset is O(bytes after it); the rest is O(size of the file).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Sequence

from tuner.measure.faults import torn_write


@dataclass
class Tail:
    """How far a reader has read one file: the end of its last complete line, the lines before it,
    and the partial line after it (an interrupted write, or one another process is making)."""

    offset: int = 0
    lines: int = 0
    partial: bytes = b""

    def read(self, path: str) -> tuple[list[tuple[int, str | None]], list[tuple[int, str]]] | None:
        """The complete lines appended since the last read as (0-based line, text; None for one that
        is not text) and their problems as (1-based line, reason); None when the file is shorter
        than what was read (it was rewritten). O(bytes appended): each line is read once."""
        try:
            with open(path, "rb") as f:
                if f.seek(0, os.SEEK_END) < self.offset:
                    return None
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return None if self.offset else ([], [])
        raw = data.split(b"\n")
        partial = raw.pop()  # b"" when the data ends with a newline
        lines: list[tuple[int, str | None]] = []
        problems = []
        for i, b in enumerate(raw, self.lines):
            try:
                lines.append((i, b.decode("utf-8")))
            except UnicodeDecodeError:
                problems.append((i + 1, "not UTF-8 text"))
                lines.append((i, None))
        self.offset += len(data) - len(partial)
        self.lines += len(raw)
        self.partial = partial
        return lines, problems


@dataclass(frozen=True)
class Problem:
    """A line eto could not use."""

    file: str
    line: int  # 1-based, as editors show it
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


def skipped_lines(problems: Sequence[Problem]) -> str:
    """How many lines were skipped, per file, and the first one's reason in each: one message however
    many lines are damaged (each is listed by ``eto db show``)."""
    by_file: dict[str, list[Problem]] = {}
    for p in problems:
        by_file.setdefault(p.file, []).append(p)
    parts = [f"{len(ps)} in {name} (line {ps[0].line}: {ps[0].reason}{', ...' if len(ps) > 1 else ''})"
             for name, ps in by_file.items()]
    n = len(problems)
    return f"{n} line{'s' * (n != 1)} it cannot read skipped: {'; '.join(parts)}"


def append_lines(path: str, lines: Sequence[str]) -> None:
    """Append ``lines`` (newlines inside them become spaces) with a single write and one fsync."""
    data = "".join(line.replace("\n", " ") + "\n" for line in lines).encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        torn_write(fd, data)  # fault injection only (see tuner.measure.faults)
        if (written := os.write(fd, data)) != len(data):
            raise OSError(f"{path}: short write ({written} of {len(data)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_at(path: str, offset: int) -> None:
    """Cut the file off at ``offset`` (an interrupted write's partial last line starts there)."""
    with open(path, "r+b") as f:
        f.truncate(offset)
        os.fsync(f.fileno())


def parse(text: str | None) -> Any:
    """A line's JSON value; None for an empty line or one that is not JSON."""
    if text is None or not text.strip():
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):  # ValueError: an integer too long to convert
        return None


def count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def raw_line(path: str, lineno: int) -> str:
    """Line ``lineno`` (1-based) of ``path`` as text, "" if there is none."""
    try:
        with open(path, "rb") as f:
            return next((ln.decode("utf-8", "replace").rstrip("\n") for i, ln in enumerate(f, 1) if i == lineno), "")
    except OSError:
        return ""


def record_json(record: Any) -> list:
    """A MetaSchedule ``TuningRecord`` as JSON, weight-packed programs included.

    TVM's ``TuningRecord.as_json`` stops at the ``IndexMap`` a ``TransformLayout`` takes as input,
    which every CPU program of a function with pre-packed weights holds (:mod:`eto.models.prepack`);
    it is written as MetaSchedule's own ``JSONDatabase`` writes it, the map's ``save_json`` text,
    which ``TuningRecord.from_json`` reads back."""
    import tvm
    from tvm.s_tir.meta_schedule import _ffi_api

    from tuner.analysis.sketch import plain

    # an IndexMap is the only object a record holds besides containers and numbers
    return plain(_ffi_api.TuningRecordAsJSON(record), tvm.ir.save_json)
