"""Operator sets of real models: ONNX files and PyTorch modules through TVM's Relax frontends.

A model is imported with TVM's own frontend (``tvm.relax.frontend.onnx.from_onnx`` or
``torch.export`` + ``tvm.relax.frontend.torch.from_exported_program``), so eto sees exactly the
operators TVM would compile. The Relax graph is then walked and every tunable call is mapped to a
catalogue :class:`~eto.operators.Operator`; the distinct operators with their counts form the
:class:`~eto.opsets.OperatorSet`. Calls of a tunable kind that cannot be mapped (asymmetric padding,
dynamic shapes, a dtype other than float32, a layout outside the NCHW family, a grouped 1-D conv,
an einsum...) are listed in :attr:`ModelOperators.unsupported` with a count and a reason, never
dropped silently. Element-wise, pooling and normalisation ops are not tunable operator types and
are not listed.

How calls map (the major loop nest is what tuning sees; operand layouts are fixed by eto's programs):

* ``nn.conv1d/2d/3d`` with ``groups == 1`` -> C1D/C2D/C3D; 2-D with ``groups == CI == CO`` -> DEP;
  other 2-D groups -> GRP. Padding must be symmetric per axis (Relax keeps before/after pairs).
* ``nn.conv2d_transpose`` (groups 1, dilation 1) -> T2D.
* ``matmul`` ``A[..., M, K] @ B[..., K, N]``: the loop nest ``[batch, i, j, k]`` is kept and the
  operand layout dropped: whether B is a plain ``[K, N]`` matrix or a transposed ``[N, K]`` weight
  (Relax writes a linear layer as ``matmul(x, permute_dims(W))``), eto tunes its own program, whose Y
  is stored ``[j, k]``. Hence

  - rank-2 x rank-2 -> ``DENSE(M, N, K)`` (a classifier on pooled features, BERT's pooler);
  - a linear layer on a token tensor ``[..., S, K]`` (B unbatched, or batched with only unit batch
    axes) -> ``BMM(1, tokens, N, K)``, as :func:`eto.zoo.bert_layers` models BERT. This holds
    whether the frontend keeps the rank (ONNX MatMul) or flattens the tokens first (torch's
    decomposition of ``aten.linear`` into ``view`` + ``addmm``): a rank-2 matmul whose left operand
    is a reshape merging the leading axes of a rank>=3 tensor and keeping its last axis counts as
    such a layer;
  - batched x batched (ranks 3 and 4, e.g. attention ``[B, H, S, D]``) -> ``BMM(prod(batch), M, N, K)``
    with the batch axes broadcast and multiplied (``b = B*H``);
  - a vector operand is a matrix with one row (left) or one column (right).
* ``nn.attention`` (``[B, S, H, D]`` query/key/value) -> its two batch matmuls,
  ``BMM(B*H, Sq, Skv, D)`` (scores) and ``BMM(B*H, Sq, Dv, Skv)`` (context), as in BERT.

Only ``main`` (or every Relax function nobody calls) is walked, following calls into other Relax
functions once per call site. ``call_tir`` functions that a frontend lowers itself (the ONNX
importer's ``Clip``) are skipped when element-wise and listed when they have a reduction loop.
Frequencies count calls in the imported graph: PyTorch's TorchScript ONNX exporter merges identical
subexpressions, so a layer applied twice to the same tensor counts once there. TVM and the optional ``onnx``/``torch`` packages are imported only when
a model is read, so ``eto ops`` stays fast.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from .operators import Operator
from .opsets import OperatorSet

if TYPE_CHECKING:  # pragma: no cover
    import tvm

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
#: Lowered calls: listed only when the callee may hide a conv/matmul (see ``_Walker._lowered``).
_LOWERED_REASON = ("a TIR function with a reduction loop (a frontend-lowered op, or a module legalized "
                   "before extraction): its operator cannot be read back")
_PACKED_REASON = "an opaque packed function: its operator cannot be seen"

_ONNX_EXTRA = "pip install 'eto[onnx]'"
_TORCH_EXTRA = "pip install 'eto[torch]'"


class ModelImportError(ValueError):
    """A model that could not be read or converted to Relax (the CLI exits with code 2)."""


class ModelFileError(ModelImportError):
    """A file that is not a readable ONNX model or ``torch.export`` archive; the message names it."""


class MissingExtraError(ImportError):
    """An optional dependency (``onnx``, ``torch``) is not installed; the message says what to install."""


# -- records ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnsupportedCall:
    """Calls of one kind that could not be mapped: the Relax op, its shapes/attributes, why, how many."""

    op: str
    call: str
    reason: str
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "call": self.call, "reason": self.reason, "count": self.count}

    def __str__(self) -> str:
        return f"{self.count} x {self.op}: {self.call}: {self.reason}"


@dataclass(frozen=True)
class ModelOperators:
    """What a model contributes to tuning: its operator set and the calls left out of it."""

    opset: OperatorSet
    unsupported: tuple[UnsupportedCall, ...] = ()
    source: str = ""

    @property
    def unsupported_calls(self) -> int:
        return sum(u.count for u in self.unsupported)

    def unsupported_counts(self) -> dict[str, int]:
        """``"op: call: reason" -> count``: a flat view for reports and tests."""
        return {f"{u.op}: {u.call}: {u.reason}": u.count for u in self.unsupported}

    def to_json(self) -> dict[str, Any]:
        """The set in the ``eto ops show --json`` item form plus ``unsupported``.

        The object is also a valid operator-set file (``OperatorSet.from_json`` reads ``operators``).
        """
        return {
            "name": self.opset.name,
            "description": self.opset.description,
            "source": self.source,
            "operators": [operator_item(e.op, e.frequency) for e in self.opset],
            "unsupported": [u.to_json() for u in self.unsupported],
        }


def operator_item(op: Operator, frequency: int) -> dict[str, Any]:
    """One operator as ``eto ops show --json`` prints it."""
    return {"name": op.name, "key": op.key, **op.to_dict(), "space": list(op.space),
            "reduction": list(op.reduction), "frequency": frequency, "gflop": op.flops / 1e9,
            "sketch": op.sketch_key()}


# -- the Relax walk -----------------------------------------------------------------------------
class _Unsupported(Exception):
    """Raised inside the mapper: this call is of a tunable kind but has no catalogue operator."""

    def __init__(self, call: str, reason: str) -> None:
        super().__init__(reason)
        self.call, self.reason = call, reason


def extract_from_relax(mod: "tvm.IRModule", name: str = "model", *, source: str = "relax",
                       description: str | None = None) -> ModelOperators:
    """The operator set of a Relax module as the frontends emit it (before legalization)."""
    from tvm import ir, relax

    if not isinstance(mod, ir.IRModule):
        raise TypeError(f"extract_from_relax needs a tvm.IRModule, got {type(mod).__name__}")
    funcs = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, relax.Function)}
    if not funcs:
        raise ModelImportError(f"{name}: the module has no Relax function to read")
    walker = _Walker(mod)
    roots = ["main"] if "main" in funcs else [n for n in funcs if n not in walker.callees()]
    for root in roots or list(funcs):
        walker.walk_function(root)
    layers = walker.layers
    unsupported = tuple(UnsupportedCall(op, call, reason, n) for (op, call, reason), n in walker.unsupported.items())
    opset = OperatorSet.from_layers(name, layers)
    if description is None:
        description = _describe(source, opset, unsupported)
    return ModelOperators(OperatorSet(name, opset.entries, description), unsupported, source)


def _describe(source: str, opset: OperatorSet, unsupported: Sequence[UnsupportedCall]) -> str:
    layers = sum(e.frequency for e in opset)
    text = f"extracted from {source}: {len(opset)} distinct operators, {layers} calls"
    if unsupported:
        kinds: Counter[tuple[str, str]] = Counter()
        for u in unsupported:  # one line per op and reason, whatever the shapes
            kinds[(u.op, u.reason)] += u.count
        text += (f"; {_plural(sum(kinds.values()), 'unsupported call')} not included "
                 f"({'; '.join(f'{n} x {op}: {reason}' for (op, reason), n in kinds.items())})")
    return text


class _Walker:
    """Collects one Operator per executed tunable call (repeats included) and the unsupported ones."""

    def __init__(self, mod: "tvm.IRModule") -> None:
        self.mod = mod
        self.layers: list[Operator] = []
        self.unsupported: Counter[tuple[str, str, str]] = Counter()
        self.bindings: dict[Any, Any] = {}
        self._stack: list[str] = []
        self._reduces: dict[str, bool] = {}

    def callees(self) -> set[str]:
        """Names of Relax functions called from other Relax functions (not roots)."""
        from tvm import ir, relax

        found: set[str] = set()

        def visit(e) -> None:
            if isinstance(e, relax.Call) and isinstance(e.op, ir.GlobalVar):
                found.add(e.op.name_hint)

        for _, f in self.mod.functions.items():
            if isinstance(f, relax.Function):
                relax.analysis.post_order_visit(f.body, visit)
        return found

    def walk_function(self, fname: str) -> None:
        if fname in self._stack:
            self.unsupported[(f"@{fname}", "recursive call", "recursion: the number of executions is unknown")] += 1
            return
        self._stack.append(fname)
        try:
            self._walk(self.mod[fname].body)
        finally:
            self._stack.pop()

    def _walk(self, e) -> None:
        from tvm import ir, relax

        if isinstance(e, relax.Call):
            for a in e.args:
                self._walk(a)
            if isinstance(e.op, ir.GlobalVar):
                if isinstance(self.mod[e.op], relax.Function):
                    self.walk_function(e.op.name_hint)
            elif isinstance(e.op, ir.Op):
                self._visit_call(e)
        elif isinstance(e, relax.SeqExpr):
            for block in e.blocks:
                for b in block.bindings:
                    self.bindings[b.var] = b.value
                    self._walk(b.value)
            self._walk(e.body)
        elif isinstance(e, relax.If):
            self._walk(e.cond)
            self._walk(e.true_branch)
            self._walk(e.false_branch)
        elif isinstance(e, relax.Tuple):
            for f in e.fields:
                self._walk(f)
        elif isinstance(e, relax.TupleGetItem):
            self._walk(e.tuple_value)
        elif isinstance(e, relax.Function):
            self._walk(e.body)

    def _has_reduction(self, callee) -> bool:
        """Whether a ``call_tir`` callee reduces (may be a conv or matmul); element-wise ones don't.

        Frontends lower a few element-wise ops themselves (the ONNX importer's ``Clip`` becomes
        ``maximum``/``minimum`` TIR functions): those are not tunable operators and are not listed.
        """
        from tvm import ir, tirx

        if not isinstance(callee, ir.GlobalVar):
            return True
        if callee.name_hint not in self._reduces:
            func = self.mod[callee]
            # TIR has no Python visitor in TVM 0.27; a reduction block iterator prints as "R".
            self._reduces[callee.name_hint] = not isinstance(func, tirx.PrimFunc) or bool(
                re.search(r'T\.axis\.reduce\(|T\.axis\.remap\("[SR]*R', func.script()))
        return self._reduces[callee.name_hint]

    def _visit_call(self, call) -> None:
        name = call.op.name
        try:
            if name in _CONV_OPS:
                ops = [_conv(call, _CONV_OPS[name])]
            elif name == "relax.nn.conv2d_transpose":
                ops = [_conv2d_transpose(call)]
            elif name == "relax.matmul":
                ops = [_matmul(call, self.bindings)]
            elif name in _ATTENTION_OPS:
                ops = _attention(call)
            elif name in _UNMAPPED_OPS:
                raise _Unsupported(_describe_call(call), _UNMAPPED_OPS[name])
            elif name == "relax.call_tir" and self._has_reduction(call.args[0]):
                raise _Unsupported(_describe_call(call), _LOWERED_REASON)
            elif name == "relax.call_dps_packed":
                raise _Unsupported(_describe_call(call), _PACKED_REASON)
            else:
                return  # element-wise, pooling, normalisation, data movement: not tunable types
        except _Unsupported as u:
            self.unsupported[(name, u.call, u.reason)] += 1
            return
        self.layers.extend(ops)


# -- reading Relax types ------------------------------------------------------------------------
def _ty(expr):
    """The Relax type of an expression (``ty`` in TVM 0.27; ``struct_info`` before)."""
    ty = getattr(expr, "ty", None)
    return ty if ty is not None else getattr(expr, "struct_info", None)


def _shape(expr) -> tuple[int, ...] | None:
    """The static shape of a tensor expression, or None when a dimension (or the rank) is unknown."""
    from tvm import tirx

    shape = getattr(_ty(expr), "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return None
    if not all(isinstance(v, tirx.IntImm) for v in values):
        return None
    return tuple(int(v) for v in values)


def _dtype(expr) -> str:
    return str(getattr(_ty(expr), "dtype", "?"))


def _fmt_shape(expr) -> str:
    shape = getattr(_ty(expr), "shape", None)
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


def _describe_call(call) -> str:
    """Shapes, dtype and window attributes of a call, for the unsupported list."""
    args = ", ".join(f"{_fmt_shape(a)} {_dtype(a)}" for a in call.args if _ty(a) is not None
                     and hasattr(_ty(a), "dtype"))
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
    """Static shapes of the operands; _Unsupported for a dynamic shape or a dtype eto does not tune."""
    shapes = []
    for a in operands:
        s = _shape(a)
        if s is None:
            raise _Unsupported(_describe_call(call),
                               "dynamic shape: operator parameters must be static (give the input shapes)")
        shapes.append(s)
    dtypes = {_dtype(a) for a in operands} | {_dtype(call)}
    other = sorted(d for d in dtypes if d != SUPPORTED_DTYPE)
    if other:
        raise _Unsupported(_describe_call(call),
                           f"dtype {', '.join(other)}: eto's operator programs are {SUPPORTED_DTYPE}")
    return shapes


def _create(call, type_: str, **params: Any) -> Operator:
    try:
        return Operator.create(type_, **params)
    except ValueError as exc:
        raise _Unsupported(_describe_call(call), f"no valid {type_} operator: {exc}") from None


def _symmetric(call, padding: Sequence[int], nd: int) -> tuple[int, ...]:
    before, after = tuple(padding[:nd]), tuple(padding[nd:])
    if len(padding) != 2 * nd or before != after:
        raise _Unsupported(_describe_call(call),
                           f"asymmetric padding (before {before}, after {after}): catalogue convolutions "
                           "pad both sides of an axis equally")
    return before


_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def _conv(call, nd: int) -> Operator:
    data, weight = call.args[0], call.args[1]
    (dshape, wshape) = _check_static_float32(call, data, weight)
    a = call.attrs
    sp = _SPATIAL[nd]
    layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout))
    if layouts != ("NC" + sp, "OI" + sp, "NC" + sp):
        raise _Unsupported(_describe_call(call),
                           f"layout {'/'.join(layouts)}: eto's convolutions are NC{sp}/OI{sp} "
                           "(convert the layout first, e.g. relax.transform.ConvertLayout)")
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
        raise _Unsupported(_describe_call(call),
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
        raise _Unsupported(_describe_call(call),
                           f"layout {'/'.join(layouts)}: T2D is NCHW input with an IOHW weight")
    padding = _symmetric(call, _ints(a.padding), 2)
    if int(a.groups) != 1:
        raise _Unsupported(_describe_call(call), f"grouped transposed convolution (groups={int(a.groups)}): "
                                                 "T2D has no groups")
    if any(d != 1 for d in _ints(a.dilation)):
        raise _Unsupported(_describe_call(call), f"dilated transposed convolution (dilation "
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
    src = _shape(value.args[0])
    return src is not None and len(src) >= 3 and src[-1] == k and math.prod(src[:-1]) == m


def _matmul(call, bindings: Mapping[Any, Any]) -> Operator:
    lhs, rhs = call.args[0], call.args[1]
    a, b = _check_static_float32(call, lhs, rhs)
    if len(a) == 1 and len(b) == 1:
        raise _Unsupported(_describe_call(call), "dot product of two vectors: no space loop to tune")
    if len(a) == 0 or len(b) == 0:
        raise _Unsupported(_describe_call(call), "matmul of a scalar")
    if len(a) == 1:
        a = (1, *a)
    if len(b) == 1:
        b = (*b, 1)
    (m, k), (k2, n) = a[-2:], b[-2:]
    a_batch, b_batch = a[:-2], b[:-2]
    if k != k2:  # pragma: no cover - Relax's type inference rejects it first
        raise _Unsupported(_describe_call(call), f"reduction lengths differ ({k} vs {k2})")
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
            raise _Unsupported(_describe_call(call), f"batch axes {x} and {y} do not broadcast")
        out.append(max(p, q))
    return tuple(out)


def _attention(call) -> list[Operator]:
    q, k, v = call.args[0], call.args[1], call.args[2]
    qs, ks, vs = _check_static_float32(call, q, k, v)
    if not (len(qs) == len(ks) == len(vs) == 4):
        raise _Unsupported(_describe_call(call), "attention inputs must be [batch, seq, heads, dim]")
    b, sq, h, d = qs
    skv, dv = ks[1], vs[3]
    return [_create(call, "BMM", B=b * h, M=sq, N=skv, K=d), _create(call, "BMM", B=b * h, M=sq, N=dv, K=skv)]


# -- optional packages ------------------------------------------------------------------------------
def _require_onnx():
    try:
        import onnx
    except ImportError as exc:
        raise MissingExtraError(f"reading ONNX models needs the onnx package: {_ONNX_EXTRA}") from exc
    return onnx


def _require_torch():
    try:
        import torch
        import torch.export  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(f"reading PyTorch models needs PyTorch (torch.export): {_TORCH_EXTRA}") from exc
    return torch


# -- ONNX ---------------------------------------------------------------------------------------
def extract_from_onnx(model: Any, *, name: str | None = None,
                      shapes: Mapping[str, Sequence[int]] | None = None) -> ModelOperators:
    """The operator set of an ONNX model: a path, serialized bytes or an ``onnx.ModelProto``.

    ``shapes`` gives static shapes to inputs whose dimensions are symbolic (e.g. a dynamic batch);
    calls that stay dynamic are listed as unsupported.
    """
    onnx = _require_onnx()
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        proto = _load_onnx_file(path)
        label = path
        name = name or _stem(path)
    elif isinstance(model, (bytes, bytearray)):
        label = "<onnx bytes>"
        proto = _parse_onnx(bytes(model), label)
    elif isinstance(model, onnx.ModelProto):
        label = "<onnx model>"
        proto = model
    else:
        raise TypeError(f"extract_from_onnx needs a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    _check_onnx(proto, label)
    name = name or proto.graph.name or "onnx_model"
    from tvm.relax.frontend.onnx import from_onnx

    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checker's and the importer's warnings about dynamic inputs
            mod = from_onnx(proto, shape_dict={k: list(v) for k, v in (shapes or {}).items()} or None,
                            keep_params_in_input=True)
    except Exception as exc:  # TVM raises many types for models it cannot import
        raise ModelImportError(f"{label}: TVM's Relax ONNX frontend could not import the model: "
                               f"{type(exc).__name__}: {_first_line(exc)}") from exc
    opset = proto.opset_import[0].version if proto.opset_import else "?"
    return extract_from_relax(mod, name, source=f"ONNX ({os.path.basename(label)}, opset {opset}) "
                                                "via tvm.relax.frontend.onnx")


def _parse_onnx(data: bytes, label: str):
    onnx = _require_onnx()
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError and friends
        raise ModelFileError(f"{label}: not an ONNX model or a torch.export .pt2 archive "
                             f"(protobuf parse failed: {_first_line(exc) or type(exc).__name__})") from None
    return proto


def _check_onnx(proto, label: str) -> None:
    if proto.ir_version < 3 or not proto.HasField("graph") or len(proto.graph.node) == 0:
        raise ModelFileError(f"{label}: not an ONNX model (no graph with nodes; ir_version {proto.ir_version})")


def _load_onnx_file(path: str):
    data = _read(path)
    proto = _parse_onnx(data, path)
    _check_onnx(proto, path)
    if any(t.data_location == 1 for t in proto.graph.initializer):  # EXTERNAL: weights beside the file
        onnx = _require_onnx()
        try:
            onnx.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
        except Exception as exc:
            raise ModelFileError(f"{path}: cannot read its external weight files: {_first_line(exc)}") from None
    return proto


# -- PyTorch ------------------------------------------------------------------------------------
def extract_from_torch(module: Any, example_inputs: Any, *, name: str | None = None,
                       example_kwargs: Mapping[str, Any] | None = None, decompose: bool = True) -> ModelOperators:
    """The operator set of a ``torch.nn.Module`` run on ``example_inputs`` (a tensor or a tuple).

    The module is exported in eval mode (restored afterwards) with ``torch.export``, so shapes are
    those of the example inputs. ``decompose`` runs PyTorch's decompositions before conversion
    (TVM's default; without it some models, e.g. BERT's boolean attention masks, fail to convert).
    """
    torch = _require_torch()
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    name = name or type(module).__name__.lower()
    was_training = getattr(module, "training", False)
    module.eval()
    try:
        with torch.no_grad():
            ep = torch.export.export(module, tuple(example_inputs), kwargs=dict(example_kwargs or {}))
    finally:
        module.train(was_training)
    return extract_from_exported_program(ep, name=name, decompose=decompose,
                                         source=f"PyTorch module {type(module).__name__}")


def extract_from_exported_program(ep: Any, *, name: str = "model", decompose: bool = True,
                                  source: str = "torch.export ExportedProgram") -> ModelOperators:
    """The operator set of a ``torch.export.ExportedProgram``."""
    _require_torch()
    from tvm.relax.frontend.torch import from_exported_program

    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = from_exported_program(ep, keep_params_as_input=True, run_ep_decomposition=decompose)
    except Exception as exc:
        raise ModelImportError(f"{name}: TVM's Relax PyTorch frontend could not convert the program: "
                               f"{type(exc).__name__}: {_first_line(exc)}") from exc
    return extract_from_relax(mod, name, source=f"{source} via torch.export + "
                                                "tvm.relax.frontend.torch.from_exported_program")


def _load_pt2(path: str):
    torch = _require_torch()
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.load(path)
    except Exception as exc:
        raise ModelFileError(
            f"{path}: a zip archive but not a readable torch.export .pt2 program ({type(exc).__name__}: "
            f"{_first_line(exc)}); a module saved with torch.save must be loaded in Python and passed to "
            "eto.frontend.extract_from_torch with example inputs") from None


# -- files --------------------------------------------------------------------------------------
def extract_from_file(path: str | os.PathLike, *, name: str | None = None,
                      shapes: Mapping[str, Sequence[int]] | None = None) -> ModelOperators:
    """An ONNX model or a ``torch.export.save`` archive (``.pt2``), recognised by content."""
    path = os.fspath(path)
    head = _read(path, 4)
    name = name or _stem(path)
    if head.startswith(b"PK\x03\x04"):
        if shapes:
            raise ModelImportError(f"{path}: input shapes apply to ONNX models; a .pt2 program has its own")
        ep = _load_pt2(path)
        return extract_from_exported_program(ep, name=name, source=f"torch.export archive {os.path.basename(path)}")
    if head[:1] in (b"{", b"[") and _is_json(path):
        raise ModelFileError(f"{path}: a JSON file, not a model (an operator-set file is read by "
                             "'eto ops show FILE')")
    try:
        _require_onnx()
    except MissingExtraError:
        if head[:1] == b"\x08":  # an ONNX ModelProto starts with its ir_version field
            raise
        raise ModelFileError(f"{path}: not an ONNX model or a torch.export .pt2 archive") from None
    return extract_from_onnx(path, name=name, shapes=shapes)


def load_model_opset(path: str | os.PathLike, name: str | None = None) -> OperatorSet:
    """The operator set of a model file, for ``eto tune --model FILE``.

    Unsupported calls are summarised in the set's ``description``; use :func:`extract_from_file`
    for the structured list.
    """
    return extract_from_file(path, name=name).opset


def _read(path: str, size: int = -1) -> bytes:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ModelFileError(f"{path}: is a directory, not a model file")
    with open(path, "rb") as f:
        data = f.read(size)
    if not data:
        raise ModelFileError(f"{path}: empty file, not a model")
    return data


def _is_json(path: str) -> bool:
    import json

    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0] or "model"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


# -- CLI ----------------------------------------------------------------------------------------
def format_model_operators(result: ModelOperators) -> str:
    """The ``eto ops show`` table of the set, then the unsupported calls."""
    from .cli import _is_default, _short
    from .report import format_table

    s = result.opset
    rows = []
    for i, e in enumerate(s):
        op = e.op
        params = " ".join(f"{k}={_short(v)}" for k, v in op.params if not _is_default(op, k, v))
        rows.append((i, op.type, params, "[" + ",".join(map(str, op.space)) + " | " +
                     ",".join(map(str, op.reduction)) + "]", e.frequency, round(op.flops / 1e9, 4)))
    lines = [f"{s.name}: {len(s)} distinct operators, {sum(e.frequency for e in s)} layers, "
             f"{s.total_flops / 1e9:.2f} GFLOP in all", f"source: {result.source}"]
    if rows:
        lines.append(format_table(("#", "type", "parameters", "loop nest [space | reduction]", "freq", "GFLOP"),
                                  rows, align="rlllrr"))
    if result.unsupported:
        lines.append(f"unsupported: {_plural(result.unsupported_calls, 'call')} not in the set")
        lines.append(format_table(("count", "op", "call", "reason"),
                                  [(u.count, u.op, u.call, u.reason) for u in result.unsupported], align="rlll"))
    else:
        lines.append("unsupported: none")
    return "\n".join(lines)


def _parse_shapes(items: Sequence[str] | None) -> dict[str, list[int]]:
    from .cli import CLIError

    shapes: dict[str, list[int]] = {}
    for item in items or ():
        key, eq, dims = item.partition("=")
        try:
            values = [int(d) for d in dims.replace("x", ",").split(",")]
        except ValueError:
            values = []
        if not eq or not key or not values or any(v < 1 for v in values):
            raise CLIError(f"--input-shape {item!r}: expected NAME=D1,D2,... with positive integers, "
                           "e.g. input=1,3,224,224")
        shapes[key] = values
    return shapes


def _cmd_from_model(args: argparse.Namespace) -> int:
    import json

    from .cli import EXIT_OK, CLIError

    try:
        result = extract_from_file(args.file, name=args.name, shapes=_parse_shapes(args.input_shape))
    except MissingExtraError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(format_model_operators(result))
    return EXIT_OK


def register_model_commands(ops_sub: Any) -> None:
    """Add ``eto ops from-model`` to the ``ops`` subcommand group (imports nothing heavy)."""
    p = ops_sub.add_parser("from-model", help="the operator set of an ONNX model or a torch.export .pt2 file",
                           description="Import a model with TVM's Relax frontend and list its tunable operators "
                                       "with frequencies, plus the calls that could not be mapped.")
    p.add_argument("file", help="an ONNX model (.onnx) or a torch.export.save archive (.pt2)")
    p.add_argument("--json", action="store_true",
                   help="JSON object: operators (as 'eto ops show --json') and unsupported; "
                        "also a valid operator-set file")
    p.add_argument("--name", help="name of the operator set (default: the file name)")
    p.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...",
                   help="static shape for an ONNX input with symbolic dimensions (repeatable)")
    p.set_defaults(func=_cmd_from_model)


__all__ = [
    "MissingExtraError",
    "ModelFileError",
    "ModelImportError",
    "ModelOperators",
    "UnsupportedCall",
    "extract_from_exported_program",
    "extract_from_file",
    "extract_from_onnx",
    "extract_from_relax",
    "extract_from_torch",
    "format_model_operators",
    "load_model_opset",
    "operator_item",
    "register_model_commands",
]
