"""The roofline of the cores a model runs on: their fp32 peak and memory bandwidth, measured now.

A profile (:mod:`eto.models.profile`) sets each task's FLOP/s against it; a time budget's improvement
steps (:mod:`eto.runs.improve`) give their time to the operators furthest under it. Both measure it on
this machine, under its present load, and never take it below what the fastest program reaches
(:func:`reached_peak`).
"""

from __future__ import annotations

import functools
import timeit
from dataclasses import dataclass
from typing import Iterable

import numpy as np


@dataclass(frozen=True)
class Peak:
    """The roofline of the cores in use: fp32 FLOP/s, memory bytes/s, and how each was found."""

    flops: float
    threads: int
    how: str
    bandwidth: float | None = None
    bandwidth_how: str = ""

    @property
    def ridge(self) -> float | None:
        """FLOPs per byte below which a task's memory traffic, not its arithmetic, bounds it."""
        return self.flops / self.bandwidth if self.bandwidth else None


def fp32_peak(threads: int, *, seconds: float = 0.02) -> float:
    """The fp32 FLOP/s ``threads`` threads of TVM's pool reach, measured now (never cached: it is this machine's,
    under its present load). Not derived from /proc/cpuinfo: its clock is not the clock under load, and it says
    nothing of a core's FMA pipes, their width (Zen 4 runs AVX-512 on 256-bit pipes) or SMT siblings sharing
    them. So TVM compiles independent FMA chains held in vector registers (no memory traffic) for the pool the
    model runs on: the best of 8 and 16 chains (enough to hide the FMA latency on 2-3 pipes), 5 runs each."""
    import tvm
    from tvm.script import tirx as T

    from eto.target import cpu_target
    from tuner.analysis.host import vector_bits, vector_registers

    lanes, best = vector_bits() // 32, 0.0
    for chains in (8, min(16, vector_registers() - 4)):
        @T.prim_func(s_tir=True)
        def fma(a: T.Buffer((threads, chains, lanes), "float32"), n: T.int32):
            for t in T.parallel(threads):
                acc = T.alloc_buffer((chains, lanes), "float32", scope="local")
                for c, v in T.grid(chains, lanes):
                    acc[c, v] = a[t, c, v]
                for _k in range(n):
                    for c in T.unroll(chains):
                        for v in T.vectorized(lanes):
                            acc[c, v] = acc[c, v] * T.float32(0.999) + T.float32(0.001)
                for c, v in T.grid(chains, lanes):
                    a[t, c, v] = acc[c, v]

        lib = tvm.compile(tvm.IRModule({"main": fma}), target=cpu_target(threads))
        a = tvm.runtime.tensor(np.ones((threads, chains, lanes), "float32"), tvm.cpu())
        n = max(1 << 14, int((1 << 14) * seconds / max(timeit.timeit(lambda: lib(a, 1 << 14), number=1), 1e-9)))
        best = max(best, 2 * threads * chains * lanes * n / min(timeit.repeat(lambda: lib(a, n), number=1, repeat=5)))
    return best


def reached_peak(peak_flops: float | None, achieved: "Iterable[float]") -> float | None:
    """The fp32 peak to measure a program against: the cores' measured peak, or what the fastest of the
    programs achieves where that is higher. A short peak measurement on a busy or throttled VM can come
    out below what tuned matmuls reach (182-213 GFLOP/s measured against a BERT-Base layer's 188-214);
    against it every large task would look done (a time budget's headroom 0, a profile's share of the
    peak above 100%). What one program achieves here, another can. O(programs)."""
    if peak_flops is None:
        return None
    return max([peak_flops, *achieved])


def memory_bandwidth(nbytes: int = 1 << 26) -> float:
    """Bytes per second (read + write) of a one-thread numpy copy much larger than the caches, the
    best of 3: a lower bound of what the cores stream together (data in the caches come faster)."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    return 2 * nbytes / min(timeit.repeat(lambda: np.copyto(dst, src), number=1, repeat=3))


@functools.lru_cache(maxsize=None)
def working_set_bandwidth(nbytes: int) -> float:
    """:func:`memory_bandwidth` of a buffer of about ``nbytes`` (rounded up to a power of two, at least
    64 KiB), measured once a size in a process. A task's activations of a few MiB stay in the caches,
    which stream them several times faster than memory does (40 GB/s for 64 MiB on a 2-core EPYC, Zen 5):
    against the 64 MiB copy, a depthwise convolution's 2.2 FLOPs per byte allowed it 88 GFLOP/s, less than
    MetaSchedule's own programs reach there (74-96), so a budget's spare time never went to one."""
    return memory_bandwidth(max(1 << 16, 1 << (max(nbytes, 1) - 1).bit_length()))
