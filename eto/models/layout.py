"""The layout a model's convolutions are tuned and built in: NCHW as the model is written, or NHWC.

Frameworks write CNNs in NCHW; CPU libraries run them channels last (ONNX Runtime's MLAS in
channel-blocked NCHWc, oneDNN in NHWC or blocked layouts), because a CPU vectorises the contiguous
axis and the channels are the axis every convolution reduces or produces. MetaSchedule's programs
follow the layout they are given: at the same budget (64 trials) its programs for four common CNN
convolutions ran 1.6x, 3.6x and 7.3x faster in NHWC than in NCHW, and one 0.9x as fast, on a 2-core
AMD EPYC (``python -m experiments.tools.layout_probe``). ``--layout NHWC`` converts every ungrouped or depthwise 2-D
convolution with Relax's ``ConvertLayout`` after the batch norms are folded, before the model is
fused (:func:`eto.models.tasks.prepare`): the transposes it inserts sit only where the layout
changes (the model's input, a flatten, a grouped convolution left in NCHW), the weights' are folded
into constants, ReLU6 follows the layout whether it arrives as ``clip`` (``torch.export``) or as
TE ``maximum``/``minimum`` PrimFuncs (TVM's ONNX importer), and the convolutions become the catalogue's ``C2DNHWC``
and ``DEPNHWC`` (:mod:`eto.operators.channels_last`). Other grouped convolutions stay NCHW.

``--layout NHWC-winograd`` is NHWC with every 3x3 stride-1 convolution that has enough channels computed
by Winograd's F(m, 3) as a batched GEMM between two hand-scheduled transforms (:mod:`eto.models.winograd`).

A database holds the functions of the layout it was tuned in: build and bench the model with the
same ``--layout`` (otherwise its convolutions are named as having no program).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from eto.errors import InputError
from eto.models.fast_math import mutate_functions
from eto.models.load import RelaxModel
from eto.models.mapping import channels_last_kind, relax_type, static_shape

if TYPE_CHECKING:  # pragma: no cover
    import tvm

#: The layouts a model's convolutions can be tuned and built in.
Layout = Literal["NCHW", "NHWC", "NHWC-winograd"]
LAYOUTS: tuple[str, ...] = get_args(Layout)


def with_layout(model: RelaxModel, layout: str = "NCHW") -> RelaxModel:
    """``model`` to be prepared with its convolutions in ``layout`` (NCHW: as written)."""
    if layout not in LAYOUTS:
        raise InputError(f"unknown layout {layout!r}: one of {', '.join(LAYOUTS)}")
    if layout == model.layout:
        return model
    return model._replace(layout=layout, source=f"{model.source}, {layout}")


def convert_layout(mod: "tvm.IRModule", layout: str) -> "tvm.IRModule":
    """``mod``'s ungrouped and depthwise 2-D convolutions in ``layout`` (NHWC data, OHWI weights), constants
    folded; with ``NHWC-winograd``, its eligible 3x3 convolutions then by Winograd."""
    from tvm import relax

    from eto.models.winograd import winograd_convolutions

    if layout == "NCHW":
        return mod

    def desired(call) -> dict:
        if call.op.name != "relax.nn.conv2d" or str(call.attrs.data_layout) != "NCHW":
            return {}
        data, weight = static_shape(call.args[0]), static_shape(call.args[1])
        if data is None or weight is None or len(data) != 4 or len(weight) != 4:  # symbolic: left as it is
            return {}
        # NCHW shapes here; as NHWC/OHWI the catalogue must hold the convolution (ungrouped or depthwise)
        nhwc, ohwi = (data[0], *data[2:], data[1]), (weight[0], *weight[2:], weight[1])
        return {"relax.nn.conv2d": ["NHWC", "OHWI"]} if channels_last_kind(nhwc, ohwi, int(call.attrs.groups)) else {}

    mod = clip_as_max_min(primfunc_min_max_as_ops(mod))
    converted = relax.transform.FoldConstant()(relax.transform.ConvertLayout({}, layout_cb=desired)(mod))
    return winograd_convolutions(converted) if layout == "NHWC-winograd" else converted


def clip_as_max_min(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Every ``clip(x, lo, hi)`` (ReLU6 from ``torch.export``) written as ``minimum(maximum(x, lo), hi)``.

    ``ConvertLayout`` knows no layout for ``clip`` and would move its input back to NCHW and its
    output to NHWC again around every ReLU6 (MobileNets have one after most convolutions);
    ``maximum`` and ``minimum`` with a scalar follow their input's layout, and fuse into the
    convolution before them as ``clip`` does."""
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    @expr_functor.mutator
    class ClipAsMaxMin(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.clip"):
                return call
            x, dtype = call.args[0], str(relax_type(call.args[0]).dtype)
            try:
                lo, hi = (float(getattr(a.value, "value", a.value)) for a in call.args[1:3])
            except (TypeError, ValueError, AttributeError):  # bounds that are not constants: left alone
                return call
            low = self.builder_.emit(relax.op.maximum(x, relax.const(lo, dtype)))
            return relax.op.minimum(low, relax.const(hi, dtype))

    return mutate_functions(mod, ClipAsMaxMin(mod))


def primfunc_min_max_as_ops(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Every ``call_tir`` of an element-wise ``maximum``/``minimum`` PrimFunc with a scalar constant
    (ONNX ``Clip``, ReLU6, as TVM's ONNX importer writes it) as Relax's ``maximum``/``minimum``.

    ``ConvertLayout`` cannot see into a PrimFunc: it moves the input of every such call back to NCHW
    and its output to NHWC again, which left 13 transposes around ReLU6 in an ONNX MobileNetV2
    (46 tasks in NHWC against 34 from the same network's ``torch.export``). The bound is folded to
    a constant first (the importer computes it with ``where(isnan(...))``)."""
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    mod = relax.transform.FoldConstant()(mod)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    ops = {"max": relax.op.maximum, "min": relax.op.minimum}

    @expr_functor.mutator
    class MinMaxAsOps(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op != call_tir or not isinstance(call.args[0], tvm.ir.GlobalVar) or len(call.args) != 2:
                return call
            kind = _min_max_kind(mod[call.args[0]]) if call.args[0] in mod.get_global_vars() else None
            args = list(call.args[1].fields) if isinstance(call.args[1], relax.Tuple) else []
            if kind is None or len(args) != 2:
                return call
            x, bound = args
            if not (isinstance(bound, tvm.ir.expr.GenericConst) and static_shape(bound) == ()):
                return call
            if static_shape(x) is None or static_shape(x) != static_shape(call):
                return call
            return ops[kind](x, bound)

    rewritten = mutate_functions(mod, MinMaxAsOps(mod))
    return relax.transform.DeadCodeElimination()(rewritten)


def _min_max_kind(func) -> str | None:
    """``"max"`` or ``"min"`` when ``func`` is a PrimFunc of two inputs whose one store is their
    element-wise maximum or minimum (``topi.maximum``/``minimum``), else None."""
    from tvm import tirx

    if not isinstance(func, tirx.PrimFunc) or len(func.params) != 3:
        return None
    values = [store.value for store in tir_statements(func.body) if isinstance(store, tirx.BufferStore)]
    if len(values) != 1:
        return None
    if isinstance(values[0], tirx.Max):
        return "max"
    return "min" if isinstance(values[0], tirx.Min) else None


def tir_statements(stmt) -> list:
    """Every statement of a TIR statement, pre-order, through its loops, blocks and sequences (TVM's
    Python API has no statement visitor). O(statements)."""
    from tvm import tirx

    found = [stmt]
    for field in ("body", "block", "init", "then_case", "else_case"):
        child = getattr(stmt, field, None)
        if isinstance(child, tirx.Stmt):
            found += tir_statements(child)
    for child in getattr(stmt, "seq", None) or ():
        found += tir_statements(child)
    return found
