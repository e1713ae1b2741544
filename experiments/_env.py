"""What every experiment records about the machine it ran on (BENCHMARKS.md asks for it)."""

from __future__ import annotations

import os
import platform


def environment() -> dict:
    import tvm
    import tvm_ffi

    from eto.target import cpu_info

    info = cpu_info()
    return {"cpu": info.model, "mcpu": info.mcpu, "cores": info.cores,
            "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS"), "tvm": tvm.__version__,
            "tvm_ffi": getattr(tvm_ffi, "__version__", "?"), "python": platform.python_version()}
