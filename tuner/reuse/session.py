"""One reuse search's bookkeeping: its candidates, their measurement in (ranked) batches, each made
durable as it is timed (:class:`SearchMeasure`), what it cost, and the :class:`ReuseResult` it ends
with (Algorithm 1 itself is :class:`tuner.reuse.search.ReuseTuner`).
"""

from __future__ import annotations

import inspect
import math
import random
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

from tuner.analysis.features import TileConfig
from tuner.measure.faults import kill_point
from tuner.measure.finalists import settle
from tuner.reuse.ranked import ranked_batches
from tuner.measure.trajectory import TrajectoryPoint

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer
    from tuner.reuse.cost_model import LearnedRanker


@dataclass(frozen=True)
class ReuseResult:
    """What the reuse-based tuner found for α, and what it cost."""

    record: "TuningRecord | None"
    latency_s: float
    config: TileConfig | None
    candidates: int  # measured
    invalid: int  # generated but rejected by the postprocessors (not measured)
    failed: int  # measured but failed to build or run
    seconds: float
    trajectory: tuple[TrajectoryPoint, ...]
    rounds: dict = field(default_factory=dict)  # round name -> candidates measured
    #: every candidate that ran, best first, as (postprocessed schedule, seconds): what a search
    #: continuing from here (reuse-then-evolve) seeds its population and trains its cost model with
    measured: tuple[tuple[Any, float], ...] = ()
    #: the best program's B/T/M features (:meth:`TileConfig.features`), None without multi-level tiling
    features: dict | None = None
    #: every candidate that ran as a TuningRecord, best first (``record`` is the first): the database
    #: keeps them all, so later reuses' rankers learn from them
    records: tuple = ()
    remeasured: int = 0  # finalists re-timed in full after a screened search (tuner.measure.finalists)
    failures: tuple[str, ...] = ()  # why each failed candidate failed (build timeout, crash, ...)
    #: where ``seconds`` went: ``setup_s`` (α's design space, β's sketch, training the ranker),
    #: ``search_s`` (GetS, the postprocessors, ranking), ``build_s`` and ``run_s`` (wall seconds of the
    #: measurer's builds and runs, the finalists' too); a backend result's have the last three
    phases: dict = field(default_factory=dict)


@dataclass
class Candidate:
    cfg: TileConfig | None  # None: the sketch has no multi-level tiling (section 5.2 only)
    unroll: int | None
    fetch: tuple[int, ...]
    extra: dict[int, Any] = field(default_factory=dict)  # sub-sketch decisions (tuner.analysis.subsketch)
    stage: int = 0  # the sketch replayed: 0 β's, k the k-th sibling write stage (ReuseTuner.siblings)
    sch: Any = None
    latency: float = math.inf

    def but(self, **changes: Any) -> "Candidate":
        """A new, unmeasured candidate differing from this one in ``changes``."""
        return replace(self, sch=None, latency=math.inf, **changes)


class SearchSession:
    """One run of Algorithm 1: builds and measures rounds, keeps the counts, the trajectory and all that ran.

    ``tuner`` is the :class:`tuner.reuse.search.ReuseTuner` (not imported here: it imports this module)."""

    def __init__(self, tuner: Any, measure: Callable[..., list[float]],
                 ranker: "LearnedRanker | None", top_k: int | None, min_gain: float, finalists: int) -> None:
        self.tuner, self.measure, self.ranker, self.top_k, self.min_gain = tuner, measure, ranker, top_k, min_gain
        self.finalists, self.remeasured = finalists, 0
        # batches with a ranker: in its order if it knows α's shape, else in a random order seeded by
        # α (a rerun, resuming, draws the same batches)
        self.batched = ranker is not None and top_k is not None
        self.ranked = self.batched and ranker.knows(tuner.alpha_mod)  # type: ignore[union-attr]
        self.rng = random.Random(str(tuner.alpha_mod))
        self.start = time.perf_counter()
        self.trials = self.invalid = self.failed = 0
        self.best_s = math.inf
        self.trajectory: list[TrajectoryPoint] = []
        self.rounds: dict[str, int] = {}
        self.seen: list[Candidate] = []

    def run(self, cands: list[Candidate], name: str, incumbent: float = math.inf, first: int = 0) -> list[Candidate]:
        """Build ``cands`` (GetS; rejected ones are counted, not measured), then measure them: all of
        them, or with a ranker ``top_k`` at a time (:func:`ranked_batches`), best-ranked first or at
        random (:meth:`ReuseTuner.tune`). The ``first`` candidates lead the order whatever their rank,
        in their own order (β's kept tiles first: the build :func:`tuner.reuse.search.reuse_tune` times alone)."""
        lead = {id(c): i for i, c in enumerate(cands[:first])}
        for c in cands:
            c.sch = self.tuner.schedule(c)
        ok = [c for c in cands if c.sch is not None]
        self.invalid += len(cands) - len(ok)
        if not ok:
            return []
        if not self.batched:
            self._measure(ok, name)
            return ok
        order = self.rng.sample(range(len(ok)), len(ok))
        if self.ranked:
            order = self.ranker.rank(self.tuner.alpha_mod, [c.sch for c in ok]) or order  # type: ignore[union-attr]
        order = sorted(order, key=lambda i: lead.get(id(ok[i]), first))  # stable: the lead first, then by rank
        done: list[Candidate] = []
        batches = ranked_batches([ok[i] for i in order], self.top_k, incumbent, self.min_gain)  # type: ignore[arg-type]
        for batch in batches:
            self._measure(batch, name)
            done += batch
        return done

    def _measure(self, batch: list[Candidate], name: str) -> None:
        for c, l in zip(batch, self.measure([c.sch for c in batch])):
            c.latency = l
            self.trials += 1
            self.failed += math.isinf(l)
            self.best_s = min(self.best_s, l)
            self.trajectory.append(TrajectoryPoint(time.perf_counter() - self.start, self.trials, self.best_s))
        self.rounds[name] = self.rounds.get(name, 0) + len(batch)
        self.seen.extend(c for c in batch if math.isfinite(c.latency))
        if self.ranker is not None and not self.ranked:
            # a round measured whole or sampled at random is a fair sample of α's space; ranked
            # picks, all near the best, would teach the ranker their tiles for every later operator
            self.ranker.observe(self.tuner.alpha_mod, [c.sch for c in batch], [c.latency for c in batch])

    def result(self, best: Candidate | None) -> ReuseResult:
        if self.finalists and best is not None and math.isfinite(best.latency):
            winner, f = settle(self.seen, lambda scheds: self.measure(scheds, precise=True), self.finalists)
            if winner is not None:  # the best-so-far curve onto the full scale; it ends at the winner, now
                best, self.remeasured = winner, min(self.finalists, len(self.seen))
                self.seen = [c for c in self.seen if math.isfinite(c.latency)]
                # (every point's best times f is at least the winner's; max() keeps rounding from saying less)
                self.trajectory = [replace(p, best_s=max(p.best_s * f, best.latency)) for p in self.trajectory]
                self.trajectory[-1] = TrajectoryPoint(time.perf_counter() - self.start, self.trials, best.latency)
        found = best is not None and math.isfinite(best.latency)
        self.seen.sort(key=lambda c: c.latency)
        records = tuple(self.tuner.record_of(c.sch, c.latency) for c in self.seen)
        return ReuseResult(
            records[0] if found else None, best.latency if found else math.inf,  # type: ignore[union-attr]
            best.cfg if found else None, self.trials, self.invalid, self.failed,  # type: ignore[union-attr]
            time.perf_counter() - self.start, tuple(self.trajectory), self.rounds,
            tuple((c.sch, c.latency) for c in self.seen),
            features=(best.cfg.features(self.tuner.alpha)  # type: ignore[union-attr]
                      if found and best.cfg is not None else None),  # type: ignore[union-attr]
            records=records, remeasured=self.remeasured)


class SearchMeasure:
    """How a reuse search measures (the ``measure`` Algorithm 1 calls): each batch's builds cut (a
    CPU's persistent builder: one candidate first, then at the cap of those that built), screened if
    ``screen``; a candidate in ``known`` (:func:`trace_key` -> seconds, an interrupted run's) takes its
    time instead of running again; every new one goes to ``on_measured([record] or [], 1, seconds)``
    the moment it is timed, the seconds since the previous one; ``on_batch()`` after each batch (a
    progress line). ``precise``: the finalists, timed in full in every runner process and not
    checkpointed (a resumed search re-times its own)."""

    def __init__(self, tuner: Any, measurer: "Measurer", target: "Target", *, screen: bool,
                 known: "dict[str, float]", on_measured: "Callable[[list, int, float], None] | None",
                 on_batch: "Callable[[], None] | None" = None) -> None:
        from tuner.measure.measurer import BuildCut

        self.tuner, self.measurer, self.target, self.screen = tuner, measurer, target, screen
        self.known, self.on_measured, self.on_batch = known, on_measured, on_batch
        self.cut = BuildCut(probe=1 if measurer.search_build_timeout(target) is not None else 0)
        try:
            self.streams = "on_result" in inspect.signature(measurer.measure).parameters
        except (TypeError, ValueError):
            self.streams = False
        self.failures: list[str] = []
        self.finalists_failed: list[str] = []

    def __call__(self, schedules: list, precise: bool = False) -> list[float]:
        if precise:
            timed = self.measurer.measure([s.mod for s in schedules], self.target, search=True, spread=True)
            self.finalists_failed.extend(r.error for r in timed if r.error)
            return [r.median for r in timed]
        keys = [trace_key(s.trace) for s in schedules] if self.known else [None] * len(schedules)
        todo = [i for i, k in enumerate(keys) if k not in self.known]
        out = [self.known.get(k, math.inf) for k in keys]  # type: ignore[arg-type]
        mark, reported = [time.perf_counter()], set()

        def each(k: int, r) -> None:  # the k-th new candidate timed: durable at once
            if k in reported:
                return
            reported.add(k)
            i, now = todo[k], time.perf_counter()
            kill_point("reuse.measured")
            if self.on_measured is not None:
                ran = [self.tuner.record_of(schedules[i], r.median)] if math.isfinite(r.median) else []
                self.on_measured(ran, 1, now - mark[0])
            mark[0] = now

        results: list = []
        for part in self.cut.parts([schedules[i].mod for i in todo]):
            # a measurer that reports each result as it ends (eto's); a stand-in's, after its batch
            kw = {"on_result": lambda k, r, at=len(results): each(at + k, r)} if self.streams else {}
            rs = self.measurer.measure(part, self.target, screen=self.screen, search=True, build_cap=self.cut.cap, **kw)
            self.cut.record(r.build_s for r in rs if r.ok)
            for k, r in enumerate(rs, start=len(results)):
                each(k, r)
            results += rs
        for i, r in zip(todo, results):
            out[i] = r.median
            self.failures.extend([r.error] if r.error else [])
        if todo and self.on_batch is not None:
            self.on_batch()
        return out


def trace_key(trace) -> str:
    """A candidate's identity across runs: its trace's text (instructions and decisions)."""
    return str(trace)
