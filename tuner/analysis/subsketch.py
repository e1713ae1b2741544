"""Other sketch types (paper section 5.2): the simplified Algorithm 1 for sub-sketches.

Sketches other than the multi-level tile one (the two-level tile with rfactor on CPU, the
cross-thread reduction and two-level tile on GPU, unrolled constant tensors) and the parts of
composite sketches outside the major loop nest (Winograd's data packing and inverse transform)
all partition loops by ``SamplePerfectTile`` and pick thread counts and unrolling by
``SampleCategorical``. They are tuned here one sub-sketch decision at a time, each a special
case of Algorithm 1's rounds:

* a tile decision of α's loop (extent E_α; β's factors f on extent E_β) keeps β's inner factors
  and takes its outer factor (blocks, parallel tasks or rfactor splits) from the window spanned
  by f_0 and f_0 · E_α / E_β, the one-loop form of equation 1; the default is the factor closest
  to f_0 scaled by the extent ratio;
* a categorical decision (e.g. cross-thread reduction threads) starts at β's choice and tries its
  neighbours (half and double the threads), the analogue of equation 2's thread range;
* unrolling tries the other options; compute locations are β's (the sketches are equal);
* a producer β does not have (the padding stage of a padded α reusing an unpadded β, e.g. a
  bridge) is *placed*: computed at the root first (always valid, no bounds checks in the main
  loop nest), then inlined and at α's own sampled loop, one round. Beyond the paper: measured on
  ResNet-50's 7x7 stem reused from an unpadded bridge, the inlined padding that α's design space
  happened to sample ran 5.4x slower than the root placement.

α's design space gives α's loop extents: its sampled tile decisions are perfect tilings of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from tuner.analysis.tiling import MAX_INNERMOST, divisors
from tuner.analysis.sketch import Sketch

SlotKind = Literal["tile", "categorical", "unroll", "location", "place"]
#: SampleComputeLocation's special values: at the root of the function, inlined into its consumer.
ROOT, INLINE = -1, -2


def scaled_tiles(alpha_extent: int, beta_factors: tuple[int, ...], *, limit: int = 6) -> list[tuple[int, ...]]:
    """Perfect tilings of ``alpha_extent`` following β's factors, the default (closest scaled) first.

    O(d(E_α) · levels). The outer factor ranges over divisors of E_α between f_0 and f_0 · r
    (r = E_α / E_β); the inner levels take, from the innermost out, the largest divisor of what is
    left that does not exceed β's factor at that level (innermost at most 64, MetaSchedule's bound).
    """
    n = len(beta_factors)
    ratio = alpha_extent / max(math.prod(beta_factors), 1)
    want = beta_factors[0] * ratio
    lo, hi = sorted((beta_factors[0], want))
    outer = [d for d in divisors(alpha_extent) if lo * (1 - 1e-9) <= d <= hi * (1 + 1e-9)]
    if not outer:  # the window holds no divisor: take the nearest one
        outer = [min(divisors(alpha_extent), key=lambda d: abs(math.log(d / want)))]
    out = []
    for d in sorted(outer, key=lambda d: (abs(math.log(d / want)), d)):
        rest, inner = alpha_extent // d, []
        for level in range(n - 1, 0, -1):
            cap = beta_factors[level] if level > 1 else rest  # level 1 takes what is left
            if level == n - 1:
                cap = min(cap, MAX_INNERMOST)
            f = max(x for x in divisors(rest) if x <= max(cap, 1))
            inner.append(f)
            rest //= f
        tiling = (d * rest,) + tuple(reversed(inner)) if n > 1 else (alpha_extent,)
        if n > 1 and tiling[-1] > MAX_INNERMOST:
            continue
        if tiling not in out:
            out.append(tiling)
        if len(out) >= limit:
            break
    return out


@dataclass(frozen=True)
class Slot:
    """One sub-sketch decision of α's sketch and where it comes from in β's."""

    inst: int
    kind: SlotKind
    block: str
    beta_decision: Any
    alpha_extent: int = 0  # tile slots
    n_options: int = 0  # categorical / unroll slots
    sampled: int | None = None  # place slots: α's own sampled location

    def default(self) -> Any:
        if self.kind == "tile":
            return list(scaled_tiles(self.alpha_extent, tuple(self.beta_decision), limit=1)[0])
        return self.beta_decision

    def alternatives(self, current: Any) -> list[Any]:
        """The values this slot's round measures besides ``current``."""
        if self.kind == "tile":
            return [list(t) for t in scaled_tiles(self.alpha_extent, tuple(self.beta_decision)) if list(t) != current]
        if self.kind == "categorical":
            return [i for i in (current - 1, current + 1) if 0 <= i < self.n_options]
        if self.kind == "unroll":
            return [i for i in range(self.n_options) if i != current]
        if self.kind == "place":
            return list(dict.fromkeys(v for v in (ROOT, INLINE, self.sampled) if v is not None and v != current))
        return []


class SubSketches:
    """The sub-sketch decisions of α's sketch (those Algorithm 1 does not set), mapped from β's."""

    def __init__(self, alpha: Sketch, beta: Sketch, *, exclude: frozenset[int] | set[int] = frozenset(),
                 beta_exclude: frozenset[int] | set[int] = frozenset()) -> None:
        """``exclude``/``beta_exclude``: the decisions Algorithm 1 sets (the main tiling), in α's and
        in β's sketch; they may differ in number when β's program has another rank (Sketch.family)."""
        a_slots = [i for i in alpha.decision_slots() if i not in exclude]
        b_slots = [j for j in beta.decision_slots() if j not in beta_exclude]
        if len(a_slots) != len(b_slots):
            raise ValueError("the two sketches have different decision structures")
        block_of = alpha.decision_blocks()
        self.slots: list[Slot] = []
        for i, j in zip(a_slots, b_slots):
            kind_name = alpha.insts[i][0]
            b_dec = beta.decisions.get(j)
            if kind_name == "SamplePerfectTile":
                self.slots.append(Slot(i, "tile", block_of.get(i, ""), tuple(int(x) for x in b_dec),
                                       alpha_extent=math.prod(int(x) for x in alpha.decisions[i])))
            elif kind_name == "SampleCategorical":
                kind: SlotKind = "unroll" if i in alpha.unroll_slots() else "categorical"
                self.slots.append(Slot(i, kind, block_of.get(i, ""), int(b_dec),
                                       n_options=len(alpha.insts[i][2][0])))
            elif kind_name == "SampleComputeLocation":
                self.slots.append(Slot(i, "location", block_of.get(i, ""), int(b_dec)))
        # padding-like producers are outside the signature; start from β's locations when the traces
        # align, and try the others after the main rounds: β placed them for β's shape (MobileNetV2's
        # depthwise convolutions pad at the root, which at V3's 7x7 and 14x14 ones cost as much as the
        # convolution; their programs with the padding inlined ran up to 2x faster)
        if [x[0] for x in alpha.insts] == [x[0] for x in beta.insts]:
            for i in sorted(alpha.tainted_decisions()):
                if alpha.insts[i][0] == "SampleComputeLocation" and i in beta.decisions:
                    self.slots.append(Slot(i, "place", block_of.get(i, ""), int(beta.decisions[i]),
                                           sampled=int(alpha.decisions[i]) if i in alpha.decisions else None))
        # producers β does not have: placed at the root first, then tried inlined and where α sampled
        placed = self.locations()
        for i in sorted(alpha.tainted_decisions()):
            if alpha.insts[i][0] == "SampleComputeLocation" and i not in placed and i in alpha.decisions:
                self.slots.append(Slot(i, "place", block_of.get(i, ""), ROOT, sampled=int(alpha.decisions[i])))

    def locations(self) -> set[int]:
        """The compute-location slots (β's or the root by default; GetS may fall back from them)."""
        return {s.inst for s in self.slots if s.kind in ("location", "place")}

    def defaults(self) -> dict[int, Any]:
        return {s.inst: s.default() for s in self.slots}

    def rounds(self) -> list[tuple[str, Slot]]:
        """One round per tunable slot, sub-sketch by sub-sketch (tiles, threads, then unrolling)."""
        order = {"place": -1, "tile": 0, "categorical": 1, "unroll": 2}
        tunable = [s for s in self.slots if s.kind in order]
        return [(f"{s.kind}[{s.block or s.inst}]", s) for s in sorted(tunable, key=lambda s: (order[s.kind], s.inst))]

    def count(self) -> int:
        """Candidates the rounds measure from the defaults (the estimator for these sketches)."""
        d = self.defaults()
        return sum(len(s.alternatives(d[s.inst])) for _, s in self.rounds())


__all__ = ["SubSketches", "Slot", "scaled_tiles"]
