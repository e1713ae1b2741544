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
target has results, defaults measured on this project's machines stand in (``DEFAULTS``, by target kind).

Fitting is O(r) over the r results of the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.store.database import Database


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


#: Before a target has results. CPU: fitted (``python -m experiments.estimate_accuracy --fit``, see
#: experiments/results/estimate_accuracy_time_fit_znver4.json) on the results of three runs on a 2-core
#: znver4 machine after the database's incremental reload: the ResNet-50 set benchmark at N = 100 and
#: the retune benchmarks of BERT-Base at 8 new lengths and ResNet-50's convolutions at 4 new batch
#: sizes (28 MetaSchedule runs on 0.006-0.6 GFLOP operators: 0.52 s per trial plus 0.84 s per trial
#: and GFLOP). The reuse line was refitted when reuses began to screen their candidates
#: (tuner.measure.finalists), on the 27 reuses of ``eto tune --opset resnet50 --trials 100`` and ``--opset
#: bert_base --trials 200`` (experiments/results/estimate_accuracy_time_fit_screened_znver4.json;
#: 0.002-3.8 GFLOP): 2.89 s of set-up -- design space, ranker training, the finalists' builds and
#: full runs -- plus 0.088 s per candidate and 0.23 s per candidate and GFLOP (before screening:
#: 0.75 s + 0.38 s + 0.34 s / GFLOP). The earlier CPU defaults (0.68 + 1.8 / GFLOP, and 4.0 s + 0.45 +
#: 0.4 / GFLOP), fitted before the database's incremental reload, over-costed ResNet-50's reuses
#: 1.8x. Fitted on runs of 100 and 200 trials, the backend line under-costs short runs of tiny
#: operators (the quick start's 64 trials: about 1 s a trial).
#: CUDA: host-side search and nvcc dominate, not the operator's size; fitted on the BERT-Base set
#: benchmark on an H200 with 16 host cores, reuses measuring 16 ranked candidates a batch
#: (``top_k="auto"``; experiments/results/set_bench_bert_base_N64_h200.json: MetaSchedule 0.90 s per
#: trial over 320; 4 reuses of 16-31 candidates, 15.2-25.0 s, least squares 4.3 s + 0.65 s each).
DEFAULTS: Mapping[str, tuple[Line, Line]] = {
    "cpu": (Line(0.0, 0.52, 0.84), Line(2.89, 0.088, 0.23)),
    "cuda": (Line(0.0, 0.9), Line(4.3, 0.65)),
}
#: Before a target has results, on a CPU whose ``mcpu`` was measured: the same fit on that machine's
#: own runs; other CPUs get ``DEFAULTS["cpu"]``. The CPU default above under-costed the 2-core Xeon
#: TVM targets as ``emeraldrapids`` 1.48x per reuse (BERT-Base at N = 100). Its lines were refitted
#: when eto's searches began to cut their builds at a multiple of their median
#: (:class:`tuner.measure.measurer.BuildCut`) in a build server that survives a cut: the fit before
#: (earlier runs: backend 0.62 s + 0.74 s/GFLOP a trial, reuse 6.53 s + 0.089 s + 0.233 s/GFLOP a
#: candidate) over-costed that code's reuses 1.25x at N = 200. Now the fit on its 9 BERT-Base
#: databases (N = 200, 3 seeds, eto and MetaSchedule; N = 100, 3 eto runs;
#: ``experiments/results/estimate_accuracy_time_fit_emeraldrapids59.json``: 21 backend runs, 36 reuses).
#: The 2-core AMD EPYC TVM targets as ``znver3`` is slower per candidate than the ``znver4`` default,
#: which under-costed its reuses 1.30x (BERT-Base at N = 100); fitted on that run's 9
#: databases (3 seeds of eto with and without root polish, and MetaSchedule:
#: ``experiments/results/estimate_accuracy_time_fit_znver3.json``: 21 backend runs, 36 reuses, 3 polishes).
#: Every root of those runs ran 100 trials, so the backend's set-up is ``znver5``'s 18.75 s and its rate the
#: line through the same points (0.566 s a trial through zero at 100 trials: 0.379 s a trial after the
#: set-up): through zero, a time budget's 8-24-trial roots cost half their seconds, and MobileNetV2's 240 s
#: stage ran its plan (estimated 165 s) past the budget with 13 operators not reached.
#: The 2-core AMD EPYC TVM targets as ``znver5``: the ``znver4`` default under-costed its 64-trial roots 1.3x,
#: its 8-trial roots 2-7x and its reuses 1.1-1.8x. Fitted on 7 of its databases (MobileNetV2 and ResNet-50
#: tuned from model files in both layouts at 64 trials, an E10 run of MobileNetV2 at 8 trials, the quick start
#: twice; ``experiments/results/estimate_accuracy_time_fit_znver5.json``: 25 backend roots, 164 reuses and
#: polishes). A backend root costs 18.7 s whatever its trials (MetaSchedule's design space, its first
#: evolutionary search, the finalists' settling and the correctness gate) plus 0.37 s a trial; its roots
#: spanned only 0.001-0.026 GFLOP, so the growth with size is ``znver4``'s (0.84 s a trial and GFLOP; the
#: free fit's 5.2 would be an extrapolation) -- least squares of seconds - 0.84 x trials x GFLOPs.
#: ``znver4`` (a 2-core AMD EPYC): the kind's default above, fitted on earlier code, under-costed this code's
#: MobileNetV2 tune 1.5x (its reuses, which now train a ranker, screen, settle finalists and pass the gate,
#: and its roots' polish, now recorded with its side-by-side timing and gate). Refitted on three runs of this
#: code (``eto tune --model M --trials 64`` of MobileNetV2 in NHWC and the BERT-Base layer, and the quick
#: start: ``experiments/results/estimate_accuracy_time_fit_znver4_models.json``, 8 roots and 47 reuses and
#: polishes); every root ran 64 trials, so the backend's set-up is ``znver5``'s 18.75 s and its rate fitted.
#: Per candidate the cost barely grows with the operator's size (the runner's minimum repeat time sets a
#: run's length) but differs by kind: a depthwise reuse's own search took 0.35 s a candidate, a batch
#: matmul's 0.03 s. One line does not tell kinds apart: it over-costs the BERT layer's matmuls and
#: under-costs MobileNetV2's depthwise convolutions, until the database has that kind's results
#: (:func:`kind_scales`; no per-kind default: those runs disagreed on the 2-D convolutions, 0.6-1.3x
#: the line, by their sizes and layouts). Those runs' reuses were recorded without their
#: correctness gate (now part of a reuse's seconds): 0.77 s a reuse on their mean, added to the fitted 5.33 s.
CPU_DEFAULTS: Mapping[str, tuple[Line, Line]] = {
    "znver4": (Line(18.75, 0.352, 0.796), Line(6.1, 0.107, 0.132)),
    "znver5": (Line(18.75, 0.371, 0.84), Line(5.07, 0.0865, 0.107)),
    "emeraldrapids": (Line(0.0, 0.566, 0.339), Line(5.95, 0.029, 0.148)),
    "znver3": (Line(18.75, 0.379, 1.331), Line(3.03, 0.132, 0.376)),
}
#: A backend run also costs a set-up whatever its trials (MetaSchedule's design space, cost model and
#: first search of a task). The defaults above without one, fitted through zero on runs of 100-200
#: trials, fold it into the rate; a database learns it once it holds runs of different lengths
#: (``fit_line``'s ``by_count``).
#: A model's function outside the catalogue (a softmax, a norm, a layout change) that the backend tunes:
#: seconds = fixed + trials x per, learned from the database's results of such functions. Their design
#: spaces are small, so they cost less than a root's line says: on the ``znver5`` machine 22 of them
#: (MobileNetV2, ResNet-50 and the BERT-Base layer from model files) took 0.6-2.6 s for a space of one
#: program (one trial, no search) and 14.6-26.6 s for 32 trials, where the root line said 19 s and 31 s:
#: least squares 0.56 s + 0.65 s a trial. CUDA keeps its backend line (none measured).
FUNCTION_DEFAULTS: Mapping[str, Line] = {"cpu": Line(0.56, 0.647), "cuda": DEFAULTS["cuda"][0]}
#: Before a target has results, on a CPU whose ``mcpu`` was measured: per operator type, its reuses' seconds
#: over that CPU's reuse line (:func:`kind_scales`). ``znver4``: pooled over eight of its databases
#: (MobileNetV2 in NHWC twice, ResNet-18 and ResNet-50 from model files, the BERT-Base layer twice, the quick
#: start twice; 16 depthwise, 71 NHWC and 19 NCHW convolution and 14 batch-matmul reuses): a depthwise
#: reuse's search costs 1.6x the line, a batch matmul's 0.65x. A type these runs did not tune keeps the line.
CPU_KIND_DEFAULTS: Mapping[str, Mapping[str, float]] = {
    "znver4": {"DEPNHWC": 1.61, "C2DNHWC": 0.91, "C2D": 1.13, "BMM": 0.65},
}
#: A root's polish (:mod:`eto.runs.polish`) over a reuse of its candidates, kind and size: it also times the
#: root's and the polished program side by side, and searches from a backend program, whose design space
#: and leads a reuse's search does not share. On the eight ``znver4`` databases above, 23 polishes cost
#: 1.30x what their reuse line and kind said (0.67-2.8x each). CUDA: none measured.
POLISH_DEFAULTS: Mapping[str, float] = {"cpu": 1.30, "cuda": 1.0}
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
    #: a polish over a reuse of the same candidates, operator and kind (:data:`POLISH_DEFAULTS`)
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


def _mcpu(target: "str | Target | None") -> str:
    from eto.target import parse_target

    t = parse_target(target if target is not None else "cpu")  # no target: this machine
    return str(t.attrs["mcpu"]) if "mcpu" in t.attrs else ""


def default_lines(target: "str | Target | None", kind: str) -> tuple[Line, Line]:
    """(backend, reuse) lines before ``target`` has results: its CPU's (``CPU_DEFAULTS``) or its kind's."""
    if kind == "cpu" and (mcpu := _mcpu(target)) in CPU_DEFAULTS:
        return CPU_DEFAULTS[mcpu]
    return DEFAULTS.get(kind, DEFAULTS["cpu"])


def default_kinds(target: "str | Target | None", kind: str) -> Mapping[str, float]:
    """Per operator type, the reuse line's scale before ``target`` has results (``CPU_KIND_DEFAULTS``)."""
    return CPU_KIND_DEFAULTS.get(_mcpu(target), {}) if kind == "cpu" else {}


def learn_time_model(database: "Database | None", target: "str | Target", kind: str) -> TimeModel:
    """The target's model from the database's results (backend, reuse and polish; evolve excluded)."""
    from eto.target import target_key

    results = []
    if database is not None:
        tk = target_key(target)
        results = [r for r in database.results() if r.get("target") == tk and r.get("records")]
    return fit_time_model(results, kind, defaults=default_lines(target, kind), kinds=default_kinds(target, kind))


def fit_time_model(results: Iterable[dict], kind: str, *, defaults: tuple[Line, Line] | None = None,
                   kinds: Mapping[str, float] | None = None) -> TimeModel:
    """The model fitted on tuning results of one target (stored result dicts), ``defaults`` (else
    ``DEFAULTS[kind]``) and ``kinds`` (per type scales, else none) as the fallback;
    ``experiments/estimate_accuracy.py --fit`` pools several databases' results."""
    d_backend, d_reuse = defaults or DEFAULTS.get(kind, DEFAULTS["cpu"])
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
    scale = sum(a for a, _ in planned) / total if planned and total > 0 else 1.0
    d_function = FUNCTION_DEFAULTS.get(kind, FUNCTION_DEFAULTS["cpu"])
    reuse_line = fit_line(reuse, d_reuse, with_intercept=True)
    scales = kind_scales(typed, reuse_line, prior=kinds)
    return TimeModel(fit_line(backend, d_backend, with_intercept=True, by_count=True),
                     reuse_line, min(2.0, max(0.5, scale)),
                     fit_line([(c, 0.0, s) for c, _, s in functions], d_function, with_intercept=True, by_count=True),
                     scales, polish_scale(polished, reuse_line, scales, POLISH_DEFAULTS.get(kind, 1.0)))


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
