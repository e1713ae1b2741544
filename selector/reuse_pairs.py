"""Reuse conditions (paper, Definition 2) and reuse-pair enumeration.

An ordered pair (α, β) is a *reuse pair* -- α may be tuned by the reuse-based tuner starting from
β's best program -- when

1. τ_α = τ_β and 𝕂_α = 𝕂_β (same type and sketch set), and
2. 𝓛_α dominates 𝓛_β or is dominated by it: |𝕀(ℓ_i)| ≤ |𝕀(ℓ'_i)| for every loop i, or ≥ for
   every loop i.

Condition 2 is symmetric, so (α, β) is a reuse pair exactly when (β, α) is; the *cost* of the two
directions differs, which is why the OC graph keeps both edges.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Union

import numpy as np

from selector.loopnest import LoopNestOp

__all__ = ["dominates", "is_reuse_pair", "reuse_pairs", "reuse_pair_indices", "group_by_class", "nearest_sources",
           "comparable_mask"]

LoopNest = Union[LoopNestOp, Sequence[int]]

#: Upper bound on the elements of one broadcast block (rows × columns × loops) so that the
#: vectorized comparisons stay within a few tens of MB whatever the number of operators.
_BLOCK_ELEMENTS = 4_000_000


def _ext(x: LoopNest) -> tuple[int, ...]:
    return x.extents if isinstance(x, LoopNestOp) else tuple(int(v) for v in x)


def dominates(a: LoopNest, b: LoopNest) -> bool:
    """True if loop nest ``a`` dominates ``b``: same depth and every extent of ``a`` ≥ that of ``b``.

    Accepts operators or plain extent sequences.  A loop nest dominates itself.
    """
    ea, eb = _ext(a), _ext(b)
    return len(ea) == len(eb) and all(x >= y for x, y in zip(ea, eb))


def is_reuse_pair(alpha: LoopNestOp, beta: LoopNestOp) -> bool:
    """Definition 2: same type, sketch set and loop structure, and domination either way.

    The definition does not exclude α = β; :func:`reuse_pairs` does (an operator never reuses itself).
    """
    if alpha.reuse_class != beta.reuse_class:
        return False
    return dominates(alpha, beta) or dominates(beta, alpha)


def group_by_class(ops: Sequence[LoopNestOp]) -> dict[tuple, list[int]]:
    """Indices of ``ops`` grouped by reuse class (type, sketch, #space loops, #reduction loops)."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        groups[op.reuse_class].append(i)
    return dict(groups)


def comparable_mask(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``m[i, j]`` is True when loop nests ``rows[i]`` and ``cols[j]`` satisfy condition 2.

    Both arguments are int arrays of shape (n, k) and (m, k).  O(n·m·k) time and memory; callers
    block the rows to bound memory.
    """
    le = (rows[:, None, :] <= cols[None, :, :]).all(axis=2)
    ge = (rows[:, None, :] >= cols[None, :, :]).all(axis=2)
    return le | ge


def row_block(n_cols: int, depth: int) -> int:
    return max(1, _BLOCK_ELEMENTS // max(1, n_cols * depth))


def reuse_pair_indices(ops: Sequence[LoopNestOp]) -> np.ndarray:
    """All ordered reuse pairs as an int array of shape (m, 2): row ``(a, b)`` means ops[a] reuses ops[b].

    Vectorized per reuse class; O(Σ_c n_c² · k) time, memory bounded by blocking.  Pairs of
    distinct operators only (a ≠ b), sorted by (a, b).
    """
    out: list[np.ndarray] = []
    for idx in group_by_class(ops).values():
        if len(idx) < 2:
            continue
        ext = np.array([ops[i].extents for i in idx], dtype=np.int64)
        gidx = np.asarray(idx, dtype=np.int64)
        step = row_block(len(idx), ext.shape[1])
        for start in range(0, len(idx), step):
            block = comparable_mask(ext[start:start + step], ext)
            r, c = np.nonzero(block)
            r = r + start
            keep = r != c
            if keep.any():
                out.append(np.stack([gidx[r[keep]], gidx[c[keep]]], axis=1))
    if not out:
        return np.zeros((0, 2), dtype=np.int64)
    pairs = np.concatenate(out)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    return pairs[order]


def reuse_pairs(ops: Iterable[LoopNestOp]) -> list[tuple[LoopNestOp, LoopNestOp]]:
    """All ordered reuse pairs (α, β) with α ≠ β among ``ops`` (α reuses β's program).

    Both directions of every comparable pair are listed.  See :func:`reuse_pair_indices` for the
    array form and complexity.
    """
    ops = list(ops)
    return [(ops[a], ops[b]) for a, b in reuse_pair_indices(ops).tolist()]



def nearest_sources(ops: Sequence[LoopNestOp], sources: Sequence[LoopNestOp], k: int) -> list[LoopNestOp]:
    """The ``sources`` (a prior database's operators) among the ``k`` nearest to some operator of ``ops``
    still to tune, in its reuse class, nearest by the loop nests' log distance Σ |log(ℓ_i / ℓ'_i)|: a
    source is worth its bridges and edges only near something that may reuse it, and a database that
    grows with every model would otherwise add its whole size to every plan. O(n · P · k_loops) for n
    operators to tune and P sources, plus a sort of each class's sources per operator."""
    import math

    def logs(op: LoopNestOp) -> list[float]:
        return [math.log(max(1, x)) for x in op.extents]

    by_class: dict[tuple, list[int]] = defaultdict(list)
    for j, src in enumerate(sources):
        by_class[src.reuse_class].append(j)
    source_logs = [logs(src) for src in sources]
    wanted: set[int] = set()
    for op in ops:
        if op.tuned or op.reuse_class not in by_class:
            continue
        mine = logs(op)
        near = sorted(by_class[op.reuse_class], key=lambda j: sum(abs(a - b) for a, b in zip(mine, source_logs[j])))
        wanted.update(near[:k])
    return [src for j, src in enumerate(sources) if j in wanted]
