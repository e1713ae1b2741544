"""Matrix products: BMM (batch matmul, the paper's BERT operators) and DENSE (plain matmul)."""

from __future__ import annotations

import numpy as np

from eto.operators.base import OperatorType, Param, register


@register
class BatchMatmul(OperatorType):
    name = "BMM"
    description = "batch matmul Z[b,i,j] = sum_k X[b,i,k] * Y[b,j,k] (Y transposed, as in BERT)"
    params = (
        Param("B", "batch"),
        Param("M", "rows of X and Z (i)"),
        Param("N", "rows of Y, columns of Z (j)"),
        Param("K", "reduction length (k)"),
    )
    space_names = ("b", "i", "j")
    reduction_names = ("k",)

    def loop_nest(self, p):
        return (p["B"], p["M"], p["N"]), (p["K"],)

    def params_from_loop_nest(self, extents, structural):
        b, m, n, k = extents
        return {"B": b, "M": m, "N": n, "K": k}

    def input_shapes(self, p):
        return [(p["B"], p["M"], p["K"]), (p["B"], p["N"], p["K"])]

    def output_shape(self, p):
        return (p["B"], p["M"], p["N"])

    def te(self, p, dtype):
        from tvm import te

        x = te.placeholder(self.input_shapes(p)[0], dtype, name="X")
        y = te.placeholder(self.input_shapes(p)[1], dtype, name="Y")
        k = te.reduce_axis((0, p["K"]), name="k")
        z = te.compute(
            self.output_shape(p), lambda b, i, j: te.sum(x[b, i, k] * y[b, j, k], axis=k), name="bmm"
        )
        return [x, y, z]

    def reference(self, p, x, y):
        return np.einsum("bik,bjk->bij", x.astype(np.float64), y.astype(np.float64))


@register
class Dense(OperatorType):
    name = "DENSE"
    description = "dense / matmul Z[i,j] = sum_k X[i,k] * W[j,k] (a linear layer without bias)"
    params = (Param("M", "rows of X (tokens x batch)"), Param("N", "output features"), Param("K", "input features"))
    space_names = ("i", "j")
    reduction_names = ("k",)

    def loop_nest(self, p):
        return (p["M"], p["N"]), (p["K"],)

    def params_from_loop_nest(self, extents, structural):
        m, n, k = extents
        return {"M": m, "N": n, "K": k}

    def input_shapes(self, p):
        return [(p["M"], p["K"]), (p["N"], p["K"])]

    def output_shape(self, p):
        return (p["M"], p["N"])

    def te(self, p, dtype):
        from tvm import te

        x = te.placeholder(self.input_shapes(p)[0], dtype, name="X")
        w = te.placeholder(self.input_shapes(p)[1], dtype, name="W")
        k = te.reduce_axis((0, p["K"]), name="k")
        z = te.compute(self.output_shape(p), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name="dense")
        return [x, w, z]

    def reference(self, p, x, w):
        return x.astype(np.float64) @ w.astype(np.float64).T
