"""Bridge operators for a model's fused tasks (section 6 of the paper, at the level Relax compiles).

A bridge joins two operators of the plan that cannot reuse each other directly; for a model, its
programs must replay on the functions Relax really compiles, so a bridge is rebuilt as a fused task
like one of the model's (:func:`bridge_task`): the anchor op at the bridge's sizes, in the model
task's layouts, then that task's epilogue. The planner asks for one per candidate pair
(:mod:`eto.planning.planner`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from tuner.tvm_errors import TVM_ERRORS

from eto.operators import Operator
from eto.models.mapping import relax_type
from eto.models.prepack import like_template
from eto.models.tasks import fuse, task_fusion

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target


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
    if not _rebuilds_itself(template, target):
        return None
    try:
        op = _rebuild(anchor, template, target)
    except TVM_ERRORS:  # TVM rejected the rebuilt function (an op, a layout or a fusion it refuses): no bridge
        return None
    if op is None or _signature(op.prim_func(), shapes=False) != _signature(template.prim_func(), shapes=False):
        return None
    return op


#: Whether a template rebuilds to its own function, per (template, target): a plan asks for a bridge of
#: each candidate pair of a kind, all on the same few templates, and each check is a Relax build.
_REBUILDS_ITSELF: dict[tuple[Operator, str], bool] = {}
#: Templates it remembers, the oldest forgotten first: a long-lived process (a notebook, a server)
#: plans model after model, and each key holds a template's function.
REBUILDS_ITSELF_CAP = 1024


def _rebuilds_itself(template: Operator, target: "Target") -> bool:
    """Whether rebuilding ``template`` at its own sizes gives its own blocks and argument shapes (so
    its layouts and epilogue are read right); memoized, O(1) after one Relax build a template."""
    key = (template, str(target))
    if key not in _REBUILDS_ITSELF:
        if len(_REBUILDS_ITSELF) >= REBUILDS_ITSELF_CAP:
            del _REBUILDS_ITSELF[next(iter(_REBUILDS_ITSELF))]
        try:
            own = _rebuild(template.anchor, template, target)
            _REBUILDS_ITSELF[key] = own is not None and _signature(own.prim_func()) == _signature(template.prim_func())
        except TVM_ERRORS:
            _REBUILDS_ITSELF[key] = False
    return _REBUILDS_ITSELF[key]


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
    op = anchor.with_fusion(task_fusion(found[0].task_name, mod), like_template(mod["main"], template.task))
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
