"""Convolutions with the channels last (NHWC input, OHWI weight): the layout CPUs vectorise.

In NCHW a convolution's innermost contiguous axis is a spatial one, so a CPU program vectorises over
output pixels and gathers its inputs across rows; with the channels last, the output channels are
contiguous and one input value multiplies a whole vector of weights, which is how CPU libraries
(ONNX Runtime's MLAS, oneDNN) run convolutions. A model converted with ``eto tune --layout NHWC``
(:mod:`eto.models.layout`) runs these; Relax legalises them to TOPI's ``conv2d_nhwc`` (major loop nest
``(N, OH, OW, CO)`` by ``(KH, KW, CI)``) and, for depthwise ones, ``group_conv2d_nhwc`` (``(N, OH, OW,
C)`` by ``(KH, KW)``): the same loops as :class:`~eto.operators.conv.Conv2D`'s and
:class:`~eto.operators.conv.DepthwiseConv2D`'s in another order, so the selector's reuse conditions
and the reuse tuner treat them as they treat NCHW ones, and the two layouts never reuse each other
(their types differ).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from eto.operators.base import ParamValue, register
from eto.operators.conv import Conv2D, DepthwiseConv2D, conv_nd_reference


@register
class Conv2DNHWC(Conv2D):
    name = "C2DNHWC"
    description = "2-D convolution, NHWC input, OHWI weight (channels last)"
    space_names = ("N", "OH", "OW", "CO")
    reduction_names = ("KH", "KW", "CI")

    def loop_nest(self, p):
        oh, ow = self.out_spatial(p)
        return (p["N"], oh, ow, p["CO"]), (p["KH"], p["KW"], p["CI"])

    def params_from_loop_nest(self, extents: Sequence[int], structural):
        n, oh, ow, co, kh, kw, ci = extents
        p: dict[str, ParamValue] = {"N": n, "H": oh + kh - 1, "W": ow + kw - 1, "CI": ci, "CO": co, "KH": kh,
                                    "KW": kw}
        return p

    def input_shapes(self, p):
        return [(p["N"], p["H"], p["W"], p["CI"]), (p["CO"], p["KH"], p["KW"], p["CI"])]

    def output_shape(self, p):
        return (p["N"], *self.out_spatial(p), p["CO"])

    def te(self, p, dtype):
        """TOPI's ``conv2d_nhwc`` with an OHWI weight, as Relax legalises ``conv2d(NHWC, OHWI)``."""
        return _nhwc_te(self.input_shapes(p), self.output_shape(p), p, dtype, depthwise=False)

    def reference(self, p, x, w):
        return _nhwc_reference(p, x, w, groups=1)


@register
class DepthwiseConv2DNHWC(DepthwiseConv2D):
    name = "DEPNHWC"
    description = "depthwise 2-D convolution (channel multiplier 1), NHWC input, C11HW weight as OHWI (channels last)"
    space_names = ("N", "OH", "OW", "C")
    reduction_names = ("KH", "KW")

    def loop_nest(self, p):
        oh, ow = self.out_spatial(p)
        return (p["N"], oh, ow, p["C"]), self._kernel(p)

    def params_from_loop_nest(self, extents, structural):
        n, oh, ow, c, kh, kw = extents
        return {"N": n, "C": c, "H": oh + kh - 1, "W": ow + kw - 1, "KH": kh, "KW": kw}

    def input_shapes(self, p):
        return [(p["N"], p["H"], p["W"], p["C"]), (p["C"], p["KH"], p["KW"], 1)]

    def output_shape(self, p):
        return (p["N"], *self.out_spatial(p), p["C"])

    def te(self, p, dtype):
        """TOPI's ``group_conv2d_nhwc`` with one channel per group, as Relax legalises it."""
        return _nhwc_te(self.input_shapes(p), self.output_shape(p), p, dtype, depthwise=True)

    def reference(self, p, x, w):
        return _nhwc_reference(p, x, w, groups=p["C"])


def _nhwc_te(shapes, out_shape, p, dtype, *, depthwise: bool) -> list:
    """A channels-last convolution: each output channel reduces over the window and, unless ``depthwise``
    (one input channel per output channel, the weight's last axis 1), over every input channel."""
    from tvm import te, topi

    data = te.placeholder(shapes[0], dtype, name="data")
    weight = te.placeholder(shapes[1], dtype, name="weight")
    (ph, pw), (sh, sw), (dh, dw) = p["padding"], p["stride"], p["dilation"]
    padded = topi.nn.pad(data, [0, ph, pw, 0], [0, ph, pw, 0], name="pad_temp") if ph or pw else data
    ry, rx = te.reduce_axis((0, p["KH"]), name="ry"), te.reduce_axis((0, p["KW"]), name="rx")
    rc = None if depthwise else te.reduce_axis((0, p["CI"]), name="rc")

    def body(n, y, x, co):
        ci, k = (co, 0) if depthwise else (rc, rc)
        return te.sum(padded[n, y * sh + ry * dh, x * sw + rx * dw, ci] * weight[co, ry, rx, k],
                      axis=[ry, rx] if depthwise else [ry, rx, rc])

    return [data, weight, te.compute(out_shape, body, name="group_conv2d_nhwc" if depthwise else "conv2d_nhwc")]


def _nhwc_reference(p, x, w, *, groups: int) -> np.ndarray:
    """numpy's result: the NCHW reference on the transposed operands, transposed back."""
    out = conv_nd_reference(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), p["stride"], p["padding"], p["dilation"],
                            groups=groups)
    return np.ascontiguousarray(out.transpose(0, 2, 3, 1))


def nchw_shapes(op) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """``op``'s first two input shapes and its output shape as an NCHW framework writes them (data
    NCHW, weight OIHW): a channels-last convolution's transposed, any other operator's as they are. How
    a layer is matched to another tool's record of it (:mod:`eto.models.profile`)."""
    ins, out = [tuple(s) for s in op.input_shapes], tuple(op.output_shape)
    if not op.type.endswith("NHWC"):
        return ins, out
    nchw = lambda s: (s[0], s[3], s[1], s[2])  # noqa: E731  (NHWC -> NCHW, OHWI -> OIHW alike)
    return [nchw(s) for s in ins[:2]], nchw(out)
