"""Integer tiling helpers: divisors and perfect tilings of loop extents, LShapes and reduction
tiles, and the vector accumulators a register block keeps.

MetaSchedule's ``SamplePerfectTile`` splits a loop of extent E into factors whose product is E,
the innermost at most :data:`MAX_INNERMOST`. The reuse search (:mod:`tuner.reuse.space`), the trial
estimator (:mod:`tuner.reuse.estimate`) and the sub-sketch rounds (:mod:`tuner.analysis.subsketch`) all enumerate
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
def split_vector(extent: int, like: int, lanes: int, *, wider: bool = True) -> tuple[int, int]:
    """(outer, innermost) with innermost the divisor of ``extent`` that is a multiple of ``lanes``
    (and <= 64) nearest ``like`` in ratio; :func:`split_inner` when ``extent`` has none.

    ``wider=False``: the widest such divisor not above ``like`` (or one vector), the narrowest where
    none is: a tile no wider than the one ``like`` came from. A program's register block was tuned at
    that width; one wider can fall off a cliff. ResNet-50's 1x1 convolution of 512 channels at 24x24,
    from MetaSchedule's program at 28x28 (innermost 14 columns): 24 columns, nearer 14 in ratio than
    8, ran 7.2x slower than 8 (2.47 against 0.34 ms; MetaSchedule's own program 0.40 ms; Zen 5)."""
    options = [d for d in divisors(extent) if d % lanes == 0 and d <= MAX_INNERMOST]
    if not options:
        return split_inner(extent, like)
    if wider:
        inner = min(options, key=lambda d: (abs(math.log(d / max(like, 1))), d))
    else:
        inner = max((d for d in options if d <= max(like, lanes)), default=min(options))
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


def vector_extent(space: Sequence[int], inner: Sequence[int]) -> int:
    """The fused vector MetaSchedule makes of a register block ``inner`` over loops of extents
    ``space``: the innermost tiles, from the last loop outwards, while each inner one covers its
    whole loop and the product stays within MAX_INNERMOST. O(loops)."""
    v = 1
    for d in reversed(range(len(space))):
        if v * inner[d] > MAX_INNERMOST:
            break
        v *= inner[d]
        if inner[d] != space[d]:
            break
    return max(v, 1)


def vector_loops(space: Sequence[int], inner: Sequence[int]) -> list[int]:
    """The loops the fused vector of the register block ``inner`` spans (:func:`vector_extent`),
    innermost first. O(loops)."""
    v, out, spanned = vector_extent(space, inner), [], 1
    for d in reversed(range(len(space))):
        if spanned >= v:
            break
        out.append(d)
        spanned *= inner[d]
    return out


def accumulators(space: Sequence[int], inner: Sequence[int], lanes: int) -> int:
    """Vector registers the register block ``inner`` over loops of extents ``space`` keeps as
    accumulators: its rows (all but the fused vector) times the vectors of one row. O(loops)."""
    v = vector_extent(space, inner)
    return math.prod(inner) // v * math.ceil(v / lanes)


@lru_cache(maxsize=1 << 12)
def lshapes(reduction: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """LShapes with at most one non-unit reduction loop (the paper's simplification), sorted."""
    n = len(reduction)
    out = {tuple(1 for _ in range(n))}
    for r, ext in enumerate(reduction):
        out.update(tuple(f if i == r else 1 for i in range(n)) for f in divisors(ext))
    return tuple(sorted(out))


@lru_cache(maxsize=1 << 12)
def reduction_options(kind: str, reduction: tuple[int, ...], inner_r: tuple[int, ...]) -> tuple:
    """Every LShape (sorted) with the reduction chunk of one fetch it gives (round M's options)."""
    return tuple((ls, tuple(math.prod(f[1:]) for f in reduction_tiles(kind, reduction, ls, inner_r)))
                 for ls in lshapes(reduction))


@lru_cache(maxsize=1 << 16)
def reduction_tiles(kind: str, reduction: tuple[int, ...], lshape: tuple[int, ...],
                     inner_r: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Reduction tile factors for an LShape; inner splits follow β's innermost factors."""
    red = []
    for r, (e, l) in enumerate(zip(reduction, lshape)):
        outer, inner = split_inner(e // l, inner_r[r] if r < len(inner_r) else 1)
        if kind == "cuda":
            red.append((l, outer, inner))
            continue
        c = outer * inner  # CPU reduction has two levels: (R0, R1); R1 must respect the bound
        if c > MAX_INNERMOST:
            d = largest_divisor_at_most(c, MAX_INNERMOST)
            l, c = l * (c // d), d
        red.append((l, c))
    return tuple(red)
