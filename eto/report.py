"""Reports without third-party dependencies: plain-text tables for the CLI, and a tuning run's
convergence (best weighted latency so far against seconds) for plots and benchmarks."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, align: str | None = None) -> str:
    """Render rows under headers; ``align`` is one char per column, ``l`` or ``r`` (default: numbers right)."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    if align is None:
        align = "".join(
            "r" if rows and all(isinstance(r[i], (int, float)) for r in rows) else "l" for i in range(len(headers))
        )

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if a == "r" else v.ljust(w) for v, w, a in zip(values, widths, align)).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


def plural(n: int, word: str) -> str:
    """``1 call``, ``3 calls``: counts in summaries read as English."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def set_trajectory(results: Sequence[dict], frequencies: Mapping[str, int], target_key: str, *,
                   since: float | None = None) -> list[tuple[float, float]]:
    """A tuning run's convergence: (seconds, Σ frequency x best latency so far) whenever that improved.

    ``results`` are a database's result lines (:meth:`eto.store.database.Database.results`),
    ``frequencies`` maps each operator key of the set to its frequency. Each result's trajectory is
    placed on the wall clock by its commit time (a point at ``s`` happened at commit time - its last
    point's seconds + ``s``), so operators tuned together by one task scheduler and reuse searches run
    one after another land on one clock, counted from ``since`` (unix time; default: the run's first
    measured point, bridges' included). Points start once every operator has a program. O(p log p) for p trajectory points.
    """
    events, first = [], math.inf
    for r in results:
        traj = r.get("trajectory")
        if r.get("target") == target_key and traj:
            anchor = float(r["time"]) - float(traj[-1][0])
            first = min(first, anchor + float(traj[0][0]))
            if r.get("op_key") in frequencies:
                events.extend((anchor + float(sec), r["op_key"], float(best)) for sec, _trial, best in traj)
    if not events:
        return []
    events.sort()
    start = first if since is None else since
    best: dict[str, float] = {}
    out: list[tuple[float, float]] = []
    for at, key, lat in events:
        if lat < best.get(key, math.inf):
            best[key] = lat
            if len(best) == len(frequencies):
                w = sum(frequencies[k] * best[k] for k in frequencies)
                if not out or w < out[-1][1]:
                    out.append((at - start, w))
    return out
