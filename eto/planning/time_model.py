"""What tuning costs in seconds on one target, learned from what the database has recorded.

It also learns how far the trial estimator's counts were off (``TimeModel.count_scale``).

The reuse pair selector minimises expected tuning *time*, not candidates: a backend trial (one
MetaSchedule candidate, with its share of the evolutionary search and cost-model updates) and a
reuse candidate (replay β's sketch with new tiles, build, run) do not cost the same, and neither
costs the same on every operator: each candidate is run ``repeat`` x ``number`` times, so a
candidate of a 0.6 GFLOP matmul takes seconds where one of a 0.03 GFLOP matmul takes under one.
A plan that charged every backend trial alike would root its tree at a large operator as readily as
at a small one. Each tuning result in the database records its operator, candidates and wall
seconds, so the per-target model is, per method, a least-squares fit of

    seconds = fixed + candidates x (per + per_gflop x GFLOPs of the operator),

on that target's results (a backend run's ``fixed`` only from runs of different lengths), and a
reuse's line scaled per operator type by how far that type's recorded reuses ran from it
(:func:`kind_scales`: a depthwise reuse's design space costs more to search than a matmul's). Until a
target has results, a prior measured on this project's machines stands in, per CPU and timing
(:mod:`eto.planning.time_priors`, whose :func:`~eto.planning.time_priors.learn_time_model` gives a
target's model: its database's results over its prior).

Fitting is O(r) over the r results of the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target


@dataclass(frozen=True)
class Line:
    """seconds = fixed + candidates x (per + per_gflop x GFLOPs), and how many results it was fitted on
    (0: a default)."""

    fixed: float
    per: float
    per_gflop: float = 0.0
    samples: int = 0

    def __call__(self, candidates: float, gflops: float = 0.0) -> float:
        return self.fixed + candidates * self.per_candidate(gflops)

    def per_candidate(self, gflops: float = 0.0) -> float:
        return self.per + self.per_gflop * gflops


#: A model's function outside the catalogue (a softmax, a norm, a layout change) that the backend tunes:
#: seconds = fixed + trials x per, learned from the database's results of such functions. Their design
#: spaces are small, so they cost less than a root's line says: on the ``znver5`` machine 22 of them
#: (MobileNetV2, ResNet-50 and the BERT-Base layer from model files) took 0.6-2.6 s for a space of one
#: program (one trial, no search) and 14.6-26.6 s for 32 trials, where the root line said 19 s and 31 s:
#: least squares 0.56 s + 0.65 s a trial. CUDA keeps its backend line (none measured).
FUNCTION_DEFAULTS: Mapping[str, Line] = {"cpu": Line(0.56, 0.647), "cuda": Line(0.0, 0.9)}
#: Results needed before a fitted line replaces the default (fewer: the default's shape is kept
#: and only the ratio of the recorded seconds to it is learned).
MIN_FIT = 5
#: Largest / smallest operator GFLOPs among the results before the growth with size is fitted
#: rather than taken from the default.
MIN_SPREAD = 2.0
#: A type's reuse scale (:func:`kind_scales`) counts this many results at the line's own cost beside its
#: recorded ones, so that one odd reuse moves it little; and it stays within [1 / KIND_SCALE_CAP, KIND_SCALE_CAP].
KIND_PRIOR, KIND_SCALE_CAP = 2.0, 3.0


@dataclass(frozen=True)
class TimeModel:
    """Expected seconds of a backend run and of a reuse, for one target.

    ``count_scale`` corrects the trial estimator: recorded reuses measured this many times the
    candidates their plans estimated (1 until the database has such results; kept within [0.5, 2]).
    """

    backend: Line
    reuse: Line
    count_scale: float = 1.0
    #: a model's function outside the catalogue tuned by the backend (:data:`FUNCTION_DEFAULTS`)
    function: Line = FUNCTION_DEFAULTS["cpu"]
    #: per operator type, how far that type's recorded reuses ran from the reuse line
    #: (:func:`kind_scales`; a type without results: its CPU's default, else 1)
    reuse_kind: Mapping[str, float] = field(default_factory=dict)
    #: a polish over a reuse of the same candidates, operator and kind
    #: (:data:`eto.planning.time_priors.POLISH_DEFAULTS`)
    polish_scale: float = 1.0

    def backend_seconds(self, trials: float, gflops: float = 0.0) -> float:
        return self.backend(trials, gflops)

    def function_seconds(self, trials: float) -> float:
        return self.function(trials)

    def reuse_candidates(self, estimated: float) -> float:
        return estimated * self.count_scale

    def reuse_seconds(self, candidates: float, gflops: float = 0.0, op_type: str | None = None) -> float:
        return self.reuse(candidates, gflops) * self.reuse_kind.get(op_type, 1.0)

    def polish_seconds(self, candidates: float, gflops: float = 0.0, op_type: str | None = None) -> float:
        return self.reuse_seconds(candidates, gflops, op_type) * self.polish_scale

    def to_json(self) -> dict:
        return {"backend": vars(self.backend), "reuse": vars(self.reuse), "function": vars(self.function),
                "count_scale": self.count_scale, "reuse_kind": dict(self.reuse_kind),
                "polish_scale": self.polish_scale}


Point = tuple[float, float, float]  # (candidates, GFLOPs of the operator, seconds)


def fit_line(points: Iterable[Point], default: Line, *, with_intercept: bool, by_count: bool = False) -> Line:
    """Least squares through (candidates, GFLOPs, seconds), falling back towards ``default``.

    With at least ``MIN_FIT`` results over operators whose sizes differ by ``MIN_SPREAD`` x, all
    coefficients are fitted (a negative one, from noise, falls back). Otherwise the default's
    growth with size is kept (candidates are weighted by 1 + per_gflop/per x GFLOPs) and the rest is
    a line in that weighted count: without an intercept, total seconds over the weighted total;
    with one, fitted on ``MIN_FIT`` results that differ in size, else the default's intercept kept
    and only the rate learned. ``by_count``: the intercept is a cost per run whatever its size (a
    backend run's set-up), told apart from the rate only by runs of different lengths: unless the
    candidates differ ``MIN_SPREAD`` x, the default's intercept is kept.
    """
    pts = [(float(c), max(float(g), 0.0), float(s)) for c, g, s in points if c > 0 and s > 0]
    if not pts:
        return default
    n = len(pts)
    gs, cs = [g for _, g, _ in pts], [c for c, _, _ in pts]
    lengths = not by_count or max(cs) >= MIN_SPREAD * min(cs)
    if n >= MIN_FIT and min(gs) > 0 and max(gs) >= MIN_SPREAD * min(gs) and lengths:
        full = _least_squares(pts, with_intercept)
        if full is not None:
            return full
    k = default.per_gflop / default.per if default.per else 0.0
    fixed, per = _line([(c * (1 + k * g), s) for c, g, s in pts], default.fixed, default.per, with_intercept,
                       keep_fixed=not lengths)
    return Line(fixed, per, per * k, n)


def _least_squares(pts: list[Point], with_intercept: bool) -> Line | None:
    import numpy as np

    cols = [[c, c * g] for c, g, _ in pts]
    if with_intercept:
        cols = [[1.0, *row] for row in cols]
    coef, _, rank, _ = np.linalg.lstsq(np.array(cols), np.array([s for _, _, s in pts]), rcond=None)
    if rank < len(cols[0]) or any(x < -1e-9 or not math.isfinite(x) for x in coef):
        return None
    fixed, per, per_gflop = (max(float(x), 0.0) for x in (coef if with_intercept else (0.0, *coef)))
    if per == 0:
        return None
    return Line(float(fixed), float(per), float(per_gflop), len(pts))


def _line(pts: list[tuple[float, float]], fixed0: float, per0: float, with_intercept: bool, *,
          keep_fixed: bool = False) -> tuple[float, float]:
    """(fixed, per) of seconds = fixed + per x work through (work, seconds); ``keep_fixed``: ``fixed0`` kept."""
    n = len(pts)
    sx = sum(x for x, _ in pts)
    sy = sum(s for _, s in pts)
    if not with_intercept:
        return 0.0, sy / sx
    mx, my = sx / n, sy / n
    var = sum((x - mx) ** 2 for x, _ in pts)
    if n < MIN_FIT or var == 0 or keep_fixed:  # keep the default's set-up time, learn the rest
        return fixed0, max(sy - n * fixed0, 0.0) / sx or per0
    per = sum((x - mx) * (s - my) for x, s in pts) / var
    fixed = my - per * mx
    if fixed < 0 or per <= 0:  # noise made the line absurd: a line through the origin instead
        return 0.0, sy / sx
    return fixed, per


def fit_time_model(results: Iterable[dict], prior: TimeModel) -> TimeModel:
    """The model fitted on tuning results of one target and timing (stored result dicts), ``prior`` (see
    :mod:`eto.planning.time_priors`) where they cannot tell a coefficient;
    ``experiments/estimate_accuracy.py --fit`` pools several databases' results."""
    rows = list(results)
    backend = [p for r in rows if r.get("method") == "backend" and (p := _point(r))]
    functions = [p for r in rows if r.get("method") == "backend" and (p := _point(r, functions=True))]
    # each with its operator's type (which _point has read) for kind_scales; a polish has its own scale
    typed = [(r["op"]["type"], p) for r in rows if r.get("method") == "reuse" and (p := _point(r))]
    polished = [(r["op"]["type"], p) for r in rows if r.get("method") == "polish" and (p := _point(r))]
    reuse = [p for _, p in typed]
    # the estimator's own count: a stored estimate was already scaled by the plan's count_scale
    planned = [(p[0], r["estimate"] / r.get("count_scale", 1.0)) for r in rows
               if r.get("method") == "reuse" and _number(r.get("estimate")) and _number(r.get("count_scale", 1.0))
               and (p := _point(r))]
    total = sum(e for _, e in planned)
    scale = sum(a for a, _ in planned) / total if planned and total > 0 else prior.count_scale
    reuse_line = fit_line(reuse, prior.reuse, with_intercept=True)
    scales = kind_scales(typed, reuse_line, prior=prior.reuse_kind)
    return TimeModel(fit_line(backend, prior.backend, with_intercept=True, by_count=True),
                     reuse_line, min(2.0, max(0.5, scale)),
                     fit_line([(c, 0.0, s) for c, _, s in functions], prior.function, with_intercept=True,
                              by_count=True),
                     scales, polish_scale(polished, reuse_line, scales, prior.polish_scale))


def kind_scales(points: Iterable[tuple[str, Point]], line: Line, *,
                prior: Mapping[str, float] | None = None) -> dict[str, float]:
    """Per operator type, its recorded reuse seconds over what ``line`` says for them, shrunk towards the
    type's ``prior`` scale (else 1) by :data:`KIND_PRIOR` results at that cost and capped by
    :data:`KIND_SCALE_CAP`; a type of ``prior`` without results keeps its prior.

    One line per target cannot tell kinds apart, and a reuse's cost is mostly its kind's: the size of
    its design space, its ranker's training and its builds' complexity, not its candidates or FLOPs (on
    a 2-core EPYC a depthwise reuse's search took 0.35 s a candidate, a batch matmul's 0.03 s, and the
    line over-costed the one and under-costed the other by 1.4-2x). O(points)."""
    sums: dict[str, list[float]] = {}
    for op_type, (c, g, s) in points:
        acc = sums.setdefault(op_type, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += s
        acc[2] += line(c, g)
    out = dict(prior or {})
    for op_type, (n, actual, predicted) in sums.items():
        if predicted > 0:
            out[op_type] = _shrunk(actual, predicted, n, out.get(op_type, 1.0))
    return out


def polish_scale(points: Iterable[tuple[str, Point]], line: Line, kinds: Mapping[str, float], prior: float) -> float:
    """Recorded polish seconds over what a reuse of the same candidates, size and type costs (``line``
    scaled by ``kinds``), shrunk towards ``prior`` like :func:`kind_scales`. O(points)."""
    pts = list(points)
    predicted = sum(line(c, g) * kinds.get(t, 1.0) for t, (c, g, _) in pts)
    if not pts or predicted <= 0:
        return prior
    return _shrunk(sum(s for _, (_, _, s) in pts), predicted, len(pts), prior)


def _shrunk(actual: float, predicted: float, n: int, prior: float) -> float:
    """actual / predicted with KIND_PRIOR results at ``prior`` x the mean prediction beside, capped."""
    weight = KIND_PRIOR * predicted / n
    ratio = (actual + weight * prior) / (predicted + weight)
    return min(KIND_SCALE_CAP, max(1 / KIND_SCALE_CAP, ratio))


def _point(result: dict, *, functions: bool = False) -> Point | None:
    """(candidates, GFLOPs, seconds) of one stored result; None if its operator cannot be read back or is
    not of the kind asked for: a catalogue operator, or (``functions``) a model's function outside it
    (its small design space would make a root's trials look cheap)."""
    from eto.operators import Operator

    try:
        op = Operator.from_dict(result["op"])
        if op.spec.backend_only != functions:
            return None
        return float(result.get("candidates") or 0), op.flops / 1e9, float(result.get("seconds") or 0)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
