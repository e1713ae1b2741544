"""What tuning costs on a target: its prior, measured on this project's machines, and what its database teaches.

A prior is a whole :class:`~eto.planning.time_model.TimeModel`, for one CPU (TVM's ``mcpu``) and one timing
(:mod:`tuner.measure.timing`); a database's own results of that timing replace it as they come in
(:func:`learn_time_model`). A candidate timed cold is a few single runs where a hot one is runs in a row for
at least 40 ms a sample, so the same reuse costs less cold: priors fitted on hot runs over-cost a cold run's
plan (the quick start's 2.3x), and a time budget then gives its roots fewer trials than it affords. Each table below says what it was fitted on
(``python -m experiments.estimate_accuracy --fit``; experiments/README.md, E5).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from eto.planning.time_model import FUNCTION_DEFAULTS, Line, TimeModel, fit_time_model
from tuner.measure.timing import DEFAULT_TIMING, Timing

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.store.database import Database

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
#: ``znver4`` (a 2-core AMD EPYC), timed hot: fitted on three hot runs (``eto tune --model M --layout NHWC
#: --time-budget`` of ResNet-50 (480 s; run before cold timing was added) and MobileNetV2 (480 s), and of the
#: BERT-Base layer (240 s), ``--timing hot``: ``experiments/results/estimate_accuracy_time_fit_znver4_hot.json``;
#: 9 roots of 8-96 trials, 17 functions, 63 reuses), over which the fit below over-costed the roots 2.7x (a
#: root's set-up is no longer 18.75 s; roots of 8-16 trials took 1-9 s) and the reuses 1.25x. Per type, the
#: reuse line's scale (``CPU_KIND_DEFAULTS``) from the same runs. The fit before:
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
    "znver4": (Line(0.39, 0.433, 0.584), Line(4.95, 0.0896, 0.0047)),
    "znver5": (Line(18.75, 0.371, 0.84), Line(5.07, 0.0865, 0.107)),
    "emeraldrapids": (Line(0.0, 0.566, 0.339), Line(5.95, 0.029, 0.148)),
    "znver3": (Line(18.75, 0.379, 1.331), Line(3.03, 0.132, 0.376)),
}
#: A backend run also costs a set-up whatever its trials (MetaSchedule's design space, cost model and
#: first search of a task). The defaults above without one, fitted through zero on runs of 100-200
#: trials, fold it into the rate; a database learns it once it holds runs of different lengths
#: (``fit_line``'s ``by_count``).
#: Before a target has results, on a CPU whose ``mcpu`` was measured: per operator type, its reuses' seconds
#: over that CPU's reuse line (:func:`kind_scales`). ``znver4``, hot: from the three hot runs above, against
#: their fitted line (a depthwise reuse's search costs 1.38x the line, a batch matmul's 0.74x); ``C2D``'s
#: from eight earlier databases (19 NCHW convolution reuses). A type these runs did not tune keeps the line.
CPU_KIND_DEFAULTS: Mapping[str, Mapping[str, float]] = {
    "znver4": {"DEPNHWC": 1.38, "C2DNHWC": 0.97, "C2D": 1.13, "BMM": 0.74},
}
#: A root's polish (:mod:`eto.runs.polish`) over a reuse of its candidates, kind and size: it also times the
#: root's and the polished program side by side, and searches from a backend program, whose design space
#: and leads a reuse's search does not share. On the eight ``znver4`` databases above, 23 polishes cost
#: 1.30x what their reuse line and kind said (0.67-2.8x each). CUDA: none measured.
POLISH_DEFAULTS: Mapping[str, float] = {"cpu": 1.30, "cuda": 1.0}

#: Timed cold, on a CPU measured cold: fitted on four cold runs of this code, the hot ones' counterparts
#: (ResNet-50 to 900 s, MobileNetV2 480 s, the BERT-Base layer 240 s) and the quick start
#: (``experiments/results/estimate_accuracy_time_fit_znver4_cold.json``: 11 roots of 1-96 trials, 17 functions,
#: 66 reuses; the function line through zero, as least squares gave it). The backend line is the hot one: the
#: cold runs' roots, 8-16 trials in batches of 1-5 tasks, cost 0.24 s a trial, but priced so a 386 s budget gave
#: ResNet-50's 24 operators 24 trials each as roots, whose batch cost 0.46 s a trial cold (263 s for 576
#: trials; the hot line says 0.43 s + 0.58 s/GFLOP): a backend trial's cost is MetaSchedule's search and
#: builds more than its timing. Their polishes did not record their timing: the kind's ``POLISH_DEFAULTS``.
COLD_CPU_DEFAULTS: Mapping[str, TimeModel] = {
    "znver4": TimeModel(CPU_DEFAULTS["znver4"][0], Line(0.743, 0.210, 0.120), 1.44, Line(0.0, 0.351),
                        {"DEPNHWC": 1.36, "C2DNHWC": 0.99, "C2D": 0.88, "BMM": 0.81}, 1.30),
}
#: Timed cold, on a CPU measured hot only: its hot prior's (backend, reuse, function) lines scaled by what cold
#: timing cost over hot on ``znver4``, each cold fit over its hot fit summed over the seven runs' reuses and
#: functions (both timings' runs); the backend's kept (above).
COLD_SCALE: tuple[float, float, float] = (1.0, 0.73, 0.61)
#: Recorded reuses measured this many times the candidates their plans estimated, on a CPU measured with this
#: code (both fits above: 1.41 hot, 1.44 cold); a database learns its own (``TimeModel.count_scale``).
CPU_COUNT_SCALE: Mapping[str, float] = {"znver4": 1.42}


def timing_on(kind: str, timing: Timing) -> Timing:
    """How candidates are timed on a target of ``kind`` when a run asks for ``timing``: GPUs are timed hot."""
    from tuner.measure.options import check_choice

    check_choice("timing", timing, Timing)
    return timing if kind == "cpu" else "hot"


def prior(target: "str | Target | None", kind: str, timing: Timing = DEFAULT_TIMING) -> TimeModel:
    """``target``'s model before its database has results of runs timed as ``timing``: its CPU's measured
    prior for that timing, else its CPU's hot one (cold: scaled by :data:`COLD_SCALE`), else its kind's."""
    mcpu = _mcpu(target) if kind == "cpu" else ""
    if timing_on(kind, timing) == "cold" and mcpu in COLD_CPU_DEFAULTS:
        return COLD_CPU_DEFAULTS[mcpu]
    backend, reuse = default_lines(target, kind)
    function = FUNCTION_DEFAULTS.get(kind, FUNCTION_DEFAULTS["cpu"])
    hot = TimeModel(backend, reuse, CPU_COUNT_SCALE.get(mcpu, 1.0), function, default_kinds(target, kind),
                    POLISH_DEFAULTS.get(kind, 1.0))
    if timing_on(kind, timing) == "hot":
        return hot
    b, r, f = COLD_SCALE
    return replace(hot, backend=_scaled(hot.backend, b), reuse=_scaled(hot.reuse, r), function=_scaled(hot.function, f))


def learn_time_model(database: "Database | None", target: "str | Target", kind: str,
                     timing: "Timing" = DEFAULT_TIMING) -> TimeModel:
    """The target's model from the database's results of runs timed as ``timing`` (backend, reuse and
    polish; evolve excluded), its prior (:func:`prior`) standing in where they
    are too few. A result recorded before timings were recorded was timed hot; a GPU's are all hot."""
    from eto.target import target_key

    results = []
    if database is not None:
        tk, timed = target_key(target), timing_on(kind, timing)
        results = [r for r in database.results() if r.get("target") == tk and r.get("records")
                   and r.get("timing", "hot") == timed]
    return fit_time_model(results, prior(target, kind, timing))


def _scaled(line: Line, f: float) -> Line:
    return Line(line.fixed * f, line.per * f, line.per_gflop * f, line.samples)


def _mcpu(target: "str | Target | None") -> str:
    from eto.target import parse_target

    t = parse_target(target if target is not None else "cpu")  # no target: this machine
    return str(t.attrs["mcpu"]) if "mcpu" in t.attrs else ""


def default_lines(target: "str | Target | None", kind: str) -> tuple[Line, Line]:
    """Hot (backend, reuse) lines before ``target`` has results: its CPU's (``CPU_DEFAULTS``) or its kind's."""
    if kind == "cpu" and (mcpu := _mcpu(target)) in CPU_DEFAULTS:
        return CPU_DEFAULTS[mcpu]
    return DEFAULTS.get(kind, DEFAULTS["cpu"])


def default_kinds(target: "str | Target | None", kind: str) -> Mapping[str, float]:
    """Per operator type, the reuse line's scale before ``target`` has results (``CPU_KIND_DEFAULTS``)."""
    return CPU_KIND_DEFAULTS.get(_mcpu(target), {}) if kind == "cpu" else {}


__all__ = ["COLD_CPU_DEFAULTS", "COLD_SCALE", "CPU_COUNT_SCALE", "CPU_DEFAULTS", "CPU_KIND_DEFAULTS", "DEFAULTS",
           "POLISH_DEFAULTS", "default_kinds", "default_lines", "learn_time_model", "prior", "timing_on"]
