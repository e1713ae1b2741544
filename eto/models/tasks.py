"""A model's fused tasks: the functions Relax really compiles, each mapped to its eto operator.

Relax does not compile a model's convolutions and matmuls alone: it fuses each with its bias, residual
add, activation (a convolution with ``add`` and ``relu``, a matmul with its bias) into one TIR
function, and MetaSchedule's ``MetaScheduleApplyDatabase`` looks programs up by that function. So
eto tunes those functions. :func:`prepare` binds the weights, folds inference batch norms into the
convolutions before them, and runs the passes MetaSchedule's own ``compile_relax`` runs before it
applies a database (library dispatch, ``LegalizeOps``, ``AnnotateTIROpPattern``, ``FoldConstant``,
``FuseOps``, ``FuseTIR``); :func:`model_tasks` extracts the fused functions with MetaSchedule's
task extraction, so the workloads tuned here are the ones ``eto build`` (:mod:`eto.models.build`) finds.

Each task's anchor block (its conv/matmul reduction, ``find_anchor_sblock``) is matched by its loop
extents (unit loops ignored) to one of the catalogue operators the frontend walk
(:mod:`eto.models.extract`) found in the same model; the task becomes that operator with the task's
fusion and PrimFunc (:meth:`~eto.operators.Operator.with_fusion`), weighted by how often the model
calls it. The selector and the reuse tuner then work on it as on any operator (reuse also across
epilogues: the tuner maps the write stage, :attr:`tuner.analysis.sketch.Sketch.family`);
:mod:`eto.models.bridges` rebuilds a fused task at a bridge's loop nest, epilogue included. A task
without a catalogue operator (pooling, softmax, normalisation, element-wise) becomes a TASK operator
(:mod:`eto.operators.task`, the reason kept): the backend tunes its function, outside the plan
(:attr:`ModelTasks.backend_only`). Only a task with symbolic shapes is left alone
(:attr:`ModelTasks.left_alone`), never dropped: it gets TVM's default schedule when the model is
built. The Winograd transforms of ``--layout NHWC-winograd`` come scheduled (:mod:`eto.models.winograd`):
they are tasks without an operator that nothing tunes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from eto.operators import Operator
from eto.operators.task import model_function
from eto.operators.opsets import OperatorSet
from eto.models.extract import extract_from_relax
from eto.models.frontend_fixes import frontend_fixes
from eto.models.layout import LayoutChoice, convert_layout
from eto.models.load import RelaxModel
from eto.models.fast_math import vector_math
from eto.models.padding import pad_axes
from eto.models.prepack import before_tuning
from eto.models.winograd import SCHEDULED_BY

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from tvm.target import Target


NO_REDUCTION = "no reduction (element-wise, reshape or layout)"
#: Why a hand-scheduled function (a Winograd transform, :mod:`eto.models.winograd`) is not tuned.
SCHEDULED = "scheduled by eto (a Winograd transform)"


@dataclass(frozen=True)
class ModelTask:
    """One function Relax compiles for the model."""

    name: str  # MetaSchedule's task name, e.g. fused_conv2d1_add_add1_relu
    weight: int  # calls per inference
    mod: "tvm.IRModule"
    op: Operator | None  # the fused eto operator (TASK outside the catalogue); None: TVM's default schedule
    reason: str = ""  # why it has no catalogue operator (a TASK) or none at all

    @property
    def flops(self) -> int:
        """FLOPs per call of the anchor operator (0 for tasks eto has no type for)."""
        return self.op.flops if self.op is not None else 0


@dataclass(frozen=True)
class ModelTasks:
    """The tasks of one model, the module they were taken from, and the weights bound into it."""

    name: str
    tasks: tuple[ModelTask, ...]
    bound: "tvm.IRModule"  # the model with its weights bound: what eto build compiles
    fused: "tvm.IRModule"  # the same after fusion: where the tasks come from
    num_inputs: int
    layout: LayoutChoice = LayoutChoice("NCHW", "NCHW")  # the layout they were compiled in

    @property
    def opset(self) -> OperatorSet:
        """The tunable tasks as an operator set (frequency: calls per inference), TASK operators
        included (the plan leaves them to the backend)."""
        ops = [t.op for t in self.tasks for _ in range(t.weight) if t.op is not None]
        return OperatorSet.from_layers(self.name, ops, f"{self.name}: the fused tasks Relax compiles")

    @property
    def left_alone(self) -> list[ModelTask]:
        """Tasks nothing tunes (symbolic shapes): they keep TVM's default schedules."""
        return [t for t in self.tasks if t.op is None and t.reason != SCHEDULED]

    @property
    def catalogue(self) -> list[ModelTask]:
        """Tasks with a catalogue operator: what the selector plans and the reuse tuner derives."""
        return [t for t in self.tasks if t.op is not None and not t.op.spec.backend_only]

    @property
    def backend_only(self) -> list[ModelTask]:
        """Tasks without a catalogue operator: the backend tunes their functions (TASK operators)."""
        return [t for t in self.tasks if t.op is not None and t.op.spec.backend_only]


def prepare(model: RelaxModel, target: "Target") -> tuple["tvm.IRModule", "tvm.IRModule", int, LayoutChoice]:
    """The model with its weights bound (awkward rows and channels padded,
    :mod:`eto.models.padding`), the same fused for the target, its number of inputs, and the layout it
    was compiled in."""
    from tvm import relax

    mod = model.mod
    func = mod["main"]
    num_inputs = int(func.attrs["num_input"]) if func.attrs is not None and "num_input" in func.attrs else len(func.params)
    if func.attrs is not None and "params" in func.attrs:
        mod, params = relax.frontend.detach_params(mod)
        weights = dict(zip(mod["main"].params[num_inputs:], params["main"]))
        mod = relax.transform.BindParams("main", weights)(mod)
    decided = None if model.winograd is None else dict(model.winograd)
    mod, layout = convert_layout(fold_batch_norms(frontend_fixes(mod)), model.layout, target=target, winograd=decided)
    mod = pad_axes(mod, target)
    return mod, fuse(mod, target), num_inputs, layout


def fold_batch_norms(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Inference batch norms folded into the convolutions before them (weights scaled, a bias
    added), as deployment compilers do: the model then runs ``conv2d+add(+add)+relu`` tasks instead
    of a bare convolution and a separate batch-norm pass over its output. Only a batch norm whose
    statistics and weights are constants (bound) directly after a ``conv2d`` is folded."""
    from tvm import relax

    from eto.models.constants import fold_constants

    return fold_constants(relax.transform.FoldBatchnormToConv2D()(mod))


def fuse(mod: "tvm.IRModule", target: "Target") -> "tvm.IRModule":
    """MetaSchedule's ``compile_relax`` preparation, up to where it applies a database; on CPUs with
    erf and sigmoid vectorised (:func:`~eto.models.fast_math.vector_math`) and weights pre-packed (:mod:`~eto.models.prepack`)."""
    import tvm
    from tvm import relax

    try:
        dispatch = relax.pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    passes = [*dispatch, *vector_math(target), relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR(), *before_tuning(target)]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def model_tasks(model: RelaxModel, target: "Target") -> ModelTasks:
    """The model's fused tasks, each mapped to its eto operator where the catalogue has one."""
    from tvm.s_tir import meta_schedule as ms

    bound, fused, num_inputs, layout = prepare(model, target)
    # the catalogue operators of the layout the model is compiled in
    catalogue = [e.op for e in extract_from_relax(pad_axes(model.mod, target) if layout.resolved == "NCHW" else bound, model.name).opset]
    tasks, seen = [], Counter()
    for t in ms.relax_integration.extract_tasks(fused, target):
        mod = t.dispatched[0]
        if SCHEDULED_BY in (mod["main"].attrs or {}):
            tasks.append(ModelTask(t.task_name, int(t.weight), mod, None, SCHEDULED))
            continue
        op, reason = _operator_of(mod, t.task_name, catalogue)
        if op is not None:
            fusion = task_fusion(t.task_name, mod)
            seen[(op, fusion)] += 1
            if seen[(op, fusion)] > 1:  # one name, another function (e.g. a bias add vs a residual add)
                fusion = f"{fusion}+v{seen[(op, fusion)]}"
            op = op.with_fusion(fusion, mod["main"])
        elif _static(mod):  # no catalogue type: the backend tunes the function itself
            op = model_function(mod["main"], re.sub(r"\d+(?=_|$)", "", t.task_name.removeprefix("fused_")))
        else:
            reason = "symbolic shapes (bind the model's dimensions first: --dim NAME=SIZE)"
        tasks.append(ModelTask(t.task_name, int(t.weight), mod, op, reason))
    return ModelTasks(model.name, tuple(tasks), bound, fused, num_inputs, layout)


def task_fusion(task_name: str, mod: "tvm.IRModule") -> str:
    """``fused_conv2d1_add_add1_relu`` -> ``pad+conv2d+add+add+relu``: ``pad`` where the function
    pads its input in a block of its own (TOPI's convolutions always do; a trace of a padded
    function does not replay on an unpadded one)."""
    tokens = [re.sub(r"\d+$", "", t) for t in task_name.split("_") if t and t != "fused"]
    return "+".join([*(["pad"] if _pads(mod) else []), *(t for t in tokens if t)]) or "task"


def _static(mod: "tvm.IRModule") -> bool:
    """Whether every argument of the function has a constant shape (what a measurement needs)."""
    return all(_int(d) is not None for p in mod["main"].params for d in getattr(p, "shape", ()))


def _pads(mod: "tvm.IRModule") -> bool:
    from tvm import s_tir
    from tvm.s_tir.schedule import ScheduleError

    try:
        s_tir.Schedule(mod).get_sblock("pad_temp")
    except ScheduleError:  # no such block
        return False
    return True


def _operator_of(mod: "tvm.IRModule", name: str, catalogue: Sequence[Operator]) -> tuple[Operator | None, str]:
    from tvm.s_tir.analysis import find_anchor_sblock

    block = find_anchor_sblock(mod)
    if block is None:
        return None, NO_REDUCTION
    kinds = [int(iv.iter_type) for iv in block.iter_vars]  # 0: data parallel, 2: reduction
    extents = [_int(iv.dom.extent) for iv in block.iter_vars]
    if any(e is None for e in extents):
        return None, "symbolic loop extents (bind the model's dimensions first)"
    space = _squeeze(e for e, k in zip(extents, kinds) if k == 0)
    reduction = _squeeze(e for e, k in zip(extents, kinds) if k == 2)
    matches = [op for op in catalogue if _squeeze(op.space) == space and _squeeze(op.reduction) == reduction
               and _compatible(op.type, block.name_hint)]
    if not matches:
        return None, f"its anchor block {block.name_hint} matches no catalogue operator of the model"
    # one loop nest, several operators (a 3x3 convolution at stride 1 on 28x28 and at stride 2 on
    # 56x56): the one whose input shapes the task takes
    args = {_squeeze(int(d) for d in p.shape) for p in mod["main"].params}
    return max(matches, key=lambda op: sum(_squeeze(s) in args for s in op.input_shapes)), ""


def _squeeze(extents) -> tuple[int, ...]:
    """Extents without unit loops: Relax keeps a batch of 1 where the catalogue has none."""
    return tuple(int(e) for e in extents if int(e) != 1)


#: The anchor block names TOPI gives each operator type (Relax's legalization).
_BLOCKS = {"C1D": "conv1d", "C2D": "conv2d", "C2DNHWC": "conv2d_nhwc", "C3D": "conv3d",
           "GRP": "group_conv2d|conv2d", "DEP": "depthwise|conv2d", "DEPNHWC": "group_conv2d_nhwc|depthwise",
           "T2D": "conv2d_transpose|compute", "BMM": "matmul", "DENSE": "matmul|dense"}


def _compatible(op_type: str, block: str) -> bool:
    pattern = _BLOCKS.get(op_type)
    return pattern is None or re.search(pattern, block) is not None


def _int(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None
