"""Rewrites of what TVM's frontends write that TVM's own backends reject or miscompute.

Applied to every model before it is prepared (:func:`eto.models.tasks.prepare`), so each is a fix of
meaning, never a change of a correct model:

- :func:`integer_cumsum`: PyTorch's ``cumsum`` of a boolean tensor counts (its result is ``int64``);
  TVM's PyTorch frontend writes it as a ``cumsum`` whose result stays boolean, which LLVM's codegen
  rejects ("Check failed: t.MatchesCode(kDLFloat)") and which could only saturate at 1 anyway.
  Hugging Face ``transformers`` builds its attention masks so (GPT-2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eto.models.fast_math import mutate_functions
from eto.models.mapping import relax_type

if TYPE_CHECKING:  # pragma: no cover
    import tvm


def frontend_fixes(mod: "tvm.IRModule") -> "tvm.IRModule":
    """``mod`` with every rewrite of this module applied."""
    return integer_cumsum(mod)


def integer_cumsum(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Every ``cumsum`` of a boolean tensor with no result type given computed in ``int64``, as PyTorch
    computes it. O(bindings)."""
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    cumsum = tvm.ir.Op.get("relax.cumsum")

    @expr_functor.mutator
    class IntegerCumsum(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op != cumsum or call.attrs.dtype is not None and str(call.attrs.dtype) not in ("", "bool"):
                return call
            x = call.args[0]
            if str(getattr(relax_type(x), "dtype", "")) != "bool":
                return call
            counted = self.builder_.emit(relax.op.astype(x, "int64"))
            return relax.op.cumsum(counted, axis=call.attrs.axis, dtype="int64", exclusive=call.attrs.exclusive)

    return mutate_functions(mod, IntegerCumsum(mod))
