"""WIN: Winograd 2-D convolution F(m x m, r x r), NCHW, with a pre-transformed weight.

As in Ansor's benchmark (``pre_computed=True``) the weight is given already transformed,
``kernel_pack[alpha, alpha, CI, CO] = G w G^T``, so the program is the inference-time one:
input transform (an unroll-constant-tensor sub-sketch), the batched GEMM over tiles (the major
loop nest, multi-level tile), and the inverse transform. :func:`transform_weight` makes a
``kernel_pack`` from an ordinary OIHW weight.
"""

from __future__ import annotations

import numpy as np

from eto.errors import InputError
from eto.operators.base import OperatorType, Param, register
from eto.operators.conv import conv_flops_direct


def winograd_matrices(tile_size: int, kernel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, B, G) of F(m, r) with TVM's interpolation points, as float64 numpy arrays."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    a, b, g = _cook_toom_convolution(_interpolation_points(tile_size + kernel - 2), tile_size, kernel)
    return np.asarray(a, np.float64), np.asarray(b, np.float64), np.asarray(g, np.float64)


def transform_weight(w: np.ndarray, tile_size: int) -> np.ndarray:
    """OIHW weight -> kernel_pack[alpha, alpha, CI, CO] = G w G^T."""
    _, _, g = winograd_matrices(tile_size, w.shape[2])
    return np.einsum("ak,oikl,bl->abio", g, w.astype(np.float64), g)


@register
class WinogradConv2D(OperatorType):
    name = "WIN"
    description = "Winograd 2-D convolution F(m,3), NCHW input, pre-transformed weight; composite"
    params = (
        Param("N", "batch size"),
        Param("CI", "input channels"),
        Param("H", "input H"),
        Param("W", "input W"),
        Param("CO", "output channels"),
        Param("K", "kernel size r (square, stride 1)", 3),
        Param("padding", "zero padding per spatial axis", 1, 2),
        Param("tile_size", "output tile size m (alpha = m + r - 1)", 4),
    )
    space_names = ("eps", "nu", "CO", "P")
    reduction_names = ("CI",)
    composite = True

    def _alpha(self, p) -> int:
        return p["tile_size"] + p["K"] - 1

    def _out(self, p) -> tuple[int, int]:
        return tuple(i + 2 * q - p["K"] + 1 for i, q in zip((p["H"], p["W"]), p["padding"]))

    def _tiles(self, p) -> tuple[int, int]:
        m = p["tile_size"]
        oh, ow = self._out(p)
        return (oh + m - 1) // m, (ow + m - 1) // m

    def validate(self, p) -> None:
        super().validate(p)
        if not 2 < p["K"] < 8:
            raise InputError(f"WIN: parameter K={p['K']} must be in 3..7 (TVM's Winograd matrices)")
        if not 1 < p["tile_size"] < 9:
            raise InputError(f"WIN: parameter tile_size={p['tile_size']} must be in 2..8")
        for axis, o in zip(("H", "W"), self._out(p)):
            if o < 1:
                raise InputError(f"WIN: kernel K={p['K']} is larger than the padded input {axis}={p[axis]}")

    def loop_nest(self, p):
        a = self._alpha(p)
        nh, nw = self._tiles(p)
        return (a, a, p["CO"], p["N"] * nh * nw), (p["CI"],)

    def params_from_loop_nest(self, extents, structural):
        eps, nu, co, tiles, ci = extents
        k = int(structural.get("K", 3))
        if eps != nu or eps - k + 1 < 2:
            raise InputError(f"WIN: loop nest {list(extents)} needs eps == nu >= K+1 (alpha of F(m, {k}))")
        m = eps - k + 1
        # One row of P tiles: batch 1, padding 0, output m x (m * P).
        return {"N": 1, "CI": ci, "H": m + k - 1, "W": m * tiles + k - 1, "CO": co, "K": k, "padding": 0,
                "tile_size": m}

    def flops(self, p):
        """Direct-convolution FLOPs, the usual basis for reporting Winograd throughput."""
        return conv_flops_direct(p["N"], p["CO"], self._out(p), p["CI"], (p["K"], p["K"]))

    def sketch_key(self, p, parallel_limit):
        return f"WIN:composite:m{p['tile_size']}"

    def input_shapes(self, p):
        a = self._alpha(p)
        return [(p["N"], p["CI"], p["H"], p["W"]), (a, a, p["CI"], p["CO"])]

    def output_shape(self, p):
        return (p["N"], p["CO"], *self._out(p))

    def te(self, p, dtype):
        from tvm import te, topi
        from tvm.topi.nn.winograd_util import winograd_transform_matrices

        m, r, alpha = p["tile_size"], p["K"], self._alpha(p)
        n, ci, co = p["N"], p["CI"], p["CO"]
        ph, pw = p["padding"]
        nh, nw = self._tiles(p)
        tiles = n * nh * nw
        data = te.placeholder(self.input_shapes(p)[0], dtype, name="data")
        kernel_pack = te.placeholder(self.input_shapes(p)[1], dtype, name="kernel_pack")
        # Pad so that every tile (alpha x alpha, step m) lies inside the padded input.
        extra_h = (nh - 1) * m + alpha - (p["H"] + 2 * ph)
        extra_w = (nw - 1) * m + alpha - (p["W"] + 2 * pw)
        padded = topi.nn.pad(data, (0, 0, ph, pw), (0, 0, ph + extra_h, pw + extra_w), name="data_pad")
        a_mat, b_mat, _ = winograd_transform_matrices(m, r, dtype)

        input_tile = te.compute(
            (ci, tiles, alpha, alpha),
            lambda c, t, e, u: padded[t // (nh * nw), c, (t // nw) % nh * m + e, t % nw * m + u],
            name="input_tile",
        )
        ra = te.reduce_axis((0, alpha), "r_a")
        rb = te.reduce_axis((0, alpha), "r_b")
        data_pack = te.compute(
            (alpha, alpha, ci, tiles),
            lambda e, u, c, t: te.sum(input_tile[c, t, ra, rb] * b_mat[ra, e] * b_mat[rb, u], axis=[ra, rb]),
            name="data_pack",
        )
        rc = te.reduce_axis((0, ci), "rc")
        bgemm = te.compute(
            (alpha, alpha, co, tiles),
            lambda e, u, o, t: te.sum(kernel_pack[e, u, rc, o] * data_pack[e, u, rc, t], axis=[rc]),
            name="bgemm",
        )
        ia = te.reduce_axis((0, alpha), "r_a")
        ib = te.reduce_axis((0, alpha), "r_b")
        inverse = te.compute(
            (co, tiles, m, m),
            lambda o, t, vh, vw: te.sum(bgemm[ia, ib, o, t] * a_mat[ia, vh] * a_mat[ib, vw], axis=[ia, ib]),
            name="inverse",
        )
        oh, ow = self._out(p)
        out = te.compute(
            (n, co, oh, ow),
            lambda b, o, y, x: inverse[o, b * nh * nw + (y // m) * nw + x // m, y % m, x % m],
            name="win",
        )
        return [data, kernel_pack, out]

    def reference(self, p, x, kernel_pack):
        """The same F(m, r) algorithm in float64 numpy: A^T [ U . (B^T d B) ] A per tile."""
        m, r, alpha = p["tile_size"], p["K"], self._alpha(p)
        a_mat, b_mat, _ = winograd_matrices(m, r)
        ph, pw = p["padding"]
        nh, nw = self._tiles(p)
        extra_h = (nh - 1) * m + alpha - (p["H"] + 2 * ph)
        extra_w = (nw - 1) * m + alpha - (p["W"] + 2 * pw)
        xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w)])
        u = kernel_pack.astype(np.float64)
        out = np.zeros((p["N"], p["CO"], nh * m, nw * m))
        for i in range(nh):
            for j in range(nw):
                d = xp[:, :, i * m : i * m + alpha, j * m : j * m + alpha]
                v = np.einsum("ae,ncab,bu->eunc", b_mat, d, b_mat)
                mm = np.einsum("euco,eunc->euno", u, v)
                out[:, :, i * m : (i + 1) * m, j * m : (j + 1) * m] = np.einsum("ey,euno,ux->noyx", a_mat, mm, a_mat)
        oh, ow = self._out(p)
        return out[:, :, :oh, :ow]

