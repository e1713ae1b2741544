"""A model's convolutions channels last (NHWC data, OHWI weights): Relax's ``ConvertLayout``, guarded.

:func:`channels_last` first puts the model in its inference form (:func:`inference_form`), in
operators whose layout ``ConvertLayout`` follows, converts every convolution the catalogue holds
channels last, and cancels the transpose pairs the conversion leaves (:func:`cancel_transposes`).
Where ``ConvertLayout`` still fails on some operator, only the convolutions whose region fails stay
as written (found by halving), and the conversion says which and why: a layout never turns into an
internal error. :mod:`eto.models.layout` chooses the layout; this module converts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from eto.models.constants import fold_constants
from eto.models.fast_math import mutate_functions
from eto.models.mapping import channels_last_kind, relax_type, static_shape

if TYPE_CHECKING:  # pragma: no cover
    import tvm

#: What a failing Relax pass raises through TVM's FFI: builtin types by the error's kind
#: (``tvm.error.InternalError`` is a ``RuntimeError``, a failed ``ICHECK`` among them).
RELAX_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, KeyError, AttributeError)


@dataclass(frozen=True)
class LayoutConversion:
    """What :func:`channels_last` did to a model: its convolutions, how many went channels last, the
    transposes the conversion added (the model's own not counted), and why the rest stayed as written
    (empty: none did)."""

    convolutions: int
    converted: int
    transposes: int
    left_as_written: str = ""

    def describe(self) -> str:
        """One line for the user: how much of the model is channels last, and why the rest is not."""
        text = f"{self.converted} of {self.convolutions} convolutions channels last, {self.transposes} transposes added"
        return text + (f"; {self.left_as_written}" if self.left_as_written else "")


def channels_last(mod: "tvm.IRModule") -> "tuple[tvm.IRModule, LayoutConversion]":
    """``mod`` with every convolution the catalogue holds channels last (NHWC/OHWI) that Relax's
    ``ConvertLayout`` can convert, and what was converted.

    The model is first put in its inference form (:func:`inference_form`: dropouts dropped, batch norms
    that no convolution absorbed as a multiply and an add, ReLU6 as ``maximum``/``minimum``), which
    ``ConvertLayout`` follows through. Where it still raises, the convolutions whose conversion makes
    it fail are found (:func:`convertible`) and stay as written, every other one is converted; where it
    fails with none converted (an operator it cannot pass at all), the model stays as written."""
    from tvm import relax

    if not any(_channels_last_ok(call) for call in _conv_calls(mod)):  # nothing to convert: the model as written
        return mod, LayoutConversion(len(_conv_calls(mod)), 0, 0)
    mod = inference_form(mod)
    wanted = [i for i, call in enumerate(_conv_calls(mod)) if _channels_last_ok(call)]
    total, done = len(_conv_calls(mod)), {}

    def attempt(chosen: "frozenset[int]"):
        seen = iter(range(1 << 30))

        def desired(call) -> dict:
            if call.op.name != "relax.nn.conv2d":
                return {}
            index = next(seen)  # ConvertLayout asks for every call in the order _conv_calls lists them
            return {"relax.nn.conv2d": ["NHWC", "OHWI"]} if index in chosen else {}

        out = relax.transform.ConvertLayout({}, layout_cb=desired)(mod)
        done[chosen] = cancel_transposes(fold_constants(out))

    def works(chosen: "frozenset[int]") -> bool:
        try:
            attempt(chosen)
        except RELAX_ERRORS:
            return False
        return True

    chosen, why = frozenset(wanted), ""
    try:
        attempt(chosen)
    except RELAX_ERRORS as exc:  # an operator's layout inference failed: isolate its convolutions
        failure = f"{type(exc).__name__}: {_last_line(exc)}"
        if not works(frozenset()):
            return mod, LayoutConversion(total, 0, 0, f"all {len(wanted)} left as written: Relax's ConvertLayout "
                                                       f"fails on this model whatever is converted ({failure})")
        chosen = frozenset(convertible(wanted, works))
        why = (f"{len(wanted) - len(chosen)} left as written: Relax's ConvertLayout fails on the operators after "
               f"them ({failure})")
    converted = done[chosen]
    added = _count_calls(converted, "relax.permute_dims") - _count_calls(mod, "relax.permute_dims")
    return converted, LayoutConversion(total, len(chosen), added, why)


def convertible(items: "Sequence[int]", works: "Callable[[frozenset[int]], bool]") -> list[int]:
    """A maximal subset of ``items`` that ``works`` accepts (``works(frozenset())`` must hold), taken in
    order: each group is added whole where ``works`` accepts it with what is kept so far, else halved and
    its halves tried (delta debugging). O(k log n) calls of ``works`` for k items that cannot be added
    among n; maximal, not maximum: an item is left out only where adding it alone to the kept ones fails."""
    kept: list[int] = []
    pending = [list(items)]
    while pending:
        group = pending.pop(0)
        if not group:
            continue
        if works(frozenset(kept + group)):
            kept += group
        elif len(group) > 1:
            pending[:0] = [group[:len(group) // 2], group[len(group) // 2:]]
    return kept


def _channels_last_ok(call) -> bool:
    """Whether the catalogue holds ``call`` (an NCHW conv2d) channels last, with static shapes."""
    if str(call.attrs.data_layout) != "NCHW":
        return False
    data, weight = static_shape(call.args[0]), static_shape(call.args[1])
    if data is None or weight is None or len(data) != 4 or len(weight) != 4:  # symbolic: left as it is
        return False
    nhwc, ohwi = (data[0], *data[2:], data[1]), (weight[0], *weight[2:], weight[1])
    return channels_last_kind(nhwc, ohwi, int(call.attrs.groups))


def _conv_calls(mod: "tvm.IRModule") -> list:
    """The 2-D convolutions of ``mod``'s Relax functions, in the order ``ConvertLayout`` visits them."""
    return _calls(mod, "relax.nn.conv2d")


def _count_calls(mod: "tvm.IRModule", op: str) -> int:
    return len(_calls(mod, op))


def _calls(mod: "tvm.IRModule", op: str) -> list:
    import tvm
    from tvm import relax

    found = []

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == op:
            found.append(expr)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


def shuffles_channels_last(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Every channel shuffle ``reshape(permute_dims(reshape(x, [N, g, c, H, W]), [0, 2, 1, 3, 4]), [N, g*c,
    H, W])`` (ShuffleNet's) written channels last between two transposes: ``x`` to NHWC, the same shuffle
    on the last axis, back to NCHW. ``ConvertLayout`` infers no layout for a reshape, so the NCHW form
    held the shuffle, and the split and concat around it, in NCHW between transposes; in this form the
    transposes meet the converted convolutions' and cancel (:func:`cancel_transposes`). O(bindings)."""
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    reshape, permute = tvm.ir.Op.get("relax.reshape"), tvm.ir.Op.get("relax.permute_dims")

    @expr_functor.mutator
    class Shuffles(PyExprMutator):
        def bound(self, expr, op):
            value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
            return value if isinstance(value, relax.Call) and value.op == op else None

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op != reshape or (t := self.bound(call.args[0], permute)) is None:
                return call
            if t.attrs.axes is None or [int(a) for a in t.attrs.axes] != [0, 2, 1, 3, 4]:
                return call
            if (r := self.bound(t.args[0], reshape)) is None:
                return call
            x, five, out = r.args[0], static_shape(r), static_shape(call)
            if static_shape(x) is None or five is None or out is None or len(five) != 5 or static_shape(x) != out \
                    or len(out) != 4 or five[0] != out[0] or five[3:] != out[2:] or five[1] * five[2] != out[1]:
                return call
            n, g, c, h, w = five
            nhwc = self.builder_.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
            grouped = self.builder_.emit(relax.op.reshape(nhwc, [n, h, w, g, c]))
            swapped = self.builder_.emit(relax.op.permute_dims(grouped, [0, 1, 2, 4, 3]))
            shuffled = self.builder_.emit(relax.op.reshape(swapped, [n, h, w, g * c]))
            return relax.op.permute_dims(shuffled, [0, 3, 1, 2])

    return relax.transform.DeadCodeElimination()(mutate_functions(mod, Shuffles(mod)))


def inference_form(mod: "tvm.IRModule") -> "tvm.IRModule":
    """``mod`` as it runs at inference, in operators whose layout Relax's ``ConvertLayout`` follows:
    ``dropout`` dropped (an identity at inference, but a tuple of two outputs that ``ConvertLayout``
    cannot match: "Expected nested to match tuple"), batch norms no convolution absorbed (a
    DenseNet's after each concat) decomposed into a multiply and an add, which follow the layout
    where ``batch_norm`` would be moved back to NCHW between two transposes, and ReLU6 as
    ``maximum``/``minimum`` (:func:`clip_as_max_min`, :func:`primfunc_min_max_as_ops`), and channel shuffles
    channels last (:func:`shuffles_channels_last`)."""
    from tvm import relax

    mod = relax.transform.DecomposeOpsForInference()(without_dropout(mod))
    return shuffles_channels_last(clip_as_max_min(primfunc_min_max_as_ops(mod)))


def without_dropout(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Every use of an inference ``dropout``'s output replaced by its input; the dropout is then dead."""
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    dropout = tvm.ir.Op.get("relax.nn.dropout")

    @expr_functor.mutator
    class WithoutDropout(PyExprMutator):
        def visit_tuple_getitem_(self, op):
            op = super().visit_tuple_getitem_(op)
            if op.index != 0 or not isinstance(op.tuple_value, relax.Var):
                return op
            bound = self.lookup_binding(op.tuple_value)
            return bound.args[0] if isinstance(bound, relax.Call) and bound.op == dropout else op

    rewritten = mutate_functions(mod, WithoutDropout(mod))
    # the dropout's output var is now an alias of its input: ConvertLayout would move an alias back to NCHW
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(rewritten))


def _axes(call) -> list[int] | None:
    """A ``permute_dims`` call's permutation (None: reverse every axis)."""
    given = call.attrs.axes
    return None if given is None else [int(a) for a in given]


def _undoes(p: list[int] | None, q: list[int] | None) -> bool:
    """Whether ``permute_dims`` by ``q`` after one by ``p`` is the identity."""
    return p is not None and q is not None and len(p) == len(q) and [p[i] for i in q] == list(range(len(p)))


def _ints(expr) -> list[int] | None:
    """A Relax tuple of integer constants as ints (None where it is not one)."""
    try:
        return [int(getattr(e, "value", e)) for e in expr.fields]
    except (AttributeError, TypeError, ValueError):
        return None


def cancel_transposes(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Transposes that undo each other, removed: every ``permute_dims(permute_dims(x, p), q)`` whose
    permutations compose to the identity replaced by ``x`` (``ConvertLayout`` leaves such pairs where a
    region it moved back to NCHW meets one it converts again), every identity ``permute_dims`` by its
    input, a ``strided_slice`` between two such transposes (a ``Split`` of channels, which
    ``ConvertLayout`` leaves in NCHW: ShuffleNet splits every unit's input) by the same slice of ``x`` on
    the permuted axes, and a ``concat`` of such paths by the concat of their inputs on the permuted axis
    (ShuffleNet's unit joins its untouched half to the branch's output). A transpose then unused is
    dropped. O(bindings x concat width)."""
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    permute, strided_slice, concat = (tvm.ir.Op.get(f"relax.{name}") for name in ("permute_dims", "strided_slice",
                                                                                   "concat"))

    @expr_functor.mutator
    class CancelTransposes(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op != permute:
                return call
            q = _axes(call)
            if q == list(range(len(q or [0]))):
                return call.args[0]
            simpler = self.through(call.args[0], q)
            return call if simpler is None else simpler

        def through(self, expr, q: list[int] | None):
            """``permute_dims(expr, q)`` without a transpose, where ``expr`` undoes ``q`` on every path
            (a transpose, a slice of one, a concat of such); None where some path would need one."""
            inner = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
            if not isinstance(inner, relax.Call) or q is None:
                return None
            if inner.op == permute:
                return inner.args[0] if _undoes(_axes(inner), q) else None
            if inner.op == strided_slice and isinstance(inner.args[0], relax.Var):
                under, sliced = self.lookup_binding(inner.args[0]), _ints(inner.args[1])
                if not (isinstance(under, relax.Call) and under.op == permute and _undoes(_axes(under), q)) or \
                        sliced is None:
                    return None
                p = _axes(under)
                return relax.op.strided_slice(under.args[0], [p[a % len(p)] for a in sliced], *inner.args[2:],
                                              assume_inbound=bool(inner.attrs.assume_inbound))
            if inner.op == concat and isinstance(inner.args[0], relax.Tuple) and inner.attrs.axis is not None:
                parts = [self.through(f, q) for f in inner.args[0].fields]
                if any(part is None for part in parts):
                    return None
                axis = int(inner.attrs.axis) % len(q)
                return relax.op.concat([self.builder_.emit(part) for part in parts], axis=q.index(axis))
            return None

    rewritten = mutate_functions(mod, CancelTransposes(mod))
    return relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(rewritten))


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

    mod = fold_constants(mod)
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
