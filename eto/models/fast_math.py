"""Fast math: a model's erf, exp, tanh and softmax as TVM's fast approximations (opt in, ``--fast-math``).

Not tuning: no schedule makes TVM's ``erf`` fast on CPU. LLVM has no vector ``erf``, so a vectorised
loop calls the C library's scalar ``erff`` once per element, and its cost follows the data: a
BERT-Base layer's GELU (128 x 3072) ran 0.49 ms on zeros, 0.64 ms on U(-1, 1), 1.3 ms on N(0, 1) and
2.8 ms on N(0, 10) (the measurer's random inputs, U(1, 10): 2.55 ms, a quarter of the layer), with
MetaSchedule's one program for it. PyTorch's GELU is a vectorised ``erf``. TVM's
``FastMathTransform`` swaps ``erf``, ``exp``, ``tanh`` and ``softmax`` for polynomial
approximations that vectorise (``topi.fast_erf`` and friends); it does not see ``nn.gelu``, which
Relax legalises to ``erf`` only later, so :func:`fast_math` first writes GELU out as
``x * (0.5 + 0.5 * erf(x / sqrt(2)))``, the same function.

Outputs change by rounding-level amounts (checked against PyTorch in the tests). The CLI applies it
right after loading the model, in ``eto tune``, ``build`` and ``bench`` alike: a database tuned with
fast math holds the fast functions' programs, so build and bench the model with ``--fast-math`` too
(without it those tasks are named as having no program and get TVM's default schedules).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .load import RelaxModel

if TYPE_CHECKING:  # pragma: no cover
    import tvm


def fast_math(model: RelaxModel, on: bool = True) -> RelaxModel:
    """``model`` with GELU written out and TVM's ``FastMathTransform`` applied (``on=False``: as it is)."""
    from tvm import relax

    if not on:
        return model
    mod = relax.transform.FastMathTransform()(_gelu_as_erf(model.mod))
    return model._replace(mod=mod, source=f"{model.source}, fast math")


def _gelu_as_erf(mod: "tvm.IRModule") -> "tvm.IRModule":
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    @expr_functor.mutator
    class GeluAsErf(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not isinstance(call.op, tvm.ir.Op) or call.op.name != "relax.nn.gelu":
                return call
            x = call.args[0]
            dtype = str(x.ty.dtype)
            const = lambda v: relax.const(v, dtype)  # noqa: E731
            erf = self.builder_.emit(relax.op.erf(relax.op.multiply(x, const(1 / math.sqrt(2)))))
            half = self.builder_.emit(relax.op.add(const(0.5), relax.op.multiply(erf, const(0.5))))
            return relax.op.multiply(x, half)

    mutator = GeluAsErf(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()
