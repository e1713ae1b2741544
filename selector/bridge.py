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
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, Optional, Union

import numpy as np

from selector.loopnest import LoopNestOp
from selector.reuse_pairs import row_block, comparable_mask, dominates, group_by_class

__all__ = ["bridge_of", "bridge_operators", "bridge_name", "Admits", "SketchCheck", "Hops"]

#: Caller-supplied feasibility test for a candidate bridge (e.g. "does the sketch still apply to
#: this shape").  Bridges it rejects are neither added nor used to generate further hops.
SketchCheck = Callable[[LoopNestOp], bool]
Hops = Union[int, Literal["all"]]
#: ``admits(alpha, beta)``: whether the plan may tune α from β's program at all (a cheap test, before
#: any cost is estimated; eto's planner vetoes some comparable pairs). Default: every comparable pair.
Admits = Callable[[LoopNestOp, LoopNestOp], bool]


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
    admits: Optional[Admits] = None,
) -> list[LoopNestOp]:
    """Bridge operators B_1 ∪ ... ∪ B_hops of ``ops`` (``hops="all"``: the closure).

    Returns only new operators: a bridge whose (type, sketch, extents) equals an input operator's,
    or an earlier bridge's, is not repeated.  Bridges get ``frequency=0``, ``bridge=True`` and a
    generated name (:func:`bridge_name`; the sketch key is part of the name only when one operator
    type occurs with several sketch keys or loop structures).  Order: by hop, then reuse class,
    then extents.

    Pairs of two ``tuned`` operators (a prior database's) get no bridge: a database of P stored
    operators would otherwise add O(P²) bridges to every plan. Any other pair gets one only when one
    of its operators is *stranded*: no tuned operator is comparable with it and ``admits`` it as a
    source (the planner's vetoes: a 3x3 convolution is never tuned from a 1x1's program, say). One
    with a free source reuses it in one step; a path through a bridge takes two and pays for the
    bridge. Without priors every operator is stranded and every pair gets its bridge. With five
    models' databases as priors MobileNet v3's 53 operators all had a free source: no bridge (228
    with every pair's) and 606 candidate pairs instead of 6,264; ResNet-50's channels-last set kept
    13 of 49, the one its plan used among them (a 3x3 convolution the 1x1 priors cannot serve). On
    eight sets the plans cost what they cost with every bridge. Not exact: one bridge can serve two
    served operators more cheaply than their far priors (with a synthetic cost growing steeply with
    the distance, 7 of 200 random sets planned up to 9% dearer).

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
        if len(idx) > 1:
            with_sketch = len(classes_per_type[ops[idx[0]].type]) > 1
            for hop, made in _class_bridges([ops[i] for i in idx], hops, with_sketch, sketch_check, admits):
                clash = [op.name for op in made if op.name in names]
                if clash:
                    raise ValueError(f"generated bridge name {clash[0]!r} clashes with an operator name")
                per_hop[hop].extend(made)
    return [op for h in sorted(per_hop) for op in per_hop[h]]


def _class_bridges(members: list[LoopNestOp], hops: Hops, with_sketch: bool, sketch_check: Optional[SketchCheck],
                   admits: Optional[Admits]) -> Iterator[tuple[int, list[LoopNestOp]]]:
    """``(hop, bridges)`` of one reuse class's ``members``, hop by hop (:func:`bridge_operators`)."""
    template, depth = members[0], len(members[0].extents)
    known: set[tuple[int, ...]] = {op.extents for op in members}
    stored_ops = [op for op in members if op.tuned]  # two tuned operators need no bridge between them
    pool_ops = [op for op in members if not op.tuned]
    stored, pool = _extents(stored_ops, depth), _extents(pool_ops, depth)
    pool_served = _served(pool_ops, stored_ops, admits)
    new, new_served, hop = pool, pool_served, 0
    while len(new) and (hops == "all" or hop < hops):
        hop += 1
        # pairs with a stranded operator: a stranded new one with anything, a served one with a stranded one
        fresh = sorted((_candidates(new[~new_served], pool) | _candidates(new[new_served], pool[~pool_served])
                        | _candidates(new[~new_served], stored)) - known)
        known.update(fresh)
        accepted = [op for op in (_make(template, ext, with_sketch) for ext in fresh)
                    if sketch_check is None or sketch_check(op)]
        yield hop, accepted
        new, new_served = _extents(accepted, depth), _served(accepted, stored_ops, admits)
        pool, pool_served = np.concatenate([pool, new]), np.concatenate([pool_served, new_served])


def _extents(ops: Sequence[LoopNestOp], depth: int) -> np.ndarray:
    return np.array([op.extents for op in ops], dtype=np.int64).reshape(-1, depth)


def _served(rows: Sequence[LoopNestOp], stored: Sequence[LoopNestOp], admits: Optional[Admits]) -> np.ndarray:
    """Which ``rows`` have a free source: a ``stored`` (tuned) operator comparable with them that
    ``admits(row, source)`` lets them reuse. The others are *stranded*, the only ones a bridge can serve
    (all of them when nothing is stored). O(n · P · k) numpy work, plus ``admits`` calls for the
    comparable pairs of rows until one is admitted."""
    served = np.zeros(len(rows), dtype=bool)
    if not len(stored) or not len(rows):
        return served
    depth = len(rows[0].extents)
    ext, src = _extents(rows, depth), _extents(stored, depth)
    step = row_block(len(src), depth)
    for start in range(0, len(rows), step):
        mask = comparable_mask(ext[start:start + step], src)
        for i, row in enumerate(mask, start):
            served[i] = row.any() if admits is None else any(admits(rows[i], stored[j]) for j in np.flatnonzero(row))
    return served
