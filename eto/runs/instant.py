"""The instant program (beyond the paper): a new shape gets a checked program before any search.

When shapes change (a new sequence length, batch size or image size), a user needs a program now
and a tuned one soon. :func:`instant` takes the database's nearest tuned program of the same
operator type and sketch, derives α's program from it without a search (β's tile factors kept,
only the outer factors following the new extents: :func:`tuner.reuse.predict.predict`; on CPU two
placements of that growth, the set-safe register rows of :mod:`tuner.reuse.cachesets` where β's rows
collide in L1, a full-vector innermost tile where β's was not (one or two 8-lane vectors, and the
target's own register width), and, for a large matmul-like nest, the
widest register-blocked panel of :mod:`tuner.reuse.panel`), times them all here as the measurer builds
them and a built model runs them (weights packed once, outside the timed call:
:func:`tuner.measure.apply.prepacked`), then the two fastest again beside their twins with the padding
inlined where β placed it elsewhere, keeps the fastest whose output matches the catalogue's numpy
reference, and stores it with method ``"instant"``. It is served (it is ``Database.best``) until
tuning stores a faster program; it never counts as a tuning result, so the operator is still tuned later.
"""

from __future__ import annotations

import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tuner.analysis.kinds import is_cpu
from tuner.measure.timing import DEFAULT_TIMING, Timing

from eto.errors import InputError
from eto.store.database import PREDICTED, Database, ProgramRecord
from eto.operators import Operator
from eto.runs.verify import tolerance

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.reuse.cost_model import LearnedRanker

#: An instant program's latency is the median of its timed calls: in each of :data:`TIMED_ROUNDS`
#: rounds (one for a lone program), after a warm-up call, at least :data:`TIMED_RUNS` calls and
#: :data:`TIMED_MIN_S` seconds.
TIMED_RUNS = 5
TIMED_MIN_S = 0.02
TIMED_ROUNDS = 3


@dataclass(frozen=True)
class Instant:
    """An instant program and what it took: ``seconds`` from choosing the source to stored."""

    op: Operator
    source: Operator
    program: ProgramRecord
    by: str  # "kept", "kept-wide", "set-safe", "vector", "panel", ..., "ranker" or "nearest" (predict.Prediction)
    ranked: int
    seconds: float

    @property
    def latency_s(self) -> float:
        return self.program.latency_s


def shape_distance(a: Operator, b: Operator) -> float:
    """Sum of |log| extent ratios of two loop nests (inf when their loop counts differ). O(loops)."""
    from tuner.analysis.tiling import log_distance

    return log_distance(a.extents, b.extents) if len(a.extents) == len(b.extents) else math.inf


def nearest_source(op: Operator, database: Database, target: "str | Target") -> ProgramRecord | None:
    """The best tuned program of ``op``'s type and sketch whose loop nest is closest to ``op``'s."""
    sources = [p for p in database.sources(op_type=op.type, target=target, sketch=op.sketch_key()) if p.op != op]
    sources = [p for p in sources if math.isfinite(shape_distance(op, p.op))]
    return min(sources, key=lambda p: (shape_distance(op, p.op), p.latency_s), default=None)


def instant(op: Operator, database: Database, target: "Target", *, ranker: "LearnedRanker | None" = None,
            source: ProgramRecord | None = None, timing: "Timing" = DEFAULT_TIMING) -> Instant:
    """Derive, check, time and store ``op``'s instant program (see the module docstring).

    ``source`` defaults to :func:`nearest_source`. ``timing``: as the tuning that follows times its
    candidates (:mod:`tuner.measure.timing`), so the instant program and a tuned one compare alike.
    Raises ValueError naming the problem when the database holds no program of ``op``'s type and
    sketch for ``target``, when the target is not this machine's CPU (the program could not be
    checked here), or when the derived program's output differs from numpy (nothing is stored then).
    """
    from tuner.reuse.predict import predict

    from eto.target import use_threads

    start = time.perf_counter()
    threads = use_threads()  # timed in this process: on the threads tuning measures with
    if not is_cpu(target) or str(target.attrs.get("mtriple", "") or ""):
        raise InputError(f"instant programs are checked and timed on this machine's CPU, not on {target.kind.name}")
    src = source or nearest_source(op, database, target)
    if src is None:
        raise InputError(f"no tuned {op.type} program with sketch {op.sketch_key()!r} in {database.path} "
                         f"for this target: {op.name} needs tuning (eto tune) first")
    first = predict(op.prim_func(), src.tuning_record, target, ranker=ranker)
    preds = (first, *first.alternatives)  # on CPU: two placements, set-safe, two vector widths, panels
    packed, timed = _built(preds, target, threads)
    latencies = _time_all(timed, [_random_args(mod) for mod in packed], timing)
    if op.flops <= INLINED_TWINS_MAX_FLOPS * math.prod(op.input_shapes[0]):
        preds, packed, timed, latencies = _with_inlined(preds, packed, timed, latencies, target, threads, timing)
    latency, pred = _checked_fastest(op, src, preds, packed, timed, latencies, target)
    program = database.commit(op, target, [pred.record(latency)], method=PREDICTED, source=src.op, candidates=0,
                              seconds=time.perf_counter() - start,
                              extra={"predicted_by": pred.by, "ranked": pred.ranked, "timed": len(preds),
                                     "checked": "numpy", "timing": timing})[0]
    return Instant(op, src.op, program, pred.by, pred.ranked, time.perf_counter() - start)


#: The fastest variants whose twin with the padding inlined (:func:`tuner.reuse.predict.inlined`) is timed
#: beside them. A twin of every variant doubled the builds (a depthwise convolution's instant program took
#: 0.5-0.9 s, and a budget run's instant programs reached 34 of MobileNetV3's 45 operators in their share
#: instead of 39); of V3's 12 padded depthwise convolutions from V2's programs, the fastest of all those
#: twins and variants was in every case one of the two fastest variants or its twin (Zen 5).
INLINED_TWINS = 2
#: ... and only for an operator whose FLOPs per element of its first input are at most this many: there a pass
#: over a padded copy is no small part of the work (a depthwise 3x3 convolution does 18, a 5x5 one 50). A dense
#: convolution does hundreds or more (ResNet-50's 3x3 ones 1,152 and up), and its twins won none of 16 new
#: shapes while their builds took its instant program from 0.4-1.3 s to 0.8-2.2 s (Zen 5).
INLINED_TWINS_MAX_FLOPS = 128


def _built(preds: tuple, target: "Target", threads: int) -> tuple[list, list]:
    """Each prediction's module with its weights packed outside the call, and its build (in parallel:
    LLVM's code generation frees the GIL)."""
    from tuner.measure.apply import build, prepacked

    packed = [prepacked(p.schedule.mod) for p in preds]
    with ThreadPoolExecutor(max(1, min(len(preds), threads))) as pool:
        return packed, list(pool.map(lambda mod: build(mod, target), packed))


def _with_inlined(preds: tuple, packed: list, timed: list, latencies: list[float], target: "Target", threads: int,
                  timing: "Timing") -> tuple[tuple, list, list, list[float]]:
    """The same lists with the :data:`INLINED_TWINS` fastest predictions' twins with the padding inlined
    appended (where they have one), those timed again beside their twins, interleaved as
    :func:`_time_all` times: a twin is compared with its variant under the same drift of the machine."""
    from tuner.reuse.predict import inlined

    lead = sorted(range(len(preds)), key=lambda i: latencies[i])[:INLINED_TWINS]
    twins = tuple(t for t in (inlined(preds[i]) for i in lead) if t is not None)
    if not twins:
        return preds, packed, timed, latencies
    twin_packed, twin_timed = _built(twins, target, threads)
    again = _time_all([timed[i] for i in lead] + twin_timed,
                      [_random_args(packed[i]) for i in lead] + [_random_args(m) for m in twin_packed], timing)
    latencies = list(latencies)
    for k, i in enumerate(lead):
        latencies[i] = again[k]
    return preds + twins, packed + twin_packed, timed + twin_timed, latencies + again[len(lead):]


def _checked_fastest(op: Operator, src: ProgramRecord, preds: tuple, packed: list, timed: list,
                     latencies: list[float], target: "Target") -> tuple[float, object]:
    """The fastest of ``preds`` whose output matches numpy, and its latency: each checked as written (its
    weights packed inside; the build timed, ``timed[i]`` of ``packed[i]``, where nothing was packed),
    fastest first, until one matches. Raises ValueError naming the first mismatch when none does."""
    from tvm_ffi import structural_equal

    from tuner.measure.apply import build, run_once

    inputs = op.random_inputs(0)
    want = op.reference(*inputs)
    errors = []
    for i in sorted(range(len(preds)), key=lambda i: latencies[i]):
        mod = preds[i].schedule.mod
        lib = timed[i] if structural_equal(packed[i], mod) else build(mod, target)
        got = run_once(lib, inputs, op.output_shape)
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        if err <= tolerance(op) + 1e-4 * float(np.max(np.abs(want), initial=0.0)):
            return latencies[i], preds[i]
        errors.append(f"the instant program for {op.name} (from {src.op.name}, {preds[i].by}) differs from numpy "
                      f"(max abs error {err:.3g}); not stored")
    raise ValueError(errors[0])


def _random_args(packed) -> list:
    """Random arguments of a prepacked module (:func:`tuner.measure.apply.prepacked`: its weights in the
    program's own layout), the output last, as the measurer makes them."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, [int(d) for d in a.shape]).astype(a.dtype)
            for a in ArgInfo.from_entry_func(packed, remove_preproc=False)]


def _time_all(libs: list, args: list[list], timing: "Timing" = DEFAULT_TIMING) -> list[float]:
    """Each program's median call time on its arguments (``args[i]`` for ``libs[i]``: prepacked weights
    take each program's own layout), the programs interleaved round by round: the choice between
    alternatives compares them under the same drift of the machine's speed, not one after the other
    (timed 5 calls each in turn, the choice for BERT's seq-32 feed-forward matmul flipped between
    two runs, to a placement that re-measured 1.15x slower than the other run's panel). Cold: every
    argument but the first flushed from the caches before each timed call, as a cold measurer does."""
    import tvm

    flush = tvm.get_global_func("cache_flush_cpu_non_first_arg") if timing == "cold" else None
    dev = tvm.cpu()
    tensors = [[tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in one] for one in args]
    times: list[list[float]] = [[] for _ in libs]
    for _ in range(TIMED_ROUNDS if len(libs) > 1 else 1):  # one program: nothing to interleave
        for lib, arrays, samples in zip(libs, tensors, times):
            lib(*arrays)
            n, until = 0, time.perf_counter() + TIMED_MIN_S
            while n < TIMED_RUNS or time.perf_counter() < until:
                if flush is not None:
                    flush(*arrays)
                t0 = time.perf_counter()
                lib(*arrays)
                dev.sync()
                samples.append(time.perf_counter() - t0)
                n += 1
    return [statistics.median(s) for s in times]
