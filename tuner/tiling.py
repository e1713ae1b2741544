"""Integer tiling helpers: divisors and perfect tilings of loop extents.

MetaSchedule's ``SamplePerfectTile`` splits a loop of extent E into factors whose product is E,
the innermost at most :data:`MAX_INNERMOST`. The reuse search (:mod:`tuner.space`), the trial
estimator (:mod:`tuner.estimate`) and the sub-sketch rounds (:mod:`tuner.subsketch`) all enumerate
such tilings; they share these functions.
"""

from __future__ import annotations

import bisect
import math
import random
from functools import lru_cache
from typing import Sequence

MAX_INNERMOST = 64  # MetaSchedule's max_innermost_factor for SamplePerfectTile


@lru_cache(maxsize=None)
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n`` in increasing order; O(sqrt n), cached."""
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def factorizations(total: int, bounds: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """All (f_1..f_k) with f_i | bounds[i] and prod f_i == total (cached: the search asks often)."""
    return _factorizations(total, tuple(bounds))


@lru_cache(maxsize=1 << 16)
def _factorizations(total: int, bounds: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
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
    return tuple(out)


def achievable_products(bounds: Sequence[int], lo: float, hi: float) -> list[int]:
    """Products of one divisor per bound lying in [lo, hi]; O(log n) after the first call per bounds."""
    values = _products(tuple(bounds))
    return list(values[bisect.bisect_left(values, lo * (1 - 1e-9)):bisect.bisect_right(values, hi * (1 + 1e-9))])


@lru_cache(maxsize=1 << 16)
def _products(bounds: tuple[int, ...]) -> tuple[int, ...]:
    values = {1}
    for b in bounds:
        values = {v * d for v in values for d in divisors(b)}
    return tuple(sorted(values))


@lru_cache(maxsize=1 << 16)
def largest_divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of ``n`` not above ``cap`` (1 when ``cap`` < 1)."""
    return max(d for d in divisors(n) if d <= max(1, cap))


@lru_cache(maxsize=1 << 16)
def split_inner(extent: int, like: int) -> tuple[int, int]:
    """(outer, innermost) with innermost = the largest divisor of ``extent`` <= ``like`` and <= 64."""
    inner = largest_divisor_at_most(extent, min(like, MAX_INNERMOST))
    return extent // inner, inner


@lru_cache(maxsize=1 << 16)
def split_vector(extent: int, like: int, lanes: int) -> tuple[int, int]:
    """(outer, innermost) with innermost the divisor of ``extent`` that is a multiple of ``lanes``
    (and <= 64) nearest ``like`` in ratio; :func:`split_inner` when ``extent`` has none."""
    options = [d for d in divisors(extent) if d % lanes == 0 and d <= MAX_INNERMOST]
    if not options:
        return split_inner(extent, like)
    inner = min(options, key=lambda d: (abs(math.log(d / max(like, 1))), d))
    return extent // inner, inner


def log_distance(a: Sequence[int], b: Sequence[int]) -> float:
    """Sum of |log(a_i / b_i)|: how far apart two shapes are, scale-free."""
    return sum(abs(math.log(x / y)) for x, y in zip(a, b))


def random_tiling(extent: int, levels: int, rng: random.Random) -> tuple[int, ...]:
    """A uniformly drawn perfect tiling of ``extent`` into ``levels`` factors (innermost <= 64)."""
    while True:
        rest, out = extent, []
        for _ in range(levels - 1):
            f = rng.choice(divisors(rest))
            out.append(f)
            rest //= f
        out.append(rest)
        if out[-1] <= MAX_INNERMOST:
            return tuple(out)
