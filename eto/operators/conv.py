"""Convolutions in the NCHW family (the paper's layouts): C1D, C2D, C3D, GRP, DEP, T2D, CAP."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from eto.errors import InputError
from eto.operators.base import OperatorType, Param, ParamValue, register

_AXES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}


def _out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - (kernel - 1) * dilation - 1) // stride + 1


class _ConvND(OperatorType):
    """Direct convolution over ``ndim`` spatial axes, optionally grouped (NC<spatial> / OI<kernel>)."""

    ndim: int = 2
    grouped = False

    @property
    def _axes(self) -> tuple[str, ...]:
        return _AXES[self.ndim]

    @property
    def _kernel_names(self) -> tuple[str, ...]:
        return tuple("K" + a for a in self._axes) if self.ndim > 1 else ("K",)

    # parameters: N, CI, <spatial>, CO, <kernel>, [groups], stride, padding, dilation
    def _kernel(self, p) -> tuple[int, ...]:
        return tuple(p[k] for k in self._kernel_names)

    def _spatial(self, p) -> tuple[int, ...]:
        return tuple(p[a] for a in self._axes)

    def _groups(self, p) -> int:
        return p["groups"] if self.grouped else 1

    def out_spatial(self, p) -> tuple[int, ...]:
        return tuple(
            _out_size(s, k, st, pd, d)
            for s, k, st, pd, d in zip(self._spatial(p), self._kernel(p), p["stride"], p["padding"], p["dilation"])
        )

    def validate(self, p) -> None:
        super().validate(p)
        g = self._groups(p)
        if p["CI"] % g:
            raise InputError(f"{self.name}: parameter groups={g} does not divide input channels CI={p['CI']}")
        if p["CO"] % g:
            raise InputError(f"{self.name}: parameter groups={g} does not divide output channels CO={p['CO']}")
        for axis, size, k, pad, d in zip(self._axes, self._spatial(p), self._kernel(p), p["padding"], p["dilation"]):
            kname = "K" + axis if self.ndim > 1 else "K"
            if (k - 1) * d + 1 > size + 2 * pad:
                raise InputError(f"{self.name}: kernel {kname}={k} (dilation {d}) is larger than the padded "
                                 f"input {axis}={size}+2*{pad}")

    def loop_nest(self, p):
        g = self._groups(p)
        return (p["N"], p["CO"], *self.out_spatial(p)), (p["CI"] // g, *self._kernel(p))

    def params_from_loop_nest(self, extents: Sequence[int], structural):
        nd = self.ndim
        n, co, *rest = extents
        out_sp, (ci_g, *kernel) = rest[:nd], rest[nd:]
        g = int(structural.get("groups", 1))
        p: dict[str, ParamValue] = {"N": n, "CO": co, "CI": ci_g * g}
        for axis, o, k in zip(self._axes, out_sp, kernel):
            p[axis] = o + k - 1
        for kname, k in zip(self._kernel_names, kernel):
            p[kname] = k
        if self.grouped:
            p["groups"] = g
        return p

    def input_shapes(self, p):
        g = self._groups(p)
        return [(p["N"], p["CI"], *self._spatial(p)), (p["CO"], p["CI"] // g, *self._kernel(p))]

    def output_shape(self, p):
        return (p["N"], p["CO"], *self.out_spatial(p))

    def te(self, p, dtype):
        from tvm import te, topi

        g = self._groups(p)
        data = te.placeholder(self.input_shapes(p)[0], dtype, name="data")
        weight = te.placeholder(self.input_shapes(p)[1], dtype, name="weight")
        pad = p["padding"]
        padded = topi.nn.pad(data, [0, 0, *pad], [0, 0, *pad], name="pad_temp") if any(pad) else data
        ci_g, co_g = p["CI"] // g, p["CO"] // g
        rc = te.reduce_axis((0, ci_g), name="rc")
        rk = [te.reduce_axis((0, k), name="r" + a.lower()) for a, k in zip(self._axes, self._kernel(p))]
        stride, dil = p["stride"], p["dilation"]

        def body(n, co, *xs):
            ci = rc if g == 1 else co // co_g * ci_g + rc
            idx = [x * s + r * d for x, r, s, d in zip(xs, rk, stride, dil)]
            return te.sum(padded[(n, ci, *idx)] * weight[(co, rc, *rk)], axis=[rc, *rk])

        out = te.compute(self.output_shape(p), body, name=self.name.lower())
        return [data, weight, out]

    def reference(self, p, x, w):
        return conv_nd_reference(x, w, p["stride"], p["padding"], p["dilation"], self._groups(p))


def conv_nd_reference(x, w, stride, padding, dilation, groups=1) -> np.ndarray:
    """Grouped N-d convolution, NC<spatial> x OI<kernel>, accumulated in float64."""
    nd = x.ndim - 2
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(q, q) for q in padding])
    w = w.astype(np.float64)
    n, _ = x.shape[:2]
    co, ci_g = w.shape[:2]
    co_g = co // groups
    out_sp = [(x.shape[2 + i] - (w.shape[2 + i] - 1) * dilation[i] - 1) // stride[i] + 1 for i in range(nd)]
    out = np.zeros((n, co, *out_sp))
    for gi in range(groups):
        xg = x[:, gi * ci_g : (gi + 1) * ci_g]
        wg = w[gi * co_g : (gi + 1) * co_g]
        for kidx in np.ndindex(*w.shape[2:]):
            sl = tuple(
                slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, o, s in zip(kidx, dilation, out_sp, stride)
            )
            patch = xg[(slice(None), slice(None)) + sl]
            out[:, gi * co_g : (gi + 1) * co_g] += np.einsum(
                "nc...,oc->no...", patch, wg[(slice(None), slice(None)) + kidx]
            )
    return out


def _conv_params(ndim: int, grouped: bool = False) -> tuple[Param, ...]:
    axes = _AXES[ndim]
    kernels = tuple("K" + a for a in axes) if ndim > 1 else ("K",)
    ps = [Param("N", "batch size"), Param("CI", "input channels")]
    ps += [Param(a, f"input {'length' if a == 'L' else a}") for a in axes]
    ps += [Param("CO", "output channels")]
    ps += [Param(k, f"kernel {'size' if k == 'K' else k[1]}") for k in kernels]
    if grouped:
        ps.append(Param("groups", "number of groups; divides CI and CO"))
    ps += [
        Param("stride", "stride per spatial axis", 1, ndim),
        Param("padding", "zero padding per spatial axis (both sides)", 0, ndim),
        Param("dilation", "dilation per spatial axis", 1, ndim),
    ]
    return tuple(ps)


@register
class Conv1D(_ConvND):
    name = "C1D"
    description = "1-D convolution, NCW input, OIW weight"
    ndim = 1
    params = _conv_params(1)
    space_names = ("N", "CO", "OL")
    reduction_names = ("CI", "K")


@register
class Conv2D(_ConvND):
    name = "C2D"
    description = "2-D convolution, NCHW input, OIHW weight"
    ndim = 2
    params = _conv_params(2)
    space_names = ("N", "CO", "OH", "OW")
    reduction_names = ("CI", "KH", "KW")


@register
class Conv3D(_ConvND):
    name = "C3D"
    description = "3-D convolution, NCDHW input, OIDHW weight"
    ndim = 3
    params = _conv_params(3)
    space_names = ("N", "CO", "OD", "OH", "OW")
    reduction_names = ("CI", "KD", "KH", "KW")


@register
class GroupConv2D(_ConvND):
    name = "GRP"
    description = "group 2-D convolution, NCHW input, O(I/groups)HW weight"
    ndim = 2
    grouped = True
    params = _conv_params(2, grouped=True)
    space_names = ("N", "CO", "OH", "OW")
    reduction_names = ("CI/groups", "KH", "KW")
    structural = ("groups",)

    def sketch_key(self, p, parallel_limit):
        # The group count changes the data-access pattern (input-channel offset per group), so
        # only convolutions with the same number of groups share a sketch here.
        return super().sketch_key(p, parallel_limit) + f":g{p['groups']}"


@register
class DepthwiseConv2D(_ConvND):
    name = "DEP"
    description = "depthwise 2-D convolution (channel multiplier 1), NCHW input, C1HW weight"
    ndim = 2
    params = (
        Param("N", "batch size"),
        Param("C", "channels"),
        Param("H", "input H"),
        Param("W", "input W"),
        Param("KH", "kernel H"),
        Param("KW", "kernel W"),
        Param("stride", "stride per spatial axis", 1, 2),
        Param("padding", "zero padding per spatial axis (both sides)", 0, 2),
        Param("dilation", "dilation per spatial axis", 1, 2),
    )
    space_names = ("N", "C", "OH", "OW")
    reduction_names = ("KH", "KW")

    def validate(self, p) -> None:
        OperatorType.validate(self, p)
        for axis, k, pad, d in zip(("H", "W"), self._kernel(p), p["padding"], p["dilation"]):
            if (k - 1) * d + 1 > p[axis] + 2 * pad:
                raise InputError(
                    f"DEP: kernel K{axis}={k} (dilation {d}) is larger than the padded input {axis}={p[axis]}+2*{pad}"
                )

    def loop_nest(self, p):
        return (p["N"], p["C"], *self.out_spatial(p)), self._kernel(p)

    def params_from_loop_nest(self, extents, structural):
        n, c, oh, ow, kh, kw = extents
        return {"N": n, "C": c, "H": oh + kh - 1, "W": ow + kw - 1, "KH": kh, "KW": kw}

    def input_shapes(self, p):
        return [(p["N"], p["C"], p["H"], p["W"]), (p["C"], 1, *self._kernel(p))]

    def output_shape(self, p):
        return (p["N"], p["C"], *self.out_spatial(p))

    def te(self, p, dtype):
        from tvm import te, topi

        data = te.placeholder(self.input_shapes(p)[0], dtype, name="data")
        weight = te.placeholder(self.input_shapes(p)[1], dtype, name="weight")
        pad = p["padding"]
        padded = topi.nn.pad(data, [0, 0, *pad], [0, 0, *pad], name="pad_temp") if any(pad) else data
        rh = te.reduce_axis((0, p["KH"]), name="rh")
        rw = te.reduce_axis((0, p["KW"]), name="rw")
        (sh, sw), (dh, dw) = p["stride"], p["dilation"]
        out = te.compute(
            self.output_shape(p),
            lambda n, c, y, x: te.sum(
                padded[n, c, y * sh + rh * dh, x * sw + rw * dw] * weight[c, 0, rh, rw], axis=[rh, rw]
            ),
            name="dep",
        )
        return [data, weight, out]

    def reference(self, p, x, w):
        return conv_nd_reference(x, w, p["stride"], p["padding"], p["dilation"], groups=p["C"])


@register
class TransposedConv2D(OperatorType):
    name = "T2D"
    description = "transposed 2-D convolution, NCHW input, IOHW weight (PyTorch ConvTranspose2d)"
    params = (
        Param("N", "batch size"),
        Param("CI", "input channels"),
        Param("H", "input H"),
        Param("W", "input W"),
        Param("CO", "output channels"),
        Param("KH", "kernel H"),
        Param("KW", "kernel W"),
        Param("stride", "stride per spatial axis", 1, 2),
        Param("padding", "padding removed from each side of the output", 0, 2),
        Param("output_padding", "extra rows/columns added at the end of the output", 0, 2),
    )
    space_names = ("N", "CO", "OH", "OW")
    reduction_names = ("CI", "KH", "KW")

    def _out(self, p) -> tuple[int, int]:
        return tuple(
            (i - 1) * s - 2 * q + k + op
            for i, s, q, k, op in zip(
                (p["H"], p["W"]), p["stride"], p["padding"], (p["KH"], p["KW"]), p["output_padding"]
            )
        )

    def validate(self, p) -> None:
        super().validate(p)
        for axis, k, q, s, op in zip(("H", "W"), (p["KH"], p["KW"]), p["padding"], p["stride"], p["output_padding"]):
            if q > k - 1:
                raise InputError(f"T2D: padding {q} exceeds kernel K{axis}={k} minus 1")
            if op >= s:
                raise InputError(f"T2D: output_padding {op} must be smaller than stride {s} on axis {axis}")
        for axis, o in zip(("H", "W"), self._out(p)):
            if o < 1:
                raise InputError(f"T2D: output {axis} would be {o}; kernel or padding too large for input {axis}")

    def loop_nest(self, p):
        return (p["N"], p["CO"], *self._out(p)), (p["CI"], p["KH"], p["KW"])

    def params_from_loop_nest(self, extents, structural):
        n, co, oh, ow, ci, kh, kw = extents
        if oh < kh or ow < kw:
            raise InputError(f"T2D: output {oh}x{ow} smaller than kernel {kh}x{kw}: no stride-1 input exists")
        return {"N": n, "CI": ci, "H": oh - kh + 1, "W": ow - kw + 1, "CO": co, "KH": kh, "KW": kw}

    def input_shapes(self, p):
        return [(p["N"], p["CI"], p["H"], p["W"]), (p["CI"], p["CO"], p["KH"], p["KW"])]

    def output_shape(self, p):
        return (p["N"], p["CO"], *self._out(p))

    def te(self, p, dtype):
        # The dilation of the input by the stride is folded into the convolution's index
        # expression (as in TVM's te_workload) so that unrolling can drop the multiplications by zero.
        from tvm import te, tirx, topi

        data = te.placeholder(self.input_shapes(p)[0], dtype, name="data")
        weight = te.placeholder(self.input_shapes(p)[1], dtype, name="weight")
        kh, kw = p["KH"], p["KW"]
        (sh, sw), (ph, pw) = p["stride"], p["padding"]
        oph, opw = p["output_padding"]
        bt, bl = kh - 1 - ph, kw - 1 - pw
        bb, br = kh - 1 - ph + oph, kw - 1 - pw + opw
        padded = topi.nn.pad(
            data,
            [0, 0, (bt + sh - 1) // sh, (bl + sw - 1) // sw],
            [0, 0, (bb + sh - 1) // sh, (br + sw - 1) // sw],
            name="pad_temp",
        )
        border_h = (sh - bt % sh) % sh
        border_w = (sw - bl % sw) % sw
        strides = (1, 1, sh, sw)

        def dilated(*idx):
            conds, index = [], []
            for i, s in zip(idx, strides):
                if s != 1:
                    index.append(te.indexdiv(i, s))
                    conds.append(te.indexmod(i, s).equal(0))
                else:
                    index.append(i)
            if conds:
                return te.if_then_else(te.all(*conds), padded(*index), tirx.const(0.0, dtype))
            return padded(*index)

        rc = te.reduce_axis((0, p["CI"]), name="rc")
        rh = te.reduce_axis((0, kh), name="rh")
        rw = te.reduce_axis((0, kw), name="rw")
        out = te.compute(
            self.output_shape(p),
            lambda n, co, y, x: te.sum(
                dilated(n, rc, y + rh + border_h, x + rw + border_w) * weight[rc, co, kh - 1 - rh, kw - 1 - rw],
                axis=[rc, rh, rw],
            ),
            name="t2d",
        )
        return [data, weight, out]

    def reference(self, p, x, w):
        x, w = x.astype(np.float64), w.astype(np.float64)
        n, _, h, wd = x.shape
        co, kh, kw = w.shape[1:]
        (sh, sw), (ph, pw) = p["stride"], p["padding"]
        oh, ow = self._out(p)
        full = np.zeros((n, co, (h - 1) * sh + kh + sh, (wd - 1) * sw + kw + sw))
        for i in range(kh):
            for j in range(kw):
                full[:, :, i : i + (h - 1) * sh + 1 : sh, j : j + (wd - 1) * sw + 1 : sw] += np.einsum(
                    "nchw,co->nohw", x, w[:, :, i, j]
                )
        return full[:, :, ph : ph + oh, pw : pw + ow]


@register
class CapsuleConv2D(OperatorType):
    name = "CAP"
    description = "capsule 2-D convolution (matrix capsules), NHWIJC input, HWIJCO weight (Ansor's layout)"
    params = (
        Param("N", "batch size"),
        Param("H", "input H"),
        Param("W", "input W"),
        Param("CI", "input capsule channels"),
        Param("CO", "output capsule channels"),
        Param("K", "kernel size (square)"),
        Param("capsule", "capsule pose matrix size (capsule x capsule)", 4),
        Param("stride", "stride per spatial axis", 1, 2),
        Param("padding", "zero padding per spatial axis", 0, 2),
    )
    space_names = ("N", "OH", "OW", "CAP_I", "CAP_J", "CO")
    reduction_names = ("KH", "KW", "CAP_K", "CI")

    def _out(self, p):
        return tuple(_out_size(i, p["K"], s, q, 1) for i, s, q in zip((p["H"], p["W"]), p["stride"], p["padding"]))

    def validate(self, p) -> None:
        super().validate(p)
        for axis, q in zip(("H", "W"), p["padding"]):
            if p["K"] > p[axis] + 2 * q:
                raise InputError(f"CAP: kernel K={p['K']} is larger than the padded input {axis}={p[axis]}+2*{q}")

    def loop_nest(self, p):
        c = p["capsule"]
        return (p["N"], *self._out(p), c, c, p["CO"]), (p["K"], p["K"], c, p["CI"])

    def params_from_loop_nest(self, extents, structural):
        n, oh, ow, ci_, cj, co, kh, kw, ck, ci = extents
        if not (ci_ == cj == ck) or kh != kw:
            raise InputError(
                f"CAP: loop nest {list(extents)} needs equal capsule extents and a square kernel"
            )
        return {"N": n, "H": oh + kh - 1, "W": ow + kw - 1, "CI": ci, "CO": co, "K": kh, "capsule": ci_}

    def input_shapes(self, p):
        c = p["capsule"]
        return [(p["N"], p["H"], p["W"], c, c, p["CI"]), (p["K"], p["K"], c, c, p["CI"], p["CO"])]

    def output_shape(self, p):
        c = p["capsule"]
        return (p["N"], *self._out(p), c, c, p["CO"])

    def te(self, p, dtype):
        from tvm import te, topi

        data = te.placeholder(self.input_shapes(p)[0], dtype, name="data")
        weight = te.placeholder(self.input_shapes(p)[1], dtype, name="weight")
        ph, pw = p["padding"]
        sh, sw = p["stride"]
        padded = topi.nn.pad(data, [0, ph, pw, 0, 0, 0], name="pad_temp") if ph or pw else data
        rh = te.reduce_axis((0, p["K"]), name="rh")
        rw = te.reduce_axis((0, p["K"]), name="rw")
        ck = te.reduce_axis((0, p["capsule"]), name="cap_k")
        rc = te.reduce_axis((0, p["CI"]), name="rc")
        out = te.compute(
            self.output_shape(p),
            lambda n, y, x, i, j, co: te.sum(
                padded[n, y * sh + rh, x * sw + rw, i, ck, rc] * weight[rh, rw, ck, j, rc, co],
                axis=[rh, rw, ck, rc],
            ),
            name="cap",
        )
        return [data, weight, out]

    def reference(self, p, x, w):
        ph, pw = p["padding"]
        sh, sw = p["stride"]
        x = np.pad(x.astype(np.float64), [(0, 0), (ph, ph), (pw, pw), (0, 0), (0, 0), (0, 0)])
        w = w.astype(np.float64)
        oh, ow = self._out(p)
        out = np.zeros(self.output_shape(p))
        for i in range(p["K"]):
            for j in range(p["K"]):
                patch = x[:, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw]
                out += np.einsum("nyxikc,kjco->nyxijo", patch, w[i, j])
        return out


def conv_flops_direct(n: int, co: int, out_hw: Sequence[int], ci: int, kernel: Sequence[int]) -> int:
    """FLOPs of the equivalent direct convolution (used to report Winograd throughput)."""
    return 2 * n * co * math.prod(out_hw) * ci * math.prod(kernel)
