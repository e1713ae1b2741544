"""Algorithm 1's search space for one reuse pair: the B/T/M windows and the Get*Shape choices.

Given α's and β's major loop nests and β's tile configuration, :class:`ReuseSpace` enumerates
what the reuse-based tuner (:mod:`tuner.reuse`) measures, round by round, without building or
measuring anything; the trial estimator (:mod:`tuner.estimate`) runs the same enumeration to
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

import math
from dataclasses import dataclass
from typing import Literal, Sequence

from .cost_model import bshape_cost, tshape_cost
from .features import Kind, LoopNest, TileConfig
from .tiling import (MAX_INNERMOST, achievable_products, divisors, factorizations, largest_divisor_at_most,
                     log_distance, split_inner)

Strategy = Literal["per-b", "global"]
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
        lo, hi = min(a, b), max(a, b)
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
            key = (cost, log_distance(shape, self.beta_cfg.bshape))  # ties: closest to β's BShape
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
            outer, inner = split_inner(bs // t, beta_inner[d] if d < len(beta_inner) else 1)
            if self.kind == "cuda":
                space.append((e // bs, 1, t, outer, inner))
            else:
                space.append((e // bs, t, outer, inner))
        red = []
        for r, (e, l) in enumerate(zip(self.alpha.reduction, lshape)):
            outer, inner = split_inner(e // l, beta_rinner[r] if r < len(beta_rinner) else 1)
            red.append((l, outer, inner) if self.kind == "cuda" else (l, outer * inner))
        if self.kind == "cpu":  # CPU reduction has two levels: (R0, R1); R1 must respect the bound
            red = [(l, c) if c <= MAX_INNERMOST else (l * (c // largest_divisor_at_most(c, MAX_INNERMOST)),
                                                      largest_divisor_at_most(c, MAX_INNERMOST))
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
