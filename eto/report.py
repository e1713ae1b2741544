"""Plain-text tables for the CLI and reports (no third-party dependency, aligned columns)."""

from __future__ import annotations

from typing import Any, Sequence


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
