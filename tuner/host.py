"""What this machine is: its physical cores and its caches (TVM-free).

One place for the host facts that the measuring stack (builder workers, runner threads), the reuse
space (a core's private cache for the BShape cost and round "panel"), the ranked-batch policy and
:mod:`eto.target` all read, so they cannot disagree.
"""

from __future__ import annotations

import functools
import os
import re


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
def cpu_cache_bytes(level: int = 2, kind: str = "Data") -> int | None:
    """Size of one instance of the level-``level`` cache of cpu0, from sysfs (None if unknown)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            d = os.path.join(base, entry)
            with open(os.path.join(d, "level")) as f:
                if int(f.read()) != level:
                    continue
            with open(os.path.join(d, "type")) as f:
                t = f.read().strip()
            if level == 1 and t != kind:
                continue
            with open(os.path.join(d, "size")) as f:
                m = re.fullmatch(r"(\d+)([KMG]?)", f.read().strip())
            if m:
                return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    except (OSError, ValueError):
        pass
    return None
