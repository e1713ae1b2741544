"""The reuse-based tuner (paper section 5, Algorithm 1): α's program from β's best one.

Given a reuse pair (α, β) and β's best program S*_β, it derives α's program by a hierarchical
search over B, T and M instead of sampling the whole space:

1. B ranges over the block counts α's loop nest admits in [B*r1, B*r2] (equation 1); for each
   B, :meth:`ReuseSpace.bshape` picks the BShape with the fewest cache-line requests and
   :meth:`ReuseSpace.lshape` the LShape (one non-unit loop) whose per-block memory is closest to β's;
2. threads per block range over [T_β, T_β·r2]/B (equation 2); :meth:`ReuseSpace.tshape` picks the
   TShape with the lowest thread-level cost; the candidates of all T are measured (round "T");
3. with the best BShape and TShape, LShapes whose M lies in [M_β, M_β·r2] (equation 3) are
   measured (round "M");
4. then the unroll options whose effect differs from the current one, then the cooperative-fetch
   vector lengths per input (GPU: 2, 4, 8 or 16-byte words), each round keeping the best;
5. decisions outside the major loop nest (composite sketches, other sketch types) are tuned last,
   sub-sketch by sub-sketch (:mod:`tuner.subsketch`, section 5.2).

The windows are the paper's (``ranges="paper"``, GPU) or widened as this CPU's section-3 evidence
says (``ranges="cpu"``, see :data:`RANGES`).

Candidates are built by :class:`tuner.sketch.Sketch` (β's sketch replayed on α with the new
decisions, GetS) and checked by the target's postprocessors (``VerifyGPUCode`` on CUDA); those
that fail verification are skipped, not measured. The enumeration does not measure anything, so
:mod:`tuner.estimate` reuses it to predict the number of measurements (section 6.1).

Rounds are batched across all B values (one build batch per round) — the same candidates
Algorithm 1 measures, built in parallel.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

from .btm import Kind, LoopNest, TileConfig, bshape_cost, tshape_cost

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target
    from tvm.tirx import PrimFunc

    from .measure import Measurer

Strategy = Literal["per-b", "global"]
RangeName = Literal["paper", "cpu"]
#: How far the B, T and M windows of equations 1-3 are widened (each side, a factor). "paper" is
#: the paper's (GPU) windows. "cpu" rests on experiments/reuse_pairs.py's section-3 analysis on this
#: CPU (30 conv2d pairs, 90%-near-best programs of a 64-trial MetaSchedule run): inside the paper's
#: windows 80% / 37% / 43% of pairs had one for B / T / M; widened x2 / x4 / x4 it is 93% / 93% / 70%.
RANGES: dict[str, tuple[float, float, float]] = {"paper": (1.0, 1.0, 1.0), "cpu": (2.0, 4.0, 4.0)}


def default_ranges(kind: Kind) -> RangeName:
    return "cpu" if kind == "cpu" else "paper"

MAX_INNERMOST = 64  # MetaSchedule's max_innermost_factor for SamplePerfectTile
GPU_MAX_THREADS = 1024
GPU_MIN_THREADS = 32  # MetaSchedule's thread_extent_low_inclusive
LINE_BYTES = {"cuda": 128, "cpu": 64}


# -- integer helpers ------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def factorizations(total: int, bounds: Sequence[int]) -> list[tuple[int, ...]]:
    """All (f_1..f_k) with f_i | bounds[i] and prod f_i == total."""
    out: list[tuple[int, ...]] = []

    def rec(i: int, rest: int, acc: tuple[int, ...]) -> None:
        if i == len(bounds):
            if rest == 1:
                out.append(acc)
            return
        for d in divisors(bounds[i]):
            if rest % d == 0:
                rec(i + 1, rest // d, acc + (d,))

    rec(0, total, ())
    return out


def achievable_products(bounds: Sequence[int], lo: float, hi: float) -> list[int]:
    """Products of one divisor per bound lying in [lo, hi]."""
    values = {1}
    for b in bounds:
        values = {v * d for v in values for d in divisors(b) if v * d <= hi * (1 + 1e-9)}
    return sorted(v for v in values if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9))


def _index_of(values: Sequence[Any], want: int) -> int | None:
    return next((i for i, v in enumerate(values) if int(v) == want), None)


def _log_distance(a: Sequence[int], b: Sequence[int]) -> float:
    return sum(abs(math.log(x / y)) for x, y in zip(a, b))


def _closed(a: float, b: float) -> tuple[float, float]:
    return (a, b) if a <= b else (b, a)


def _split_inner(extent: int, like: int) -> tuple[int, int]:
    """(outer, innermost) with innermost = the largest divisor of ``extent`` <= ``like`` and <= 64."""
    inner = max(d for d in divisors(extent) if d <= max(1, min(like, MAX_INNERMOST)))
    return extent // inner, inner


# -- the search space -------------------------------------------------------------------------------
@dataclass
class ReuseSpace:
    """Algorithm 1's enumeration for one reuse pair, without measuring anything."""

    kind: Kind
    alpha: LoopNest
    beta: LoopNest
    beta_cfg: TileConfig
    max_threads: int = GPU_MAX_THREADS
    max_shared_bytes: int = 48 * 1024
    vector_lanes: int = 8
    max_lshapes: int = 8
    ranges: RangeName = "paper"

    @property
    def r1(self) -> float:
        return math.prod(self.beta.reduction) / math.prod(self.alpha.reduction)

    @property
    def r2(self) -> float:
        return math.prod(self.alpha.extents) / math.prod(self.beta.extents)

    @property
    def beta_M(self) -> int:
        return self.beta_cfg.M(self.beta)

    # ranges (equations 1-3)
    def _window(self, a: float, b: float, which: int) -> tuple[float, float]:
        lo, hi = _closed(a, b)
        w = RANGES[self.ranges][which]
        return lo / w, hi * w

    def b_values(self) -> list[int]:
        lo, hi = self._window(self.beta_cfg.B * self.r1, self.beta_cfg.B * self.r2, 0)
        return achievable_products(self.alpha.space, lo, hi)

    def t_range(self) -> tuple[float, float]:
        return self._window(self.beta_cfg.T, self.beta_cfg.T * self.r2, 1)

    def m_range(self) -> tuple[float, float]:
        return self._window(self.beta_M, self.beta_M * self.r2, 2)

    # GetBShape, GetLShape, GetTShape
    def bshape(self, B: int) -> tuple[int, ...] | None:
        best, best_cost = None, math.inf
        for counts in factorizations(B, self.alpha.space):
            shape = tuple(e // c for e, c in zip(self.alpha.space, counts))
            cost = bshape_cost(self.alpha, shape, B, LINE_BYTES[self.kind])
            key = (cost, _log_distance(shape, self.beta_cfg.bshape))  # ties: closest to β's BShape
            if best is None or key < best_cost:
                best, best_cost = shape, key
        return best

    def lshapes(self) -> list[tuple[int, ...]]:
        """LShapes with at most one non-unit reduction loop (the paper's simplification)."""
        n = len(self.alpha.reduction)
        out = {tuple(1 for _ in range(n))}
        for r, ext in enumerate(self.alpha.reduction):
            out.update(tuple(f if i == r else 1 for i in range(n)) for f in divisors(ext))
        return sorted(out)

    def lshape(self, bshape: Sequence[int]) -> tuple[int, ...]:
        """GetLShape: the LShape whose per-block bytes are closest to β's."""
        target = self.beta_cfg.block_bytes(self.beta)
        return min(self.lshapes(), key=lambda ls: (abs(math.log(max(self._block_bytes(bshape, ls), 1)
                                                                 / max(target, 1))), -max(ls)))

    def _block_bytes(self, bshape: Sequence[int], lshape: Sequence[int]) -> int:
        chunk = tuple(e // l for e, l in zip(self.alpha.reduction, lshape))
        return sum(a.elements(tuple(bshape) + chunk) * a.dtype_bytes for a in self.alpha.inputs)

    def threads_per_block(self, B: int, bshape: Sequence[int]) -> list[int]:
        lo, hi = self.t_range()
        values = achievable_products(bshape, lo / B, hi / B)
        if self.kind == "cuda":
            values = [t for t in values if GPU_MIN_THREADS <= t <= self.max_threads] or \
                     [t for t in achievable_products(bshape, GPU_MIN_THREADS, self.max_threads)][:1]
        return values

    def config(self, bshape: Sequence[int], threads: Sequence[int], lshape: Sequence[int]) -> TileConfig:
        """A full tile configuration: inner splits follow β's innermost factors."""
        beta_inner = [f[-1] for f in self.beta_cfg.space]
        beta_rinner = [f[-1] for f in self.beta_cfg.reduction]
        space = []
        for d, (e, bs, t) in enumerate(zip(self.alpha.space, bshape, threads)):
            outer, inner = _split_inner(bs // t, beta_inner[d] if d < len(beta_inner) else 1)
            if self.kind == "cuda":
                space.append((e // bs, 1, t, outer, inner))
            else:
                space.append((e // bs, t, outer, inner))
        red = []
        for r, (e, l) in enumerate(zip(self.alpha.reduction, lshape)):
            outer, inner = _split_inner(e // l, beta_rinner[r] if r < len(beta_rinner) else 1)
            red.append((l, outer, inner) if self.kind == "cuda" else (l, outer * inner))
        if self.kind == "cpu":  # CPU reduction has two levels: (R0, R1); R1 must respect the bound
            red = [(l, c) if c <= MAX_INNERMOST else (l * (c // max(d for d in divisors(c) if d <= MAX_INNERMOST)),
                                                      max(d for d in divisors(c) if d <= MAX_INNERMOST))
                   for l, c in red]
        return TileConfig(self.kind, tuple(space), tuple(red))

    def tshape(self, t: int, bshape: Sequence[int], lshape: Sequence[int]) -> TileConfig | None:
        best, best_cost = None, math.inf
        for threads in factorizations(t, bshape):
            cfg = self.config(bshape, threads, lshape)
            cost = tshape_cost(self.alpha, cfg, lanes=self.vector_lanes)
            if cost < best_cost:
                best, best_cost = cfg, cost
        return best

    def valid(self, cfg: TileConfig) -> bool:
        if self.kind == "cuda":
            if not GPU_MIN_THREADS <= cfg.threads_per_block <= self.max_threads:
                return False
            if cfg.block_bytes(self.alpha) > self.max_shared_bytes:
                return False
        return True

    def t_round(self) -> list[TileConfig]:
        """Round T: for every B, the best TShape of every admissible thread count."""
        out = []
        for B in self.b_values():
            bs = self.bshape(B)
            if bs is None:
                continue
            ls = self.lshape(bs)
            for t in self.threads_per_block(B, bs):
                cfg = self.tshape(t, bs, ls)
                if cfg is not None and self.valid(cfg):
                    out.append(cfg)
        return out

    def unroll_round(self, cfg: TileConfig, options: Sequence[int], current: int | None) -> list[int]:
        """Indices of the unroll options whose effect differs from ``current``'s and from each other.

        An auto-unroll limit ``u`` unrolls a thread's loops up to ``u`` iterations, so all limits at or
        above the iterations one thread runs per fetch (its tile times the fetch's reduction chunk)
        unroll the same: Example 3 tries only {0, 16} of {0, 16, 64, 512, 1024} for that reason.
        """
        work = cfg.thread_work()

        def effect(i: int) -> int:
            return min(int(options[i]), work)

        seen = {effect(current)} if current is not None else set()
        out = []
        for i in range(len(options)):
            if effect(i) not in seen:
                seen.add(effect(i))
                out.append(i)
        return out

    def vector_round(self, lanes: Sequence[int], current: int | None, input_index: int) -> list[int]:
        """Indices of the cooperative-fetch vector lengths to try for one input (16-byte bound)."""
        width = self.alpha.inputs[input_index].dtype_bytes if input_index < len(self.alpha.inputs) else 4
        # global memory accesses are 1, 2, 4, 8 or 16-byte words
        return [i for i, n in enumerate(lanes) if i != current and n * width in (2, 4, 8, 16)]

    def m_round(self, best: TileConfig) -> list[TileConfig]:
        """Round M: other LShapes of ``best`` whose M lies in the equation-3 range."""
        lo, hi = self.m_range()
        threads = best.thread_counts
        options = []
        for ls in self.lshapes():
            if ls == best.lshape:
                continue
            cfg = self.config(best.bshape, threads, ls)
            m = cfg.M(self.alpha)
            if lo <= m <= hi and self.valid(cfg):
                options.append((abs(math.log(max(m, 1) / max(best.M(self.alpha), 1))), cfg))
        options.sort(key=lambda x: x[0])
        return [c for _, c in options[: self.max_lshapes]]


# -- tuning ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrajectoryPoint:
    seconds: float
    trial: int
    best_s: float


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


@dataclass
class _Cand:
    cfg: TileConfig | None  # None: the sketch has no multi-level tiling (section 5.2 only)
    unroll: int | None
    fetch: tuple[int, ...]
    extra: dict[int, Any] = field(default_factory=dict)  # sub-sketch decisions (tuner.subsketch)
    sch: Any = None
    latency: float = math.inf

    def but(self, **changes: Any) -> "_Cand":
        """A new, unmeasured candidate differing from this one in ``changes``."""
        return replace(self, sch=None, latency=math.inf, **changes)


class ReuseTuner:
    """Algorithm 1 on one reuse pair (α's function, β's best record, the target)."""

    def __init__(self, alpha_func: "PrimFunc", beta_record: "TuningRecord", target: "Target", *,
                 vector_lanes: int = 8, ranges: RangeName | None = None) -> None:
        from tvm.ir import IRModule
        from tvm.s_tir import meta_schedule as ms

        from .btm import loop_nest_of, program_features
        from .sketch import Sketch

        from .subsketch import SubSketches

        self.target = target
        self.kind: Kind = "cuda" if target.kind.name == "cuda" else "cpu"
        self.beta_sketch = Sketch(beta_record.trace)
        self.alpha_mod = IRModule({"main": alpha_func})
        self.ctx = ms.TuneContext(mod=self.alpha_mod, target=target, space_generator="post-order-apply",
                                  search_strategy="replay-trace", task_name="reuse", num_threads=1)
        want = self.beta_sketch.signature
        sketches = [Sketch(s.trace) for s in self.ctx.generate_design_space()]
        self.sketch = next((sk for sk in sketches if sk.signature == want), None)
        if self.sketch is None:
            raise ValueError("reuse condition 1 fails: the sketch of β's program is not in α's design space")
        self.sketch = self.sketch.with_values_of(self.beta_sketch)
        self.postprocs = list(self.ctx.space_generator.postprocs)
        self.has_mlt = bool(self.sketch.tiles)
        self.unroll_inst: int | None = None
        self.unroll_values: list[int] = []
        self.fetch_insts: tuple[int, ...] = ()
        self.beta_unroll, self.beta_fetch = None, ()
        self.alpha = self.beta = self.beta_cfg = self.space = None
        handled: set[int] = set()
        if self.has_mlt:
            t, bt = self.sketch.main_tiles, self.beta_sketch.main_tiles
            self.alpha = loop_nest_of(self.alpha_mod, t.block)
            self.beta_cfg, self.beta = program_features(beta_record, self.kind)
            attrs = target.attrs
            self.space = ReuseSpace(
                self.kind, self.alpha, self.beta, self.beta_cfg,
                max_threads=int(attrs.get("max_threads_per_block", GPU_MAX_THREADS)) if self.kind == "cuda" else 0,
                max_shared_bytes=int(attrs.get("max_shared_memory_per_block", 48 * 1024)) if self.kind == "cuda" else 0,
                vector_lanes=vector_lanes, ranges=ranges or default_ranges(self.kind),
            )
            self.unroll_inst = t.unroll
            self.unroll_values = [int(v) for v in self.sketch.insts[t.unroll][2][0]] if t.unroll is not None else []
            self.fetch_insts = t.fetch
            # GetS defaults (Algorithm 1 tunes these last): β's unroll, no vectorised cooperative fetch
            self.beta_unroll = self.beta_sketch.decisions.get(bt.unroll) if bt.unroll is not None else None
            self.beta_fetch = tuple(_index_of(self.sketch.insts[i][2][0], 1) for i in t.fetch)
            handled = set(t.space + t.reduction + t.fetch) | ({t.unroll} if t.unroll is not None else set())
        # everything else (composite parts, other sketch types) is tuned sub-sketch by sub-sketch
        self.sub = SubSketches(self.sketch, self.beta_sketch, exclude=handled)

    # GetS -------------------------------------------------------------------------------------
    def schedule(self, cand: _Cand):
        """GetS: replay the sketch with ``cand``'s decisions, run the postprocessors (None if rejected).

        β's compute locations can leave a producer at a loop whose extent becomes dynamic under α's
        new tiles; then the locations fall back to α's own sampled ones, then to the root (always
        valid), and ``cand.extra`` records the locations that were used.
        """
        decisions: dict[int, Any] = {}
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
        for extra in variants if locations else variants[:1]:
            sch = self._replay({**decisions, **extra})
            if sch is not None:
                cand.extra = extra
                return sch
        return None

    def _replay(self, decisions: dict[int, Any]):
        try:
            sch = self.sketch.apply(self.alpha_mod, decisions)
        except Exception:  # a decision the schedule primitives refuse
            return None
        sch.enter_postproc()
        for p in self.postprocs:
            if not p.apply(sch):
                return None
        return sch

    def _cand(self, cfg: TileConfig | None, unroll=None, fetch=None) -> _Cand:
        return _Cand(cfg, self.beta_unroll if unroll is None else unroll,
                     self.beta_fetch if fetch is None else fetch, self.sub.defaults())

    # Algorithm 1 -------------------------------------------------------------------------------
    def rounds(self) -> list[tuple[str, Callable[[_Cand], list[_Cand]]]]:
        """The measurement rounds after round T, each a function of the best candidate so far."""
        def m_round(best: _Cand) -> list[_Cand]:
            return [best.but(cfg=c) for c in self.space.m_round(best.cfg)]

        def unroll_round(best: _Cand) -> list[_Cand]:
            return [best.but(unroll=u) for u in self.space.unroll_round(best.cfg, self.unroll_values, best.unroll)]

        out = [("M", m_round), ("unroll", unroll_round)]
        for k, inst in enumerate(self.fetch_insts):
            def fetch_round(best: _Cand, k=k, inst=inst) -> list[_Cand]:
                lanes = [int(v) for v in self.sketch.insts[inst][2][0]]
                return [best.but(fetch=best.fetch[:k] + (o,) + best.fetch[k + 1:])
                        for o in self.space.vector_round(lanes, best.fetch[k], k)]
            out.append((f"vector[{k}]", fetch_round))
        return out

    def tune(self, measure: Callable[[list[Any]], list[float]], *, strategy: Strategy = "per-b") -> ReuseResult:
        """Run Algorithm 1; ``measure(schedules)`` returns seconds per schedule (inf if it failed).

        ``"per-b"`` keeps the paper's structure: after round T every B value keeps its own best
        candidate through rounds M, unroll and vector; the best over all B is returned.
        ``"global"`` runs rounds M, unroll and vector once, from the best candidate of round T:
        fewer measurements (d_B + d_M + ... instead of d_B x (d_T + d_M + ...)) for a small risk.
        """
        start = time.perf_counter()
        trials = invalid = failed = 0
        best_s = math.inf
        trajectory: list[TrajectoryPoint] = []
        rounds: dict[str, int] = {}
        seen: list[_Cand] = []

        def run(cands: list[_Cand], name: str) -> list[_Cand]:
            nonlocal trials, invalid, failed, best_s
            ok = []
            for c in cands:
                c.sch = self.schedule(c)
                if c.sch is None:
                    invalid += 1
                else:
                    ok.append(c)
            if not ok:
                return []
            lat = measure([c.sch for c in ok])
            for c, l in zip(ok, lat):
                c.latency = l
                trials += 1
                failed += math.isinf(l)
                best_s = min(best_s, l)
                trajectory.append(TrajectoryPoint(time.perf_counter() - start, trials, best_s))
            rounds[name] = rounds.get(name, 0) + len(ok)
            seen.extend(c for c in ok if math.isfinite(c.latency))
            return ok

        if not self.has_mlt:  # section 5.2: β's decisions transferred, then sub-sketch rounds
            measured = run([self._cand(None)], "transfer")
        else:
            measured = run([self._cand(c) for c in self.space.t_round()], "T")
        if not measured and self.has_mlt:
            # no B/T in range is admissible for α: start from β's own shape scaled to α
            measured = run([self._cand(c) for c in self._fallback()], "fallback")
        groups: dict[int, _Cand] = {}
        for c in measured:
            key = c.cfg.B if strategy == "per-b" and c.cfg is not None else 0
            if key not in groups or c.latency < groups[key].latency:
                groups[key] = c
        for name, make in (self.rounds() if self.has_mlt else []):
            batch, owner = [], []
            for key, best in groups.items():
                if math.isinf(best.latency):
                    continue
                new = make(best)
                batch += new
                owner += [key] * len(new)
            measured = run(batch, name)
            for c in measured:
                key = c.cfg.B if strategy == "per-b" and c.cfg is not None else 0
                if c.latency < groups[key].latency:
                    groups[key] = c
        best = min(groups.values(), key=lambda c: c.latency, default=None)
        for name, slot in self.sub.rounds():  # composite and other sketches: one sub-sketch at a time
            if best is None or math.isinf(best.latency):
                break
            cands = [best.but(extra={**best.extra, slot.inst: v}) for v in slot.alternatives(best.extra[slot.inst])]
            for c in run(cands, name):
                if c.latency < best.latency:
                    best = c
        record = None
        if best is not None and math.isfinite(best.latency):
            record = self._record(best)
        seen.sort(key=lambda c: c.latency)
        return ReuseResult(record, best.latency if best else math.inf, best.cfg if best else None, trials,
                           invalid, failed, time.perf_counter() - start, tuple(trajectory), rounds,
                           tuple((c.sch, c.latency) for c in seen))

    def _fallback(self) -> list[TileConfig]:
        """β's BShape clipped to α's extents, with the nearest admissible thread count."""
        bs = tuple(max(d for d in divisors(e) if d <= max(1, b)) for e, b in zip(self.alpha.space, self.beta_cfg.bshape))
        ls = self.space.lshape(bs)
        ts = achievable_products(bs, 1, math.prod(bs))
        want = self.beta_cfg.threads_per_block
        out = []
        for t in sorted(ts, key=lambda t: abs(math.log(t / max(want, 1))))[:3]:
            cfg = self.space.tshape(t, bs, ls)
            if cfg is not None and self.space.valid(cfg):
                out.append(cfg)
        return out

    def _record(self, cand: _Cand):
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

        return TuningRecord(cand.sch.trace, Workload(self.alpha_mod), [cand.latency], self.target,
                            ArgInfo.from_prim_func(self.alpha_mod["main"]))


def reuse_tune(func: "PrimFunc", source_record: "TuningRecord", target: "Target", measurer: "Measurer", *,
               vector_lanes: int = 8, strategy: Strategy = "per-b", ranges: RangeName | None = None) -> ReuseResult:
    """Derive α's program (``func``) from β's best program (``source_record``) by Algorithm 1.

    Every candidate is built and timed by ``measurer``; the result's record carries the median of
    the measured repeats as its run time.
    """
    tuner = ReuseTuner(func, source_record, target, vector_lanes=vector_lanes, ranges=ranges)

    def measure(schedules: list) -> list[float]:
        return [r.median for r in measurer.measure([s.mod for s in schedules], target)]

    return tuner.tune(measure, strategy=strategy)
