"""Append-only JSON-lines files, the storage under :mod:`eto.database`.

A line goes out in one ``write`` on an ``O_APPEND`` descriptor and is fsync'ed, so a process killed
at any point leaves complete lines plus at most one partial last line; readers report that line
(and any line that is not UTF-8) by number instead of failing, and the next writer cuts it off.
Everything here is O(size of the file).
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from tuner.faults import torn_write


def read_lines(path: str) -> tuple[list[str | None], list[tuple[int, str]]]:
    """The file's lines (None for one that is not text) and its problems as (1-based line, reason)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return [], []
    if not data:
        return [], []
    raw = data.split(b"\n")
    partial = raw.pop()  # b"" when the file ends with a newline
    lines: list[str | None] = []
    problems = []
    for i, b in enumerate(raw):
        try:
            lines.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append((i + 1, "not UTF-8 text"))
            lines.append(None)
    if partial:
        problems.append((len(raw) + 1, "incomplete last line (interrupted write)"))
    return lines, problems


def append_lines(path: str, lines: Sequence[str]) -> None:
    """Append ``lines`` (newlines inside them become spaces) with a single write and one fsync."""
    data = "".join(line.replace("\n", " ") + "\n" for line in lines).encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        torn_write(fd, data)  # fault injection only (see tuner.faults)
        if (written := os.write(fd, data)) != len(data):
            raise OSError(f"{path}: short write ({written} of {len(data)} bytes)")
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_partial_line(path: str) -> tuple[int, str] | None:
    """Cut an interrupted write's partial last line off; return its 1-based number and text."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if not data or data.endswith(b"\n"):
        return None
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.truncate(cut)
        os.fsync(f.fileno())
    return data[:cut].count(b"\n") + 1, data[cut:].decode("utf-8", "replace")


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
