"""Constant folding in numpy: the weight arithmetic a model's import leaves, evaluated, not compiled.

Folding a batch norm into its convolution (``FoldBatchnormToConv2D``) and moving weights channels
last (``ConvertLayout``) leave expressions over constants: ``multiply(W, expand_dims(divide(γ,
sqrt(add(σ², ε)))))``, ``permute_dims(W)``. Relax's ``FoldConstant`` legalizes each to TIR, builds it
with LLVM and runs it: ~160 builds for ResNet-50, a second or two of every command that imports a
model. :func:`fold_constants` evaluates the element-wise arithmetic and the layout operators among
them with numpy, in the constants' own dtype (IEEE float arithmetic and ``sqrt`` round as TVM's
generated code does: the same bits), and leaves the rest to ``FoldConstant``, which runs after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import tvm

#: Element-wise operators folded here, by Relax name: float inputs only (an integer division's
#: rounding is Relax's to define).
ARITHMETIC: dict[str, Callable[..., np.ndarray]] = {
    "relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
    "relax.divide": np.divide, "relax.sqrt": np.sqrt, "relax.negative": np.negative,
}
#: What TVM's ONNX importer writes for a ``Clip``'s bounds (``where(isnan(b), ±inf, b)``): every
#: ReLU6 of an ONNX MobileNet.
SELECTION: dict[str, Callable[..., np.ndarray]] = {"relax.isnan": np.isnan, "relax.where": np.where}
#: Layout operators folded here (their attributes read by :func:`_layout`).
LAYOUT = frozenset({"relax.permute_dims", "relax.reshape", "relax.expand_dims", "relax.squeeze"})


def fold_constants(mod: "tvm.IRModule") -> "tvm.IRModule":
    """``mod`` with every call of :data:`ARITHMETIC`, :data:`SELECTION` or :data:`LAYOUT` over constants
    replaced by its value, then Relax's ``FoldConstant`` for what is left. O(bindings + constant bytes)."""
    from tvm import relax
    from tvm.ir.expr import Constant
    from tvm.relax import PyExprMutator, expr_functor

    from eto.models.fast_math import mutate_functions
    from eto.models.mapping import relax_type

    @expr_functor.mutator
    class Fold(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name not in ARITHMETIC and name not in SELECTION and name not in LAYOUT:
                return call
            values = [self.constant(a) for a in call.args[:1 if name in LAYOUT else len(call.args)]]
            if any(v is None for v in values):
                return call
            value = evaluate(name, values, call)
            return call if value is None else relax.const(value, str(value.dtype))

        def constant(self, expr) -> np.ndarray | None:
            """``expr``'s value where it is a constant (or a variable bound to one)."""
            if isinstance(expr, relax.Var):
                expr = self.lookup_binding(expr)  # None for a parameter
            value = expr.value if isinstance(expr, Constant) else None
            if isinstance(value, (int, float)):  # a scalar (an epsilon): a 0-d array of its dtype
                dtype = getattr(expr, "dtype", None) or getattr(relax_type(expr), "dtype", None)
                return np.array(value, dtype=str(dtype)) if dtype is not None else None
            return value.numpy() if hasattr(value, "numpy") else None

    folded = mutate_functions(mod, Fold(mod))
    return relax.transform.FoldConstant()(relax.transform.DeadCodeElimination()(folded))


def evaluate(name: str, values: list[np.ndarray], call: Any) -> np.ndarray | None:
    """The value of the call ``name`` on constant ``values``; None where it is not folded here."""
    if name in ARITHMETIC:
        if any(v.dtype.kind != "f" for v in values) or len({v.dtype for v in values}) != 1:
            return None
        with np.errstate(all="ignore"):  # inf and NaN are values too, as TVM's code would compute them
            out = np.asarray(ARITHMETIC[name](*values))
        return out.astype(values[0].dtype, copy=False)
    if name == "relax.isnan":
        return np.isnan(values[0]) if values[0].dtype.kind == "f" else None
    if name == "relax.where":
        cond, x, y = values
        return np.where(cond, x, y) if cond.dtype == np.bool_ and x.dtype == y.dtype else None
    return _layout(name, values[0], call)


def _layout(name: str, x: np.ndarray, call: Any) -> np.ndarray | None:
    attrs = call.attrs
    if name == "relax.permute_dims":
        axes = None if attrs.axes is None else [int(a) for a in attrs.axes]
        return np.ascontiguousarray(np.transpose(x, axes))
    if name == "relax.reshape":
        shape = getattr(call.args[1], "values", None)
        try:
            return x.reshape([int(s) for s in shape]) if shape is not None else None
        except (TypeError, ValueError):  # a symbolic size
            return None
    if name == "relax.expand_dims":
        out = x
        for axis in sorted(int(a) % (x.ndim + len(attrs.axis)) for a in attrs.axis):
            out = np.expand_dims(out, axis)
        return out
    if name == "relax.squeeze":
        return np.squeeze(x, None if attrs.axis is None else tuple(int(a) for a in attrs.axis))
    return None
