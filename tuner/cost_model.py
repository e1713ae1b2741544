"""Cost models that rank candidates before anything is measured (paper section 5.1).

Algorithm 1 picks one BShape per block count and one TShape per thread count without measuring:
GetBShape takes the BShape with the fewest cache-line requests (:func:`bshape_cost`), GetTShape
the TShape with the lowest thread-level cost (:func:`tshape_cost`). Both are analytic: they read
only the loop nest's access pattern (:class:`tuner.features.LoopNest`) and the tile factors.
"""

from __future__ import annotations

import math
from typing import Sequence

from .features import LoopNest, TileConfig

def bshape_cost(nest: LoopNest, bshape: Sequence[int], B: int, line_bytes: int) -> int:
    """BShape cost: cache-line requests of all blocks loading what they need from global memory."""
    tile = tuple(bshape) + nest.reduction
    return B * sum(a.cache_lines(tile, line_bytes) for a in nest.inputs)


def tshape_cost(nest: LoopNest, cfg: TileConfig, *, warp: int = 32, lanes: int = 8) -> float:
    """TShape cost.

    GPU: separate conflict-free shared-memory requests of all threads of a block per reduction
    step: each warp requests the elements its threads' tiles touch; a thread-contiguous walk with
    stride ``s`` in the shared tile conflicts ``gcd(s, 32)``-way.
    CPU: loads per multiply-add of the register tile (its input footprint over its volume), doubled
    when the vectorised innermost extent is not a multiple of the vector lanes, and penalised when
    the accumulators exceed the 16 vector registers.
    """
    step = tuple(1 for _ in nest.reduction)
    tile = cfg.thread_tile
    if cfg.kind == "cuda":
        t = cfg.threads_per_block
        warps = math.ceil(t / warp)
        cost = 0.0
        for a in nest.inputs:
            elems = a.elements(tuple(tile) + step)
            stride = abs(a.coeffs[-1][len(nest.space) - 1]) if a.coeffs else 1
            conflict = math.gcd(max(stride, 1), 32) if cfg.thread_counts[-1] > 1 else 1
            cost += warps * elems * conflict
        return cost * math.prod(cfg.vthreads)
    vol = math.prod(tile)
    loads = sum(a.elements(tuple(tile) + step) for a in nest.inputs)
    cost = loads / vol
    inner = cfg.space[-1][-1]
    if inner % lanes:
        cost *= 2
    if vol / lanes > 12:
        cost *= 1 + (vol / lanes - 12) / 12
    return cost
