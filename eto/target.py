"""Targets and hardware descriptions.

``"cpu"`` (or ``"llvm"``) means this machine: TVM 0.27 ignores ``mcpu=native`` (it falls back to a
generic CPU without vector extensions), so the CPU is detected here through LLVM's host query and
written into the target. ``"cuda"`` means an NVIDIA GPU by TVM tag (default ``nvidia/nvidia-a100``),
always with an LLVM host; plain ``{"kind": "cuda"}`` dicts lack the attributes MetaSchedule needs.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from tuner.analysis.host import cpu_cache_bytes, cpu_flags, num_threads, physical_cores, vector_bits
from tuner.analysis.kinds import Kind as TargetKind, is_cpu, is_cuda, kind_of
from tuner.tvm_errors import TVM_ERRORS, error_line

from eto.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

DEFAULT_CUDA_TAG = "nvidia/nvidia-a100"

#: Streaming multiprocessors of common tags (TVM's tags do not record them).
_SM_COUNT = {
    "nvidia/tesla-p100": 56,
    "nvidia/nvidia-v100": 80,
    "nvidia/nvidia-a100": 108,
    "nvidia/nvidia-h100": 132,
    "nvidia/geforce-rtx-3090-ti": 84,
    "nvidia/geforce-rtx-3080": 68,
    "nvidia/geforce-rtx-3070": 46,
}


@dataclass(frozen=True)
class CPUInfo:
    """What the CPU reuse analysis and the roofline need to know about a CPU target."""

    kind: Literal["cpu"]
    mcpu: str
    model: str
    cores: int
    threads: int
    vector_bits: int
    fma: bool
    l1d_bytes: int | None
    l2_bytes: int | None
    l3_bytes: int | None

    @property
    def vector_lanes_fp32(self) -> int:
        return self.vector_bits // 32

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GPUInfo:
    """The limits the reuse-based tuner checks candidates against (paper section 5.1)."""

    kind: Literal["cuda"]
    tag: str
    arch: str
    sms: int | None
    max_threads_per_block: int
    max_shared_memory_per_block: int
    warp_size: int
    registers_per_block: int
    l2_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


HardwareInfo = CPUInfo | GPUInfo


# -- CPU detection ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def detect_mcpu() -> str:
    """LLVM's name for this CPU (e.g. ``znver3``, ``skylake-avx512``); ``generic`` if unknown."""
    try:
        from tvm.target import codegen

        name = str(codegen.llvm_get_system_cpu())
        return name if name and name != "generic" else "generic"
    except TVM_ERRORS:  # pragma: no cover - only without an LLVM-enabled TVM (no such function)
        return "generic"


def export_threads() -> int:
    """Set ``TVM_NUM_THREADS`` to :func:`num_threads` unless the user set it; the threads it names.

    Builder and runner workers are separate processes that size TVM's pool from the variable; unset,
    they would tune and time on one thread.
    """
    want = num_threads()
    os.environ.setdefault("TVM_NUM_THREADS", str(want))
    return want


def use_threads() -> int:
    """Make this process's TVM runtime run :func:`num_threads` threads; the threads it runs.

    TVM sizes its thread pool once, from ``TVM_NUM_THREADS``, when the process first runs a parallel
    kernel (or asks how many threads it has); unset, that is one thread here. Programs eto times or
    serves in-process (instant programs, the program cache) would then run at about half their
    speed on 2 cores (an instant program timed 1.5-1.9 ms in-process against 0.8-1.1 ms with the
    variable set). So the variable is set before the first such run; a pool that started earlier
    with fewer threads cannot be resized, which is warned about.
    """
    want = export_threads()
    import tvm

    have = int(tvm.runtime.num_threads())
    if have < want:
        warnings.warn(f"TVM's thread pool already runs {have} thread(s), not {want}: set TVM_NUM_THREADS={want} "
                      f"before this process runs any TVM kernel, or in-process timings and served programs are "
                      f"slower than measured ones", RuntimeWarning, stacklevel=2)
    return have


def cpu_info(num_cores: int | None = None, mcpu: str | None = None) -> CPUInfo:
    """This machine's CPU; ``threads`` read now (``TVM_NUM_THREADS`` may change), the rest detected once."""
    flags = cpu_flags()
    cores = num_cores or physical_cores()
    return CPUInfo(
        kind="cpu",
        mcpu=mcpu or detect_mcpu(),
        model=_cpu_model(),
        cores=cores,
        threads=num_threads() if num_cores is None else num_cores,
        vector_bits=vector_bits(),
        fma=bool(flags & {"fma", "asimd"}),
        l1d_bytes=cpu_cache_bytes(1),
        l2_bytes=cpu_cache_bytes(2),
        l3_bytes=cpu_cache_bytes(3),
    )


# -- targets ------------------------------------------------------------------------------------
def cpu_target(num_cores: int | None = None, mcpu: str | None = None) -> "Target":
    """An LLVM target for this machine with the detected ``mcpu`` and ``num-cores``."""
    from tvm.target import Target

    info = cpu_info(num_cores, mcpu)
    return Target({"kind": "llvm", "mcpu": info.mcpu, "num-cores": info.threads})


def cuda_target(tag: str = DEFAULT_CUDA_TAG) -> "Target":
    """A CUDA target from a TVM tag such as ``nvidia/nvidia-a100``, with an LLVM host."""
    import tvm
    from tvm.target import Target

    if tag not in tvm.target.list_tags():
        known = sorted(t for t in tvm.target.list_tags() if t.startswith("nvidia/"))
        raise InputError(f"unknown CUDA target tag {tag!r}; e.g. {', '.join(known[:8])}, ...")
    return Target(tag, host={"kind": "llvm"})


def parse_target(spec: "str | Target") -> "Target":
    """``cpu``/``llvm`` -> this CPU; ``cuda`` -> the default tag; ``nvidia/...`` -> that tag.

    A JSON object string (``{"kind": "llvm", ...}``) is passed to TVM unchanged.
    """
    from tvm.target import Target

    if isinstance(spec, Target):
        return spec
    s = spec.strip()
    if s in ("cpu", "llvm"):
        return cpu_target()
    if s == "cuda":
        return cuda_target()
    if s.startswith("nvidia/"):
        return cuda_target(s)
    if s.startswith("{"):
        try:
            return Target(json.loads(s))
        except TVM_ERRORS as exc:  # bad JSON (a ValueError), or TVM's error for a bad target
            raise InputError(f"target {spec!r}: {error_line(exc)}") from None
    raise InputError(f"unknown target {spec!r}: use 'cpu', 'cuda', a TVM tag like 'nvidia/nvidia-a100' or a JSON dict")


def hardware_info(target: "str | Target") -> HardwareInfo:
    """The hardware description of a target, from TVM's target attributes where it has them."""
    t = parse_target(target)
    if is_cpu(t):
        cores = int(t.attrs["num-cores"]) if "num-cores" in t.attrs else None
        mcpu = str(t.attrs["mcpu"]) if "mcpu" in t.attrs else None
        return cpu_info(cores, mcpu)
    if is_cuda(t):
        a = t.attrs
        # TVM drops the tag name when it expands a tag; keep the one the caller gave.
        tag = str(t.tag) if t.tag else ""
        if not tag and isinstance(target, str):
            tag = DEFAULT_CUDA_TAG if target.strip() == "cuda" else target.strip()
        return GPUInfo(
            kind="cuda",
            tag=tag,
            arch=str(a.get("arch", "")),
            sms=_SM_COUNT.get(tag),
            max_threads_per_block=int(a.get("max_threads_per_block", a.get("max_num_threads", 1024))),
            max_shared_memory_per_block=int(a.get("max_shared_memory_per_block", 48 * 1024)),
            warp_size=int(a.get("thread_warp_size", 32)),
            registers_per_block=int(a.get("registers_per_block", 65536)),
            l2_bytes=int(a["l2_cache_size_bytes"]) if "l2_cache_size_bytes" in a else None,
        )
    raise InputError(f"no hardware description for target kind {t.kind.name!r}")


def target_kind(target: "str | Target") -> TargetKind:
    """``"cuda"`` or ``"cpu"``: the kind of tile structure and B/T/M the target's programs have."""
    return kind_of(parse_target(target))


def target_key(target: "str | Target") -> str:
    """The canonical text of a target, as MetaSchedule stores it in records (the database's key).

    Cached per text: databases ask for it on every query, and a ``Target``'s own text is its JSON.
    """
    return _key_of_text(target if isinstance(target, str) else str(target))


@functools.lru_cache(maxsize=64)
def _key_of_text(text: str) -> str:
    import json

    obj = json.loads(text) if text.lstrip().startswith("{") else json.loads(str(parse_target(text)))
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)


def target_mismatch(stored: Iterable[str], target: "str | Target") -> str | None:
    """Why programs stored for the ``stored`` target keys cannot serve ``target`` (None: some can, or
    none are stored).

    A database keys programs by the target's whole text, ``num-cores`` included, so a database tuned
    with ``TVM_NUM_THREADS=2`` looks empty to a process with another thread count: name what differs.
    """
    keys, want = set(stored), target_key(target)
    if not keys or want in keys:
        return None
    mine, diffs, cores = json.loads(want), [], set()
    for key in sorted(keys):
        theirs = json.loads(key)
        differ = [k for k in sorted(set(theirs) | set(mine)) if theirs.get(k) != mine.get(k)]
        diffs.append(", ".join(f"{k} {theirs.get(k, '-')} there, {mine.get(k, '-')} here" for k in differ))
        if differ == ["num-cores"]:
            cores.add(theirs["num-cores"])
    hint = (f"; num-cores is the thread count: run with TVM_NUM_THREADS={min(cores)} (or pass that target)"
            if cores else "; pass --target with the database's target to use its programs")
    return f"no program for this target; programs for {len(keys)} other target(s): {'; '.join(diffs)}{hint}"


def warn_target_mismatch(database: Any, target: "str | Target") -> None:
    """:func:`target_mismatch` of a database's programs, as a warning for the Python API (the command
    line makes it an error where the command needs the programs)."""
    why = target_mismatch({p.target for p in database.programs()}, target)
    if why is not None:
        warnings.warn(f"{database.path}: {why}", RuntimeWarning, stacklevel=3)
