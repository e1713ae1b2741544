"""Algorithm 1's search space for one reuse pair: the B/T/M windows and the Get*Shape choices.

Given α's and β's major loop nests and β's tile configuration, :class:`ReuseSpace` enumerates
what the reuse-based tuner (:mod:`tuner.reuse.search`) measures, round by round, without building or
measuring anything; the trial estimator (:mod:`tuner.reuse.estimate`) runs the same enumeration to
predict the tuner's cost, so the two cannot drift apart.

1. B ranges over the block counts α's loop nest admits in [B*r1, B*r2] (equation 1); for each
   B, :meth:`ReuseSpace.bshape` picks the BShape with the fewest cache-line requests and
   :meth:`ReuseSpace.lshape` the LShape (one non-unit loop) whose per-block memory is closest to β's;
2. threads per block range over [T_β, T_β·r2]/B (equation 2); :meth:`ReuseSpace.tshape` picks the
   TShape with the lowest thread-level cost (round "T");
3. with the best BShape and TShape, LShapes whose M lies in [M_β, M_β·r2] (equation 3) (round "M");
4. then the unroll options whose effect differs from the current one, then the cooperative-fetch
   vector lengths per input (GPU: 2, 4, 8 or 16-byte words).

The windows are the paper's (``ranges="paper"``, GPU) or widened as this CPU's section-3 evidence
says (``ranges="cpu"``, see :data:`RANGES`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, Sequence

from tuner.reuse.cost_model import bshape_cost, tshape_cost
from tuner.analysis.features import LoopNest, TileConfig, cached_property
from tuner.analysis.kinds import Kind
from tuner.analysis.host import cpu_cache_bytes, env_int, num_threads, vector_bits, vector_registers
from tuner.analysis.gathers import MAX_UNROLLED_GATHERS, unrolled_gathers
from tuner.reuse.panel import panel_configs
from tuner.analysis.tiling import (MAX_INNERMOST, accumulators, achievable_products, divisors, factorizations,
    largest_divisor_at_most, log_distance, lshapes, reduction_options, reduction_tiles, split_inner, split_vector)

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

Strategy = Literal["per-b", "global"]
#: Where :meth:`ReuseSpace.kept_tiles` puts a loop's growth: the outermost level, or (CPU) level 1.
Growth = Literal["outer", "parallel"]
#: The reuse tuner's strategy unless told otherwise, and so the trial estimator's: "global" runs the
#: rounds after T once, from round T's best; "per-b" (the paper's loop) once per block count.
DEFAULT_STRATEGY: Strategy = "global"
RangeName = Literal["paper", "cpu"]
#: How far the B, T and M windows of equations 1-3 are widened (each side, a factor). "paper" is
#: the paper's (GPU) windows. "cpu" rests on experiments/reuse_pairs.py's section-3 analysis on this
#: CPU (30 conv2d pairs, 90%-near-best programs of a 64-trial MetaSchedule run): inside the paper's
#: windows 80% / 37% / 43% of pairs had one for B / T / M; widened x2 / x4 / x4 it is 93% / 93% / 70%.
RANGES: dict[str, tuple[float, float, float]] = {"paper": (1.0, 1.0, 1.0), "cpu": (2.0, 4.0, 4.0)}


def default_ranges(kind: Kind) -> RangeName:
    """The windows a target kind gets unless told otherwise."""
    return "cpu" if kind == "cpu" else "paper"


GPU_MAX_THREADS = 1024
GPU_MIN_THREADS = 32  # MetaSchedule's thread_extent_low_inclusive
LINE_BYTES = {"cuda": 128, "cpu": 64}
DEFAULT_CACHE_BYTES = 1 << 20  # one core's private cache when sysfs does not say
CACHE_ENV = "ETO_CPU_CACHE_BYTES"


def target_limits(kind: Kind, target: "Target | None" = None) -> dict[str, int]:
    """The :class:`ReuseSpace` fields a target sets, from its TVM attributes: one place, so the
    reuse tuner and the plan's trial estimator enumerate the same space.

    CUDA: threads per block and shared memory per block. CPU: the cores (``num-cores``, else what
    the tuner's target gets, :func:`~tuner.analysis.host.num_threads`), one core's private cache:
    ``ETO_CPU_CACHE_BYTES`` if set (0: the paper's BShape cost), else this machine's L2 (sysfs),
    the fp32 lanes of its widest vector register and how many it has (RPC workers are of the same kind).
    """
    attrs = target.attrs if target is not None else {}
    if kind == "cuda":
        return {"max_threads": int(attrs.get("max_threads_per_block", GPU_MAX_THREADS)),
                "max_shared_bytes": int(attrs.get("max_shared_memory_per_block", 48 * 1024))}
    cores = int(attrs["num-cores"]) if "num-cores" in attrs else num_threads()
    cache = env_int(CACHE_ENV, "a size in bytes (0: the paper's BShape cost)")
    if cache is None:
        cache = cpu_cache_bytes(2) or DEFAULT_CACHE_BYTES
    return {"cores": cores, "cache_bytes": max(cache, 0), "native_lanes": vector_bits() // 32,
            "registers": vector_registers()}


@dataclass(frozen=True)
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
    #: CPU: the cores the parallel block loop is spread over and one core's private cache (0: the
    #: paper's BShape cost, all blocks' cache-line requests; see :func:`tuner.reuse.cost_model.bshape_cost`)
    cores: int = 1
    cache_bytes: int = 0
    #: CPU: fp32 lanes of the target's widest vector register, for :func:`tuner.reuse.leads.vector_tiles` (0: none)
    native_lanes: int = 0
    #: CPU: vector registers, the bound on a candidate's register block (:meth:`in_registers`; 0: none)
    registers: int = 0

    @property
    def r1(self) -> float:
        return math.prod(self.beta.reduction) / math.prod(self.alpha.reduction)

    @property
    def r2(self) -> float:
        return math.prod(self.alpha.extents) / math.prod(self.beta.extents)

    @cached_property
    def beta_M(self) -> int:
        return self.beta_cfg.M(self.beta)

    @cached_property
    def _beta_block_bytes(self) -> int:
        return self.beta_cfg.block_bytes(self.beta)

    # ranges (equations 1-3)
    def _window(self, a: float, b: float, which: int) -> tuple[float, float]:
        lo, hi = min(a, b), max(a, b)
        w = RANGES[self.ranges][which]
        return lo / w, hi * w

    def b_values(self) -> list[int]:
        lo, hi = self._window(self.beta_cfg.B * self.r1, self.beta_cfg.B * self.r2, 0)
        return achievable_products(self.alpha.space, lo, hi)

    def t_range(self) -> tuple[float, float]:
        return self._t_range

    @cached_property
    def _t_range(self) -> tuple[float, float]:  # asked once per block count
        return self._window(self.beta_cfg.T, self.beta_cfg.T * self.r2, 1)

    def m_range(self) -> tuple[float, float]:
        return self._window(self.beta_M, self.beta_M * self.r2, 2)

    # GetBShape, GetLShape, GetTShape
    def bshape(self, B: int) -> tuple[int, ...] | None:
        """GetBShape: the BShape with the fewest cache-line requests (ties: closest to β's)."""
        return _best_bshape(self.kind, self.alpha, B, self.beta_cfg.bshape, self.cores, self.cache_bytes)

    def lshape(self, bshape: Sequence[int]) -> tuple[int, ...]:
        """GetLShape: the LShape whose per-block bytes are closest to β's."""
        target = max(self._beta_block_bytes, 1)
        sizes, best = _lshapes_by_bytes(self.alpha, tuple(bshape))
        i = bisect.bisect_left(sizes, target)  # the closest sizes in log distance: the two around β's
        near = [j for j in (i - 1, i) if 0 <= j < len(sizes)]
        j = min(near, key=lambda j: (abs(math.log(max(sizes[j], 1) / target)), *best[j][:2]))
        return best[j][2]

    def _block_bytes(self, bshape: Sequence[int], lshape: Sequence[int]) -> int:
        return _block_bytes(self.alpha, tuple(bshape), tuple(lshape))

    def threads_per_block(self, B: int, bshape: Sequence[int]) -> list[int]:
        lo, hi = self.t_range()
        values = achievable_products(bshape, lo / B, hi / B)
        if self.kind == "cuda":
            values = [t for t in values if GPU_MIN_THREADS <= t <= self.max_threads] or \
                     [t for t in achievable_products(bshape, GPU_MIN_THREADS, self.max_threads)][:1]
        return values

    def config(self, bshape: Sequence[int], threads: Sequence[int], lshape: Sequence[int],
               like: TileConfig | None = None) -> TileConfig:
        """A full tile configuration: inner splits follow β's innermost factors, or ``like``'s."""
        inner = self._beta_inner if like is None else _inner_factors(like)
        return _tile_config(self.kind, self.alpha.space, self.alpha.reduction, tuple(bshape), tuple(threads),
                            tuple(lshape), inner, self.free_vector)

    def tshape(self, t: int, bshape: Sequence[int], lshape: Sequence[int],
               like: TileConfig | None = None) -> TileConfig | None:
        """GetTShape: of the ways to spread ``t`` threads over the BShape, the one with the lowest cost
        (inner splits following β's innermost factors, or ``like``'s)."""
        inner = self._beta_inner if like is None else _inner_factors(like)
        return _best_tshape(self.kind, self.alpha, t, tuple(bshape), tuple(lshape), inner,
                            self.vector_lanes, self.free_vector)

    def kept_tiles(self, *, growth: Growth = "outer", wider: bool = False) -> TileConfig:
        """β's tile factors on α's loops, changed only where α's extents force it: per loop, β's
        inner factors (innermost first) each shrunk to the largest divisor of what is left, the
        outermost factor takes the rest. β's register, vector and cache tiles stay as tuned; only
        the number of outer iterations (parallel blocks) follows the new shape; a vector tile β could
        not choose (:attr:`free_vector`) becomes a full one, no wider than β's (``wider``: the
        whole-vector width nearest β's, :func:`~tuner.analysis.tiling.split_vector`). Neither wins
        everywhere: ResNet-50's 1x1 convolutions at 24 columns from 28 ran 7.2x faster narrow, its 3x3
        ones up to 1.9x slower (Zen 5), so :mod:`eto.runs.instant` times both. O(loops x levels).

        ``growth="parallel"`` (CPU, beyond the paper): where α's loop has room for β's two outer
        factors, the outermost keeps β's and level 1 takes the rest. MetaSchedule's CPU programs fuse
        levels 0 and 1 of every space loop into one parallel loop, level 0 outermost, and each thread
        runs a contiguous range of it: growing level 0 re-partitions the threads' work along the
        grown loop, so each streams all of the other operand. Measured on instant programs
        (BERT-Base's 768x768 matmul at seq 160-384 from seq 128, ResNet-50's 1x1 convolutions of
        2048 channels at batch 4 and 16 from batch 1): 2.2-5x faster than ``"outer"``; elsewhere
        within -10% / +5% (README, "New shapes"), so :mod:`eto.runs.instant` times both.
        Computed once per growth (the enumeration and its estimate ask about ten times a pair).
        """
        cache = self.__dict__.setdefault("_kept", {})  # frozen: what cached_property does
        if (growth, wider) not in cache:
            cache[growth, wider] = self._kept_tiles(growth, wider)
        return cache[growth, wider]

    def _kept_tiles(self, growth: Growth, wider: bool) -> TileConfig:
        def keep(factors: Sequence[int], extent: int, lanes: int = 0) -> tuple[int, ...]:
            inner, rest = [], extent
            for i, f in enumerate(reversed(factors[1:])):
                vector = lanes and i == 0
                d = split_vector(rest, f, lanes, wider=wider)[1] if vector else largest_divisor_at_most(rest, f)
                inner.append(d)
                rest //= d
            return (rest, *reversed(inner))

        def in_level1(kept: tuple[int, ...], factors: Sequence[int]) -> tuple[int, ...]:
            rest = kept[0] * kept[1]  # what levels 0 and 1 share; level 0 keeps β's factor where it can
            if len(kept) < 3 or rest < factors[0] * factors[1]:
                return kept
            outer = largest_divisor_at_most(rest, factors[0])
            return (outer, rest // outer, *kept[2:])

        b, last = self.beta_cfg, len(self.alpha.space) - 1
        space = tuple(keep(f, e, self.free_vector if d == last else 0)
                      for d, (f, e) in enumerate(zip(b.space, self.alpha.space)))
        if growth == "parallel" and self.kind == "cpu":
            space = tuple(in_level1(k, f) for k, f in zip(space, b.space))
        return TileConfig(self.kind, space, tuple(keep(f, e) for f, e in zip(b.reduction, self.alpha.reduction)))

    def grown_tiles(self) -> TileConfig | None:
        """:meth:`kept_tiles` with each innermost space tile that β's extent capped doubled for α
        (None when no loop has one, or the result is not admissible).

        Beyond the paper, as :attr:`free_vector` is for the vectorised loop: where β's innermost tile
        took β's whole extent (a 7x7 bridge's 7 columns), β's tuning could not try a larger one,
        so the factor says nothing about an α with more room. The doubled factor is the largest
        divisor of (outer x inner) up to twice β's, the outer factor takes the rest. CPU only (on
        CUDA the inner levels are thread tiles; not measured there). O(loops x d).

        Measured on ResNet-50's 14x14 and 28x28 convolutions derived from a 7x7 bridge: the
        set's re-measured throughput against MetaSchedule went from 0.84 to 0.95 (seed 0,
        experiments/README.md, "A lead for inner tiles a small bridge could not try").
        """
        if self.kind != "cpu":
            return None
        kept = self.kept_tiles()
        space, grown = [], False
        for f, bf, be, ae in zip(kept.space, self.beta_cfg.space, self.beta.space, self.alpha.space):
            inner = f[-1]
            if len(f) > 1 and bf[-1] == be == inner and ae > be:
                room = f[0] * inner
                g = largest_divisor_at_most(room, min(2 * inner, MAX_INNERMOST))
                if g > inner:
                    f, grown = (room // g, *f[1:-1], g), True
            space.append(tuple(f))
        cfg = TileConfig(self.kind, tuple(space), kept.reduction)
        return cfg if grown and self.valid(cfg) else None

    def kept_lead(self) -> TileConfig | None:
        """:meth:`kept_tiles` when the target admits them (else None): round T's first lead, measured
        whatever its rank (beyond the paper: β's own tiles are often the best start when only a
        dimension's size changed). Round T itself is ranked, so a configuration of it is measured
        only if the ranker puts it in a measured batch: ResNet-50's 1x1 convolution of 2,048
        channels, reused from one of 1,024, never measured β's tiles, which round T held."""
        kept = self.kept_tiles()
        return kept if self.valid(kept) else None

    def kept_in_t_round(self) -> bool:
        """Whether round T (with β's inner tiles) holds :meth:`kept_tiles`: the tuner then measures
        them once, as the lead. O(one TShape)."""
        kept = self.kept_tiles()
        t = kept.threads_per_block
        return any(bs == kept.bshape and t in threads and self.tshape(t, bs, self.lshape(bs)) == kept
                   for bs, threads in self.t_groups())

    @cached_property
    def free_vector(self) -> int:
        """The vector lanes when β's vector tile was no choice of its tuning, else 0.

        On CPU the innermost tile of the last space loop is vectorised. When β's extent there is
        not a multiple of the lanes (a bridge's 7 columns, say), β's best program could not pick a
        full vector, so its innermost factor says nothing about α, whose extent is a multiple:
        α's inner split then takes the full-vector divisor nearest β's factor
        (:func:`~tuner.analysis.tiling.split_vector`). Beyond the paper; measured on ResNet-50's 1x1
        convolutions reused from a 7x7 bridge, whose inherited 7-wide tiles ran at 0.6 of
        MetaSchedule.
        """
        if self.kind != "cpu" or not self.alpha.space or not self.beta.space:
            return 0
        lanes = self.vector_lanes
        return lanes if self.beta.space[-1] % lanes and not self.alpha.space[-1] % lanes else 0

    @cached_property
    def _beta_inner(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """β's innermost tile factor per space loop and per reduction loop (inner splits follow them)."""
        return _inner_factors(self.beta_cfg)

    def valid(self, cfg: TileConfig) -> bool:
        return self._fits(cfg.threads_per_block, cfg.block_bytes(self.alpha)) and self.in_registers(cfg)

    def in_registers(self, cfg: TileConfig) -> bool:
        """CPU: whether ``cfg``'s register block keeps no more vector accumulators
        (:func:`~tuner.analysis.tiling.accumulators`) than the target has vector registers, or than β's kept block
        where that holds more (β's run chose it). A larger one spills every step and takes LLVM
        seconds to build: BERT-Base's root's runner-up tiles (64 accumulators) on its feed-forward
        matmuls built in 3.8 s and ran 12-15x slower than the best (README, "Register blocks bounded
        by the registers"). O(loops)."""
        if self.kind != "cpu" or self.registers <= 0:
            return True
        lanes, cap = self._register_bound
        return accumulators(self.alpha.space, [f[-1] for f in cfg.space], lanes) <= cap

    @cached_property
    def _register_bound(self) -> tuple[int, int]:
        lanes = self.native_lanes or self.vector_lanes
        kept = accumulators(self.alpha.space, [f[-1] for f in self.kept_tiles().space], lanes)
        return lanes, max(self.registers, kept)

    def _fits(self, threads_per_block: int, staged_bytes: int) -> bool:
        """The target's limits: on CUDA threads per block and shared memory; none on CPU."""
        return self.kind != "cuda" or (GPU_MIN_THREADS <= threads_per_block <= self.max_threads
                                       and staged_bytes <= self.max_shared_bytes)

    def t_round(self, like: TileConfig | None = None) -> list[TileConfig]:
        """Round T: for every B, the best TShape of every admissible thread count (inner tiles
        β's, or ``like``'s: a lead of the search that beat β's own tiles)."""
        slots = self.t_slots()
        lshape = {bs: self.lshape(bs) for bs, _ in slots}
        return [self.tshape(t, bs, lshape[bs], like) for bs, t in slots]  # type: ignore[misc]

    def t_slots(self) -> list[tuple[tuple[int, ...], int]]:
        """Round T before its LShapes and TShapes are chosen: (BShape, threads per block), in order."""
        return [(bs, t) for bs, threads in self.t_groups() for t in threads]

    def t_groups(self) -> list[tuple[tuple[int, ...], list[int]]]:
        """Round T's slots grouped by block count: (BShape, admissible threads per block), in order.

        Whether a slot is admissible does not depend on how its threads split over the BShape, so
        the trial estimator counts slots and picks shapes only for the candidates it follows
        further: O(d_B) cheap steps. On CUDA the staged bytes (BShape and LShape) must fit.
        """
        return self._t_groups

    @cached_property
    def _t_groups(self) -> list[tuple[tuple[int, ...], list[int]]]:
        out = []
        for B in self.b_values():
            bs = self.bshape(B)
            if bs is None:
                continue
            threads = self.threads_per_block(B, bs)
            if self.kind == "cuda":
                staged = self._block_bytes(bs, self.lshape(bs))
                threads = [t for t in threads if self._fits(t, staged)]
            if threads:
                out.append((bs, threads))
        return out

    def unroll_round(self, cfg: TileConfig, options: Sequence[int], current: int | None) -> list[int]:
        """Indices of the unroll options whose effect differs from ``current``'s and from each other.

        An auto-unroll limit ``u`` unrolls a thread's loops up to ``u`` iterations, so all limits at or
        above the iterations one thread runs per fetch (its tile times the fetch's reduction chunk)
        unroll the same: Example 3 tries only {0, 16} of {0, 16, 64, 512, 1024} for that reason.
        On CPU no limit that unrolls more gathered lanes than
        :data:`~tuner.analysis.gathers.MAX_UNROLLED_GATHERS` (slow to compile, slow to run).
        """
        work = cfg.thread_work()

        def effect(i: int) -> int:
            return min(int(options[i]), work)

        seen = {effect(current)} if current is not None else set()
        out = []
        for i in range(len(options)):
            if self.kind == "cpu" and unrolled_gathers(self.alpha, cfg, int(options[i])) > MAX_UNROLLED_GATHERS:
                continue
            if effect(i) not in seen:
                seen.add(effect(i))
                out.append(i)
        return out

    def vector_round(self, lanes: Sequence[int], current: int | None, input_index: int) -> list[int]:
        """Indices of the cooperative-fetch vector lengths to try for one input (16-byte bound)."""
        width = self.alpha.inputs[input_index].dtype_bytes if input_index < len(self.alpha.inputs) else 4
        # global memory accesses are 1, 2, 4, 8 or 16-byte words
        return [i for i, n in enumerate(lanes) if i != current and n * width in (2, 4, 8, 16)]

    def panel_round(self) -> list[TileConfig]:
        """Round "panel" (CPU, beyond the paper): :func:`tuner.reuse.panel.panel_configs` for α."""
        return list(self._panels)

    @cached_property
    def _panels(self) -> tuple[TileConfig, ...]:
        # once per space: the tuner reads it for round T's lead and for the round, the instant program too
        return panel_configs(self.kind, self.alpha, self.kept_tiles(), self.vector_lanes, self.cache_bytes,
                            self.native_lanes)

    def m_round(self, best: TileConfig) -> list[TileConfig]:
        """Round M: other LShapes of ``best`` whose M lies in the equation-3 range, ``best``'s inner
        (register and vector) tiles kept: round T's winner may be a lead with tiles other than β's."""
        return [self.config(best.bshape, best.thread_counts, ls, like=best) for ls in self.m_lshapes(best)]

    def m_lshapes(self, best: TileConfig) -> list[tuple[int, ...]]:
        """Round M's LShapes, closest M first (the estimator counts them without building configs)."""
        lo, hi = self.m_range()
        best_m = max(best.M(self.alpha), 1)
        B, bshape, threads = best.B, best.bshape, best.threads_per_block
        options = []
        for ls, chunk in reduction_options(self.kind, self.alpha.reduction, self._beta_inner[1]):
            staged = self.alpha.staged_bytes(bshape + chunk)
            m = B * staged
            if ls != best.lshape and lo <= m <= hi and self._fits(threads, staged):
                options.append((abs(math.log(max(m, 1) / best_m)), ls))
        options.sort(key=lambda x: x[0])
        return [ls for _, ls in options[: self.max_lshapes]]


def _inner_factors(cfg: TileConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The innermost tile factor per space loop and per reduction loop of ``cfg``."""
    return tuple(f[-1] for f in cfg.space), tuple(f[-1] for f in cfg.reduction)


# -- the Get*Shape choices, as pure functions of their inputs: cached, because the estimator asks
# -- for the same shapes for every sampled β program and every pair sharing an α
def _best_bshape(kind: Kind, alpha: LoopNest, B: int, beta_bshape: tuple[int, ...], cores: int = 1,
                 cache_bytes: int = 0) -> tuple[int, ...] | None:
    """Fewest cache-line requests; ties go to the BShape closest to β's, then to the first one."""
    ties = _cheapest_bshapes(kind, alpha, B, cores, cache_bytes)
    if not ties:
        return None
    return ties[0] if len(ties) == 1 else min(ties, key=lambda shape: log_distance(shape, beta_bshape))


@lru_cache(maxsize=1 << 16)
def _cheapest_bshapes(kind: Kind, alpha: LoopNest, B: int, cores: int = 1,
                      cache_bytes: int = 0) -> tuple[tuple[int, ...], ...]:
    """The BShapes of ``B`` blocks with the fewest cache-line requests, in enumeration order."""
    options = []
    for counts in factorizations(B, alpha.space):
        shape = tuple(e // c for e, c in zip(alpha.space, counts))
        options.append((bshape_cost(alpha, shape, B, LINE_BYTES[kind], cores=cores, cache_bytes=cache_bytes), shape))
    low = min((cost for cost, _ in options), default=None)
    return tuple(shape for cost, shape in options if cost == low)


@lru_cache(maxsize=1 << 18)
def _tile_config(kind: Kind, space: tuple[int, ...], reduction: tuple[int, ...], bshape: tuple[int, ...],
                 threads: tuple[int, ...], lshape: tuple[int, ...],
                 beta_inner: tuple[tuple[int, ...], tuple[int, ...]], free_vector: int = 0) -> TileConfig:
    inner_s, inner_r = beta_inner
    tiles = []
    for d, (e, bs, t) in enumerate(zip(space, bshape, threads)):
        like = inner_s[d] if d < len(inner_s) else 1
        if free_vector and d == len(space) - 1:
            outer, inner = split_vector(bs // t, like, free_vector)
        else:
            outer, inner = split_inner(bs // t, like)
        tiles.append((e // bs, 1, t, outer, inner) if kind == "cuda" else (e // bs, t, outer, inner))
    red = reduction_tiles(kind, reduction, lshape, inner_r)
    return TileConfig(kind, tuple(tiles), red)


@lru_cache(maxsize=1 << 16)
def _best_tshape(kind: Kind, alpha: LoopNest, t: int, bshape: tuple[int, ...], lshape: tuple[int, ...],
                 beta_inner: tuple[tuple[int, ...], tuple[int, ...]], lanes: int, free_vector: int = 0
                 ) -> TileConfig | None:
    best, best_cost = None, math.inf
    for threads in factorizations(t, bshape):
        cfg = _tile_config(kind, alpha.space, alpha.reduction, bshape, threads, lshape, beta_inner, free_vector)
        cost = tshape_cost(alpha, cfg, lanes=lanes)
        if cost < best_cost:
            best, best_cost = cfg, cost
    return best


def _block_bytes(alpha: LoopNest, bshape: tuple[int, ...], lshape: tuple[int, ...]) -> int:
    return alpha.staged_bytes(bshape + tuple(e // l for e, l in zip(alpha.reduction, lshape)))


@lru_cache(maxsize=1 << 16)
def _lshapes_by_bytes(alpha: LoopNest, bshape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple]:
    """The distinct bytes one block stages per fetch over all LShapes (sorted), and for each the
    LShape GetLShape prefers among those staging it: the largest loop, then the first (as sorted)."""
    best: dict[int, tuple[int, int, tuple[int, ...]]] = {}
    for pos, ls in enumerate(lshapes(alpha.reduction)):
        key = (-max(ls), pos, ls)
        size = _block_bytes(alpha, bshape, ls)
        if size not in best or key < best[size]:
            best[size] = key
    sizes = tuple(sorted(best))
    return sizes, tuple(best[s] for s in sizes)
