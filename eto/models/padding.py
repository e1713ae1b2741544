"""Linear layers whose row count has no tile: padded to one, the extra rows sliced off after.

MetaSchedule tiles a loop only by exact factors of its length (``SamplePerfectTile``). A matmul whose
row axis is prime or nearly so (a ViT's 197 tokens: 14x14 patches and a class token; 577 at 384x384)
cannot be split into register or cache tiles on that axis at all, so every candidate computes one row
at a time: each weight vector loaded is used once. ONNX Runtime's MLAS packs any size. The usual fix,
taken here: pad the rows with zeros to the next multiple of :data:`ROW_TILE`, multiply, and slice
the real rows back out (:func:`pad_rows`, a Relax pass run where the model is prepared, so the
catalogue operator, the task and the build all see the padded matmul). The extra rows cost at most
``ROW_TILE - 1`` rows of work (1.5% at 197 -> 200); a row count with a usable tile is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import tvm

#: Rows are padded to a multiple of this.
ROW_TILE = 8
#: A row count divisible by one of these already tiles: it is left alone.
USABLE_TILES = range(4, 17)
#: Below this many rows a matmul is too small for padding to pay.
MIN_ROWS = 32


def padded_rows(m: int) -> int:
    """``m`` where some tile from 4 to 16 divides it (or ``m`` is small), else the next multiple of
    :data:`ROW_TILE`: 197 -> 200, 577 -> 584, 394 (2 x 197) -> 400; 128, 196, 49 stay."""
    if m < MIN_ROWS or any(m % t == 0 for t in USABLE_TILES):
        return m
    return -(-m // ROW_TILE) * ROW_TILE


def pad_rows(mod: "tvm.IRModule") -> "tvm.IRModule":
    """``mod`` with each float32 linear layer (``matmul`` of an activation by a 2-D weight) whose row
    count :func:`padded_rows` pads computed on zero-padded rows and sliced back to its shape. O(calls)."""
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    from eto.models.fast_math import mutate_functions
    from eto.models.mapping import static_shape

    matmul = tvm.ir.Op.get("relax.matmul")

    @expr_functor.mutator
    class PaddedRows(PyExprMutator):
        padded: dict = {}  # activation -> its padded rows, in the block being rewritten (Q, K and V share one)

        def visit_dataflow_block_(self, block):
            self.padded = {}
            return super().visit_dataflow_block_(block)

        def visit_binding_block_(self, block):
            self.padded = {}
            return super().visit_binding_block_(block)

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op != matmul:
                return call
            lhs, rhs = call.args
            shape, weight = static_shape(lhs), static_shape(rhs)
            if shape is None or len(shape) < 2 or weight is None or len(weight) != 2:
                return call
            if str(lhs.ty.dtype) != "float32" or str(rhs.ty.dtype) != "float32":
                return call
            m = shape[-2]
            rows = padded_rows(m)
            if rows == m:
                return call
            width = [0] * (2 * len(shape))
            width[2 * (len(shape) - 2) + 1] = rows - m
            if lhs not in self.padded:
                self.padded[lhs] = self.builder_.emit(relax.op.nn.pad(lhs, width))
            padded = self.padded[lhs]
            product = self.builder_.emit(relax.op.matmul(padded, rhs, out_dtype=call.attrs.out_dtype))
            return relax.op.strided_slice(product, axes=[len(shape) - 2], begin=[0], end=[m])

    return mutate_functions(mod, PaddedRows(mod))

