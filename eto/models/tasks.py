"""A model's fused tasks: the functions Relax really compiles, each mapped to its eto operator.

Relax does not compile a model's convolutions and matmuls alone: it fuses each with its bias, residual
add, activation (a convolution with ``add`` and ``relu``, a matmul with its bias) into one TIR
function, and MetaSchedule's ``MetaScheduleApplyDatabase`` looks programs up by that function. So
eto tunes those functions. :func:`prepare` binds the weights and runs the passes MetaSchedule's own
``compile_relax`` runs before it applies a database (library dispatch, ``LegalizeOps``,
``AnnotateTIROpPattern``, ``FoldConstant``, ``FuseOps``, ``FuseTIR``); :func:`model_tasks`
extracts the fused functions with MetaSchedule's task extraction, so the workloads tuned here are
the ones ``eto build`` (:mod:`eto.models.build`) finds.

Each task's anchor block (its conv/matmul reduction, ``find_anchor_sblock``) is matched by its loop
extents (unit loops ignored) to one of the catalogue operators the frontend walk
(:mod:`eto.models.extract`) found in the same model; the task becomes that operator with the task's
fusion and PrimFunc (:meth:`~eto.operators.Operator.with_fusion`), weighted by how often the model
calls it. The selector and the reuse tuner then work on it as on any operator (reuse only between
tasks of one fusion: the fusion is part of the sketch key). Tasks without a catalogue operator
(pooling, softmax, normalisation, element-wise) are kept in :attr:`ModelTasks.left_alone` with
the reason, never dropped: they get TVM's default schedules when the model is built.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from ..operators import Operator
from ..opsets import OperatorSet
from .extract import extract_from_relax
from .load import RelaxModel

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from tvm.target import Target


NOTHING_TO_TUNE = "no reduction (element-wise, reshape or layout): nothing to tune"


@dataclass(frozen=True)
class ModelTask:
    """One function Relax compiles for the model."""

    name: str  # MetaSchedule's task name, e.g. fused_conv2d1_add_add1_relu
    weight: int  # calls per inference
    mod: "tvm.IRModule"
    op: Operator | None  # the fused eto operator; None: left to TVM's default schedule
    reason: str = ""  # why op is None

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

    @property
    def opset(self) -> OperatorSet:
        """The tunable tasks as an operator set (frequency: calls per inference)."""
        ops = [t.op for t in self.tasks for _ in range(t.weight) if t.op is not None]
        return OperatorSet.from_layers(self.name, ops, f"{self.name}: the fused tasks Relax compiles")

    @property
    def left_alone(self) -> list[ModelTask]:
        return [t for t in self.tasks if t.op is None]


def prepare(model: RelaxModel, target: "Target") -> tuple["tvm.IRModule", "tvm.IRModule", int]:
    """The model with its weights bound, the same fused for the target, and its number of inputs."""
    from tvm import relax

    mod = model.mod
    func = mod["main"]
    num_inputs = int(func.attrs["num_input"]) if func.attrs is not None and "num_input" in func.attrs else len(func.params)
    if func.attrs is not None and "params" in func.attrs:
        mod, params = relax.frontend.detach_params(mod)
        weights = dict(zip(mod["main"].params[num_inputs:], params["main"]))
        mod = relax.transform.BindParams("main", weights)(mod)
    return mod, fuse(mod, target), num_inputs


def fuse(mod: "tvm.IRModule", target: "Target") -> "tvm.IRModule":
    """MetaSchedule's ``compile_relax`` preparation, up to where it applies a database."""
    import tvm
    from tvm import relax

    try:
        dispatch = relax.pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    passes = [*dispatch, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def model_tasks(model: RelaxModel, target: "Target") -> ModelTasks:
    """The model's fused tasks, each mapped to its eto operator where the catalogue has one."""
    from tvm.s_tir import meta_schedule as ms

    bound, fused, num_inputs = prepare(model, target)
    catalogue = [e.op for e in extract_from_relax(model.mod, model.name).opset]
    tasks, seen = [], Counter()
    for t in ms.relax_integration.extract_tasks(fused, target):
        mod = t.dispatched[0]
        op, reason = _operator_of(mod, t.task_name, catalogue)
        if op is not None:
            fusion = _fusion(t.task_name, mod)
            seen[(op, fusion)] += 1
            if seen[(op, fusion)] > 1:  # one name, another function (e.g. a bias add vs a residual add)
                fusion = f"{fusion}+v{seen[(op, fusion)]}"
            op = op.with_fusion(fusion, mod["main"])
        tasks.append(ModelTask(t.task_name, int(t.weight), mod, op, reason))
    return ModelTasks(model.name, tuple(tasks), bound, fused, num_inputs)


def _fusion(task_name: str, mod: "tvm.IRModule") -> str:
    """``fused_conv2d1_add_add1_relu`` -> ``pad+conv2d+add+add+relu``: ``pad`` where the function
    pads its input in a block of its own (TOPI's convolutions always do; a trace of a padded
    function does not replay on an unpadded one)."""
    tokens = [re.sub(r"\d+$", "", t) for t in task_name.split("_") if t and t != "fused"]
    return "+".join([*(["pad"] if _pads(mod) else []), *(t for t in tokens if t)]) or "task"


def _pads(mod: "tvm.IRModule") -> bool:
    from tvm import s_tir

    try:
        s_tir.Schedule(mod).get_sblock("pad_temp")
    except Exception:  # noqa: BLE001 -- no such block
        return False
    return True


#: Fusions whose bridges :func:`bridge_task` builds: the anchor alone, as Relax legalizes it.
BRIDGEABLE = {("C2D", "conv2d"), ("C2D", "pad+conv2d")}


def bridge_task(anchor: Operator, fusion: str, target: "Target | None" = None) -> Operator | None:
    """A bridge operator (section 6) for fused tasks of ``fusion``: ``anchor``'s loop nest as the
    function Relax compiles for it. Only fusions of the anchor alone (``pad+conv2d``, a 2-D
    convolution that batch norm was not folded into) have one: a bridge of a fusion with an epilogue would need
    the epilogue rebuilt at the bridge's shape. None where no bridge can be built."""
    if (anchor.type, fusion) not in BRIDGEABLE:
        return None
    from tvm import relax

    from ..target import cpu_target

    x, w = (relax.Var(n, relax.TensorType(s, "float32")) for n, s in zip("xw", anchor.input_shapes))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(relax.op.nn.conv2d(
                x, w, strides=anchor["stride"], padding=anchor["padding"], dilation=anchor["dilation"])))
        bb.emit_func_output(y)
    target = target or cpu_target()
    from tvm.s_tir import meta_schedule as ms

    (task,) = ms.relax_integration.extract_tasks(fuse(bb.get(), target), target)
    mod = task.dispatched[0]
    op = anchor.with_fusion(_fusion(task.task_name, mod), mod["main"])
    return op if op.fusion == fusion else None


def _operator_of(mod: "tvm.IRModule", name: str, catalogue: Sequence[Operator]) -> tuple[Operator | None, str]:
    from tvm.s_tir.analysis import find_anchor_sblock

    block = find_anchor_sblock(mod)
    if block is None:
        return None, NOTHING_TO_TUNE
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
_BLOCKS = {"C1D": "conv1d", "C2D": "conv2d", "C3D": "conv3d", "GRP": "group_conv2d|conv2d", "DEP": "depthwise|conv2d",
           "T2D": "conv2d_transpose|compute", "BMM": "matmul", "DENSE": "matmul|dense"}


def _compatible(op_type: str, block: str) -> bool:
    pattern = _BLOCKS.get(op_type)
    return pattern is None or re.search(pattern, block) is not None


def _int(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None
