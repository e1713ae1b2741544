"""A cheap analytic reuse-cost estimate: the selector's TVM-free stand-in for the trial estimator.

eto plans with the tuner's estimator (``tuner.reuse.estimate``, paper Section 6.1: the average number of
trials Algorithm 1 runs over sampled BShape/TShape/LShape sizes of the reused program); this
module needs only the two loop nests, so the selector, its tests and its benchmarks run without
TVM, and ``eto plan --cost analytic`` answers in milliseconds.  It follows the *shape* of
Algorithm 1's trial count:

    trials ≈ d_B · (d_T + d_M) + unroll options + vectorization options

where, with r1 = |𝕀(r𝓛_β)| / |𝕀(r𝓛_α)| and r2 = |𝕀(𝓛_α)| / |𝕀(𝓛_β)| (paper, eqs. 1-3):

* d_B: block counts B in the window spanned by B_β·r1 and B_β·r2 -- ``B_PER_OCTAVE`` values per
  factor of two of the window, at most the number of achievable block counts of α (distinct
  products of divisors of its space extents);
* d_T: thread counts in the window spanned by T_β and T_β·r2 (``T_PER_OCTAVE`` per octave, capped);
* d_M: LShapes (one reduction loop split, paper's GetLShape) whose M falls in the window spanned
  by M_β and M_β·r2, at most the number of such LShapes of α;

the densities come from the paper's Example 3 (7 block counts over a factor-4 window, 3 thread
counts over a factor-2 window).  The result is capped at the backend budget: a reuse pair that
costs as much as tuning from scratch is never worth selecting.  Identical loop nests cost
1·(1+1)+8 = 10 trials.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable

from selector.loopnest import LoopNestOp

__all__ = ["analytic_cost", "analytic_cost_fn", "B_PER_OCTAVE", "T_PER_OCTAVE"]

B_PER_OCTAVE = 3.5
T_PER_OCTAVE = 3.0
MAX_THREAD_CHOICES = 32
UNROLL_OPTIONS = 4        # auto-unroll values other than the reused program's (of 0,16,64,512,1024)
VECTOR_OPTIONS = 4        # vector lengths {2, 4} for float32 loads, for two inputs


def _divisors(n: int) -> list[int]:
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


@lru_cache(maxsize=65536)
def _block_counts(space: tuple[int, ...]) -> int:
    """Number of distinct products of divisors of the space extents (achievable B values)."""
    values = {1}
    for n in space:
        values = {v * d for v in values for d in _divisors(n)}
        if len(values) > 100_000:  # the count only caps d_B; never needed this large
            break
    return len(values)


@lru_cache(maxsize=65536)
def _lshapes(reduction: tuple[int, ...]) -> int:
    """LShapes with at most one reduction loop split (paper, GetLShape)."""
    return 1 + sum(len(_divisors(n)) - 1 for n in reduction)


def _in_window(per_octave: float, ratio: float) -> int:
    return 1 + int(per_octave * abs(math.log2(ratio)) + 1e-9)


def analytic_cost(alpha: LoopNestOp, beta: LoopNestOp, *, budget: float = 1000.0) -> float:
    """Estimated trials for the reuse-based tuner to tune ``alpha`` from ``beta``'s best program.

    Pure function of the two loop nests (and ``budget``, the cap).  O(1) after per-shape caching.
    See the module docstring for the model; eto swaps in the tuner's estimator.
    """
    r1 = beta.reduction_size / alpha.reduction_size
    r2 = alpha.size / beta.size
    d_b = min(_in_window(B_PER_OCTAVE, max(r1, r2) / min(r1, r2)), _block_counts(alpha.space))
    d_t = min(_in_window(T_PER_OCTAVE, r2), MAX_THREAD_CHOICES)
    d_m = min(_in_window(1.0, r2), _lshapes(alpha.reduction))
    trials = d_b * (d_t + d_m) + UNROLL_OPTIONS + VECTOR_OPTIONS
    return float(min(budget, trials))


def analytic_cost_fn(budget: float = 1000.0) -> Callable[[LoopNestOp, LoopNestOp], float]:
    """``cost_fn(alpha, beta)`` for :func:`selector.build_oc_graph` with the given cap."""

    def cost(alpha: LoopNestOp, beta: LoopNestOp) -> float:
        return analytic_cost(alpha, beta, budget=budget)

    cost.__name__ = f"analytic_cost_budget_{budget:g}"
    return cost
