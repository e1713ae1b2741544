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
epilogues: the tuner maps the write stage, :attr:`tuner.analysis.sketch.Sketch.family`); :func:`bridge_task` rebuilds a fused
task at a bridge's loop nest, epilogue included. A task without a catalogue operator (pooling,
softmax, normalisation, element-wise) becomes a TASK operator (:mod:`eto.operators.task`, the
reason kept): the backend tunes its function, outside the plan (:attr:`ModelTasks.backend_only`).
Only a task with symbolic shapes is left alone (:attr:`ModelTasks.left_alone`), never dropped: it
gets TVM's default schedule when the model is built.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from eto.operators import Operator
from eto.operators.task import model_function
from eto.operators.opsets import OperatorSet
from eto.models.extract import extract_from_relax
from eto.models.layout import convert_layout
from eto.models.load import RelaxModel
from eto.models.mapping import relax_type
from eto.models.fast_math import vector_erf
from eto.models.prepack import before_tuning, like_template

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from tvm.target import Target


NO_REDUCTION = "no reduction (element-wise, reshape or layout)"


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

    @property
    def opset(self) -> OperatorSet:
        """The tunable tasks as an operator set (frequency: calls per inference), TASK operators
        included (the plan leaves them to the backend)."""
        ops = [t.op for t in self.tasks for _ in range(t.weight) if t.op is not None]
        return OperatorSet.from_layers(self.name, ops, f"{self.name}: the fused tasks Relax compiles")

    @property
    def left_alone(self) -> list[ModelTask]:
        """Tasks nothing tunes (symbolic shapes): they keep TVM's default schedules."""
        return [t for t in self.tasks if t.op is None]

    @property
    def catalogue(self) -> list[ModelTask]:
        """Tasks with a catalogue operator: what the selector plans and the reuse tuner derives."""
        return [t for t in self.tasks if t.op is not None and not t.op.spec.backend_only]

    @property
    def backend_only(self) -> list[ModelTask]:
        """Tasks without a catalogue operator: the backend tunes their functions (TASK operators)."""
        return [t for t in self.tasks if t.op is not None and t.op.spec.backend_only]


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
    mod = convert_layout(fold_batch_norms(mod), model.layout)
    return mod, fuse(mod, target), num_inputs


def fold_batch_norms(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Inference batch norms folded into the convolutions before them (weights scaled, a bias
    added), as deployment compilers do: the model then runs ``conv2d+add(+add)+relu`` tasks instead
    of a bare convolution and a separate batch-norm pass over its output. Only a batch norm whose
    statistics and weights are constants (bound) directly after a ``conv2d`` is folded."""
    from tvm import relax

    return relax.transform.FoldConstant()(relax.transform.FoldBatchnormToConv2D()(mod))


def fuse(mod: "tvm.IRModule", target: "Target") -> "tvm.IRModule":
    """MetaSchedule's ``compile_relax`` preparation, up to where it applies a database; on CPUs with
    erf vectorised (:func:`~eto.models.fast_math.vector_erf`) and weights pre-packed (:mod:`~eto.models.prepack`)."""
    import tvm
    from tvm import relax

    try:
        dispatch = relax.pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):
        dispatch = []
    passes = [*dispatch, *vector_erf(target), relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
              relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR(), *before_tuning(target)]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def model_tasks(model: RelaxModel, target: "Target") -> ModelTasks:
    """The model's fused tasks, each mapped to its eto operator where the catalogue has one."""
    from tvm.s_tir import meta_schedule as ms

    bound, fused, num_inputs = prepare(model, target)
    # the catalogue operators of the layout the model is compiled in
    catalogue = [e.op for e in extract_from_relax(model.mod if model.layout == "NCHW" else bound, model.name).opset]
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
        elif _static(mod):  # no catalogue type: the backend tunes the function itself
            op = model_function(mod["main"], re.sub(r"\d+(?=_|$)", "", t.task_name.removeprefix("fused_")))
        else:
            reason = "symbolic shapes (bind the model's dimensions first: --dim NAME=SIZE)"
        tasks.append(ModelTask(t.task_name, int(t.weight), mod, op, reason))
    return ModelTasks(model.name, tuple(tasks), bound, fused, num_inputs)


def _fusion(task_name: str, mod: "tvm.IRModule") -> str:
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

    try:
        s_tir.Schedule(mod).get_sblock("pad_temp")
    except Exception:  # noqa: BLE001 -- no such block
        return False
    return True


#: Epilogue ops a bridge can rebuild, by the token Relax's task names give them (the ``relax.op``
#: attribute path): element-wise with one operand (``relu``) or two (``add``: the second a bias, a
#: residual, a scale, broadcast to the output).
_UNARY = {"relu": "nn.relu", "gelu": "nn.gelu", "silu": "nn.silu", "sigmoid": "sigmoid", "tanh": "tanh",
          "exp": "exp", "sqrt": "sqrt", "negative": "negative"}
_BINARY = {t: t for t in ("add", "subtract", "multiply", "divide", "maximum", "minimum")}
#: The Relax op each operator type's anchor block comes from (Relax's legalization of it).
_ANCHOR_OPS = {"C2D": "conv2d", "C2DNHWC": "conv2d", "GRP": "conv2d", "DEP": "conv2d", "DEPNHWC": "conv2d",
               "BMM": "matmul", "DENSE": "matmul"}


def bridge_task(anchor: Operator, template: Operator, target: "Target | None" = None) -> Operator | None:
    """A bridge operator (section 6) for a model's fused tasks: ``anchor``'s loop nest in the function
    Relax compiles for a task like ``template`` (a fused task of the model: its fusion, epilogue and
    layouts).

    The function is rebuilt in Relax and compiled as the model's are: the anchor op (``conv2d``,
    ``matmul``) on inputs of the bridge's sizes, in the template's layouts, then the template's
    epilogue, op by op, each further operand (bias, residual) broadcast as the template's is. It is
    kept only if it has the template's fusion, arguments and blocks, and if rebuilding the template
    at its own sizes gives the template's argument shapes back (so the layouts were read right).
    None where the fusion has an op no recipe covers (a reshape, a second reduction) or any check
    fails: the selector then has no bridge there, never a wrong one.
    """
    if not template.fusion or template.task is None or anchor.type != template.type:
        return None
    target = target or _cpu()
    try:
        own = _rebuild(template.anchor, template, target)
        if own is None or _signature(own.prim_func()) != _signature(template.prim_func()):
            return None
        op = _rebuild(anchor, template, target)
    except Exception:  # noqa: BLE001 -- TVM rejected the rebuilt function: no bridge
        return None
    if op is None or _signature(op.prim_func(), shapes=False) != _signature(template.prim_func(), shapes=False):
        return None
    return op


def _cpu():
    from eto.target import cpu_target

    return cpu_target()


def _signature(func, *, shapes: bool = True) -> tuple:
    """What a trace replay depends on: the blocks in order and the arguments (ranks or shapes)."""
    from tvm import s_tir
    from tvm.ir import IRModule

    sch = s_tir.Schedule(IRModule({"main": func}))
    blocks = tuple(sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root")))
    args = tuple(tuple(int(d) for d in p.shape) if shapes else len(p.shape) for p in func.params)
    return blocks, args


def _rebuild(anchor: Operator, template: Operator, target: "Target") -> Operator | None:
    """``template``'s fused task with ``anchor`` as its anchor op (see :func:`bridge_task`)."""
    from tvm import relax

    tokens = [t for t in template.fusion.split("+") if t != "pad"]
    kind = _ANCHOR_OPS.get(template.type)
    if not tokens or tokens[0] != kind or any(t not in _UNARY and t not in _BINARY for t in tokens[1:]):
        return None
    params, dtypes = [*template.input_shapes, template.output_shape], template.dtypes
    inputs = _anchor_inputs(anchor, template, kind)
    if inputs is None:
        return None
    extras, out_t = params[len(inputs):-1], params[-1]
    if sum(t in _BINARY for t in tokens[1:]) != len(extras):
        return None
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, dt)) for i, (s, dt) in enumerate(zip(inputs, dtypes))]
    if kind == "conv2d":
        last = template.type in ("C2DNHWC", "DEPNHWC")  # channels last: NHWC/OHWI
        groups = (inputs[0][3] // inputs[1][3]) if last else inputs[0][1] // inputs[1][1]
        expr = relax.op.nn.conv2d(*xs, strides=anchor["stride"], padding=anchor["padding"],
                                  dilation=anchor["dilation"], groups=groups,
                                  data_layout="NHWC" if last else "NCHW", kernel_layout="OHWI" if last else "OIHW")
    else:
        expr = relax.op.matmul(*xs)
    out = tuple(int(d) for d in relax_type(relax.BlockBuilder().normalize(expr)).shape)
    shapes = [_broadcast_like(e, out_t, out) for e in extras]
    if any(s is None for s in shapes):
        return None
    operands = [relax.Var(f"e{i}", relax.TensorType(s, dt))
                for i, (s, dt) in enumerate(zip(shapes, dtypes[len(inputs):]))]
    with bb.function("main", [*xs, *operands]):
        with bb.dataflow():
            y, rest = bb.emit(expr), iter(operands)
            for t in tokens[1:]:
                fn = functools.reduce(getattr, (_BINARY.get(t) or _UNARY[t]).split("."), relax.op)
                y = bb.emit(fn(y, next(rest)) if t in _BINARY else fn(y))
            y = bb.emit_output(y)
        bb.emit_func_output(y)
    from tvm.s_tir import meta_schedule as ms

    found = ms.relax_integration.extract_tasks(fuse(bb.get(), target), target)
    if len(found) != 1:
        return None
    mod = found[0].dispatched[0]
    op = anchor.with_fusion(_fusion(found[0].task_name, mod), like_template(mod["main"], template.task))
    return op if op.fusion == template.fusion else None


def _anchor_inputs(anchor: Operator, template: Operator, kind: str) -> list[tuple[int, ...]] | None:
    """The anchor op's input shapes for ``anchor``, in the template's layouts.

    Convolutions: the catalogue's shapes (NCHW/OIHW, or NHWC/OHWI with the channels last). Matmuls: each
    dimension of the template's inputs follows the anchor-block loop that indexes it (the template
    may hold its weights as K x N or N x K, with or without a unit batch); loops of extent 1 in the
    template must stay 1.
    """
    if kind == "conv2d":
        return [tuple(s) for s in anchor.anchor.input_shapes]
    from tvm.ir import IRModule
    from tvm.s_tir.analysis import find_anchor_sblock

    from tuner.analysis.features import region_buffer

    func = template.prim_func()
    block = find_anchor_sblock(IRModule({"main": func}))
    if block is None:
        return None
    t_ext, b_ext = template.anchor.extents, anchor.extents
    t_iters = [(iv.var, int(iv.dom.extent)) for iv in block.iter_vars]
    kinds = [int(iv.iter_type) for iv in block.iter_vars]
    # the template's non-unit loops, space then reduction, are the catalogue's non-unit loops in order
    order = [v for (v, e), k in sorted(zip(t_iters, kinds), key=lambda x: x[1] != 0) if e != 1]
    keep = [i for i, e in enumerate(t_ext) if e != 1]
    if len(order) != len(keep) or any(b_ext[i] != 1 for i in range(len(t_ext)) if i not in keep):
        return None
    size = {v: b_ext[i] for v, i in zip(order, keep)}
    unit = {v for v, e in t_iters if e == 1}
    shapes: list[tuple[int, ...]] = []
    for param in func.params[:2]:
        region = next((r for r in block.reads if region_buffer(r).same_as(param)), None)
        if region is None:
            return None
        dims = []
        for rng, d in zip(region.region, param.shape):
            m = rng.min
            if any(m.same_as(v) for v in size):
                dims.append(next(s for v, s in size.items() if m.same_as(v)))
            elif int(d) == 1 and (any(m.same_as(v) for v in unit) or _int(m) == 0):
                dims.append(1)
            else:
                return None
        shapes.append(tuple(dims))
    return shapes


def _broadcast_like(shape: tuple[int, ...], template_out: tuple[int, ...], out: tuple[int, ...]):
    """An epilogue operand's shape for output ``out``, broadcast as ``shape`` is to ``template_out``
    (aligned from the right: a dimension is 1 or the output's)."""
    if len(shape) > len(out) or len(template_out) != len(out):
        return None
    lead = len(out) - len(shape)
    dims = []
    for i, d in enumerate(shape):
        if d == 1:
            dims.append(1)
        elif d == template_out[lead + i]:
            dims.append(out[lead + i])
        else:
            return None
    return tuple(dims)


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
