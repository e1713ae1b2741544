"""``eto bench``: what a tuning run bought, end to end, against the baselines a user would try.

One process builds the model several ways and times them interleaved, round by round, on the same
inputs (so drift lands on every method alike; ``eto bench --processes`` repeats that in fresh
processes and pools them, :func:`join_processes`): TVM without tuning (default schedules), with eto's
database (:mod:`eto.models.build`), with MetaSchedule's own tuning of the same tasks
(``tune_tasks`` on the tasks eto tunes, ``max_trials_per_task`` trials each, the gradient task
scheduler; optional, it takes as long as MetaSchedule takes), and PyTorch eager on the same weights
(for ``torch.export`` programs; oneDNN on the CPU) and ONNX Runtime (for ONNX files, where it is
installed). Every output is compared with PyTorch's (or, for ONNX files, with the untuned build's).

Tuning time per method: eto's is the sum of the seconds of every tuning result its database holds for
the target (:func:`recorded_tuning`): the model's tasks, the bridges the plan tuned (operators the
model does not contain, often the most expensive runs), polishes, fallbacks and failed attempts; the
database keeps no run-level total, so time outside the results (loading, planning) is not in it, and
the method's note says what was counted. MetaSchedule's is its wall time in this process, measuring
with eto's builder and runner (:class:`tuner.measure.measurer.Measurer`, as ``eto tune --method metaschedule``).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Collection, Literal, Mapping, Sequence

import numpy as np

from tuner.measure.options import DEFAULT_TRIALS_PER_ITER
from eto.store.database import POLISH
from eto.models.build import BuiltModel, build_model, compile_fused, model_inputs
from eto.models.tasks import ModelTasks, model_tasks

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.store.database import Database
    from eto.models.load import RelaxModel

#: The file in a MetaSchedule work directory that keeps its tuning time, so a rerun reuses the run.
MS_TIME_FILE = "eto_tuning_time.json"


@dataclass(frozen=True)
class MethodResult:
    """One way of running the model: its latencies, tuning time and output error."""

    method: str  # untuned | eto | metaschedule | pytorch
    latencies_s: tuple[float, ...]
    tuning_s: float | None = None
    max_abs_error: float | None = None  # against the reference outputs
    applied_flops_share: float | None = None  # TVM builds: tunable FLOPs running a tuned program
    note: str = ""
    #: the median of each timing process (:func:`join_processes`): a build's speed is a draw per process
    process_medians_s: tuple[float, ...] = ()

    @property
    def median_s(self) -> float:
        return statistics.median(self.latencies_s)

    @property
    def spread(self) -> tuple[float, float]:
        """The 10th and 90th percentile latencies."""
        q = np.percentile(self.latencies_s, [10, 90])
        return float(q[0]), float(q[1])


@dataclass(frozen=True)
class BenchReport:
    model: str
    target: str
    reference: str  # whose outputs the errors are against
    results: tuple[MethodResult, ...]
    tasks: list[dict] = field(default_factory=list)

    def result(self, method: str) -> MethodResult | None:
        return next((r for r in self.results if r.method == method), None)

    @classmethod
    def from_json(cls, d: dict) -> "BenchReport":
        fields = {f for f in MethodResult.__dataclass_fields__}
        results = tuple(MethodResult(**{**{k: v for k, v in r.items() if k in fields},
                                        "latencies_s": tuple(r["latencies_s"]),
                                        "process_medians_s": tuple(r.get("process_medians_s", ()))})
                        for r in d["results"])
        return cls(d["model"], d["target"], d["reference"], results, d.get("tasks", []))

    def to_json(self) -> dict:
        return {"model": self.model, "target": self.target, "reference": self.reference,
                "results": [{**asdict(r), "median_s": r.median_s, "p10_s": r.spread[0], "p90_s": r.spread[1]}
                            for r in self.results], "tasks": self.tasks}


def bench_model(model: "RelaxModel", target: "Target", *, database: "Database | None",
                torch_module: Callable[..., Any] | None = None, onnx_session: Any = None,
                ms_trials: int | None = None, ms_search: Literal["evolutionary", "light"] = "evolutionary",
                ms_work_dir: str | None = None, rounds: int = 5, min_repeat_ms: int = 50,
                others: "Mapping[str, Database] | None" = None,
                log: Callable[[str], None] = lambda m: None) -> BenchReport:
    """Build and time ``model`` every way that applies; see the module docstring. ``others``: more
    databases, each built and timed as a method of that name (e.g. a database of instant programs).
    ``ms_search``: MetaSchedule's search, its default or :func:`tuner.measure.backend.light_search` (a quick look)."""
    from eto.target import use_threads

    use_threads()  # TVM's builds are timed in this process, beside PyTorch on as many threads
    tasks = model_tasks(model, target)
    inputs = model_inputs(tasks)
    builds: dict[str, BuiltModel] = {"untuned": build_model(model, None, target, tasks=tasks)}
    tuning: dict[str, float | None] = {"untuned": None}
    notes: dict[str, str] = {}
    keys = {t.op.key for t in tasks.tasks if t.op is not None}
    for name, db in {**({"eto": database} if database is not None else {}), **(others or {})}.items():
        builds[name] = build_model(model, db, target, tasks=tasks)
        recorded = recorded_tuning(db, target, keys)
        tuning[name], notes[name] = recorded.seconds, recorded.note
    for t in builds["eto"].unprogrammed if "eto" in builds else ():  # a fallback's warning came from the build
        log(f"warning: {t.name} ({t.op}) has no program in the database: default schedule")
    if ms_trials:
        ms_db, tuning["metaschedule"] = tune_metaschedule(tasks, target, ms_trials, ms_work_dir, search=ms_search,
                                                              log=log)
        builds["metaschedule"] = build_with_metaschedule(ms_db, tasks, target)
    reference, errors, times = time_side_by_side(builds, inputs, torch_module=torch_module, onnx_session=onnx_session,
                                                 rounds=rounds, min_repeat_ms=min_repeat_ms, log=log)
    results = tuple(MethodResult(m, tuple(times[m]), tuning.get(m), errors[m],
                                 builds[m].applied_flops_share if m in builds and m != "untuned" else None,
                                 notes.get(m, ""), process_medians_s=(statistics.median(times[m]),))
                    for m in times)
    return BenchReport(model.name, str(target), reference, results, [
        {"task": t.name, "weight": t.weight, "operator": t.op.name if t.op else None, "gflop": t.flops / 1e9,
         "reason": t.reason, "eto_program": t in builds["eto"].applied if "eto" in builds else None}
        for t in tasks.tasks])


def join_processes(reports: Sequence[BenchReport]) -> BenchReport:
    """One report of the same builds timed in several processes: each method's latencies pooled, each
    process's medians kept, the worst output error.

    A program's speed is drawn per process and kept for its life (up to 1.75x apart on a 2-core
    Xeon, experiments README, ``process_lottery.py``), so one process's timing compares draws, not
    builds; pooling fresh processes compares the builds."""
    first = reports[0]
    joined = []
    for r in first.results:
        each = [rep.result(r.method) for rep in reports]
        if any(e is None for e in each):
            raise ValueError(f"method {r.method!r} is missing from a timing process's report")
        errors = [e.max_abs_error for e in each if e.max_abs_error is not None]
        joined.append(replace(r, latencies_s=tuple(x for e in each for x in e.latencies_s),
                              max_abs_error=max(errors) if errors else None,
                              process_medians_s=tuple(m for e in each for m in (e.process_medians_s or (e.median_s,)))))
    return replace(first, results=tuple(joined))


def time_side_by_side(builds: "Mapping[str, BuiltModel]", inputs: Sequence[np.ndarray], *,
                      torch_module: Callable[..., Any] | None = None, onnx_session: Any = None, rounds: int = 5,
                      min_repeat_ms: int = 50, log: Callable[[str], None] = lambda m: None
                      ) -> tuple[str, dict[str, float], dict[str, list[float]]]:
    """Every build (and PyTorch, ONNX Runtime where given) on ``inputs``: the reference (PyTorch, else the
    untuned build), each one's max abs error against it, and its run times over ``rounds`` rounds, the
    order reversed every other round so that none always runs first."""
    runners: dict[str, Callable[[], list[np.ndarray]]] = {m: (lambda b=b: b.run(inputs)) for m, b in builds.items()}
    timers: dict[str, Callable[[], list[float]]] = {
        m: (lambda b=b: b.time(inputs, repeat=3, min_repeat_ms=min_repeat_ms)) for m, b in builds.items()}
    if torch_module is not None:
        runners["pytorch"], timers["pytorch"] = _torch(torch_module, inputs, min_repeat_ms)
    if onnx_session is not None:
        runners["onnxruntime"], timers["onnxruntime"] = _onnxruntime(onnx_session, inputs, min_repeat_ms)
    reference = "pytorch" if "pytorch" in runners else "untuned"
    want = runners[reference]()
    errors = {m: max(float(np.abs(np.asarray(g, dtype=np.float64) - w).max()) for g, w in zip(run(), want))
              for m, run in runners.items()}
    times: dict[str, list[float]] = {m: [] for m in timers}
    for r in range(rounds):
        for m in (timers if r % 2 == 0 else list(reversed(timers))):
            times[m] += timers[m]()
        log(f"round {r + 1}/{rounds}: " + ", ".join(f"{m} {statistics.median(t) * 1e3:.3f} ms" for m, t in times.items()))
    return reference, errors, times


def tune_metaschedule(tasks: ModelTasks, target: "Target", trials: int, work_dir: str | None, *,
                      search: Literal["evolutionary", "light"] = "evolutionary",
                      log: Callable[[str], None] = lambda m: None):
    """MetaSchedule's own tuning of the tasks eto tunes; reuses a finished run in ``work_dir``."""
    from tuner.measure.backend import search_strategy
    from tuner.analysis.intrinsics import register_tensor_intrinsics

    register_tensor_intrinsics(target)  # before any TuneContext, off the clock
    from tvm.s_tir import meta_schedule as ms

    from tuner.measure.measurer import MeasureConfig, Measurer

    if work_dir and os.path.exists(os.path.join(work_dir, MS_TIME_FILE)):
        with open(os.path.join(work_dir, MS_TIME_FILE)) as f:
            seconds = json.load(f)["seconds"]
        log(f"MetaSchedule: reusing the finished run in {work_dir} ({seconds:.0f} s)")
        return ms.database.JSONDatabase(work_dir=work_dir), seconds
    work_dir = work_dir or _temp_dir()
    extracted = [t for t in ms.relax_integration.extract_tasks(tasks.fused, target)
                 if any(m.name == t.task_name for m in tasks.tasks if m.op is not None)]
    log(f"MetaSchedule: tuning {len(extracted)} tasks, {trials} trials each ({search} search)")
    # its task table goes to its log files, not to stdout (where eto bench --json prints)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    with Measurer.local(MeasureConfig()) as measurer:  # eto's builder and runner: the same measurements
        start = time.perf_counter()
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            extracted, work_dir, strategy=search_strategy(search))
        db = ms.relax_integration.tune_tasks(tasks=contexts, task_weights=weights, work_dir=work_dir,
                                             max_trials_global=trials * len(contexts), max_trials_per_task=trials,
                                             num_trials_per_iter=min(DEFAULT_TRIALS_PER_ITER, trials), builder=measurer.builder,
                                             runner=measurer.runner)
        seconds = time.perf_counter() - start
    with open(os.path.join(work_dir, MS_TIME_FILE), "w") as f:
        json.dump({"seconds": seconds, "trials_per_task": trials, "tasks": len(contexts), "search": search}, f)
    return db, seconds


def build_with_metaschedule(ms_db, tasks: ModelTasks, target: "Target") -> BuiltModel:
    """Compile the model with a MetaSchedule database, noting which tunable tasks it covers."""
    applied = tuple(t for t in tasks.tasks if t.op is not None and ms_db.has_workload(t.mod))
    missing = tuple(t for t in tasks.tasks if t.op is not None and t not in applied)
    ex = compile_fused(ms_db, tasks.fused, target)  # as eto's own: the same fused functions, weights pre-packed
    return BuiltModel(ex, tasks, applied, missing, target)


@dataclass(frozen=True)
class RecordedTuning:
    """What a database recorded of tuning on one target: the seconds of all its tuning results."""

    seconds: float
    results: int
    model_results: int  # of them, results for the model's own tasks
    polishes: int
    failed: int  # results without a program (their time was spent all the same)
    merged_seconds: float = 0.0  # of ``seconds``, in results copied from other databases

    @property
    def note(self) -> str:
        merged = (f"; {self.merged_seconds:.0f} s of it in results copied from other databases (--prior, "
                  "eto db merge)" if self.merged_seconds else "")
        return (f"tuning s: the seconds of all {self.results} tuning results the database holds for the target: "
                f"{self.model_results} for the model's tasks, {self.results - self.model_results} for other "
                f"operators (the plan's bridges), {self.polishes} polishes, {self.failed} without a program{merged}; "
                "time outside the results (loading, planning) is not recorded")


def recorded_tuning(database: "Database", target: "Target | str", model_keys: Collection[str]) -> RecordedTuning:
    """The tuning time ``database`` recorded on ``target``: every result counts, not only those for the
    operators in ``model_keys`` (the model's tasks), because ``eto tune --model`` also tunes bridges
    (roots the plan tuned with the backend that the model does not contain, often its most expensive
    runs) and their polishes, and a fallback or a failed attempt spent its time too. The database
    keeps no run-level total; instant programs (``eto retune``) count as the results they are."""
    from eto.target import target_key

    tk = target_key(target)
    mine = [r for r in database.results() if r.get("target") == tk]
    seconds = [float(r.get("seconds", 0.0)) for r in mine]
    return RecordedTuning(sum(seconds), len(mine), sum(r.get("op_key") in model_keys for r in mine),
                          sum(r.get("method") == POLISH for r in mine), sum(not r.get("records") for r in mine),
                          sum(s for r, s in zip(mine, seconds) if r.get("merged_from")))


def _torch(module: Callable[..., Any], inputs: Sequence[np.ndarray], min_repeat_ms: int):
    import torch

    args = [torch.from_numpy(np.asarray(a, order="C")) for a in inputs]

    def run() -> list[np.ndarray]:
        with torch.no_grad():
            return [t.detach().numpy() for t in _leaves(module(*args))]

    def timer() -> list[float]:
        with torch.no_grad():
            return _repeat(lambda: module(*args), min_repeat_ms)

    run()  # warm-up
    return run, timer


def onnxruntime_session(path: str, threads: int):
    """An ONNX Runtime CPU session on ``path`` with ``threads`` threads, or None where ONNX Runtime
    is not installed (``pip install onnxruntime``).

    Its threads spin during a run, as ONNX Runtime's do by default, but stop at the run's end
    (``session.force_spinning_stop``): left spinning, they took the cores from the build timed next
    (ResNet-50's eto build ran 74 ms right after an ONNX Runtime run against 40 ms alone; ONNX
    Runtime itself ran 19.3 ms this way against 18.6 ms spinning on, 20.2 ms with spinning off)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.add_session_config_entry("session.force_spinning_stop", "1")
    return ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])


def _onnxruntime(session: Any, inputs: Sequence[np.ndarray], min_repeat_ms: int):
    feed = {i.name: np.asarray(a, order="C") for i, a in zip(session.get_inputs(), inputs)}

    def run() -> list[np.ndarray]:
        return [np.asarray(o) for o in session.run(None, feed)]

    run()  # warm-up
    return run, lambda: _repeat(lambda: session.run(None, feed), min_repeat_ms)


def _repeat(call: Callable[[], Any], min_repeat_ms: int, repeat: int = 3) -> list[float]:
    """``repeat`` seconds-per-call, each the mean of calls filling ``min_repeat_ms`` (TVM's
    ``time_evaluator`` protocol, for the baselines outside TVM)."""
    out = []
    for _ in range(repeat):
        n, start = 0, time.perf_counter()
        while True:
            call()
            n += 1
            if (time.perf_counter() - start) * 1e3 >= min_repeat_ms:
                break
        out.append((time.perf_counter() - start) / n)
    return out


def _leaves(value: Any) -> list[Any]:
    if hasattr(value, "detach"):
        return [value]
    return [a for v in value for a in _leaves(v)]


def _temp_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="eto-ms-relax-")
