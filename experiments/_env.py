"""What every experiment records about the machine it ran on (experiments/README.md, "How we measure", asks for it)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess


def environment() -> dict:
    import tvm
    import tvm_ffi

    from eto.target import cpu_info

    info = cpu_info()
    gpu = None
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        gpu = out.stdout.strip() or None
    return {"gpu": gpu, "cpu": info.model, "mcpu": info.mcpu, "cores": info.cores,
            "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS"), "tvm": tvm.__version__,
            "tvm_ffi": getattr(tvm_ffi, "__version__", "?"), "python": platform.python_version()}


def metaschedule_dir(spec: str) -> str | None:
    """The work directory of a ``ms:DIR`` database argument (None for an eto database); exits naming
    a directory that holds no MetaSchedule database."""
    if not spec.startswith("ms:"):
        return None
    if not os.path.isfile(os.path.join(spec[3:], "database_workload.json")):
        raise SystemExit(f"{spec[3:]}: no MetaSchedule database (database_workload.json) there")
    return spec[3:]
