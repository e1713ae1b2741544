"""Trial-count estimator (paper section 6.1): how many candidates Algorithm 1 measures for a pair.

The reuse pair selector needs an edge cost before β is tuned, so β's best program is unknown. The
paper's observation: averaged over the possible BShape/TShape/LShape sizes of the reused program,
the count Algorithm 1's enumeration gives is close to what it actually measures. This module runs
the *same* enumeration as :class:`tuner.reuse.space.ReuseSpace` (rounds T, M, unroll and vector per B)
on a small random sample of β tile configurations, without building or measuring anything.

Cost: O(samples x (d_B x (d_T + d_M))) enumerations of divisor products, about a millisecond per
pair and sample; :func:`estimate_many` spreads a plan's pairs over the machine's cores.
"""

from __future__ import annotations

import os
import pickle
import random
import statistics
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

from tuner.analysis.features import LoopNest, TileConfig, align_loops
from tuner.analysis.kinds import Kind
from tuner.reuse.leads import lead_tiles
from tuner.reuse.options import ReuseOptions
from tuner.reuse.space import (DEFAULT_STRATEGY, GPU_MAX_THREADS, GPU_MIN_THREADS, ReuseSpace, Strategy,
    default_ranges, target_limits)
from tuner.analysis.tiling import random_tiling

#: MetaSchedule's default choices (``unroll_max_steps`` and ``vector_load_lens`` of its rules).
UNROLL_VALUES: dict[Kind, tuple[int, ...]] = {"cpu": (0, 16, 64, 512), "cuda": (0, 16, 64, 512, 1024)}
FETCH_LANES: tuple[int, ...] = (1, 2, 3, 4)
#: The sketches beside β's that round "stage" of the reuse tuner tries round T's best on
#: (:func:`tuner.reuse.search.write_stage_siblings`): MetaSchedule's default multi-level tiling on CPU may
#: write a tile back through a cache at level 1 or 2 or not at all (three sketches), on CUDA must at
#: level 3 (one).
WRITE_STAGE_SIBLINGS: dict[Kind, int] = {"cpu": 2, "cuda": 0}
LEVELS: dict[Kind, tuple[int, int]] = {"cpu": (4, 2), "cuda": (5, 3)}  # (space, reduction) tile levels


@dataclass(frozen=True)
class TrialEstimate:
    """The mean over sampled β configurations, and the spread the sample showed."""

    mean: float
    low: float
    high: float
    samples: int


#: The chance that a ranked batch beats the best so far enough to earn its round another batch
#: (:func:`tuner.reuse.ranked.ranked_batches`); a plan refines it from what its database recorded.
CONTINUE_RATE = 0.3


def ranked_count(n: int, top_k: int | None, *, open_round: bool, continue_rate: float = CONTINUE_RATE) -> float:
    """Expected candidates the ranked policy measures of a round of ``n`` (all of them if ``top_k`` is None).

    The first batch is always measured; an open round (T, which starts from no incumbent) always
    earns its second; every later batch is measured with probability ``continue_rate`` per step.
    """
    if top_k is None or n <= top_k:
        return float(n)
    total, left, p = float(top_k), n - top_k, 1.0 if open_round else continue_rate
    while left > 0:
        total += p * min(top_k, left)
        left -= top_k
        p *= continue_rate
    return total


def placement_trials(alpha_producers: int) -> int:
    """Candidates of the reuse tuner's placement rounds: each of α's producer stages (padding), placed
    where β placed it (at the root where β has none), is then tried at the root or inlined and where α's
    design space sampled it (at most 2)."""
    return 2 * alpha_producers


def fetched_inputs(kind: Kind, nest: LoopNest) -> int:
    """Inputs staged by cooperative fetch: all of them on GPU; none on CPU, where tiling has no fetch."""
    return len(nest.inputs) if kind == "cuda" else 0


def random_config(kind: Kind, nest: LoopNest, rng: random.Random, *, max_threads: int = GPU_MAX_THREADS,
                  max_shared_bytes: int = 48 * 1024, tries: int = 200) -> TileConfig:
    """A random tile configuration of ``nest`` that the target accepts (GPU: thread and shared limits)."""
    n_s, n_r = LEVELS[kind]
    cfg = None
    for _ in range(tries):
        cfg = TileConfig(kind, tuple(random_tiling(e, n_s, rng) for e in nest.space),
                         tuple(random_tiling(e, n_r, rng) for e in nest.reduction))
        if kind == "cpu" or (GPU_MIN_THREADS <= cfg.threads_per_block <= max_threads
                             and cfg.block_bytes(nest) <= max_shared_bytes):
            return cfg
    assert cfg is not None
    return cfg


def count_trials(space: ReuseSpace, *, unroll_values: Sequence[int], fetch_lanes: Sequence[int],
                 n_fetch: int, beta_unroll: int | None = None, strategy: Strategy = DEFAULT_STRATEGY,
                 top_k: int | None = None, continue_rate: float = CONTINUE_RATE, stages: int = 0) -> float:
    """Candidates Algorithm 1 would measure for one β configuration (``space.beta_cfg``).

    Round T is enumerated exactly; the later rounds run once per B (``"global"``: once) from the
    median candidate, standing in for the (unknown until measured) winner of round T. With
    ``top_k`` (a trained ranker) each round counts :func:`ranked_count` of its candidates.
    ``stages``: α's sibling write-stage sketches, one candidate each after round T.
    """
    groups = space.t_groups()  # a BShape stands for its B (one BShape per B)
    n_slots = sum(len(threads) for _, threads in groups)
    if not n_slots:
        return 3  # the reuse tuner's fallback measures at most three configurations
    # β's kept tiles and their variants lead round T, measured on their own first (tuner.reuse.leads);
    # round T then skips the kept tiles if it holds them
    lead = len(lead_tiles(space))
    n_slots -= space.kept_lead() is not None and space.kept_in_t_round()

    def later(n: int) -> float:
        return ranked_count(n, top_k, open_round=strategy == "per-b", continue_rate=continue_rate)

    # after a lead, round T has an incumbent: its first batch is measured, the rest only if it improves
    total = lead + ranked_count(n_slots, top_k, open_round=not lead, continue_rate=continue_rate)
    # rounds "stage" and "panel" (tuner.reuse.panel): once each, against round T's best
    total += ranked_count(stages, top_k, open_round=False, continue_rate=continue_rate)
    total += ranked_count(len(space.panel_round()), top_k, open_round=False, continue_rate=continue_rate)
    current = len(unroll_values) - 1 if beta_unroll is None else beta_unroll
    one = fetch_lanes.index(1) if 1 in fetch_lanes else None
    for bs, t in _followed(groups, n_slots, per_b=strategy == "per-b"):
        rep = space.tshape(t, bs, space.lshape(bs))
        total += later(len(space.m_lshapes(rep)))
        total += later(len(space.unroll_round(rep, unroll_values, current)))
        total += sum(later(len(space.vector_round(fetch_lanes, one, k))) for k in range(n_fetch))
    return total


def _followed(groups: list[tuple[tuple[int, ...], list[int]]], n_slots: int, *, per_b: bool):
    """The median slot of each B (``per_b``), or of all of round T: the one the later rounds follow."""
    if per_b:
        return [(bs, threads[len(threads) // 2]) for bs, threads in groups]
    i = n_slots // 2
    for bs, threads in groups:
        if i < len(threads):
            return [(bs, threads[i])]
        i -= len(threads)
    raise AssertionError("median slot outside round T")


def estimate_trials(kind: Kind, alpha: LoopNest, beta: LoopNest, options: ReuseOptions | None = None, *,
                    limits: Mapping[str, int] | None = None, samples: int = 16, seed: int = 0,
                    unroll_values: Sequence[int] | None = None, fetch_lanes: Sequence[int] = FETCH_LANES,
                    n_fetch: int | None = None, continue_rate: float = CONTINUE_RATE,
                    stages: int | None = None) -> TrialEstimate:
    """Mean number of candidates Algorithm 1 measures for (α, β) over ``samples`` random β programs.

    ``options``: the reuse tuner's (:class:`~tuner.reuse.options.ReuseOptions`: its strategy, ranges and
    ``top_k``, resolved for the target: the ranked few measured per round, None: every candidate, the
    paper's count; default: every candidate). ``limits``: the target's, as
    :func:`~tuner.reuse.space.target_limits` gives them to the tuner (GPU: threads and shared memory per
    block; CPU: cores, one core's cache, vector lanes and registers; None or missing: this machine's).
    ``n_fetch`` is the number of cooperatively fetched inputs (GPU; default: all of α's inputs), zero on
    CPU where MetaSchedule's tiling has no cooperative fetch. ``stages``: α's sibling write-stage sketches
    (default :data:`WRITE_STAGE_SIBLINGS` of ``kind``).
    """
    options = options or ReuseOptions(top_k=None)
    if options.top_k == "auto":
        raise ValueError("estimate_trials counts a resolved top_k: tuner.reuse.ranked.resolve_top_k(top_k, target)")
    rng = random.Random(seed)
    limits = {**_space_limits(kind, limits), "vector_lanes": options.vector_lanes}
    unroll_values = tuple(unroll_values or UNROLL_VALUES[kind])
    if n_fetch is None:
        n_fetch = fetched_inputs(kind, alpha)
    counts = []
    for _ in range(samples):
        cfg = random_config(kind, beta, rng, max_threads=limits["max_threads"],
                            max_shared_bytes=limits["max_shared_bytes"])
        beta_nest, cfg = align_loops(beta, cfg, alpha) or (beta, cfg)  # as the tuner sees β (another rank)
        space = ReuseSpace(kind, alpha, beta_nest, cfg, ranges=options.ranges or default_ranges(kind), **limits)
        counts.append(count_trials(space, unroll_values=unroll_values, fetch_lanes=fetch_lanes, n_fetch=n_fetch,
                                   beta_unroll=rng.randrange(len(unroll_values)), strategy=options.strategy,
                                   top_k=options.top_k, continue_rate=continue_rate,
                                   stages=WRITE_STAGE_SIBLINGS[kind] if stages is None else stages))
    return TrialEstimate(statistics.fmean(counts), min(counts), max(counts), samples)


def _space_limits(kind: Kind, given: Mapping[str, int] | None) -> dict[str, int]:
    """The :class:`ReuseSpace` limits for an estimate: those ``given``, the rest this machine's (CPU) or a
    GPU's defaults, as the tuner's space would have them."""
    given = dict(given or {})
    cpu = ("cores", "cache_bytes", "native_lanes", "registers")
    here = target_limits(kind) if kind == "cpu" and any(given.get(k) is None for k in cpu) else {}
    out = {"max_threads": GPU_MAX_THREADS, "max_shared_bytes": 48 * 1024, "cores": 1, "cache_bytes": 0,
           "native_lanes": 0, "registers": 0}
    out.update({k: v for k, v in here.items() if v is not None})
    out.update({k: v for k, v in given.items() if v is not None})
    return out


#: Fewer pairs than this are estimated in this process: a worker costs ~0.3 s to start.
PARALLEL_MIN_PAIRS = 256


def estimate_many(kind: Kind, pairs: Sequence[tuple[LoopNest, LoopNest]], *, workers: int | None = None,
                  **kw) -> list[TrialEstimate]:
    """:func:`estimate_trials` for every ``(alpha, beta)`` of ``pairs``, in order, the same numbers.

    Pairs estimated before with the same options on this machine are read from the cache on disk
    (:mod:`tuner.reuse.estimate_cache`). A plan asks for O(n²) pairs (1,240 for ResNet-50 with bridges)
    of pure Python, so the others are split over ``workers`` fresh interpreters (default: the cores
    this process may use). They are plain subprocesses that import only this module: nothing of the
    caller (TVM, threads, a script's top-level code, a notebook) is copied or re-run. Small batches,
    or a failed worker, are estimated in this process.
    """
    from tuner.reuse.estimate_cache import cached

    limits = kw.get("limits")
    setting = (kind, sorted((k, v) for k, v in kw.items() if k != "limits"),
               sorted(_space_limits(kind, limits).items()))
    return cached(setting, list(pairs), lambda todo: _estimate_many(kind, todo, workers, **kw),
                  encode=lambda e: [e.mean, e.low, e.high, e.samples], decode=lambda v: TrialEstimate(*v))


def _estimate_many(kind: Kind, pairs: Sequence[tuple[LoopNest, LoopNest]], workers: int | None,
                   **kw) -> list[TrialEstimate]:
    """:func:`estimate_many` without the cache."""
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if workers <= 1 or len(pairs) < PARALLEL_MIN_PAIRS:
        return [estimate_trials(kind, a, b, **kw) for a, b in pairs]
    chunks = [list(pairs[i::workers]) for i in range(workers)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs: list[subprocess.Popen] = []
    try:
        for _ in chunks:
            procs.append(subprocess.Popen([sys.executable, "-c", "from tuner.reuse.estimate import _worker; _worker()"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env))
    except OSError:  # no processes here (sandbox, frozen app)
        for proc in procs:
            proc.kill()
            proc.wait()
        return [estimate_trials(kind, a, b, **kw) for a, b in pairs]
    results: list[list[TrialEstimate] | None] = []
    for proc, chunk in zip(procs, chunks):  # each reads its whole input before writing: no deadlock
        try:
            proc.stdin.write(pickle.dumps((kind, kw, chunk)))  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:  # the worker died before reading (its share is redone below)
            pass
    for proc in procs:
        out = proc.stdout.read()  # type: ignore[union-attr]
        ok = proc.wait() == 0
        try:
            results.append(pickle.loads(out) if ok and out else None)
        except (pickle.UnpicklingError, EOFError):
            results.append(None)
    estimates: list[TrialEstimate | None] = [None] * len(pairs)
    for i, (chunk, res) in enumerate(zip(chunks, results)):
        if res is None:  # a worker died: its share in this process, the same numbers
            res = [estimate_trials(kind, a, b, **kw) for a, b in chunk]
        estimates[i::workers] = res
    return estimates  # type: ignore[return-value]


def _worker() -> None:
    """A worker of :func:`estimate_many`: a pickled (kind, options, pairs) in, the estimates out."""
    kind, kw, chunk = pickle.loads(sys.stdin.buffer.read())
    out = [estimate_trials(kind, a, b, **kw) for a, b in chunk]
    sys.stdout.buffer.write(pickle.dumps(out))


def trials_for_config(kind: Kind, alpha: LoopNest, beta: LoopNest, beta_cfg: TileConfig, **kw) -> float:
    """The enumeration's count for a *known* β program (what :func:`estimate_trials` averages)."""
    limits = target_limits(kind)
    names = ("max_threads", "max_shared_bytes", "vector_lanes", "cores", "cache_bytes", "native_lanes", "registers")
    limits.update({k: kw.pop(k) for k in names if k in kw})
    space = ReuseSpace(kind, alpha, beta, beta_cfg, ranges=kw.pop("ranges", None) or default_ranges(kind), **limits)
    n_fetch = kw.pop("n_fetch", fetched_inputs(kind, alpha))
    kw.setdefault("stages", WRITE_STAGE_SIBLINGS[kind])
    return count_trials(space, unroll_values=kw.pop("unroll_values", UNROLL_VALUES[kind]),
                        fetch_lanes=kw.pop("fetch_lanes", FETCH_LANES), n_fetch=n_fetch, **kw)

