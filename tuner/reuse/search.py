"""The reuse-based tuner (paper section 5, Algorithm 1): α's program from β's best one.

Given a reuse pair (α, β) and β's best program S*_β, it derives α's program by a hierarchical
search over B, T and M instead of sampling the whole space. The rounds' candidates are enumerated
by :class:`tuner.reuse.space.ReuseSpace` (equations 1-3, GetBShape / GetTShape / GetLShape); this module
measures them, round by round, keeping the best: T, "stage" (round T's best on α's sketches
that write the tile back elsewhere, :func:`write_stage_siblings`), (CPU) the register-blocked panel
of :mod:`tuner.reuse.panel`, M, unroll, then the cooperative-fetch vector lengths. Decisions outside the
major loop nest (composite sketches, other sketch types) are tuned last, sub-sketch by sub-sketch
(:mod:`tuner.analysis.subsketch`, section 5.2).

Candidates are built by :class:`tuner.analysis.sketch.Sketch` (β's sketch replayed on α with the new
decisions, GetS) and checked by the target's postprocessors (``VerifyGPUCode`` on CUDA); those
that fail verification are skipped, not measured. The enumeration does not measure anything, so
:mod:`tuner.reuse.estimate` reuses it to predict the number of measurements (section 6.1).

Beyond the paper, β may be a fused task with another epilogue or rank than α's (a ``matmul+add``
program for a batch ``matmul``): GetS then replays α's own sketch of β's family
(:attr:`tuner.analysis.sketch.Sketch.family`) with β's tiles put on α's loops
(:func:`tuner.analysis.features.align_loops`).

Rounds are batched across all B values (one build batch per round) — the same candidates
Algorithm 1 measures, built in parallel.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tuner.analysis.intrinsics import register_tensor_intrinsics
from tuner.reuse.leads import lead_tiles
from tuner.analysis.gathers import bounded_unroll
from tuner.reuse.registers import covering_unroll, register_tiles
from tuner.reuse.panel import blocked_lead, unroll_covering
from tuner.reuse.ranked import DEFAULT_TOP_K, MIN_GAIN, resolve_top_k
from tuner.reuse.rounds import best_after_rounds, sub_sketch_rounds
from tuner.analysis.features import LoopNest, TileConfig
from tuner.analysis.kinds import Kind, kind_of
from tuner.reuse.session import ReuseResult, Candidate, SearchMeasure, SearchSession, trace_key
from tuner.reuse.options import ReuseOptions
from tuner.reuse.space import DEFAULT_STRATEGY, RangeName, ReuseSpace, Strategy, default_ranges, target_limits
from tuner.analysis.tiling import achievable_products, largest_divisor_at_most

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target
    from tvm.tirx import PrimFunc

    from tuner.reuse.cost_model import LearnedRanker
    from tuner.measure.measurer import Measurer
    from tuner.analysis.sketch import Sketch


def _index_of(values: Sequence[Any], want: int) -> int | None:
    return next((i for i, v in enumerate(values) if int(v) == want), None)


# -- tuning ----------------------------------------------------------------------------------------
class ReuseTuner:
    """Algorithm 1 on one reuse pair (α's function, β's best record, the target)."""

    def __init__(self, alpha_func: "PrimFunc", beta_record: "TuningRecord", target: "Target", *,
                 vector_lanes: int = 8, ranges: RangeName | None = None) -> None:
        from tvm.ir import IRModule
        from tvm.s_tir import meta_schedule as ms

        from tuner.analysis.features import align_loops, loop_nest_of, program_features
        from tuner.analysis.sketch import Sketch
        from tuner.analysis.subsketch import SubSketches

        self.target = target
        self.kind: Kind = kind_of(target)
        self.beta_sketch = Sketch(beta_record.trace)
        self.alpha_mod = IRModule({"main": alpha_func})
        register_tensor_intrinsics(target)
        self.ctx = ms.TuneContext(mod=self.alpha_mod, target=target, space_generator="post-order-apply",
                                  search_strategy="replay-trace", task_name="reuse", num_threads=1)
        sketches = [Sketch(s.trace) for s in self.ctx.generate_design_space()]
        want = self.beta_sketch.signature
        self.sketch = next((sk for sk in sketches if sk.signature == want), None)
        if self.sketch is None:  # another epilogue or rank of the same anchor (Sketch.family)
            family = self.beta_sketch.family
            self.sketch = next((sk for sk in sketches if sk.family == family), None)
        if self.sketch is None:
            raise ValueError("reuse condition 1 fails: the sketch of β's program is not in α's design space")
        self.sketch = self.sketch.with_values_of(self.beta_sketch)
        self.siblings = write_stage_siblings(self.sketch, sketches, self.beta_sketch)
        self.postprocs = list(self.ctx.space_generator.postprocs)
        self.has_mlt = bool(self.sketch.tiles)
        self.unroll_inst: int | None = None
        self.unroll_values: list[int] = []
        self.fetch_insts: tuple[int, ...] = ()
        self.beta_unroll, self.beta_fetch = None, ()
        self.alpha = self.beta = self.beta_cfg = self.space = None
        handled: set[int] = set()
        beta_handled: set[int] = set()
        if self.has_mlt:
            t, bt = self.sketch.main_tiles, self.beta_sketch.main_tiles
            self.alpha = loop_nest_of(self.alpha_mod, t.block)
            beta_cfg, beta = program_features(beta_record, self.kind, sketch=self.beta_sketch)
            aligned = align_loops(beta, beta_cfg, self.alpha)
            if aligned is None:
                raise ValueError("reuse condition 1 fails: β's program tiles other reduction loops than α's")
            self.beta, self.beta_cfg = aligned
            self.space = ReuseSpace(self.kind, self.alpha, self.beta, self.beta_cfg, **target_limits(self.kind, target),
                                    vector_lanes=vector_lanes, ranges=ranges or default_ranges(self.kind))
            self.unroll_inst = t.unroll
            self.unroll_values = [int(v) for v in self.sketch.insts[t.unroll][2][0]] if t.unroll is not None else []
            self.fetch_insts = t.fetch
            # GetS defaults (Algorithm 1 tunes these last): β's unroll, no vectorised cooperative fetch
            self.beta_unroll = self.beta_sketch.decisions.get(bt.unroll) if bt.unroll is not None else None
            self.beta_fetch = tuple(_index_of(self.sketch.insts[i][2][0], 1) for i in t.fetch)
            handled, beta_handled = t.decisions, bt.decisions
        # everything else (composite parts, other sketch types) is tuned sub-sketch by sub-sketch
        self.sub = SubSketches(self.sketch, self.beta_sketch, exclude=handled, beta_exclude=beta_handled)

    # GetS -------------------------------------------------------------------------------------
    def schedule(self, cand: Candidate):
        """GetS: replay the sketch with ``cand``'s decisions, run the postprocessors (None if rejected).

        β's compute locations can leave a producer at a loop whose extent becomes dynamic under α's
        new tiles; then the locations fall back to α's own sampled ones, then to the root (always
        valid), and ``cand.extra`` records the locations that were used.
        """
        decisions: dict[int, Any] = {}
        if self.kind == "cpu" and cand.cfg is not None and cand.unroll is not None and self.unroll_values:
            # β's limit on α's tiles may unroll a body of gathers LLVM takes seconds to compile
            cand.unroll = bounded_unroll(self.alpha, cand.cfg, self.unroll_values, cand.unroll)
        if cand.cfg is not None:
            t = self.sketch.main_tiles
            for inst, f in zip(t.space + t.reduction, cand.cfg.decisions()):
                decisions[inst] = list(f)
        if cand.unroll is not None and self.unroll_inst is not None:
            decisions[self.unroll_inst] = cand.unroll
        for inst, d in zip(self.fetch_insts, cand.fetch):
            if d is not None:
                decisions[inst] = d
        locations = self.sub.locations()
        variants = [cand.extra,
                    {**cand.extra, **{k: self.sketch.decisions[k] for k in locations}},
                    {**cand.extra, **{k: -1 for k in locations}}]
        sketch, where = (self.sketch, None) if not cand.stage else self.siblings[cand.stage - 1]
        for extra in variants if locations else variants[:1]:
            merged = {**decisions, **extra}
            if where is not None:  # a sibling write stage: the same decisions at its instructions
                merged = {where[k]: v for k, v in merged.items() if k in where}
            sch = self._replay(sketch, merged)
            if sch is not None:
                cand.extra = extra
                return sch
        return None

    def _replay(self, sketch: "Sketch", decisions: dict[int, Any]):
        sch = sketch.applied(self.alpha_mod, decisions)
        if sch is None:  # a decision the schedule primitives refuse: no candidate
            return None
        sch.enter_postproc()
        for p in self.postprocs:
            if not p.apply(sch):
                return None
        return sch

    def _cand(self, cfg: TileConfig | None, unroll=None, fetch=None) -> Candidate:
        return Candidate(cfg, self.beta_unroll if unroll is None else unroll,
                     self.beta_fetch if fetch is None else fetch, self.sub.defaults())

    # Algorithm 1 -------------------------------------------------------------------------------
    def rounds(self) -> list[tuple[str, Callable[[Candidate], list[Candidate]]]]:
        """The measurement rounds after round T, each a function of the best candidate so far."""
        def m_round(best: Candidate) -> list[Candidate]:
            return [best.but(cfg=c) for c in self.space.m_round(best.cfg)]

        def unroll_round(best: Candidate) -> list[Candidate]:
            return [best.but(unroll=u) for u in self.space.unroll_round(best.cfg, self.unroll_values, best.unroll)]

        out = [("M", m_round), ("unroll", unroll_round)]
        for k, inst in enumerate(self.fetch_insts):
            def fetch_round(best: Candidate, k=k, inst=inst) -> list[Candidate]:
                lanes = [int(v) for v in self.sketch.insts[inst][2][0]]
                return [best.but(fetch=best.fetch[:k] + (o,) + best.fetch[k + 1:])
                        for o in self.space.vector_round(lanes, best.fetch[k], k)]
            out.append((f"vector[{k}]", fetch_round))
        return out

    def tune(self, measure: Callable[[list[Any]], list[float]], *, strategy: Strategy = DEFAULT_STRATEGY,
             ranker: "LearnedRanker | None" = None, top_k: int | None = DEFAULT_TOP_K,
             min_gain: float = MIN_GAIN, seeds: Sequence[TileConfig] = (), finalists: int = 0) -> ReuseResult:
        """Run Algorithm 1; ``measure(schedules)`` returns seconds per schedule (inf if it failed).
        ``finalists``: the candidates were screened; ``measure(schedules, precise=True)`` re-times
        that many of the best in full at the end (:func:`tuner.measure.finalists.settle`).

        ``"per-b"`` keeps the paper's structure: after round T every B value keeps its own best
        candidate through rounds M, unroll and vector; the best over all B is returned.
        ``"global"`` runs rounds M, unroll and vector once, from the best candidate of round T:
        fewer measurements (d_B + d_M + ... instead of d_B x (d_T + d_M + ...)) for a small risk.

        With a ``ranker`` each round is measured ``top_k`` at a time until a batch does not beat the best
        by ``min_gain`` (:func:`ranked_batches`), in the ranker's order if it knows α's shape
        (:meth:`~tuner.reuse.cost_model.LearnedRanker.knows`), else in a seeded random order it learns from.
        Without a ranker (or ``top_k=None``) every candidate is measured, as in the paper.

        Round T (:meth:`_round_t`) is led by β's kept tiles and ``seeds``, tile configurations from elsewhere
        (α's instant program, other operators', β's runner-ups). Round "stage" follows round T once
        (:meth:`_stage_round`); on CPU round "panel"
        (:mod:`tuner.reuse.panel`) follows round T once, from its best; a seed that is one of its
        configurations leads that round, not round T.
        """
        session = SearchSession(self, measure, ranker, top_k, min_gain, finalists)
        run = session.run
        if not self.has_mlt:  # section 5.2: β's decisions transferred, then sub-sketch rounds
            measured = run([self._cand(None)], "transfer")
        else:  # β's kept tiles and the seeds first (measured first, all of them), then round T's
            measured = self._round_t(run, seeds)
            if not measured:
                # no B/T in range is admissible for α: start from β's own shape scaled to α
                measured = run([self._cand(c) for c in self._fallback()], "fallback")
            measured += self._stage_round(run, measured)
            measured += self._panel_round(run, measured, seeds)
        best = best_after_rounds(run, measured, self.rounds() if self.has_mlt else [], strategy)
        return session.result(sub_sketch_rounds(run, self.sub, best))

    def _round_t(self, run: Callable[..., list[Candidate]], seeds: Sequence[TileConfig]) -> list[Candidate]:
        """Round T, led by β's kept tiles and their variants (:func:`tuner.reuse.leads.lead_tiles`: the
        inner tiles β's extents capped doubled, a native-width vector tile, register rows that
        collide in L1 cut to its ways), and ``seeds`` (:meth:`_lead`), all
        measured first. When a lead with inner tiles other than β's wins, round T's candidates take
        its inner tiles instead of β's (beyond the paper: a small bridge's inner tiles can be far from
        right for a large α, see :func:`eto.planning.lead_sources.runner_ups`).
        """
        kept = self.space.kept_lead()
        lead = self._lead(seeds)
        block = register_tiles(self.space)  # measured with an unroll limit that covers its block
        unroll = {block: covering_unroll(block, self.alpha.space, self.unroll_values)} if block else {}
        measured = run([self._cand(c, unroll=unroll.get(c)) for c in lead], "T", first=len(lead)) if lead else []
        won = min((c for c in measured if math.isfinite(c.latency)), key=lambda c: c.latency, default=None)
        # a lead with inner (register, vector) tiles other than β's won: round T takes them
        like = won.cfg if won is not None and won.cfg != kept else None
        t_round = [c for c in self.space.t_round(like=like) if c not in lead]
        measured += run([self._cand(c) for c in t_round], "T", won.latency if won is not None else math.inf)
        return measured

    def _lead(self, seeds: Sequence[TileConfig]) -> list[TileConfig]:
        """Round T's lead: β's kept tiles and their variants, then ``seeds``, each once, those α admits."""
        panels = set(self.space.panel_round())  # a seed that is one (α's instant program) leads that round
        lead: list[TileConfig] = []
        for c in [*lead_tiles(self.space), *seeds]:
            if c not in lead and c not in panels and self._fits(c):
                lead.append(c)
        return lead

    def _stage_round(self, run: Callable[..., list[Candidate]], measured: list[Candidate]) -> list[Candidate]:
        """Round "stage" once, from round T's best: the same decisions on α's sibling sketches, those
        that write the tile back at another level or not through a cache (:func:`write_stage_siblings`).
        Beyond the paper, which keeps β's sketch: where β's backend run put its write stage suits β's
        size, and every operator derived from it inherits it along chains (ResNet-50 at N = 100: all
        15 1x1 convolutions of one seed wrote through their bridge's cache). On that seed's 21
        reuses the round changed two results, 1.55x and 1.74x faster, for +9.5% time; on MobileNetV2's
        34 none, for +13% (README, "What a small source cannot teach")."""
        done = [c for c in measured if math.isfinite(c.latency)]
        if not done or not self.siblings:
            return []
        best_t = min(done, key=lambda c: c.latency)
        return run([best_t.but(stage=k) for k in range(1, len(self.siblings) + 1)], "stage", best_t.latency)

    def _panel_round(self, run: Callable[..., list[Candidate]], measured: list[Candidate],
                     seeds: Sequence[TileConfig]) -> list[Candidate]:
        """Round "panel" once, from round T's best (:mod:`tuner.reuse.panel`). Seeds that are panels (α's
        instant program) are measured first whatever their rank: a round that stops at its first
        batch without gain must not skip the program the database already serves."""
        done = [c for c in measured if math.isfinite(c.latency)]
        if not done:
            return []
        best_t = min(done, key=lambda c: c.latency)
        configs = [cfg for cfg in self.space.panel_round() if self._fits(cfg)]
        lead = blocked_lead(configs)  # then the blocked panel the ranker cannot know
        configs.sort(key=lambda cfg: (cfg not in seeds, cfg != lead))
        unrolls = [unroll_covering(cfg, self.unroll_values) for cfg in configs]
        cands = [best_t.but(cfg=cfg, unroll=best_t.unroll if u is None else u) for cfg, u in zip(configs, unrolls)]
        first = sum(cfg in seeds for cfg in configs) + (lead is not None and lead not in seeds)
        return run(cands, "panel", best_t.latency, first=first)

    def _fits(self, cfg: TileConfig) -> bool:
        """A configuration of α's loops (its factors multiply to α's extents) the target admits."""
        return (len(cfg.space) == len(self.alpha.space) and len(cfg.reduction) == len(self.alpha.reduction)
                and all(math.prod(f) == e for f, e in zip(cfg.space + cfg.reduction,
                                                            self.alpha.space + self.alpha.reduction))
                and self.space.valid(cfg))

    def _fallback(self) -> list[TileConfig]:
        """β's BShape clipped to α's extents, with the nearest admissible thread count."""
        bs = tuple(largest_divisor_at_most(e, b) for e, b in zip(self.alpha.space, self.beta_cfg.bshape))
        ls = self.space.lshape(bs)
        ts = achievable_products(bs, 1, math.prod(bs))
        want = self.beta_cfg.threads_per_block
        out = []
        for t in sorted(ts, key=lambda t: abs(math.log(t / max(want, 1))))[:3]:
            cfg = self.space.tshape(t, bs, ls)
            if cfg is not None and self.space.valid(cfg):
                out.append(cfg)
        return out

    def record_of(self, sch, seconds: float):
        """A measured candidate as a TuningRecord of α (its median run time)."""
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

        if not hasattr(self, "_workload"):  # one workload object: a database serialises it once
            self._workload = Workload(self.alpha_mod), ArgInfo.from_prim_func(self.alpha_mod["main"])
        wl, args = self._workload
        return TuningRecord(sch.trace, wl, [float(seconds)], self.target, args)


def reuse_tune(func: "PrimFunc", source_record: "TuningRecord", target: "Target", measurer: "Measurer",
               options: ReuseOptions | None = None, *, ranker: "LearnedRanker | None" = None,
               history: Sequence["TuningRecord"] = (), known: "Mapping[str, float] | None" = None,
               on_measured: "Callable[[list[TuningRecord], int, float], None] | None" = None,
               on_batch: "Callable[[], None] | None" = None,
               seeds: Sequence["TuningRecord"] = (), alternates: Sequence["TuningRecord"] = ()) -> ReuseResult:
    """Derive α's program (``func``) from β's best program (``source_record``) by Algorithm 1.

    ``options`` (:class:`~tuner.reuse.options.ReuseOptions`, default its defaults): the strategy, the
    ranked ``top_k`` per round, the finalists, the B/T/M ranges.
    Every candidate is built and timed by ``measurer``, screened, and the ``finalists`` best again
    in full (:mod:`tuner.measure.finalists`; 0: all in full); the result's record carries the median of the
    full repeats as its run time. ``ranker`` (shared across a run, so it keeps learning)
    is first trained on ``history`` (measured records, e.g. β's whole backend run); then each
    round measures its ``top_k`` best-ranked candidates at a time (:meth:`ReuseTuner.tune`; ``"auto"``:
    :func:`default_top_k`). Its
    seconds and trajectory count from before α's design space is generated, as a MetaSchedule
    run's do, and include training the ranker.

    Durability: ``on_measured(records, measured, seconds)`` gets each candidate as soon as it is
    timed (``[record]`` if it ran, else ``[]``; ``measured`` 1; the seconds since the last one, the
    first of a batch counting its builds: :class:`~tuner.reuse.session.SearchMeasure`), so a kill
    loses only the candidates being built or run (``on_batch()`` after each measured batch);
    ``known`` (:func:`trace_key` -> seconds, e.g. an interrupted run's candidates) are candidates
    timed before: the search takes their times instead of measuring them again, so a rerun
    continues where the interrupted run stopped. ``seeds``: α's own programs
    found elsewhere (its instant program): their tiles join round T's first batch. ``alternates``:
    best programs of other operators of α's type and sketch; their tiles kept on α's loops
    (:meth:`ReuseSpace.kept_tiles`) join round T's lead too, so a reuse does not hang on one
    source's luck (beyond the paper).
    """
    options = options or ReuseOptions()
    start, clock = time.perf_counter(), dict(measurer.clock)
    tuner = ReuseTuner(func, source_record, target, vector_lanes=options.vector_lanes, ranges=options.ranges)
    seed_cfgs = [cfg for cfg in (config_of(r, tuner) for r in seeds) if cfg is not None]
    seed_cfgs += [cfg for cfg in (_kept_from(r, tuner) for r in alternates) if cfg is not None]
    if ranker is not None and history:
        ranker.observe_records(history)
    setup = time.perf_counter() - start  # design space, β's sketch, ranker training: on the clock
    measure = SearchMeasure(tuner, measurer, target, screen=options.finalists > 0, known=known or {},
                            on_measured=on_measured, on_batch=on_batch)
    res = tuner.tune(measure, strategy=options.strategy, ranker=ranker, top_k=resolve_top_k(options.top_k, target),
                     seeds=seed_cfgs, finalists=options.finalists)
    build, run = (measurer.clock[k] - clock[k] for k in ("build_s", "run_s"))
    phases = {"setup_s": setup, "search_s": max(res.seconds - build - run, 0.0), "build_s": build, "run_s": run}
    # a finalist that passed its screening and failed in full counts as failed too
    return replace(res, seconds=setup + res.seconds, trajectory=tuple(p.after(setup, 0) for p in res.trajectory),
                   failed=res.failed + len(measure.finalists_failed),
                   failures=tuple(measure.failures + measure.finalists_failed),
                   phases=phases)


def write_stage_siblings(sketch: "Sketch", space: Sequence["Sketch"],
                         beta: "Sketch") -> list[tuple["Sketch", dict[int, int]]]:
    """The sketches of α's design space ``space`` that are ``sketch`` with another write stage
    (:attr:`~tuner.analysis.sketch.Sketch.stageless` equal, signature not), each with the map of ``sketch``'s
    decision instructions onto its own. MetaSchedule's CPU rules make three of one tiled block (no
    cache, a cache at tile level 1 or 2); its CUDA rules one. O(|space| x trace length)."""
    if not sketch.tiles:
        return []
    out, seen, want = [], {sketch.signature}, sketch.stageless  # each a hash over the trace: once
    for sk in space:
        if sk.signature in seen or sk.stageless != want:
            continue
        where = sketch.decision_map(sk)
        if where is not None:
            seen.add(sk.signature)
            out.append((sk.with_values_of(beta), where))
    return out


def _features(record: "TuningRecord", tuner: ReuseTuner) -> "tuple[TileConfig, LoopNest] | None":
    """``record``'s tile configuration and loop nest on α's loops (:func:`~tuner.analysis.features.align_loops`)
    when it is a multi-level tiling with α's tile levels, else None."""
    from tuner.analysis.features import align_loops, program_features
    from tuner.analysis.sketch import Sketch

    if not tuner.has_mlt:
        return None
    try:
        sketch = Sketch(record.trace)
        if not sketch.main_tiles:
            return None
        cfg, nest = program_features(record, tuner.kind, sketch=sketch)
        aligned = align_loops(nest, cfg, tuner.alpha)
    except (ValueError, KeyError, IndexError, AttributeError):
        return None
    if aligned is None:
        return None
    nest, cfg = aligned
    levels = [len(f) for f in tuner.beta_cfg.space + tuner.beta_cfg.reduction]
    if [len(f) for f in cfg.space + cfg.reduction] != levels:
        return None
    return cfg, nest


def config_of(record: "TuningRecord", tuner: ReuseTuner) -> TileConfig | None:
    """The tile configuration of α's program ``record`` (None: not a multi-level tiling of α's sketch)."""
    found = _features(record, tuner)
    return None if found is None else found[0]


def _kept_from(record: "TuningRecord", tuner: ReuseTuner) -> TileConfig | None:
    """Another operator's program's tile factors kept on α's loops (None: not α's tiling structure)."""
    found = _features(record, tuner)
    return None if found is None else replace(tuner.space, beta=found[1], beta_cfg=found[0]).kept_tiles()


def built_candidate(tuner: ReuseTuner, cand: Candidate) -> bool:
    cand.sch = tuner.schedule(cand)
    return cand.sch is not None
