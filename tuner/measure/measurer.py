"""Measurement: build candidate programs in parallel and run them one at a time, for real.

:class:`Measurer` bundles a builder (:class:`tuner.measure.builder.PersistentBuilder`, which links a shared
library in parallel workers, so the sequential runner only loads it) and a runner: runs are
sequential and happen after the batch's builds have finished, so a build never competes with a
timed run.

A candidate that fails to build, crashes its worker or exceeds its timeout yields a
:class:`MeasureResult` with ``error`` set; measuring continues with the next one. A reuse search
builds with a shorter timeout (``MeasureConfig.search_build_timeout_s``): a few candidates make LLVM
take 30-50 s (a fully unrolled reduction over strided vector loads), and each of them cost a
search of 16 candidates MetaSchedule's whole 30 s while it waited; once some of its candidates have
built, a reuse search cuts lower, at a multiple of their median build (:func:`search_build_cap`).
Those cut builds run in a fork of a warm worker (:mod:`tuner.measure.builder`), so a cut costs no worker
restart. Each result carries its build's seconds, and :attr:`Measurer.clock` the wall seconds of
all builds and runs, from which a search's ``phases`` are taken.
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Literal, Sequence, TypeVar

from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, RPCConfig, RunnerInput

from tuner.analysis.kinds import is_cpu
from tuner.measure import arguments, deadline, stop
from tuner.measure.builder import PersistentBuilder, one_line
from tuner.analysis.host import physical_cores
from tuner.measure.options import OptionError
from tuner.measure.trajectory import median_secs
from tuner.measure.workers import bind_to_parent, remove_artifact, stop_pool

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.target import Target

RunnerKind = Literal["local", "rpc"]
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class MeasureConfig:
    """How candidates are timed. ``repeat`` medians are what eto compares (noise: the same program
    measured 615-1113 us across runner calls on 2 threads here)."""

    number: int = 3
    repeat: int = 5
    min_repeat_ms: int = 40
    enable_cpu_cache_flush: bool = False
    build_timeout_s: float = 30.0
    run_timeout_s: float = 30.0
    #: eto's searches' build timeout on CPU targets (reuse searches; backend roots tuned by eto,
    #: ``tune_backend(short_builds=True)``; None: ``build_timeout_s``). The search measures a
    #: ranked few and loses nothing by dropping a candidate LLVM cannot compile in 10 s; CUDA builds
    #: (nvcc) keep ``build_timeout_s``. Measured here: BERT-Base's BMM[12,128,128,64] lost 30 s a
    #: candidate (twice in one search of 16) on programs LLVM compiles in 50 s; sampled recorded
    #: candidates compile in 0.06-8 s, a few of the largest in 21-22 s. Such candidates also decided
    #: the time of a 100-trial root (BERT-Base's BMM[1,128,768,768]: 63-68 s, and 118 s when three
    #: waited out the 30 s; builds 24-29 against 79 s)
    search_build_timeout_s: float | None = 10.0
    num_threads: int | None = None  # TVM_NUM_THREADS for timed runs; default: physical cores
    builder_workers: int | None = None  # default: physical cores
    recycle_after: int = 256  # builds per worker process before it is restarted
    #: screening (``Measurer.measure(..., screen=True)``): fewer, shorter repeats, for candidates that
    #: only need ranking; a search re-times its finalists with the full configuration (tuner.measure.finalists)
    screen_repeat: int = 3
    screen_min_repeat_ms: int = 10
    #: runner processes that time a search's finalists (``measure(..., spread=True)``; local runs). On
    #: this project's 2-core VM the same program, on 2 threads, runs at one speed in one process and up to
    #: 1.75x slower in the next, and keeps its speed for the process's life (BERT-Base's 768x768 matmul:
    #: 0.64-0.71 ms in 2 of 6 processes, 1.11-1.12 ms in 4; experiments/results/process_lottery_*.json),
    #: so a search timed in one process can crown a program that is fast only there: with 2 or more,
    #: finalists are timed in this many processes and ranked by all their samples' median. Default:
    #: ``ETO_SETTLE_PROCESSES`` if set, else 1: measured on quickstart (3 seeds, N = 64, programs
    #: re-measured in 4 fresh processes; experiments/results/set_bench_quickstart_N64_settle_ab.json),
    #: settling in 2 processes cost 1.17x the tuning time and gave 0.83x the weighted throughput of
    #: 1 (in all 3 seeds, 12 of 15 operators slower): the spare process's draw misled more than it corrected
    settle_processes: int = field(default_factory=lambda: default_settle_processes())

    def evaluator(self, *, screen: bool = False) -> EvaluatorConfig:
        return EvaluatorConfig(
            number=self.number,
            repeat=self.screen_repeat if screen else self.repeat,
            min_repeat_ms=self.screen_min_repeat_ms if screen else self.min_repeat_ms,
            enable_cpu_cache_flush=self.enable_cpu_cache_flush,
        )


@dataclass(frozen=True)
class MeasureResult:
    """One candidate's outcome: ``run_secs`` (one per repeat) or an ``error`` naming what failed."""

    run_secs: tuple[float, ...] | None
    error: str | None = None
    stage: Literal["build", "run", ""] = ""
    build_s: float | None = None  # its build's seconds (a persistent builder's; else None)

    @property
    def ok(self) -> bool:
        return self.run_secs is not None and self.error is None

    @property
    def median(self) -> float:
        """Median seconds, or +inf for a failed candidate (so it never wins a comparison)."""
        return median_secs(self.run_secs) if self.ok else float("inf")


#: eto's searches (reuses; now its backend roots too, per task) cut a candidate's build
#: at this many times the median build of the search's candidates so far (never below
#: ``SEARCH_BUILD_FLOOR_S``, never above ``search_build_timeout_s``): one α's candidates build in
#: about the same time unless the code explodes, and the ones that explode are slow programs.
#: Measured on BERT-Base's reuses from one root (every candidate's build logged): the best programs
#: built in 0.1-2.4 s, every build over 3 s ran 5-50x slower than the
#: search's best, and 9 builds hit the 10 s timeout (45 s of a 52 s search); a cap of 4x the median
#: (2 s floor), replayed on that log, cut 12 candidates, none within 1.1x of its search's best.
SEARCH_BUILD_FACTOR = 4.0
SEARCH_BUILD_FLOOR_S = 2.0


def search_build_cap(built: Sequence[float]) -> float | None:
    """The build timeout for a search's next candidates (a reuse's, or an eto root's task), given
    its builds so far (seconds of those that built); None before any (:class:`BuildCut` then
    builds a probe first)."""
    if not built:
        return None
    return max(SEARCH_BUILD_FLOOR_S, SEARCH_BUILD_FACTOR * statistics.median(built))


class BuildCut:
    """One search's build history and the cut it sets for its next builds: until one of its builds
    has succeeded, a batch builds its first ``probe`` candidates alone at the uncut timeout, so a
    candidate LLVM cannot compile costs at most the cap, never the timeout, once there is a median.
    A reuse probes one candidate (round T's lead, β's own tiles; a register lead after it may take
    14 s), an eto root one per build worker (the batch's builds run side by side). ``ceiling``:
    the search's own build timeout, which :attr:`cap` never exceeds (None: the caller's)."""

    def __init__(self, *, probe: int = 1, ceiling: float | None = None) -> None:
        self.probe, self.ceiling = probe, ceiling
        #: seconds of the builds that succeeded (a cut or failed build is no sample)
        self.built: list[float] = []

    def parts(self, items: Sequence[T]) -> list[Sequence[T]]:
        """``items`` in the parts to build one after another, each at :attr:`cap` as it is then."""
        k = 0 if self.built else max(0, min(self.probe, len(items) - 1))
        return [part for part in (items[:k], items[k:]) if part]

    @property
    def cap(self) -> float | None:
        cap = search_build_cap(self.built)
        if self.ceiling is None:
            return cap
        return self.ceiling if cap is None else min(cap, self.ceiling)

    def record(self, seconds: Iterable[float | None]) -> None:
        """The seconds of a part's builds that succeeded."""
        self.built.extend(s for s in seconds if s is not None)


def default_settle_processes() -> int:
    """``ETO_SETTLE_PROCESSES`` (a positive integer) or 1."""
    env = os.environ.get("ETO_SETTLE_PROCESSES")
    if not env:
        return 1
    try:
        n = int(env)
    except ValueError:
        n = 0
    if n < 1:
        raise OptionError("ETO_SETTLE_PROCESSES", f"must be a positive integer, got {env!r}")
    return n


def _init_runner(n: int, parent: int) -> None:
    """Runner process initializer: TVM reads TVM_NUM_THREADS when its thread pool starts; the process
    dies with ``parent`` (:func:`~tuner.measure.workers.bind_to_parent`); integer arguments are zeros."""
    os.environ["TVM_NUM_THREADS"] = str(n)
    bind_to_parent(parent)
    arguments.register()


# -- measurer -----------------------------------------------------------------------------------
@dataclass
class Measurer:
    """A builder and a runner with one configuration; usable as MetaSchedule's builder/runner too.

    Create with :meth:`local` or :meth:`rpc`; call :meth:`close` (or use ``with``) when done.
    """

    builder: ms.Builder
    runner: ms.Runner
    config: MeasureConfig
    kind: RunnerKind = "local"
    #: starts one more runner process, where ``measure(..., spread=True)`` times too (None: no spares);
    #: the first spread measurement starts ``config.settle_processes - 1`` of them (~2.7 s each here)
    spare: "Callable[[], ms.Runner] | None" = None
    spares: list = field(default_factory=list)
    counters: dict = field(default_factory=lambda: {"built": 0, "build_failed": 0, "run_failed": 0, "ok": 0})
    #: wall seconds spent building and running (all calls): a search's phases are differences of it
    clock: dict = field(default_factory=lambda: {"build_s": 0.0, "run_s": 0.0})

    @classmethod
    def local(cls, config: MeasureConfig | None = None, *, warm: "Target | None" = None) -> "Measurer":
        """Build and run here. ``warm``: start the build workers for that target at once
        (:meth:`PersistentBuilder.warm`), beside the runner's worker, which MetaSchedule starts and
        checks before its constructor returns (about 2.6 s here)."""
        config = config or MeasureConfig()
        threads = config.num_threads or physical_cores()
        builder = PersistentBuilder(
            max_workers=config.builder_workers, timeout_sec=config.build_timeout_s,
            recycle_after=config.recycle_after,
        )
        if warm is not None:
            builder.warm(warm)

        def runner() -> ms.Runner:  # one worker process, started at its first run
            return ms.runner.LocalRunner(timeout_sec=config.run_timeout_s, evaluator_config=config.evaluator(),
                                         initializer=functools.partial(_init_runner, threads, os.getpid()),
                                         f_alloc_argument=arguments.ALLOC_ARGUMENT)

        return cls(builder, runner(), config, "local", runner)

    @classmethod
    def rpc(
        cls,
        tracker_host: str,
        tracker_port: int,
        key: str,
        config: MeasureConfig | None = None,
        *,
        max_workers: int | None = None,
        session_timeout_s: float | None = None,
    ) -> "Measurer":
        """Run on devices registered with a TVM RPC tracker under ``key`` (one run per device at a time)."""
        config = config or MeasureConfig()
        builder = PersistentBuilder(
            max_workers=config.builder_workers, timeout_sec=config.build_timeout_s,
            recycle_after=config.recycle_after,
        )
        rpc_config = RPCConfig(
            tracker_host=tracker_host,
            tracker_port=tracker_port,
            tracker_key=key,
            session_priority=1,
            session_timeout_sec=int(session_timeout_s or config.run_timeout_s),
        )
        runner = ms.runner.RPCRunner(
            rpc_config=rpc_config, evaluator_config=config.evaluator(), max_workers=max_workers or 1
        )
        return cls(builder, runner, config, "rpc")

    def search_build_timeout(self, target: "Target") -> float | None:
        """eto's searches' build timeout for ``target`` (``config.search_build_timeout_s``: LLVM builds
        on a persistent builder), or None: the builder's own."""
        short = self.config.search_build_timeout_s
        ok = short is not None and is_cpu(target) and isinstance(self.builder, PersistentBuilder)
        return short if ok else None

    def measure(self, mods: Sequence["IRModule"], target: "Target", *, screen: bool = False,
                search: bool = False, spread: bool = False, build_cap: float | None = None,
                on_result: "Callable[[int, MeasureResult], None] | None" = None) -> list[MeasureResult]:
        """Build all candidates in parallel, then run each; failures are results, not exceptions.

        ``screen``: time them with the configuration's screening repeats (a third of the run time
        here), for ranking; the runner's own configuration is restored afterwards. ``search``: a
        reuse search's candidates, built with ``search_build_timeout_s`` on CPU targets, or ``build_cap``
        where that is lower (:func:`search_build_cap`). ``spread``:
        time each in the :attr:`spares` processes too, one process after the other (a search's
        finalists, :attr:`MeasureConfig.settle_processes`); its samples are all processes' together,
        and it fails if it failed in any. ``on_result(i, result)``: each candidate's result as soon as
        it is known (failed builds after the builds, each run as it ends), so a caller can make it
        durable before the next one runs. Between candidates a requested stop (:mod:`tuner.measure.stop`)
        is raised: what has not run yet is abandoned; so is it once a run's deadline has passed
        (:mod:`tuner.measure.deadline`), and past it nothing is built."""
        stop.check()
        deadline.check()
        if not mods:
            return []
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        built, seconds = self._build(mods, target, search, build_cap)
        t1 = time.perf_counter()
        results: list[MeasureResult | None] = [None] * len(mods)
        inputs, where = [], []
        for i, (mod, b) in enumerate(zip(mods, built)):
            self.counters["built"] += 1
            if b.error_msg is not None:
                self.counters["build_failed"] += 1
                results[i] = MeasureResult(None, str(b.error_msg), "build", seconds[i])
                continue
            args = ArgInfo.from_entry_func(mod, remove_preproc=True)
            device = "cpu" if is_cpu(target) else target.kind.name
            inputs.append(RunnerInput(b.artifact_path, device, args))
            where.append(i)
        for i, r in enumerate(results):
            if r is not None and on_result is not None:
                on_result(i, r)
        if spread and self.spare is not None:
            self.spares += [self.spare() for _ in range(self.config.settle_processes - 1 - len(self.spares))]
        first = self._run(self.runner, inputs, screen)  # each run's result as it ends
        if spread and self.spares:  # its runs end before a spare's start
            first = list(first)
        others = [list(self._run(runner, inputs, screen)) for runner in (self.spares if spread else ())]
        for k, ((i, inp), ran) in enumerate(zip(zip(where, inputs), first)):
            results[i] = self._outcome([ran, *(run[k] for run in others)], seconds[i])
            remove_artifact(str(inp.artifact_path))
            if on_result is not None:
                on_result(i, results[i])  # type: ignore[arg-type]
            stop.check()
            deadline.check()  # a short budget's end is not a whole batch of runs away
        self.clock["run_s"] += time.perf_counter() - t1
        return results  # type: ignore[return-value]

    def _build(self, mods: Sequence["IRModule"], target: "Target", search: bool,
               build_cap: float | None) -> tuple[list, list[float | None]]:
        """Every candidate built (see :meth:`measure`): the builder's results and each build's seconds."""
        to_build = [BuilderInput(m, target) for m in mods]
        t0 = time.perf_counter()
        short = self.search_build_timeout(target) if search else None
        if short is not None and build_cap is not None:
            short = min(short, build_cap)
        built = self.builder.build_within(to_build, short) if short is not None else self.builder.build(to_build)
        self.clock["build_s"] += time.perf_counter() - t0
        seconds = getattr(self.builder, "seconds", None)
        return built, seconds if isinstance(seconds, list) and len(seconds) == len(mods) else [None] * len(mods)

    def _outcome(self, outcomes: list, build_s: float | None) -> MeasureResult:
        """One candidate's result from its runs (one per runner process); it failed if one did."""
        bad = next((r for r in outcomes if r.error_msg is not None or r.run_secs is None), None)
        if bad is not None:
            self.counters["run_failed"] += 1
            return MeasureResult(None, run_error_message(bad.error_msg), "run", build_s)
        self.counters["ok"] += 1
        return MeasureResult(tuple(float(s) for r in outcomes for s in r.run_secs), build_s=build_s)

    def _run(self, runner: ms.Runner, inputs: list[RunnerInput], screen: bool) -> Iterator:
        """Every input submitted to ``runner`` now; the results, each waited for as it is taken (the
        caller takes them all before another runner's: two runners never time at once)."""
        # MetaSchedule's local and RPC runners read it when a run is submitted; another runner times its way
        full = getattr(runner, "evaluator_config", None)
        swap = screen and full is not None
        if swap:
            runner.evaluator_config = self.config.evaluator(screen=True)
        try:
            futures = runner.run(inputs) if inputs else []
        finally:
            if swap:
                runner.evaluator_config = full
        return (fut.result() for fut in futures)

    def remeasure(self, mods: Sequence["IRModule"], target: "Target", *, rounds: int = 3) -> list[float]:
        """Median seconds of each module over ``rounds`` interleaved measurements (inf if one failed).

        Latencies recorded by different runs drift with the machine's state; comparing two programs
        means timing them side by side, alternating, as here. A module that fails in a round is measured
        once more in it: a build or run a loaded machine timed out is no failing program (E7 at ci scale
        lost a program's ratio so under the parallel test tier); one that fails twice is.
        """
        times: list[list[float]] = [[] for _ in mods]
        for _ in range(rounds):
            results = self.measure(list(mods), target)
            again = [i for i, r in enumerate(results) if not r.ok]
            for i, r in zip(again, self.measure([mods[i] for i in again], target) if again else []):
                results[i] = r
            for i, r in enumerate(results):
                times[i].append(r.median)
        return [statistics.median(t) if all(math.isfinite(x) for x in t) else math.inf for t in times]

    def close(self) -> None:
        """Stop the build workers and every runner process at once (:func:`tuner.measure.workers.stop_pool`)."""
        if isinstance(self.builder, PersistentBuilder):
            self.builder.shutdown()
        for runner in (self.runner, *self.spares):
            pool = getattr(runner, "pool", None)
            if pool is not None:
                stop_pool(pool)

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_error_message(msg: object) -> str:
    """A runner's error in one line that says what happened (crash, timeout, or its last line)."""
    text = one_line(msg or "no timing returned")
    if "Subprocess terminated" in str(msg):
        return "the candidate crashed the runner process (aborted or killed by a signal)"
    if "Timeout" in str(msg):
        return "run " + text[text.find("Timeout"):].lower()
    return text
