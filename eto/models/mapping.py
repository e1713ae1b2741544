"""How a Relax call maps to catalogue operators (the major loop nest is what tuning sees).

Operand layouts are fixed by eto's programs, so only the loop nest of a call matters:

* ``nn.conv1d/2d/3d`` with ``groups == 1`` -> C1D/C2D/C3D; 2-D with ``groups == CI == CO`` -> DEP;
  other 2-D groups -> GRP. Padding must be symmetric per axis (Relax keeps before/after pairs).
* ``nn.conv2d_transpose`` (groups 1, dilation 1) -> T2D.
* ``matmul`` ``A[..., M, K] @ B[..., K, N]``: the loop nest ``[batch, i, j, k]`` is kept and the
  operand layout dropped: whether B is a plain ``[K, N]`` matrix or a transposed ``[N, K]`` weight
  (Relax writes a linear layer as ``matmul(x, permute_dims(W))``), eto tunes its own program, whose Y
  is stored ``[j, k]``. Hence

  - rank-2 x rank-2 -> ``DENSE(M, N, K)`` (a classifier on pooled features, BERT's pooler);
  - a linear layer on a token tensor ``[..., S, K]`` (B unbatched, or batched with only unit batch
    axes) -> ``BMM(1, tokens, N, K)``, as :func:`eto.operators.zoo.bert_layers` models BERT. This holds
    whether the frontend keeps the rank (ONNX MatMul) or flattens the tokens first (torch's
    decomposition of ``aten.linear`` into ``view`` + ``addmm``): a rank-2 matmul whose left operand
    is a reshape merging the leading axes of a rank>=3 tensor and keeping its last axis counts as
    such a layer;
  - batched x batched (ranks 3 and 4, e.g. attention ``[B, H, S, D]``) -> ``BMM(prod(batch), M, N, K)``
    with the batch axes broadcast and multiplied (``b = B*H``);
  - a vector operand is a matrix with one row (left) or one column (right).
* ``nn.attention`` (``[B, S, H, D]`` query/key/value) -> its two batch matmuls,
  ``BMM(B*H, Sq, Skv, D)`` (scores) and ``BMM(B*H, Sq, Dv, Skv)`` (context), as in BERT.

A call of a tunable kind that cannot be mapped (asymmetric padding, dynamic shapes, a dtype other
than float32, a layout outside the NCHW family, a grouped 1-D conv, an einsum...) raises
:class:`Unmapped` with the reason, so that the walk lists it instead of dropping it.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from eto.operators import Operator

#: The dtype eto's operator programs are written in (``Operator.prim_func`` default).
SUPPORTED_DTYPE = "float32"

_CONV_OPS = {"relax.nn.conv1d": 1, "relax.nn.conv2d": 2, "relax.nn.conv3d": 3}
_ATTENTION_OPS = ("relax.nn.attention", "relax.nn.attention_bias")
#: Conv/matmul-like Relax ops that have no catalogue type: always listed as unsupported.
_UNMAPPED_OPS = {
    "relax.nn.conv1d_transpose": "transposed 1-D convolution: the catalogue's only transposed convolution is T2D",
    "relax.nn.conv3d_transpose": "transposed 3-D convolution: the catalogue's only transposed convolution is T2D",
    "relax.einsum": "einsum is not mapped to a catalogue operator (write it as matmul to tune it)",
    "relax.outer": "outer product has no reduction loop: not a tunable operator type",
    "relax.nn.attention_var_len": "variable-length attention has data-dependent shapes",
}


class Unmapped(Exception):
    """A call of a tunable kind with no catalogue operator: its description and the reason."""

    def __init__(self, call: str, reason: str) -> None:
        super().__init__(reason)
        self.call, self.reason = call, reason


def call_operators(call, bindings: Mapping[Any, Any]) -> list[Operator] | None:
    """The catalogue operators one Relax op call runs; None for a call of no tunable kind.

    ``bindings`` (variable -> bound value) lets a matmul see whether its operand is a reshape.
    Raises :class:`Unmapped` for a conv/matmul-like call that has no catalogue operator.
    """
    name = call.op.name
    if name in _CONV_OPS:
        return [_conv(call, _CONV_OPS[name])]
    if name == "relax.nn.conv2d_transpose":
        return [_conv2d_transpose(call)]
    if name == "relax.matmul":
        return [_matmul(call, bindings)]
    if name in _ATTENTION_OPS:
        return _attention(call)
    if name in _UNMAPPED_OPS:
        raise Unmapped(describe_call(call), _UNMAPPED_OPS[name])
    return None  # element-wise, pooling, normalisation, data movement: not tunable types


# -- reading Relax types ------------------------------------------------------------------------
def relax_type(expr):
    """The Relax type of an expression (``ty`` in TVM 0.27; ``struct_info`` before)."""
    ty = getattr(expr, "ty", None)
    return ty if ty is not None else getattr(expr, "struct_info", None)


def static_shape(expr) -> tuple[int, ...] | None:
    """The static shape of a tensor expression, or None when a dimension (or the rank) is unknown."""
    from tvm import tirx

    shape = getattr(relax_type(expr), "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return None
    if not all(isinstance(v, tirx.IntImm) for v in values):
        return None
    return tuple(int(v) for v in values)


def _dtype(expr) -> str:
    return str(getattr(relax_type(expr), "dtype", "?"))


def _fmt_shape(expr) -> str:
    shape = getattr(relax_type(expr), "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return "?"
    return "x".join(str(_int_or_text(v)) for v in values) or "scalar"


def _int_or_text(v) -> int | str:
    try:
        return int(v)
    except (TypeError, ValueError):
        return str(v)


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _attr_text(attrs, names: Iterable[str]) -> str:
    parts = []
    for n in names:
        v = getattr(attrs, n, None)
        if v is None:
            continue
        parts.append(f"{n}={v if isinstance(v, (str, int)) else '[' + ','.join(map(str, _ints(v))) + ']'}")
    return ", ".join(parts)


_CONV_ATTRS = ("strides", "padding", "output_padding", "dilation", "groups", "data_layout", "kernel_layout")


def describe_call(call) -> str:
    """Shapes, dtype and window attributes of a call, for the unsupported list."""
    args = ", ".join(f"{_fmt_shape(a)} {_dtype(a)}" for a in call.args if relax_type(a) is not None
                     and hasattr(relax_type(a), "dtype"))
    text = f"({args})" if args else "()"
    if call.attrs is not None and any(hasattr(call.attrs, n) for n in _CONV_ATTRS):
        text += " " + _attr_text(call.attrs, _CONV_ATTRS)
    if call.op.name in ("relax.call_tir", "relax.call_dps_packed") and call.args:
        callee, inputs = call.args[0], call.args[1] if len(call.args) > 1 else None
        fields = getattr(inputs, "fields", ())
        args = ", ".join(f"{_fmt_shape(a)} {_dtype(a)}" for a in fields)
        name = getattr(callee, "name_hint", None) or getattr(callee, "global_symbol", "?")
        text = f"{name}({args}) -> {_fmt_shape(call)} {_dtype(call)}"
    return text


def _check_static_float32(call, *operands) -> list[tuple[int, ...]]:
    """Static shapes of the operands; Unmapped for a dynamic shape or a dtype eto does not tune."""
    shapes = []
    for a in operands:
        s = static_shape(a)
        if s is None:
            raise Unmapped(describe_call(call),
                               "dynamic shape: operator parameters must be static (set the symbolic dimensions: --dim NAME=SIZE)")
        shapes.append(s)
    dtypes = {_dtype(a) for a in operands} | {_dtype(call)}
    other = sorted(d for d in dtypes if d != SUPPORTED_DTYPE)
    if other:
        raise Unmapped(describe_call(call),
                           f"dtype {', '.join(other)}: eto's operator programs are {SUPPORTED_DTYPE}")
    return shapes


def _create(call, type_: str, **params: Any) -> Operator:
    try:
        return Operator.create(type_, **params)
    except ValueError as exc:
        raise Unmapped(describe_call(call), f"no valid {type_} operator: {exc}") from None


def _symmetric(call, padding: Sequence[int], nd: int) -> tuple[int, ...]:
    before, after = tuple(padding[:nd]), tuple(padding[nd:])
    if len(padding) != 2 * nd or before != after:
        raise Unmapped(describe_call(call),
                           f"asymmetric padding (before {before}, after {after}): catalogue convolutions "
                           "pad both sides of an axis equally")
    return before


_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def channels_last_kind(data: Sequence[int], weight: Sequence[int], groups: int) -> bool:
    """Whether an NHWC/OHWI 2-D convolution is one the catalogue holds with the channels last: ungrouped
    (C2DNHWC) or depthwise, one channel per group (DEPNHWC)."""
    return len(data) == 4 and len(weight) == 4 and (groups == 1 or groups == data[3] == weight[0] and weight[3] == 1)


def _conv(call, nd: int) -> Operator:
    data, weight = call.args[0], call.args[1]
    (dshape, wshape) = _check_static_float32(call, data, weight)
    a = call.attrs
    sp = _SPATIAL[nd]
    layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout))
    if layouts == ("NHWC", "OHWI", "NHWC") and channels_last_kind(dshape, wshape, int(a.groups)):
        (n, h, w, ci), (co, kh, kw, _) = dshape, wshape  # channels last (eto.operators.channels_last)
        window = {"stride": _ints(a.strides), "padding": _symmetric(call, _ints(a.padding), nd),
                  "dilation": _ints(a.dilation)}
        if int(a.groups) > 1:
            return _create(call, "DEPNHWC", N=n, C=ci, H=h, W=w, KH=kh, KW=kw, **window)
        return _create(call, "C2DNHWC", N=n, CI=ci, H=h, W=w, CO=co, KH=kh, KW=kw, **window)
    if layouts != ("NC" + sp, "OI" + sp, "NC" + sp):
        raise Unmapped(describe_call(call),
                           f"layout {'/'.join(layouts)}: eto's convolutions are NC{sp}/OI{sp}, or NHWC/OHWI "
                           "ungrouped or depthwise (convert the layout first: eto's --layout, "
                           "relax.transform.ConvertLayout)")
    padding = _symmetric(call, _ints(a.padding), nd)
    stride, dilation, groups = _ints(a.strides), _ints(a.dilation), int(a.groups)
    n, ci, *spatial = dshape
    co, _, *kernel = wshape
    window = {"stride": stride, "padding": padding, "dilation": dilation}
    if groups == 1:
        if nd == 1:
            return _create(call, "C1D", N=n, CI=ci, L=spatial[0], CO=co, K=kernel[0], **window)
        if nd == 2:
            return _create(call, "C2D", N=n, CI=ci, H=spatial[0], W=spatial[1], CO=co, KH=kernel[0],
                           KW=kernel[1], **window)
        return _create(call, "C3D", N=n, CI=ci, D=spatial[0], H=spatial[1], W=spatial[2], CO=co,
                       KD=kernel[0], KH=kernel[1], KW=kernel[2], **window)
    if nd != 2:
        raise Unmapped(describe_call(call),
                           f"grouped {nd}-D convolution (groups={groups}): the catalogue has grouped "
                           "and depthwise convolutions in 2-D only")
    if groups == ci == co:
        return _create(call, "DEP", N=n, C=ci, H=spatial[0], W=spatial[1], KH=kernel[0], KW=kernel[1], **window)
    return _create(call, "GRP", N=n, CI=ci, H=spatial[0], W=spatial[1], CO=co, KH=kernel[0], KW=kernel[1],
                   groups=groups, **window)


def _conv2d_transpose(call) -> Operator:
    data, weight = call.args[0], call.args[1]
    (dshape, wshape) = _check_static_float32(call, data, weight)
    a = call.attrs
    layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout))
    if layouts != ("NCHW", "IOHW", "NCHW"):
        raise Unmapped(describe_call(call),
                           f"layout {'/'.join(layouts)}: T2D is NCHW input with an IOHW weight")
    padding = _symmetric(call, _ints(a.padding), 2)
    if int(a.groups) != 1:
        raise Unmapped(describe_call(call), f"grouped transposed convolution (groups={int(a.groups)}): "
                                                 "T2D has no groups")
    if any(d != 1 for d in _ints(a.dilation)):
        raise Unmapped(describe_call(call), f"dilated transposed convolution (dilation "
                                                 f"{_ints(a.dilation)}): T2D has no dilation")
    n, ci, h, w = dshape
    _, co, kh, kw = wshape
    return _create(call, "T2D", N=n, CI=ci, H=h, W=w, CO=co, KH=kh, KW=kw, stride=_ints(a.strides),
                   padding=padding, output_padding=_ints(a.output_padding))


def _flattened_tokens(lhs, bindings: Mapping[Any, Any], m: int, k: int) -> bool:
    """Whether a rank-2 operand is a token tensor [..., S, K] flattened to [tokens, K] (torch's linear)."""
    from tvm import ir, relax

    value = bindings.get(lhs)
    if not (isinstance(value, relax.Call) and isinstance(value.op, ir.Op) and value.op.name == "relax.reshape"):
        return False
    src = static_shape(value.args[0])
    return src is not None and len(src) >= 3 and src[-1] == k and math.prod(src[:-1]) == m


def _matmul(call, bindings: Mapping[Any, Any]) -> Operator:
    lhs, rhs = call.args[0], call.args[1]
    a, b = _check_static_float32(call, lhs, rhs)
    if len(a) == 1 and len(b) == 1:
        raise Unmapped(describe_call(call), "dot product of two vectors: no space loop to tune")
    if len(a) == 0 or len(b) == 0:
        raise Unmapped(describe_call(call), "matmul of a scalar")
    if len(a) == 1:
        a = (1, *a)
    if len(b) == 1:
        b = (*b, 1)
    (m, k), (k2, n) = a[-2:], b[-2:]
    a_batch, b_batch = a[:-2], b[:-2]
    if k != k2:  # pragma: no cover - Relax's type inference rejects it first
        raise Unmapped(describe_call(call), f"reduction lengths differ ({k} vs {k2})")
    if all(x == 1 for x in b_batch):  # a weight shared by every row: a linear layer
        if a_batch:
            return _create(call, "BMM", B=1, M=math.prod(a_batch) * m, N=n, K=k)
        if not b_batch and _flattened_tokens(lhs, bindings, m, k):
            return _create(call, "BMM", B=1, M=m, N=n, K=k)
        if b_batch:
            return _create(call, "BMM", B=1, M=m, N=n, K=k)
        return _create(call, "DENSE", M=m, N=n, K=k)
    batch = _broadcast(call, a_batch, b_batch)
    return _create(call, "BMM", B=math.prod(batch), M=m, N=n, K=k)


def _broadcast(call, x: Sequence[int], y: Sequence[int]) -> tuple[int, ...]:
    width = max(len(x), len(y))
    x = (1,) * (width - len(x)) + tuple(x)
    y = (1,) * (width - len(y)) + tuple(y)
    out = []
    for p, q in zip(x, y):
        if p != q and 1 not in (p, q):  # pragma: no cover - Relax's type inference rejects it first
            raise Unmapped(describe_call(call), f"batch axes {x} and {y} do not broadcast")
        out.append(max(p, q))
    return tuple(out)


def _attention(call) -> list[Operator]:
    q, k, v = call.args[0], call.args[1], call.args[2]
    qs, ks, vs = _check_static_float32(call, q, k, v)
    if not (len(qs) == len(ks) == len(vs) == 4):
        raise Unmapped(describe_call(call), "attention inputs must be [batch, seq, heads, dim]")
    b, sq, h, d = qs
    skv, dv = ks[1], vs[3]
    return [_create(call, "BMM", B=b * h, M=sq, N=skv, K=d), _create(call, "BMM", B=b * h, M=sq, N=dv, K=skv)]
