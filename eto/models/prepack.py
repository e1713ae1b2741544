"""Pre-packed weights: a CPU program reads each weight in the order its loops walk it.

CPU libraries (ONNX Runtime's MLAS, oneDNN) pack a convolution's or matmul's weights once, at load
time, into the blocked layout their kernels stream through; a kernel that reads the weights as the
model stores them strides across rows and misses the caches for every tile. TVM does the same with
MetaSchedule's layout rewrite, in three steps, which eto takes on CPUs (:func:`prepacks`):

1. when a model is fused into tasks, each task's constant weights are marked layout-free
   (``AttachAttrLayoutFreeBuffers``, :func:`before_tuning`): the function's result does not depend on
   how they are stored;
2. every program tuned for such a function then ends with the postprocessor ``RewriteLayout``: a
   block of its own copies the weight into the layout the program's tiles read (for a 3x3
   convolution's ``[256, 3, 3, 256]`` weight, for one, ``[8, 2, 32, 3, 3, 16, 16]``). Measurements
   leave that block out (``RemoveWeightLayoutRewriteBlock`` in the builder), as a deployed model
   never runs it; the correctness gate keeps it in, so it checks the packing too;
3. ``eto build`` splits the packing block of each program into a function of its own
   (``SplitLayoutRewritePreproc``, :func:`split_prepacking`) and runs it once, on the constants, at build time
   (``FoldConstant``, :func:`after_database`): the library holds the packed weights, and each task
   runs as ``<task>_prepacked`` (:func:`task_symbol` names its task).

A bridge operator's weights are arguments, not constants: it is marked as the model task it stands
for (:func:`like_template`), so its programs are tuned for packed weights as the tasks that reuse
them are. A database tuned before this change holds programs without the packing block: they still
build and run, reading the weights as stored. GPU programs stage weights through shared memory
instead, and are left as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.analysis.kinds import is_cpu

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir.transform import Pass
    from tvm.target import Target
    from tvm.tirx import PrimFunc

#: the function attribute that marks a PrimFunc's layout-free arguments (by position)
LAYOUT_FREE = "layout_free_buffers"
#: what ``SplitLayoutRewritePreproc`` appends to the name of a task whose weights it packed
PREPACKED = "_prepacked"


def prepacks(target: "Target") -> bool:
    """Whether a model's weights are pre-packed for ``target``: on CPUs."""
    return is_cpu(target)


def before_tuning(target: "Target") -> list["Pass"]:
    """The pass after ``FuseTIR`` that marks each task's constant weights layout-free."""
    from tvm import relax

    return [relax.transform.AttachAttrLayoutFreeBuffers()] if prepacks(target) else []


def after_database(target: "Target") -> list["Pass"]:
    """The passes after ``MetaScheduleApplyDatabase`` that pack the weights once, at build time."""
    from tvm import relax

    if not prepacks(target):
        return []
    return [split_prepacking(), relax.transform.FoldConstant()]


def split_prepacking() -> "Pass":
    """Relax's ``SplitLayoutRewritePreproc`` on the functions that pack a weight (a tuned program's
    ``RewriteLayout`` block) only. The pass visits every PrimFunc and stops with an internal error
    ("There should be a compute block if there is only one subtree under the root") on functions
    whose body it does not expect, which TVM's default schedules write for some tasks (GPT-2's causal
    mask); a function without a packing block has nothing to split, so it is held out of the pass and
    put back after it."""
    import tvm
    from tvm import relax, tirx

    @tvm.transform.module_pass(opt_level=0, name="eto.SplitPrepacking")
    def run(mod: "tvm.IRModule", _ctx) -> "tvm.IRModule":
        held = {gv: f for gv, f in mod.functions_items()
                if isinstance(f, tirx.PrimFunc) and "meta_schedule.layout_rewrite_preproc" not in f.script()}
        if len(held) == sum(isinstance(f, tirx.PrimFunc) for f in mod.functions.values()):
            return mod
        kept = tvm.IRModule({gv: f for gv, f in mod.functions_items() if gv not in held}, attrs=mod.attrs)
        out = relax.transform.SplitLayoutRewritePreproc()(kept)
        for gv, func in held.items():
            out[gv] = func
        return out

    return run


def like_template(func: "PrimFunc", template: "PrimFunc") -> "PrimFunc":
    """``func`` (a bridge's function) with ``template``'s layout-free arguments (same positions)."""
    if template.attrs is None or LAYOUT_FREE not in template.attrs:
        return func
    return func.with_attr(LAYOUT_FREE, template.attrs[LAYOUT_FREE])


def task_symbol(symbol: str) -> str:
    """The task a function the built model calls runs: its name, less :data:`PREPACKED`."""
    return symbol.removesuffix(PREPACKED)
