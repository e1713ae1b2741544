"""Derivations: how a plan's non-root operator gets its program from its parent's (paper section 5).

A plan's reuse edge β -> α says *that* α is derived from β; a :class:`Derivation` says *how*. Three
implement the one method, :meth:`Derivation.derive`, which commits α's result into the run's database:

* :class:`ReuseSearch` -- the reuse-based tuner (Algorithm 1: the hierarchical B/T/M search), each
  measured candidate checkpointed so an interrupted search resumes where it stopped;
* :class:`ReuseThenEvolve` -- beyond the paper (its future work): the reuse search, then MetaSchedule's
  evolutionary search continued from every candidate it measured; the better program is kept;
* :class:`TopKDerivation` -- the paper's baseline (Selective Tuning's TopK): β's best programs applied to α.

Each falls back to the backend when there is nothing to reuse, and keeps the reason with the result.
:class:`RunContext` is what every step of one run shares (target, database, options, the ranker).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from tuner.measure.faults import kill_point
from tuner.measure.timing import timing_of

from eto.operators import Operator
from eto.options import TuneOptions
from eto.planning.lead_sources import leads
from eto.runs.polish import polish_root, side_by_side
from eto.runs.tuning import checkable_here, features_of, gated, tune_with_backend
from eto.store.database import PREDICTED, Database

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import Measurer
    from tuner.reuse.cost_model import LearnedRanker
    from tuner.reuse.search import ReuseResult

#: Database methods whose records train the reuse tuner's ranker (:meth:`RunContext.history`).
RANKER_METHODS = frozenset({"backend", "import"})


@dataclass(frozen=True)
class RunContext:
    """What every step of one pipeline run shares: where results go and how operators are tuned."""

    target: "Target"
    database: Database
    options: TuneOptions
    hot: frozenset[Operator]
    say: Callable[[str], None]
    on_batch: Callable[[str, int, int, float], None] | None = None
    #: ranks each reuse round's candidates (None: measure them all, as the paper does); shared by
    #: every reuse of the run, so each one trains it for the next
    ranker: "LearnedRanker | None" = None
    fed: set = field(default_factory=set)  # database record lines the ranker has been trained on

    @property
    def trials(self) -> int:
        return self.options.backend.trials

    @property
    def hot_trials(self) -> int:
        return self.options.plan.hot_budget(self.trials)

    def run_backend(self, ops: Sequence[Operator], measurer: "Measurer", trials: int,
                    extra: "Mapping[Operator, dict] | None" = None) -> None:
        """The backend over ``ops``, ``trials`` each, as this run's options say: with method eto its
        roots' finalists settled and their builds cut short as the reuse searches' are."""
        eto = self.options.method == "eto"
        tune_with_backend(ops, self.target, self.database, dataclasses.replace(self.options.backend, trials=trials),
                          measurer=measurer, on_batch=self.on_batch, extra=extra,
                          finalists=self.options.reuse.finalists if eto else 0, short_builds=eto)

    def history(self, op_type: str) -> list:
        """Measured records of ``op_type`` on the target the ranker has not seen yet (marked seen):
        those of searches that sample their space broadly (the backend's, imported ones). A reuse's
        records are its ranked picks, all near its best: trained on them, the ranker learned to
        favour the picks' tiles on every later operator (measured on the BERT layer's
        feed-forward matmuls, derived after three others: 4.6-5.4 ms against 2.9-3.4 ms)."""
        new = [p for p in self.database.programs(target=self.target)
               if p.op.type == op_type and p.line not in self.fed and p.method in RANKER_METHODS]
        self.fed.update(p.line for p in new)
        return [p.tuning_record for p in new]

    def backend(self, ops: Sequence[Operator], measurer: "Measurer",
                estimates: Mapping[Operator, dict] | None = None) -> None:
        """Tune ``ops`` with the backend's task scheduler (hot operators with ``hot_trials`` each), then
        polish them. ``estimates``: the plan's estimate per operator, stored with its result for the report."""
        for group, n in (([o for o in ops if o in self.hot], self.hot_trials),
                         ([o for o in ops if o not in self.hot], self.trials)):
            if group:
                self.say(f"backend: {len(group)} operators, {n} trials each")
                self.run_backend(group, measurer, n, {o: (estimates or {})[o] for o in group if o in (estimates or {})})
        self.polish_roots(ops, measurer)

    def fallback(self, alpha: Operator, measurer: "Measurer", reason: str, estimate: dict,
                 trials: int | None = None) -> None:
        """α by the backend (``trials``, default the run's), the reason kept with its result."""
        self.say(f"backend fallback for {alpha.name}: {reason}")
        self.run_backend([alpha], measurer, trials or self.trials, {alpha: {**estimate, "fallback": reason}})

    def polish_roots(self, ops: Sequence[Operator], measurer: "Measurer") -> None:
        """With polish on, each of ``ops`` that is a plan root not yet polished (:mod:`eto.runs.polish`)."""
        for op in ops if self.options.polishes else ():
            polish_root(op, self.database, self.target, measurer, self.options.reuse, ranker=self.ranker, say=self.say,
                        history=lambda: self.history(op.type) if self.ranker else ())


@dataclass(frozen=True, kw_only=True)
class Extension:
    """What a search's follow-up adds before the result is stored: the search's records (re-ordered
    if they were re-measured), new records, and their cost."""

    records: list
    new: list = field(default_factory=list)
    candidates: int = 0
    seconds: float = 0.0
    trajectory: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)


class Derivation(abc.ABC):
    """How α's program is derived from β's: one method, which commits α's result (or a fallback's)."""

    @abc.abstractmethod
    def derive(self, alpha: Operator, beta: Operator, run: RunContext, measurer: "Measurer", *,
               estimate: dict, fallback_trials: int | None = None) -> None:
        """Derive α from β's programs in ``run.database`` and commit the result there.

        ``estimate``: the plan's estimate for α, stored with the result; ``fallback_trials``: the
        backend's trials when nothing can be reused (default the run's)."""

    @staticmethod
    def create(options: TuneOptions) -> "Derivation":
        """The derivation a run's options ask for."""
        if options.method != "eto":
            return TopKDerivation()
        return ReuseThenEvolve(options.evolve_trials) if options.evolve_trials else ReuseSearch()


class ReuseSearch(Derivation):
    """The reuse-based tuner (Algorithm 1), each measured candidate checkpointed: an interrupted search's
    candidates are not measured again."""

    method = "reuse"

    def derive(self, alpha: Operator, beta: Operator, run: RunContext, measurer: "Measurer", *,
               estimate: dict, fallback_trials: int | None = None) -> None:
        from tuner.measure.trajectory import median_secs
        from tuner.reuse.search import reuse_tune, trace_key

        source = run.database.search_base(beta, run.target)
        prior = run.database.progress(alpha, run.target, "reuse")
        known = {trace_key(r.trace): s for r, s in prior.programs()}
        # α's instant program (eto.runs.instant) joins round T's first batch: the search never ends worse
        seeds, alternates = leads(alpha, beta, source, run.database, run.target)
        shown = {"n": len(known), "best": min(known.values(), default=math.inf)}

        def checkpoint(records: list, measured: int, seconds: float) -> None:  # each candidate
            run.database.checkpoint(alpha, run.target, records, method="reuse", trials=measured, seconds=seconds)
            kill_point("reuse.checkpointed")
            shown["n"] += measured
            shown["best"] = min([shown["best"], *(median_secs(r.run_secs) for r in records)])

        def show() -> None:  # after each batch: the progress line, the plan's estimate its budget (0: none)
            if run.on_batch is not None:  # a display grows the total past the estimate, never a full bar early
                run.on_batch(f"reuse {alpha.name}", shown["n"], round(estimate["estimate"] or 0), shown["best"])

        if source is None:
            reason = f"{beta.name} has no program to reuse"
        else:
            kill_point("reuse.start")
            try:
                res = reuse_tune(alpha.prim_func(), source.tuning_record, run.target, measurer, run.options.reuse,
                                 ranker=run.ranker, history=run.history(alpha.type) if run.ranker else (),
                                 known=known, on_measured=checkpoint, on_batch=show, seeds=seeds,
                                 alternates=alternates)
            except ValueError as exc:  # e.g. reuse condition 1 fails on this target
                reason = str(exc)
            else:
                if res.record is not None:
                    self.commit(alpha, beta, res, run, measurer, estimate={
                        **estimate, **({"resumed_after": len(known), "interrupted_seconds": prior.seconds}
                                       if known else {})})
                    return
                reason = f"no candidate derived from {beta.name} built and ran ({res.failed} failed)"
        run.fallback(alpha, measurer, reason, estimate, fallback_trials)

    def extend(self, alpha: Operator, res: "ReuseResult", run: RunContext, measurer: "Measurer") -> "Extension":
        """What follows the search before the result is stored (a subclass's hook): nothing here."""
        return Extension(records=list(res.records))

    def commit(self, alpha: Operator, beta: Operator, res: "ReuseResult", run: RunContext, measurer: "Measurer", *,
               estimate: dict) -> None:
        """Store a reuse result, every measured candidate with it (and what :meth:`extend` added), gated."""
        ext = self.extend(alpha, res, run, measurer)
        records = ext.records + ext.new
        feats = [res.features] + [None] * (len(records) - 1)
        # a resumed search counts the candidates measured before the kill, and their seconds
        candidates = res.candidates + ext.candidates
        seconds = res.seconds + estimate.get("interrupted_seconds", 0.0) + ext.seconds
        trajectory = [p.to_json() for p in res.trajectory] + ext.trajectory
        extra = ext.extra
        failures = sorted(set(res.failures))  # why candidates failed, each reason once
        gate_start = time.perf_counter()  # the correctness gate is part of what a reuse costs: recorded with it
        kept, checked, wrong = gated(alpha, records, run.target, checkable_here(measurer, run.target))
        gate_s = time.perf_counter() - gate_start
        kill_point("reuse.result")
        run.database.commit(alpha, run.target, kept, method=self.method, source=beta, candidates=candidates,
                            seconds=seconds + gate_s, error=wrong, features=features_of(kept, records, feats),
                            extra={**estimate, "timing": timing_of(measurer.config), "rounds": res.rounds, "remeasured": res.remeasured, **extra, **checked,
                                   "failed": res.failed, "failures": failures, "trajectory": trajectory,
                                   "phases": {**{k: round(v, 3) for k, v in res.phases.items()},
                                              "gate_s": round(gate_s, 3)}})
        failed = f", {res.failed} failed ({'; '.join(failures)})" if failures else ""
        est, est_s = estimate.get("estimate"), estimate.get("estimated_seconds")  # none for a function (unplanned)
        run.say(f"reuse: {alpha.name} <- {beta.name}: {res.candidates} candidates"
                f"{f' (estimated {est or 0:.0f})' if est_s is not None else ''}, {res.seconds:.1f} s"
                f"{f' (estimated {est_s:.1f} s)' if est_s is not None else ''}, {res.latency_s * 1e6:.1f} us{failed}")


class ReuseThenEvolve(ReuseSearch):
    """The reuse search, then ``trials`` more of MetaSchedule's evolutionary search for α.

    Every candidate the reuse tuner measured seeds the population and trains the cost model first:
    without that, the search's first batches are as blind as a fresh run's. The two searches' best
    programs are re-measured side by side before either is preferred.
    """

    method = "reuse+evolve"

    def __init__(self, trials: int):
        self.trials = trials

    def extend(self, alpha: Operator, res: "ReuseResult", run: RunContext, measurer: "Measurer") -> Extension:
        from tuner.measure.backend import BackendTask, tune_backend

        b = run.options.backend
        options = dataclasses.replace(b, trials=self.trials, num_trials_per_iter=min(self.trials, b.num_trials_per_iter))
        ev = tune_backend([BackendTask(alpha.name, alpha.prim_func())], run.target, options, measurer=measurer,
                          warm_start=[res.measured], on_batch=run.on_batch, finalists=run.options.reuse.finalists,
                          short_builds=True)[0]
        known = {str(r.trace) for r in res.records}  # the warm start comes back among evolve's records
        new = [r for r in ev.records if str(r.trace) not in known]
        reuse_s = found = float("inf")
        records = list(res.records)
        if new:  # which is better is decided side by side, not by two runs' own records
            records, new, reuse_s, found = side_by_side(records, new, run.target, measurer)
        run.say(f"evolve: {alpha.name}: {ev.candidates} more candidates, {ev.seconds:.1f} s; re-measured "
                f"side by side: reuse {reuse_s * 1e6:.1f} us, evolve's best {found * 1e6:.1f} us")
        return Extension(
            records=records, new=new, candidates=ev.candidates, seconds=ev.seconds,
            trajectory=[p.after(res.seconds, res.candidates, res.latency_s).to_json() for p in ev.trajectory],
            extra={"evolve": {"candidates": ev.candidates, "seconds": ev.seconds, "reuse_latency_s": reuse_s,
                              "best_s": found, "improved": found < reuse_s, "remeasured": bool(new)}})


class TopKDerivation(Derivation):
    """The baselines' derivation: β's best measured programs applied to α, the best 3 that run kept."""

    def derive(self, alpha: Operator, beta: Operator, run: RunContext, measurer: "Measurer", *,
               estimate: dict, fallback_trials: int | None = None) -> None:
        from tuner.reuse.topk import topk_tune

        records = [p.tuning_record for p in run.database.programs(target=run.target, op=beta) if p.method != PREDICTED]
        res = topk_tune(alpha.prim_func(), records, run.target, measurer) if records else None
        if res is None or res.record is None:
            reason = (f"{beta.name} has no program to apply" if res is None else
                      f"none of {beta.name}'s {len(records)} programs applies to {alpha.name} and runs")
            run.fallback(alpha, measurer, reason, estimate, fallback_trials)
            return
        kept, checked, wrong = gated(alpha, list(res.records), run.target, checkable_here(measurer, run.target))
        run.database.commit(alpha, run.target, kept, method="topk", source=beta, candidates=res.candidates,
                            seconds=res.seconds, error=wrong,
                            extra={**estimate, **checked, "invalid": res.invalid,
                                   "timing": timing_of(measurer.config),
                                   "trajectory": [p.to_json() for p in res.trajectory]})
        run.say(f"topk: {alpha.name} <- {beta.name}: {res.candidates} measured ({res.invalid} did not apply), "
                f"{res.seconds:.1f} s, {res.latency_s * 1e6:.1f} us")


__all__ = ["Derivation", "Extension", "RANKER_METHODS", "ReuseSearch", "ReuseThenEvolve", "RunContext", "TopKDerivation"]
