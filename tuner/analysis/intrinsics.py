"""The tensor intrinsics MetaSchedule's rules can name, registered without the 25 s import.

Building a ``TuneContext`` runs ``import tvm.s_tir.tensor_intrin``, which parses every target's
intrinsics as TVMScript: ~30 s here, 19 s of it for CUDA's tensor-core intrinsics (docs/architecture.md, "Toolchain facts"). The
default rules for a CPU target name only its architecture's dot-product intrinsics
(``dot_16x4_vnni`` / ``dot_16x4_avx512`` on x86, ``dot_4x4_*`` on Arm); CUDA's name the
tensor-core ones (``wmma_*``). :func:`register_tensor_intrinsics` registers those of the target at
hand and marks the package imported, so an eto process that tunes for CPU starts about 27 s sooner.
Other submodules stay importable as usual.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import sys
from typing import TYPE_CHECKING

from tuner.analysis.kinds import is_cuda

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

PACKAGE = "tvm.s_tir.tensor_intrin"


def _is_arm() -> bool:
    machine = platform.machine().lower()
    return machine == "aarch64" or machine.startswith("arm")  # arm64, armv7l, ...


def register_tensor_intrinsics(target: "Target | None" = None) -> None:
    """Register the intrinsics ``target``'s default rules can name; mark the package imported.

    CPU (or no target): this host's architecture's dot products, ~0.4 s on x86 (``x86``), ~2 s on
    Arm (``arm_cpu``). CUDA: its tensor-core intrinsics too (``cuda``, ~19 s: the default rules
    for sm_70 and later include MetaSchedule's tensor-core tiling). Each module once per process.
    """
    if PACKAGE not in sys.modules:
        import tvm.s_tir

        spec = importlib.util.find_spec(PACKAGE)
        if spec is None:  # pragma: no cover  (a TVM without the package: nothing to register)
            return
        package = importlib.util.module_from_spec(spec)  # the package object, its __init__ not run
        sys.modules[PACKAGE] = package
        setattr(tvm.s_tir, "tensor_intrin", package)
    modules = ["arm_cpu" if _is_arm() else "x86"]
    if target is not None and is_cuda(target):
        modules.append("cuda")
    for name in modules:
        importlib.import_module(f"{PACKAGE}.{name}")
