"""Bridge operators (paper, Definition 5) and their k-hop sets and closure.

When α and β have the same type and sketch set but neither loop nest dominates the other, they
cannot reuse each other.  Their *bridge* γ has the element-wise minimum loop nest
[min(|𝕀(ℓ_1)|, |𝕀(ℓ'_1)|), ..., min(|𝕀(ℓ_k)|, |𝕀(ℓ'_k)|)] and the same type and sketch set; γ is
dominated by both, so (α, γ), (γ, α), (β, γ), (γ, β) are all reuse pairs and α, β get an indirect
reuse path through γ.  Among all operators that could bridge α and β this is the one with the
smallest iteration space that stays closest to both (the paper's reasoning in Section 6.2).

k-hop sets: B_1 holds the bridges of pairs in the requested set A; B_k the bridges of pairs in
A ∪ B_1 ∪ ... ∪ B_{k-1} not already in that union.  The closure (``hops="all"``) is finite: every
bridge extent is one of the extents that already occur in its loop position.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Optional, Union

import numpy as np

from selector.loopnest import LoopNestOp
from selector.reuse_pairs import row_block, comparable_mask, dominates, group_by_class

__all__ = ["bridge_of", "bridge_operators", "bridge_name", "SketchCheck", "Hops"]

#: Caller-supplied feasibility test for a candidate bridge (e.g. "does the sketch still apply to
#: this shape").  Bridges it rejects are neither added nor used to generate further hops.
SketchCheck = Callable[[LoopNestOp], bool]
Hops = Union[int, Literal["all"]]


def bridge_of(alpha: LoopNestOp, beta: LoopNestOp) -> Optional[tuple[int, ...]]:
    """Loop nest of the bridge for (α, β), or None when Definition 5 does not apply.

    None when the two are in different reuse classes (type, sketch set, loop structure) or when
    they already satisfy the domination condition (the "bridge" would be one of them).
    """
    if alpha.reuse_class != beta.reuse_class:
        return None
    if dominates(alpha, beta) or dominates(beta, alpha):
        return None
    return tuple(min(x, y) for x, y in zip(alpha.extents, beta.extents))


def bridge_name(type_: str, extents: Sequence[int], sketch: Optional[str] = None) -> str:
    """Generated node name, e.g. ``bridge:C2D[1,64,14,14,64,1,1]`` (sketch added when needed)."""
    dims = ",".join(str(int(x)) for x in extents)
    tag = type_ if sketch is None else f"{type_}@{sketch}"
    return f"bridge:{tag}[{dims}]"


def _make(template: LoopNestOp, ext: tuple[int, ...], with_sketch: bool) -> LoopNestOp:
    ns = len(template.space)
    return LoopNestOp(
        name=bridge_name(template.type, ext, template.sketch if with_sketch else None),
        type=template.type,
        sketch=template.sketch,
        space=ext[:ns],
        reduction=ext[ns:],
        frequency=0,
        tuned=False,
        bridge=True,
        sketch_count=template.sketch_count,
    )


def _candidates(new: np.ndarray, pool: np.ndarray) -> set[tuple[int, ...]]:
    """Distinct element-wise minima over pairs (new[i], pool[j]) that violate domination."""
    found: set[tuple[int, ...]] = set()
    step = row_block(len(pool), pool.shape[1])
    for start in range(0, len(new), step):
        block = new[start:start + step]
        incomparable = ~comparable_mask(block, pool)
        if not incomparable.any():
            continue
        r, c = np.nonzero(incomparable)
        mins = np.minimum(block[r], pool[c])
        found.update(map(tuple, np.unique(mins, axis=0).tolist()))
    return found


def bridge_operators(
    ops: Iterable[LoopNestOp],
    hops: Hops = 1,
    sketch_check: Optional[SketchCheck] = None,
) -> list[LoopNestOp]:
    """Bridge operators B_1 ∪ ... ∪ B_hops of ``ops`` (``hops="all"``: the closure).

    Returns only new operators: a bridge whose (type, sketch, extents) equals an input operator's,
    or an earlier bridge's, is not repeated.  Bridges get ``frequency=0``, ``bridge=True`` and a
    generated name (:func:`bridge_name`; the sketch key is part of the name only when one operator
    type occurs with several sketch keys or loop structures).  Order: by hop, then reuse class,
    then extents.

    Pairs of two ``tuned`` operators (a prior database's) get no bridge: a database of P stored
    operators would otherwise add O(P²) bridges to every plan. A tuned operator and one to tune get a
    bridge only when no tuned operator is comparable with the latter (it is *stranded*): one that
    has a free source already reuses it in one step, where a path through a bridge takes two (the
    bridge's reuse, then its own). With five models' databases as priors this kept MobileNet v3's plan
    at 100 bridges (those among its own operators) and 6,264 candidate pairs instead of 228 and 19,006;
    the larger graph's plan used none of the extra bridges. Every bridge between operators to tune is kept.

    Complexity: each hop compares only pairs that involve at least one operator added by the
    previous hop (pairs of older operators produced their bridges already; the first hop's, an
    operator not tuned), vectorized per reuse class: O(Σ_hops |new| · |pool| · k) numpy work, plus
    one ``sketch_check`` call per distinct candidate.
    """
    if hops != "all" and (isinstance(hops, bool) or not isinstance(hops, int) or hops < 0):
        raise ValueError(f"hops must be a non-negative int or 'all', got {hops!r}")
    ops = list(ops)
    names = {op.name for op in ops}
    classes_per_type: dict[str, set] = defaultdict(set)
    for op in ops:
        classes_per_type[op.type].add(op.reuse_class)

    per_hop: dict[int, list[LoopNestOp]] = defaultdict(list)
    for cls, idx in sorted(group_by_class(ops).items(), key=lambda kv: tuple(map(str, kv[0]))):
        if len(idx) < 2:
            continue
        template = ops[idx[0]]
        with_sketch = len(classes_per_type[template.type]) > 1
        ext = np.array([ops[i].extents for i in idx], dtype=np.int64)
        known: set[tuple[int, ...]] = set(map(tuple, ext.tolist()))
        is_tuned = np.array([ops[i].tuned for i in idx], dtype=bool)
        stored, pool = ext[is_tuned], ext[~is_tuned]  # two tuned operators need no bridge between them
        new, hop = pool, 0
        while len(new) and (hops == "all" or hop < hops):
            hop += 1
            fresh = sorted((_candidates(new, pool) | _candidates(_stranded(new, stored), stored)) - known)
            known.update(fresh)
            accepted = []
            for ext in fresh:
                op = _make(template, ext, with_sketch)
                if sketch_check is None or sketch_check(op):
                    if op.name in names:
                        raise ValueError(f"generated bridge name {op.name!r} clashes with an operator name")
                    accepted.append(op)
            per_hop[hop].extend(accepted)
            new = np.array([op.extents for op in accepted], dtype=np.int64).reshape(-1, pool.shape[1])
            pool = np.concatenate([pool, new])
    return [op for h in sorted(per_hop) for op in per_hop[h]]


def _stranded(new: np.ndarray, stored: np.ndarray) -> np.ndarray:
    """The rows of ``new`` that no ``stored`` (tuned) loop nest is comparable with: operators with no free
    source to reuse directly, the only ones a bridge to a tuned operator can serve."""
    if not len(stored) or not len(new):
        return new[:0]
    step = row_block(len(stored), stored.shape[1])
    free = np.concatenate([comparable_mask(new[s:s + step], stored).any(axis=1) for s in range(0, len(new), step)])
    return new[~free]
