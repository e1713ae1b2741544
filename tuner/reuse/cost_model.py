"""Cost models that rank candidates before anything is measured (paper section 5.1, and beyond).

Algorithm 1 picks one BShape per block count and one TShape per thread count without measuring:
GetBShape takes the BShape with the fewest cache-line requests (:func:`bshape_cost`), GetTShape
the TShape with the lowest thread-level cost (:func:`tshape_cost`). Both are analytic: they read
only the loop nest's access pattern (:class:`tuner.analysis.features.LoopNest`) and the tile factors.
:class:`LearnedRanker` goes beyond the paper: a model learned from measured programs ranks whole
candidates, so the reuse tuner measures a ranked few per round instead of all of them.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from tuner.analysis.features import LoopNest, TileConfig, major_extents
from tuner.analysis.intrinsics import register_tensor_intrinsics
from tuner.tvm_errors import TVM_ERRORS

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target


def bshape_cost(nest: LoopNest, bshape: Sequence[int], B: int, line_bytes: int, *, cores: int = 1,
                cache_bytes: int = 0) -> int:
    """BShape cost: cache-line requests of all blocks loading what they need from global memory.

    That is the paper's (GPU: blocks share nothing but L2). With ``cache_bytes`` (CPU, beyond the
    paper) it is the requests one core sends past its private cache: the parallel loop over the
    blocks is cut into one contiguous chunk per core (:func:`core_region`); an input whose part in
    the chunk fits the cache (smallest first) is loaded once, any other once per block. The paper's
    count prefers square blocks; on a CPU they can be the slow choice. BERT-Base's feed-forward
    matmul [128 x 768] x [768 x 3072] tuned from a bridge came out at 8.7-8.9 ms when its blocks
    split the 128 rows (each core then streams all 9.4 MB of weights) and at 5.3-6.2 ms when they
    kept the rows whole (each core streams half); the 393 KB activations fit either way.
    O(inputs x dims).
    """
    tile = tuple(bshape) + nest.reduction
    if not cache_bytes:
        return B * sum(a.cache_lines(tile, line_bytes) for a in nest.inputs)
    counts = tuple(e // b for e, b in zip(nest.space, bshape))
    region = core_region(counts, tuple(bshape), cores) + nest.reduction
    blocks = math.prod(r // b for r, b in zip(region, bshape))
    left, cost = cache_bytes, 0
    for size, a in sorted(((a.elements(region) * a.dtype_bytes, a) for a in nest.inputs), key=lambda x: x[0]):
        if size <= left:
            left -= size
            cost += a.cache_lines(region, line_bytes)
        else:
            cost += blocks * a.cache_lines(tile, line_bytes)
    return cost


def core_region(counts: Sequence[int], bshape: Sequence[int], cores: int) -> tuple[int, ...]:
    """The space one core covers when the blocks' loop (``counts`` per loop, row-major, fused and
    parallel as MetaSchedule's CPU rules make it) is cut into ``cores`` contiguous chunks.

    A chunk of n = ceil(B / cores) blocks covers whole inner loops while their product fits in n,
    then ceil(n / that product) iterations of the next loop: the box of the first chunk, exact when
    the chunk is a box, else a box holding at least n blocks. O(loops).
    """
    n = math.ceil(math.prod(counts) / max(cores, 1))
    k, inner = [1] * len(counts), 1
    for d in reversed(range(len(counts))):
        if inner * counts[d] <= n:
            k[d], inner = counts[d], inner * counts[d]
        else:
            k[d] = math.ceil(n / inner)
            break
    return tuple(c * b for c, b in zip(k, bshape))


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


class LearnedRanker:
    """Ranks α's candidates before any is built: MetaSchedule's XGBoost model on per-store features.

    Beyond the paper (section 5.1 ranks B and T shapes analytically, then measures every survivor):
    the model learns from every program the database has measured on the target — β's whole
    backend run, other operators of the kind, earlier reuses — and from each candidate measured
    during this run, so the reuse tuner measures only the most promising few of each round. Scores
    are throughput relative to the best program of the same workload (MetaSchedule's grouping), so
    programs of other shapes train it without being compared to α's in seconds.

    ``min_samples``: below this many training programs the model is not trusted (``rank`` returns
    None). ``reach`` and ``near_samples``: the model ranks a workload only once it was trained on
    ``near_samples`` programs of workloads whose every loop is within ``reach`` x the workload's
    (:meth:`knows`); otherwise the reuse tuner samples the round at random instead
    (:class:`tuner.reuse.search.ReuseTuner`).
    """

    MIN_SAMPLES = 32
    #: Per-store features carry absolute sizes, which do not carry over to other shapes. Trained on
    #: a 2 MFLOP bridge's 200 programs, the model ranked BERT-Base's 288x larger feed-forward matmul
    #: BMM[1,128,768,3072] worse than chance (``experiments/ranker_reach.py``, README "Ranked
    #: rounds"); trained on those and 17 programs of BMM[1,128,3072,768] (the same size, N and K
    #: 4x apart) it still led that matmul's reuse to 10.1-10.3 ms against 2.9-3.0 ms for the other.
    #: So: every loop within 2x.
    REACH = 2.0
    NEAR_SAMPLES = 8

    def __init__(self, target: "Target", *, min_samples: int = MIN_SAMPLES, reach: float = REACH,
                 near_samples: int = NEAR_SAMPLES) -> None:
        self.target = target
        self.min_samples = min_samples
        self.reach = reach
        self.near_samples = near_samples
        self._trained_on: dict[str, list] = {}  # workload hash -> [major loop extents or None, programs]
        self._model = None
        self._lock = threading.RLock()  # scale-out tunes subtrees in threads that share one ranker
        self._contexts: dict[Any, Any] = {}
        self._seen: set[Any] = set()  # (workload hash, trace text) already trained on

    @property
    def samples(self) -> int:
        return self._model.data_size if self._model is not None else 0

    @property
    def trained(self) -> bool:
        return self._model is not None and self._model.booster is not None and self.samples >= self.min_samples

    def _ensure_model(self):
        if self._model is None:
            from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig, XGBModel

            # one XGBoost thread: on 2 cores busy with builds, two threads train 4-5x slower; the
            # short patience (10 rounds) keeps a retrain near a second on a few hundred programs
            self._model = XGBModel(num_warmup_samples=self.min_samples, config=XGBConfig(nthread=1),
                                   early_stopping_rounds=10, verbose_eval=0, adaptive_training=True)
        return self._model

    def _context(self, mod: "IRModule", *, key: str | None = None):
        """The workload's tuning context (``key``: its structural hash, when the caller has it)."""
        from tvm.s_tir import meta_schedule as ms
        from tvm.s_tir.meta_schedule.utils import shash2hex

        key = key or shash2hex(mod)
        if key not in self._contexts:
            register_tensor_intrinsics(self.target)
            self._contexts[key] = ms.TuneContext(mod=mod, target=self.target, num_threads=1)
            self._trained_on.setdefault(key, [major_extents(mod), 0])
        return self._contexts[key]

    def knows(self, mod: "IRModule") -> bool:
        """Whether the model is trained and has seen ``near_samples`` programs of workloads whose
        major loop nest has ``mod``'s loops, each within ``reach`` x: only then is its order worth
        following. A workload whose loop nest cannot be read is trusted as before. O(workloads seen)."""
        if not self.trained:
            return False
        mine = major_extents(mod)
        if mine is None:
            return True

        def near(other) -> bool:
            return other is not None and len(other) == len(mine) and all(
                max(a, b) <= self.reach * min(a, b) for a, b in zip(other, mine))

        with self._lock:
            seen = sum(n for extents, n in self._trained_on.values() if near(extents))
        return seen >= self.near_samples

    def observe(self, mod: "IRModule", schedules: Sequence[Any], seconds: Sequence[float]) -> None:
        """Train on measured programs of one workload (postprocessed schedules, seconds; inf: failed)."""
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.runner import RunnerResult
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
        from tvm.s_tir.meta_schedule.utils import shash2hex

        pairs = [(s, t) for s, t in zip(schedules, seconds) if s is not None]
        if not pairs:
            return
        args = ArgInfo.from_prim_func(mod["main"])
        key = shash2hex(mod)
        with self._lock:
            ctx = self._context(mod, key=key)
            self._trained_on[key][1] += len(pairs)
            self._ensure_model().update(
                ctx, [MeasureCandidate(s, args) for s, _ in pairs],
                [RunnerResult([float(t)] if math.isfinite(t) else None, None if math.isfinite(t) else "failed")
                 for _, t in pairs])

    def observe_records(self, records: Iterable["TuningRecord"]) -> int:
        """Train on database records (each replayed on its workload once); returns how many were new."""
        from tvm.s_tir import Schedule
        from tvm.s_tir.meta_schedule.utils import shash2hex

        from tuner.measure.trajectory import median_secs

        groups: dict[Any, tuple[Any, list, list]] = {}
        hashes: list[tuple[Any, str]] = []  # (workload, hash): one run's records share a workload
        for rec in records:
            mod = rec.workload.mod
            h = next((h for w, h in hashes if w.same_as(rec.workload)), None)
            if h is None:
                h = shash2hex(mod)
                hashes.append((rec.workload, h))
            key = (h, str(rec.trace))
            with self._lock:
                if key in self._seen:
                    continue
                self._seen.add(key)
            try:
                sch = Schedule(mod)
                rec.trace.apply_to_schedule(sch, remove_postproc=False)
            except TVM_ERRORS:  # a record of another TVM version or a damaged trace: one example less to learn from
                continue
            g = groups.setdefault(key[0], (mod, [], []))
            g[1].append(sch)
            g[2].append(median_secs(rec.run_secs))
        for mod, schedules, seconds in groups.values():
            self.observe(mod, schedules, seconds)
        return sum(len(g[1]) for g in groups.values())

    def rank(self, mod: "IRModule", schedules: Sequence[Any]) -> list[int] | None:
        """Indices of ``schedules``, most promising first; None while the model is not trusted."""
        if not self.trained or not schedules:
            return None
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

        args = ArgInfo.from_prim_func(mod["main"])
        with self._lock:
            scores = self._model.predict(self._context(mod), [MeasureCandidate(s, args) for s in schedules])
        return sorted(range(len(schedules)), key=lambda i: (-float(scores[i]), i))
