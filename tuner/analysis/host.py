"""What this machine is: its physical cores and its caches (TVM-free).

One place for the host facts that the measuring stack (builder workers, runner threads), the reuse
space (a core's private cache for the BShape cost and round "panel"), the ranked-batch policy and
:mod:`eto.target` all read, so they cannot disagree.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass


class EnvironmentValueError(ValueError):
    """An environment variable set to a value eto cannot use: the message names the variable, the value
    and what it takes. Bad input, not a bug (the command line exits 2)."""


def env_int(name: str, what: str, *, minimum: int = 0) -> int | None:
    """The integer value of the environment variable ``name`` (None where unset or blank), at least
    ``minimum``; :class:`EnvironmentValueError` otherwise, saying it takes ``what``."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise EnvironmentValueError(f"{name}={text!r}: expected {what}; set it so or unset it")
    return value


def physical_cores() -> int:
    """Physical cores (psutil), else logical ones: TVM's pool and the builder run one worker per core."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
        if n:
            return int(n)
    except (ImportError, OSError):  # pragma: no cover - no psutil, or /sys and /proc unreadable
        pass
    return os.cpu_count() or 1


def num_threads() -> int:
    """Threads TVM should use: ``TVM_NUM_THREADS`` if set, else the physical cores.

    TVM runs a single thread here when the variable is unset (docs/architecture.md, "Toolchain facts"), so tuning
    and measurement set it explicitly from this value; a target without ``num-cores`` means it too.
    """
    threads = env_int("TVM_NUM_THREADS", "a positive number of threads", minimum=1)
    return threads if threads is not None else physical_cores()


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


def vector_registers() -> int:
    """This machine's vector registers: 32 with AVX-512 or Arm's Neon, 16 with AVX/AVX2 or SSE."""
    return 32 if cpu_flags() & {"avx512f", "asimd"} else 16


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
