"""Which kind of machine a target's programs are for: the one place that reads a target's kind.

Two questions, asked all over eto, with different answers for a target that is neither: the *tile
structure* a program has (:func:`kind_of`: CUDA's blocks and threads, or a CPU's loop nest), and whether
the target is a CPU that LLVM compiles for (:func:`is_cpu`), which is what can be run, checked and timed
on this machine, and what the CPU-only passes (pre-packed weights, cold timing, instant programs) apply to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

Kind = Literal["cpu", "cuda"]


def kind_of(target: "Target") -> Kind:
    """``"cuda"`` or ``"cpu"``: which tile structure (and which B/T/M) the target's programs have."""
    return "cuda" if target.kind.name == "cuda" else "cpu"


def is_cpu(target: "Target") -> bool:
    """Whether ``target`` is a CPU that LLVM compiles for (TVM's ``llvm`` kind)."""
    return target.kind.name == "llvm"


def is_cuda(target: "Target") -> bool:
    """Whether ``target`` is an NVIDIA GPU (TVM's ``cuda`` kind)."""
    return target.kind.name == "cuda"


__all__ = ["Kind", "is_cpu", "is_cuda", "kind_of"]
