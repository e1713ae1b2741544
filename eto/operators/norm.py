"""FRB: Frobenius norm of each matrix in a batch (Ansor's ``norm_bmn``)."""

from __future__ import annotations

import numpy as np

from eto.operators.base import OperatorType, Param, register


@register
class FrobeniusNorm(OperatorType):
    """Two loop nests: the sum of squares (the major one, as in the paper) and the square root."""

    name = "FRB"
    description = "Frobenius norm D[b] = sqrt(sum_ij A[b,i,j]^2); composite (sum of squares, sqrt)"
    params = (Param("B", "batch"), Param("M", "rows"), Param("N", "columns"))
    space_names = ("b",)
    reduction_names = ("i", "j")
    composite = True

    def loop_nest(self, p):
        return (p["B"],), (p["M"], p["N"])

    def params_from_loop_nest(self, extents, structural):
        b, m, n = extents
        return {"B": b, "M": m, "N": n}

    def flops(self, p):
        return 2 * p["B"] * p["M"] * p["N"] + p["B"]

    def sketch_key(self, p, parallel_limit):
        # Sketch set: cross-thread reduction / rfactor, or two two-level tile sub-sketches (paper 7.1).
        return "FRB:composite"

    def sketch_count(self, p, parallel_limit):
        return 2  # rfactor (cross-thread reduction on GPU) and the two-level tiles

    def input_shapes(self, p):
        return [(p["B"], p["M"], p["N"])]

    def output_shape(self, p):
        return (p["B"],)

    def te(self, p, dtype):
        from tvm import te

        a = te.placeholder(self.input_shapes(p)[0], dtype, name="A")
        i = te.reduce_axis((0, p["M"]), name="i")
        j = te.reduce_axis((0, p["N"]), name="j")
        c = te.compute((p["B"],), lambda b: te.sum(a[b, i, j] * a[b, i, j], axis=[i, j]), name="sumsq")
        d = te.compute((p["B"],), lambda b: te.sqrt(c[b]), name="frb")
        return [a, d]

    def reference(self, p, a):
        return np.sqrt(np.sum(a.astype(np.float64) ** 2, axis=(1, 2)))
