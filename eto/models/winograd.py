"""Winograd convolution for a model's 3x3 stride-1 convolutions (layout ``NHWC-winograd``).

A 3x3 convolution computed by Winograd's minimal filtering F(m x m, 3 x 3) does its multiplications
in ``alpha^2 = (m + 2)^2`` independent matrix products over tiles instead of ``9 m^2`` per tile: 4x
fewer at m = 4, 2.25x at m = 2. ResNets spend about 40% of their time in such convolutions, and every
fp32 CPU program of them (MetaSchedule's, ONNX Runtime's) already runs them near the cores' peak, so
a faster algorithm is what is left. Relax has no CPU Winograd of its own, and TOPI's NHWC one with a
pre-computed weight is legacy TE; a single fused TIR function of the three stages is one MetaSchedule
tunes badly (its generic rules tile the transforms' tiny constant reductions like any reduction).

So :func:`winograd_convolutions` writes each eligible ``conv2d`` (NHWC data, OHWI constant weight,
3x3, stride and dilation 1, ungrouped, float32) as three calls:

- the *input transform* ``V[e*alpha+n, p, c] = (B^T d_p B)[e, n]`` of each tile ``d_p``: a
  hand-scheduled PrimFunc (tiles in parallel, channels vectorised, the constant matrices unrolled
  into adds and multiplies, so it needs no tuning);
- the *batched GEMM* ``M = V @ U`` with the weight transformed once, at preparation, ``U = G w G^T``:
  a Relax ``matmul``, which becomes the catalogue's ``BMM`` that the selector plans and the reuse
  tuner derives like any other;
- the *output transform* ``Y = A^T M_p A`` of each tile, with the convolution's bias add, residual
  add and ReLU when they follow it: hand-scheduled like the input transform.

The tile size is chosen per convolution: the largest m of :data:`TILE_SIZES` that still gives the
GEMM :data:`MIN_TILES` rows (tiles), since a GEMM of a handful of rows runs far below the cores'
peak. Every choice is general: no shape of a benchmark is named here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from eto.models.fast_math import mutate_functions
from eto.models.mapping import relax_type, static_shape

if TYPE_CHECKING:  # pragma: no cover
    import tvm

#: Output tile sizes m tried, largest first (F(6, 3) and up lose too much fp32 accuracy).
TILE_SIZES: tuple[int, ...] = (4, 2)
#: The fewest tiles (GEMM rows) a tile size must give to be chosen.
MIN_TILES = 16
#: The fewest input and output channels (the GEMM's reduction and columns) worth a Winograd.
MIN_CHANNELS = 16
#: The attribute of a transform function eto scheduled: ``"input"`` or ``"output"``.
SCHEDULED_BY = "eto.winograd"


def tile_size(n: int, out_h: int, out_w: int) -> int:
    """The output tile size m for an ``n`` x ``out_h`` x ``out_w`` output (see the module's docstring)."""
    for m in TILE_SIZES:
        if n * -(-out_h // m) * -(-out_w // m) >= MIN_TILES:
            return m
    return TILE_SIZES[-1]


def _lin(coefs: Sequence[float], terms: Sequence[Any]):
    """``sum(c * t)`` over TIR expressions, zero terms dropped and unit ones unmultiplied."""
    from tvm import tirx

    out = None
    for c, t in ((c, t) for c, t in zip(coefs, terms) if abs(c) >= 1e-12):
        term = t if abs(c - 1) < 1e-12 else (-t) if abs(c + 1) < 1e-12 else tirx.const(float(np.float32(c)),
                                                                                       "float32") * t
        out = term if out is None else out + term
    return tirx.const(0.0, "float32") if out is None else out


def _vector(c: int) -> int:
    return next(v for v in (16, 8, 4, 2, 1) if c % v == 0)


def _transform(stage: str, params: Sequence[tuple[str, tuple[int, ...]]], tiles: int, channels: int,
               body: Callable[..., None]):
    """One transform PrimFunc, built with TVM's IR builder: the float32 buffers ``params`` (name, shape),
    then ``for p in parallel(tiles): for co in range(channels // v): for ci in vectorized(v)`` around one
    block whose stores ``body(*buffers, p, channel)`` emits (channel: ``co * v + ci``). Private (Relax names
    it) and marked scheduled by eto. Built directly, not parsed: the same function as TVMScript text took
    3-6 s a shape to parse, most of ``eto tune``'s start on a ResNet."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    v = _vector(channels)
    with IRBuilder() as ib:
        with T.prim_func(private=True, s_tir=True):
            buffers = [T.arg(name, T.buffer(shape, "float32", layout=None)) for name, shape in params]
            T.func_attr({"tirx.noalias": True})
            with T.sblock("root"), T.parallel(0, tiles) as p, T.serial(0, channels // v) as co, \
                    T.vectorized(0, v) as ci, T.sblock(f"winograd_{stage}"):
                body(*buffers, p, co * v + ci)
    return ib.get().with_attr("tirx.is_scheduled", True).with_attr(SCHEDULED_BY, stage)


def input_transform(shape: Sequence[int], pads: Sequence[int], m: int):
    """:func:`_input_transform`, made once a process per shape."""
    return _input_transform(tuple(int(d) for d in shape), tuple(int(p) for p in pads), int(m))


def output_transform(shape: Sequence[int], m: int, *, residual: bool = False, relu: bool = False):
    """:func:`_output_transform`, made once a process per shape and epilogue."""
    return _output_transform(tuple(int(d) for d in shape), int(m), bool(residual), bool(relu))


@functools.lru_cache(maxsize=None)
def _input_transform(shape: tuple[int, ...], pads: tuple[int, ...], m: int):
    """The PrimFunc ``(x[N, H, W, C]) -> V[alpha^2, tiles, C]`` of F(m, 3), zero padding ``pads``
    (top, left, bottom, right) applied as it reads. O(alpha^2 * tiles * C).

    Intermediate values are written into the stores' expressions, not bound to names: TVM 0.27's loop
    vectoriser miscomputed a vectorised loop whose body binds values (checked against numpy)."""
    from tvm import tirx
    from tvm.tirx.script.builder import ir as T

    from eto.operators.winograd import winograd_matrices

    n, h, w, c = shape
    a = m + 2
    _, b_mat, _ = winograd_matrices(m, 3)
    out_h, out_w = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    nh, nw = -(-out_h // m), -(-out_w // m)

    def body(x, v_buf, p, ch) -> None:
        row, col = p // nw % nh * m - pads[0], p % nw * m - pads[1]
        zero = tirx.const(0, "int32")

        def load(i: int, j: int):
            # as TVMScript's parser writes `0 <= r and r < h and ...`: left-nested, the zero on the left
            inside = tirx.And(tirx.And(tirx.And(tirx.LE(zero, row + i), row + i < h), tirx.LE(zero, col + j)),
                              col + j < w)
            return tirx.if_then_else(inside, x[p // (nh * nw), row + i, col + j, ch], tirx.const(0.0, "float32"))

        d = [[load(i, j) for j in range(a)] for i in range(a)]
        t = [[_lin(b_mat[:, k], d[i]) for k in range(a)] for i in range(a)]  # rows: d B
        for e in range(a):
            for k in range(a):
                T.buffer_store(v_buf, _lin(b_mat[:, e], [t[i][k] for i in range(a)]), [e * a + k, p, ch])

    return _transform("input", [("x", (n, h, w, c)), ("V", (a * a, n * nh * nw, c))], n * nh * nw, c, body)


@functools.lru_cache(maxsize=None)
def _output_transform(shape: tuple[int, ...], m: int, residual: bool, relu: bool):
    """The PrimFunc ``(M[alpha^2, tiles, CO], bias[CO][, r[N, OH, OW, CO]]) -> y[N, OH, OW, CO]`` of
    F(m, 3): each tile's ``A^T M A`` plus the bias, plus ``r`` when ``residual``, through ReLU when
    ``relu``. O(alpha^2 * tiles * CO)."""
    from tvm import tirx
    from tvm.tirx.script.builder import ir as T

    from eto.operators.winograd import winograd_matrices

    n, oh, ow, co = shape
    a = m + 2
    a_mat, _, _ = winograd_matrices(m, 3)
    nh, nw = -(-oh // m), -(-ow // m)

    def body(m_buf, bias, *rest) -> None:
        *r, y, p, ch = rest
        mm = [[m_buf[e * a + k, p, ch] for k in range(a)] for e in range(a)]
        s = [[_lin(a_mat[:, x], mm[e]) for x in range(m)] for e in range(a)]  # M A
        for yy in range(m):
            for x in range(m):
                row, col = p // nw % nh * m + yy, p % nw * m + x
                value = _lin(a_mat[:, yy], [s[e][x] for e in range(a)]) + bias[ch]
                value = value + r[0][p // (nh * nw), row, col, ch] if residual else value
                value = T.max(value, tirx.const(0.0, "float32")) if relu else value
                with T.If(tirx.And(row < oh, col < ow)), T.Then():
                    T.buffer_store(y, value, [p // (nh * nw), row, col, ch])

    params = [("M", (a * a, n * nh * nw, co)), ("bias", (co,)), *([("r", shape)] if residual else []), ("y", shape)]
    return _transform("output", params, n * nh * nw, co, body)


def fold_transform_calls(calls: Sequence[tuple[str, float]], tasks: Mapping[str, Any]
                         ) -> tuple[list[tuple[str, float]], dict[int, tuple]]:
    """A model's calls (function, seconds) in order, each Winograd convolution's transforms folded into
    its GEMM's call: the calls, and for each folded one (by index) the convolution's NCHW data, OIHW
    weight and NCHW output shapes, as a profile compares layers. ``tasks``: the model's tasks by name."""
    def stage(name: str) -> str | None:
        mod = getattr(tasks.get(name), "mod", None)
        return None if mod is None else (getattr(mod["main"], "attrs", None) or {}).get(SCHEDULED_BY)

    out, shapes, pending = [], {}, None  # pending: (index in out of the input transform's call, its shape)
    for name, seconds in calls:
        if stage(name) == "input":
            pending = (len(out), [int(d) for d in tasks[name].mod["main"].params[0].shape])
        elif stage(name) == "output" and pending is not None and \
                (gemm := next((i for i in range(pending[0] + 1, len(out)) if out[i][0] in tasks), None)) is not None:
            at, (n, h, w, c) = pending
            _, oh, ow, co = (int(d) for d in tasks[name].mod["main"].params[-1].shape)
            out[gemm] = (out[gemm][0], out[gemm][1] + out[at][1] + seconds)
            shapes[gemm - 1] = ((n, c, h, w), (co, c, 3, 3), (n, co, oh, ow))
            del out[at]
            pending = None
            continue
        out.append((name, seconds))
    return out, shapes


def transform_weight(w_ohwi: np.ndarray, m: int) -> np.ndarray:
    """OHWI 3x3 weight -> ``U[alpha^2, CI, CO] = G w G^T`` (float64 arithmetic, float32 result): the WIN
    operator's ``kernel_pack`` with its two tile axes as one batch axis."""
    from eto.operators.winograd import transform_weight as kernel_pack

    u = kernel_pack(w_ohwi.transpose(0, 3, 1, 2), m)
    return u.reshape(-1, *u.shape[2:]).astype(np.float32)


def eligible(call) -> bool:
    """Whether a Relax call is a conv2d :func:`winograd_convolutions` rewrites."""
    import tvm
    from tvm import relax

    if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
        return False
    at = call.attrs
    if (str(at.data_layout), str(at.kernel_layout), str(at.out_layout or at.data_layout)) != ("NHWC", "OHWI", "NHWC"):
        return False
    if int(at.groups) != 1 or [int(s) for s in at.strides] != [1, 1] or [int(d) for d in at.dilation] != [1, 1]:
        return False
    data, weight = static_shape(call.args[0]), static_shape(call.args[1])
    if data is None or weight is None or not isinstance(call.args[1], tvm.ir.expr.GenericConst):
        return False
    if str(relax_type(call).dtype) != "float32" or str(relax_type(call.args[0]).dtype) != "float32":
        return False
    return weight[1:3] == (3, 3) and min(weight[0], weight[3]) >= MIN_CHANNELS


def _channel_bias(expr, co: int) -> np.ndarray | None:
    """A constant that broadcasts along the output channels only, as a ``[co]`` array, else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.GenericConst):
        return None
    value = expr.value.numpy()
    if value.ndim > 4 or value.shape[-1:] != (co,) or any(d != 1 for d in value.shape[:-1]):
        return None
    return value.reshape(co).astype(np.float32)


def conv_key(call) -> str:
    """A convolution's shape as :func:`winograd_convolutions`'s ``choose`` sees it and a database records
    it: ``NxHxWxCI->CO/pPT,PL,PB,PR`` (NHWC data, 3x3 stride-1 OHWI weight)."""
    n, h, w, c = static_shape(call.args[0])
    pads = ",".join(str(int(p)) for p in call.attrs.padding)
    return f"{n}x{h}x{w}x{c}->{static_shape(call.args[1])[0]}/p{pads}"


def winograd_convolutions(mod: "tvm.IRModule", choose: "Callable[[str], bool] | None" = None) -> "tvm.IRModule":
    """``mod`` with every :func:`eligible` convolution (of those whose :func:`conv_key` ``choose``
    accepts; None: all) as input transform, batched GEMM and output transform (see the module's
    docstring); a bias add, a residual add and a ReLU that follow it (each the only use of the value
    before it) are absorbed into the output transform. O(bindings)."""
    from tvm import relax

    return relax.transform.DeadCodeElimination()(mutate_functions(mod, _rewriter(mod, choose)))


def eligible_keys(mod: "tvm.IRModule") -> list[str]:
    """The :func:`conv_key` of every convolution of ``mod`` that :func:`winograd_convolutions` could
    rewrite, in program order, repeats kept."""
    from tvm import relax

    keys: list[str] = []
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: keys.append(conv_key(e)) if eligible(e) else None)
    return keys


def predicted_faster(key: str, *, peak_flops: float, bandwidth: "Callable[[int], float]") -> bool:
    """Whether Winograd is predicted to run the convolution ``key`` (:func:`conv_key`) faster than the
    direct convolution, both near the cores' fp32 peak: the GEMM's multiplications at ``peak_flops``
    plus the traffic of its two intermediates (the transformed input V and the GEMM's output M, each
    written and read once) at ``bandwidth(bytes)``, the copy speed of a buffer of their size (from the
    caches where they fit), against the direct convolution's ``9 m^2`` multiplications per tile at the
    peak. Few channels or few tiles make the traffic dominate, so those stay direct. O(1)."""
    shape, rest = key.split("->")
    n, h, w, ci = (int(v) for v in shape.split("x"))
    co = int(rest.split("/")[0])
    pads = [int(p) for p in rest.split("/p")[1].split(",")]
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    m = tile_size(n, oh, ow)
    a, tiles = m + 2, n * -(-oh // m) * -(-ow // m)
    direct = 2.0 * n * oh * ow * ci * co * 9 / peak_flops
    traffic = 2 * 4 * a * a * tiles * (ci + co)
    return 2.0 * a * a * tiles * ci * co / peak_flops + traffic / bandwidth(traffic // 2) < direct


@dataclass(frozen=True)
class _Chain:
    """An eligible convolution and the epilogue its output transform absorbs, in this order."""

    conv: Any  # the conv2d call
    bias: np.ndarray | None = None  # [CO], a constant added along the channels
    residual: Any = None  # a tensor of the output's shape added after the bias (a residual connection)
    relu: bool = False


def _absorb(chain: _Chain, call: Any, prev: Any) -> _Chain | None:
    """``chain`` with the op ``call`` that consumes its value ``prev`` absorbed, else None."""
    import tvm
    from tvm import relax

    name = call.op.name if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) else ""
    if name == "relax.nn.relu":
        return replace(chain, relu=True)
    if name != "relax.add" or sum(a.same_as(prev) for a in call.args) != 1:
        return None
    other = call.args[1] if call.args[0].same_as(prev) else call.args[0]
    out = static_shape(chain.conv)
    if chain.bias is None and chain.residual is None and (bias := _channel_bias(other, out[-1])) is not None:
        return replace(chain, bias=bias)
    if chain.residual is None and isinstance(other, relax.Var) and static_shape(other) == out \
            and str(relax_type(other).dtype) == "float32":
        return replace(chain, residual=other)
    return None


def _chains(func) -> dict[Any, _Chain]:
    """``{var: chain}`` for the binding that ends each eligible conv2d's chain in ``func``: its bias
    add, residual add and ReLU, each followed only if the value before it has no other use. O(bindings)."""
    from tvm import relax

    bound: dict[Any, Any] = {}
    uses: dict[Any, int] = {}
    consumers: dict[Any, list] = {}

    @relax.expr_functor.visitor
    class Bindings(relax.PyExprVisitor):
        def visit_var_binding_(self, binding):
            bound[binding.var] = binding.value
            for arg in getattr(binding.value, "args", ()):
                if isinstance(arg, relax.Var):
                    consumers.setdefault(arg, []).append(binding.var)
            self.visit_expr(binding.value)

        def visit_var_(self, var):
            uses[var] = uses.get(var, 0) + 1

        def visit_dataflow_var_(self, var):
            uses[var] = uses.get(var, 0) + 1

    Bindings().visit_expr(func)
    chains = {}
    for var, value in list(bound.items()):
        if not eligible(value):
            continue
        chain, end = _Chain(value), var
        while not chain.relu and uses.get(end, 0) == 1 and len(consumers.get(end, ())) == 1:
            following = _absorb(chain, bound[consumers[end][0]], end)
            if following is None:
                break
            chain, end = following, consumers[end][0]
        chains[end] = chain
    return chains


def _rewriter(mod: "tvm.IRModule", choose: "Callable[[str], bool] | None") -> Any:
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    chains: dict[Any, tuple] = {}
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            chains.update({v: c for v, c in _chains(func).items() if choose is None or choose(conv_key(c.conv))})

    @expr_functor.mutator
    class Winograd(PyExprMutator):
        def visit_var_binding_(self, binding):
            if binding.var not in chains:
                return super().visit_var_binding_(binding)
            value = self._winograd(chains[binding.var])
            emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
            self.set_var_remap(binding.var, emit(value, binding.var.name))
            return None

        def _winograd(self, chain: _Chain):
            conv, bias = chain.conv, chain.bias
            x, weight = self.visit_expr(conv.args[0]), conv.args[1]
            n, h, w, c = static_shape(x)
            out = static_shape(conv)
            pads = [int(p) for p in conv.attrs.padding]
            m = tile_size(n, out[1], out[2])
            u = transform_weight(weight.value.numpy(), m)
            a, tiles = m + 2, n * -(-out[1] // m) * -(-out[2] // m)
            name = f"winograd{m}_{n}x{h}x{w}x{c}"
            gv_in = self.builder_.add_func(input_transform((n, h, w, c), pads, m), f"{name}_input")
            v = self.builder_.emit(relax.call_tir(gv_in, (x,), relax.TensorType((a * a, tiles, c), "float32")))
            mm = self.builder_.emit(relax.op.matmul(v, relax.const(u)))
            residual = chain.residual is not None
            out_name = f"{name}_output{'_add' if residual else ''}{'_relu' if chain.relu else ''}"
            gv_out = self.builder_.add_func(output_transform(out, m, residual=residual, relu=chain.relu), out_name)
            b = relax.const(bias if bias is not None else np.zeros(out[-1], np.float32))
            args = (mm, b, self.visit_expr(chain.residual)) if residual else (mm, b)
            return relax.call_tir(gv_out, args, relax.TensorType(out, "float32"))

    return Winograd(mod)
