"""Axes without a tile padded to one, the extra rows or channels sliced off after.

MetaSchedule tiles a loop only by exact factors of its length (``SamplePerfectTile``), and a CPU's
vector is ``lanes`` values wide (16 float32 with AVX-512). Two kinds of length defeat that:

- **rows of a linear layer** that are prime or nearly so (a ViT's 197 tokens: 14x14 patches and a
  class token; 577 at 384x384): the row axis cannot be split into register tiles, so every candidate
  computes one row at a time and uses each weight vector it loads once (:func:`pad_rows`: to the next
  multiple of :data:`ROW_TILE`, 197 -> 200);
- **channels of a channels-last convolution** that are not a multiple of the vector width
  (ShuffleNet v2's 58, 116 and 232; 40, 72, 120 on AVX-512): the channel axis is the one vectorised,
  and a program over 116 channels ran 1.5x slower than one over 128 (a 1x1 convolution at 28x28, and a
  3x3 depthwise one, MetaSchedule at 64 trials each; docs/models.md) (:func:`pad_channels`: filters of
  zeros, a depthwise convolution's input channels too).

ONNX Runtime's MLAS does the same: it packs any size into blocks. Both are Relax passes run where the
model is prepared (:func:`eto.models.tasks.prepare`), so the catalogue operator, the task and the
build all see the padded operator; FuseOps folds each pad into the producer's function and each slice
into the operator's own epilogue, so the extra cost is the padded work (at most a quarter more).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from tvm.target import Target

#: Rows are padded to a multiple of this.
ROW_TILE = 8
#: A row count divisible by one of these already tiles: it is left alone.
USABLE_TILES = range(4, 17)
#: Below this many rows a matmul is too small for padding to pay.
MIN_ROWS = 32
#: Channels are padded only where that adds at most this fraction of the work.
MAX_CHANNEL_PADDING = 0.25


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


def padded_channels(c: int, lanes: int) -> int:
    """``c`` rounded up to a multiple of ``lanes`` where that adds at most :data:`MAX_CHANNEL_PADDING`
    of the work, else ``c``: with 16 lanes 58 -> 64, 116 -> 128, 40 -> 48, 232 -> 240; 24, 3, 20 stay."""
    padded = -(-c // lanes) * lanes
    return padded if padded <= c * (1 + MAX_CHANNEL_PADDING) else c


def pad_channels(mod: "tvm.IRModule", lanes: int) -> "tvm.IRModule":
    """``mod`` with each float32 channels-last convolution (NHWC data, OHWI weights, ungrouped or
    depthwise) whose output channels :func:`padded_channels` pads computed on zero filters (a depthwise
    one also on zero input channels) and sliced back to its shape. O(calls)."""
    import tvm
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    from eto.models.fast_math import mutate_functions
    from eto.models.mapping import channels_last_kind, static_shape

    conv2d = tvm.ir.Op.get("relax.nn.conv2d")

    @expr_functor.mutator
    class PaddedChannels(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op != conv2d:
                return call
            a, (data, weight) = call.attrs, call.args
            shape, kernel = static_shape(data), static_shape(weight)
            layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout))
            if shape is None or kernel is None or layouts != ("NHWC", "OHWI", "NHWC"):
                return call
            if str(data.ty.dtype) != "float32" or not channels_last_kind(shape, kernel, int(a.groups)):
                return call
            c = kernel[0]
            channels = padded_channels(c, lanes)
            if channels == c:
                return call
            groups = int(a.groups)
            if groups > 1:  # depthwise: every channel is its own group
                data = self.builder_.emit(relax.op.nn.pad(data, [0, 0, 0, 0, 0, 0, 0, channels - c]))
                groups = channels
            weight = self.builder_.emit(relax.op.nn.pad(weight, [0, channels - c, 0, 0, 0, 0, 0, 0]))
            out = self.builder_.emit(relax.op.nn.conv2d(
                data, weight, strides=a.strides, padding=a.padding, dilation=a.dilation, groups=groups,
                data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC", out_dtype=a.out_dtype))
            return relax.op.strided_slice(out, axes=[3], begin=[0], end=[c])

    return mutate_functions(mod, PaddedChannels(mod))



def pad_axes(mod: "tvm.IRModule", target: "Target") -> "tvm.IRModule":
    """:func:`pad_rows`, and on a CPU :func:`pad_channels` to its vector width (a GPU vectorises no
    channel axis)."""
    from eto.target import hardware_info, is_cpu

    mod = pad_rows(mod)
    return pad_channels(mod, hardware_info(target).vector_lanes_fp32) if is_cpu(target) else mod
