"""What this machine is: its physical cores and its caches (TVM-free), and the limits a target
sets on the reuse space (:func:`target_limits`).

One place for the host facts that the measuring stack (builder workers, runner threads), the reuse
space (a core's private cache for the BShape cost and round "panel"), the ranked-batch policy and
:mod:`eto.target` all read, so they cannot disagree.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target


def physical_cores() -> int:
    """Physical cores (psutil), else logical ones: TVM's pool and the builder run one worker per core."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
        if n:
            return int(n)
    except Exception:  # pragma: no cover
        pass
    return os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags (``/proc/cpuinfo``; empty if unknown)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def vector_bits() -> int:
    """The widest SIMD register this machine's CPU has (AVX-512: 512, AVX/AVX2: 256, else 128)."""
    flags = cpu_flags()
    return 512 if "avx512f" in flags else 256 if flags & {"avx2", "avx"} else 128


def cpu_cache_bytes(level: int = 2, kind: str = "Data") -> int | None:
    """Size of one instance of the level-``level`` cache of cpu0, from sysfs (None if unknown)."""
    geometry = cpu_cache(level, kind)
    return geometry.size if geometry else None


@dataclass(frozen=True)
class CacheGeometry:
    """One cache of cpu0: ``size`` bytes in ``ways``-way sets of ``line``-byte lines."""

    size: int
    ways: int
    line: int

    @property
    def set_span(self) -> int:
        """Bytes between two addresses that map to the same set (sets x line: 4 KB for 32 KB 8-way)."""
        return self.size // self.ways if self.ways else 0


@functools.lru_cache(maxsize=None)
def cpu_cache(level: int = 1, kind: str = "Data") -> CacheGeometry | None:
    """The level-``level`` cache of cpu0 (for L1, the ``kind`` one), from sysfs; None if unknown
    (ways and line 0 where sysfs does not say)."""
    base = "/sys/devices/system/cpu/cpu0/cache"

    def read(d: str, name: str) -> str:
        with open(os.path.join(d, name)) as f:
            return f.read().strip()

    try:
        for entry in sorted(os.listdir(base)):
            d = os.path.join(base, entry)
            if int(read(d, "level")) != level or (level == 1 and read(d, "type") != kind):
                continue
            m = re.fullmatch(r"(\d+)([KMG]?)", read(d, "size"))
            if m:
                size = int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
                extra = [int(read(d, n)) if os.path.exists(os.path.join(d, n)) else 0
                         for n in ("ways_of_associativity", "coherency_line_size")]
                return CacheGeometry(size, *extra)
    except (OSError, ValueError):
        pass
    return None


GPU_MAX_THREADS = 1024
DEFAULT_CACHE_BYTES = 1 << 20  # one core's private cache when sysfs does not say
CACHE_ENV = "ETO_CPU_CACHE_BYTES"


def target_limits(kind: str, target: "Target | None" = None) -> dict[str, int]:
    """The :class:`tuner.space.ReuseSpace` fields a target sets, from its TVM attributes: one place, so the
    reuse tuner and the plan's trial estimator enumerate the same space.

    CUDA: threads per block and shared memory per block. CPU: the cores (``num-cores``, else this
    machine's), one core's private cache: ``ETO_CPU_CACHE_BYTES`` if set (0: the paper's BShape
    cost), else this machine's L2 (sysfs; the target does not carry it), and the fp32 lanes of its
    widest vector register, as the tuner measures here or on RPC workers of the same kind.
    """
    attrs = target.attrs if target is not None else {}
    if kind == "cuda":
        return {"max_threads": int(attrs.get("max_threads_per_block", GPU_MAX_THREADS)),
                "max_shared_bytes": int(attrs.get("max_shared_memory_per_block", 48 * 1024))}
    cores = int(attrs["num-cores"]) if "num-cores" in attrs else (os.cpu_count() or 1)
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        try:
            cache = int(env)
        except ValueError:
            raise ValueError(f"{CACHE_ENV}={env!r}: expected a size in bytes (0: the paper's BShape cost)") from None
    else:
        cache = cpu_cache_bytes(2) or DEFAULT_CACHE_BYTES
    return {"cores": cores, "cache_bytes": max(cache, 0), "native_lanes": vector_bits() // 32}
