"""What tuning costs in seconds on one target, learned from what the database has recorded.

It also learns how far the trial estimator's counts were off (``TimeModel.count_scale``).

The reuse pair selector minimises expected tuning *time*, not candidates: a backend trial (one
MetaSchedule candidate, with its share of the evolutionary search and cost-model updates) and a
reuse candidate (replay β's sketch with new tiles, build, run) do not cost the same. Each
tuning result in the database records its candidates and wall seconds, so the per-target model is
a pair of least-squares lines, seconds = fixed + per x candidates, one per method, fitted on
that target's results. Until a target has results, defaults measured on this project's machines
stand in (``DEFAULTS``, by target kind).

Fitting is O(r) over the r results of the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from .database import Database


@dataclass(frozen=True)
class Line:
    """seconds = fixed + per x candidates, and how many results it was fitted on (0: a default)."""

    fixed: float
    per: float
    samples: int = 0

    def __call__(self, candidates: float) -> float:
        return self.fixed + self.per * candidates


#: Before a target has results. CPU: fitted on this project's 2-core machines
#: (experiments/reuse_pairs.py --scale small --trials 128: MetaSchedule 0.97 s per trial over 16
#: operators; 24 ranked reuses 4.0 s of set-up -- design space, ranker training on β's 128
#: programs -- plus 0.45 s per candidate). CUDA: the host-side search dominates; not yet fitted.
DEFAULTS: Mapping[str, tuple[Line, Line]] = {
    "cpu": (Line(0.0, 0.97), Line(4.0, 0.45)),
    "cuda": (Line(0.0, 0.8), Line(4.0, 0.4)),
}
#: Results needed before a fitted line replaces the default (fewer: the default's slope is kept
#: and only the ratio of the recorded seconds to it is learned).
MIN_FIT = 5


@dataclass(frozen=True)
class TimeModel:
    """Expected seconds of a backend run and of a reuse, for one target.

    ``count_scale`` corrects the trial estimator: recorded reuses measured this many times the
    candidates their plans estimated (1 until the database has such results; kept within [0.5, 2]).
    """

    backend: Line
    reuse: Line
    count_scale: float = 1.0

    def backend_seconds(self, trials: float) -> float:
        return self.backend(trials)

    def reuse_candidates(self, estimated: float) -> float:
        return estimated * self.count_scale

    def reuse_seconds(self, candidates: float) -> float:
        return self.reuse(candidates)

    def to_json(self) -> dict:
        return {"backend": vars(self.backend), "reuse": vars(self.reuse), "count_scale": self.count_scale}


def fit_line(points: Iterable[tuple[float, float]], default: Line, *, with_intercept: bool) -> Line:
    """Least squares through (candidates, seconds), falling back towards ``default`` on little data.

    Without an intercept (backend runs, whose set-up is amortised over many trials) the slope is
    total seconds over total candidates. With one, the intercept is clamped to >= 0 and a
    degenerate fit (all runs the same size) keeps the default's intercept.
    """
    pts = [(float(c), float(s)) for c, s in points if c > 0 and s > 0]
    n = len(pts)
    if n == 0:
        return default
    sx = sum(c for c, _ in pts)
    sy = sum(s for _, s in pts)
    if not with_intercept or n < MIN_FIT:
        if with_intercept:  # keep the default's set-up time, learn the rest
            return Line(default.fixed, max(sy - n * default.fixed, 0.0) / sx or default.per, n)
        return Line(0.0, sy / sx, n)
    mx, my = sx / n, sy / n
    var = sum((c - mx) ** 2 for c, _ in pts)
    if var == 0:
        return Line(default.fixed, max(my - default.fixed, 0.0) / mx or default.per, n)
    per = sum((c - mx) * (s - my) for c, s in pts) / var
    fixed = my - per * mx
    if fixed < 0 or per <= 0:  # noise made the line absurd: a line through the origin instead
        return Line(0.0, sy / sx, n)
    return Line(fixed, per, n)


def learn_time_model(database: "Database | None", target: "str | Target", kind: str) -> TimeModel:
    """The target's model from the database's results (backend and reuse, evolve excluded)."""
    from .target import target_key

    d_backend, d_reuse = DEFAULTS.get(kind, DEFAULTS["cpu"])
    if database is None:
        return TimeModel(d_backend, d_reuse)
    tk = target_key(target)
    rows = [r for r in database.results() if r.get("target") == tk and r.get("records")]
    backend = [(r["candidates"], r["seconds"]) for r in rows if r.get("method") == "backend"]
    reuse = [(r["candidates"], r["seconds"]) for r in rows if r.get("method") == "reuse"]
    # the estimator's own count: a stored estimate was already scaled by the plan's count_scale
    planned = [(r["candidates"], r["estimate"] / r.get("count_scale", 1.0))
               for r in rows if r.get("method") == "reuse" and r.get("estimate")]
    scale = sum(a for a, _ in planned) / sum(e for _, e in planned) if planned else 1.0
    return TimeModel(fit_line(backend, d_backend, with_intercept=False),
                     fit_line(reuse, d_reuse, with_intercept=True), min(2.0, max(0.5, scale)))
