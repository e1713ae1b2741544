"""Fast math: a model's erf, exp, tanh and softmax as TVM's fast approximations (opt in, ``--fast-math``),
and the vector erf and sigmoid of every CPU build.

Not tuning: no schedule makes TVM's ``erf`` fast on CPU. LLVM has no vector ``erf``, so a vectorised
loop calls the C library's scalar ``erff`` once per element, and its cost follows the data: a
BERT-Base layer's GELU (128 x 3072) ran 0.49 ms on zeros, 0.64 ms on U(-1, 1), 1.3 ms on N(0, 1) and
2.8 ms on N(0, 10) (the measurer's random inputs, U(1, 10): 2.55 ms, a quarter of the layer), with
MetaSchedule's one program for it. PyTorch's GELU is a vectorised ``erf``. TVM's
``FastMathTransform`` swaps ``erf``, ``exp``, ``tanh`` and ``softmax`` for polynomial
approximations that vectorise (``topi.fast_erf`` and friends); it does not see ``nn.gelu`` or
``nn.gelu_tanh``, which Relax legalises to ``erf`` and ``tanh`` only later, so :func:`fast_math`
first writes GELU out as ``x * (0.5 + 0.5 * erf(x / sqrt(2)))`` and its tanh form (GPT-2's,
PyTorch's ``approximate="tanh"``) as ``x * (0.5 + 0.5 * tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))``,
the same functions.

Outputs change by rounding-level amounts (checked against PyTorch in the tests). The CLI applies it
right after loading the model, in ``eto tune``, ``build`` and ``bench`` alike: a database tuned with
fast math holds the fast functions' programs, so build and bench the model with ``--fast-math`` too
(without it those tasks are named as having no program and get TVM's default schedules).

Vector math (on CPUs, always): the scalar ``erff`` calls cost GELU more than any schedule can win
back, so on CPU targets eto computes every float32 ``erf`` (GELU's included) with ``topi.fast_erf``,
fast math or not (:func:`vector_math`, run before ``LegalizeOps`` in :func:`eto.models.tasks.fuse`).
Its error, measured against float64 erf on 2^20 float32 points (N(0, 1) and U(-6, 6)): at most 6.8
units in the last place, 4.1e-7 relative, against 0.9 units for the C library's ``erff``. ONNX
Runtime's CPU GELU is a polynomial erf as well (MLAS). Sigmoid (SiLU's, the squeeze-and-excitation
gates' of EfficientNet, RegNetY, MobileNet v3), ``tanh`` (GELU's tanh form: GPT-2's) and softmax are
the same story with ``expf``, which LLVM's vector ``exp`` calls per element: eto writes each float32
sigmoid as ``1 / (1 + fast_exp(-x))``, ``tanh`` as ``topi.fast_tanh`` and softmax as
``topi.nn.fast_softmax`` (error bounds in the tests), and a power by a constant 2, 3 or 4 (GPT-2's
GELU cubes its input; LLVM calls ``powf``) as products. Only ``exp`` elsewhere stays exact unless
``--fast-math``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from eto.models.load import RelaxModel
from tuner.analysis.kinds import is_cpu

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from tvm import te
    from tvm.ir.transform import Pass
    from tvm.target import Target


def fast_math(model: RelaxModel, on: bool = True) -> RelaxModel:
    """``model`` with GELU written out and TVM's ``FastMathTransform`` applied (``on=False``: as it is)."""
    from tvm import relax

    if not on:
        return model
    mod = relax.transform.FastMathTransform()(_gelu_as_erf(model.mod))
    return model._replace(mod=mod, source=f"{model.source}, fast math")


def vector_math(target: "Target") -> list["Pass"]:
    """The pass that computes a model's float32 erf and tanh (GELU's), sigmoid and softmax with TVM's
    vectorising polynomials, and small integer powers as products, on CPUs (else none)."""
    import tvm

    if not is_cpu(target):
        return []

    @tvm.transform.module_pass(opt_level=0, name="EtoVectorMath")
    def as_polynomials(mod: "tvm.IRModule", _ctx) -> "tvm.IRModule":
        return _vector_functions(_gelu_as_erf(mod))

    return [as_polynomials]


def _vector_functions(mod: "tvm.IRModule") -> "tvm.IRModule":
    """``mod`` with each float32 ``relax.erf`` computed by ``topi.fast_erf`` (FastMathTransform's erf alone),
    ``tanh`` by ``topi.fast_tanh``, ``nn.softmax`` by ``topi.nn.fast_softmax``, each ``sigmoid``
    (``nn.silu``'s too) as ``1 / (1 + topi.fast_exp(-x))``, and each power by a constant 2, 3 or 4 as
    products (LLVM calls ``powf`` per element for it: GPT-2's GELU cubes its input)."""
    import tvm
    from tvm import relax, topi
    from tvm.relax import PyExprMutator, expr_functor

    ops = {name: tvm.ir.Op.get(f"relax.{name}") for name in ("erf", "tanh", "sigmoid", "nn.silu", "nn.softmax", "power")}
    polynomial = {ops["erf"]: topi.fast_erf, ops["tanh"]: topi.fast_tanh}

    @expr_functor.mutator
    class VectorFunctions(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op not in ops.values() or str(call.args[0].ty.dtype) != "float32":
                return call
            x, emit = call.args[0], self.builder_.emit
            if call.op in polynomial:
                return self.builder_.call_te(polynomial[call.op], x)
            if call.op == ops["nn.softmax"]:
                return self.builder_.call_te(topi.nn.fast_softmax, x, int(call.attrs.axis))
            if call.op == ops["power"]:
                n = _small_integer(call.args[1], x.ty.ndim)
                if n is None:
                    return call
                return self.builder_.call_te(_product_power, x, n, primfunc_name_hint="power")
            one = relax.const(1.0, "float32")
            e = emit(self.builder_.call_te(topi.fast_exp, emit(relax.op.negative(x))))
            gate = relax.op.divide(one, emit(relax.op.add(one, e)))
            return gate if call.op == ops["sigmoid"] else relax.op.multiply(x, emit(gate))

    return mutate_functions(mod, VectorFunctions(mod))


def _product_power(x: "te.Tensor", n: int) -> "te.Tensor":
    """``x ** n`` as ``x * x * ...``, one element-wise function (FuseOps keeps it with its neighbours,
    which a chain of Relax multiplies with a repeated argument defeats)."""
    from functools import reduce

    from tvm import te

    return te.compute(x.shape, lambda *i: reduce(lambda a, _: a * x(*i), range(n - 1), x(*i)), name="T_power")


def _small_integer(exponent, ndim: int) -> int | None:
    """2, 3 or 4 where ``exponent`` is that constant, of one element and no more dimensions than the
    base's ``ndim`` (so the product has the power's shape), else None."""
    import tvm

    if not isinstance(exponent, tvm.ir.Constant):
        return None
    value = exponent.value.numpy()
    if value.size != 1 or value.ndim > ndim or float(value.flat[0]) not in (2.0, 3.0, 4.0):
        return None
    return int(value.flat[0])


def _gelu_as_erf(mod: "tvm.IRModule") -> "tvm.IRModule":
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    @expr_functor.mutator
    class GeluWrittenOut(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
            if name not in ("relax.nn.gelu", "relax.nn.gelu_tanh"):
                return call
            x = call.args[0]
            dtype = str(x.ty.dtype)
            const = lambda v: relax.const(v, dtype)  # noqa: E731
            mul, emit = relax.op.multiply, self.builder_.emit
            if name == "relax.nn.gelu":
                inner = emit(relax.op.erf(mul(x, const(1 / math.sqrt(2)))))
            else:
                cubic = emit(relax.op.add(x, mul(const(0.044715), mul(x, mul(x, x)))))
                inner = emit(relax.op.tanh(mul(const(math.sqrt(2 / math.pi)), cubic)))
            half = emit(relax.op.add(const(0.5), mul(inner, const(0.5))))
            return mul(x, half)

    return mutate_functions(mod, GeluWrittenOut(mod))


def mutate_functions(mod: "tvm.IRModule", mutator) -> "tvm.IRModule":
    """``mod`` with each Relax function rewritten by ``mutator`` (a ``PyExprMutator`` built on ``mod``)."""
    from tvm import relax

    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()
