"""One compiled function for a symbolic size: tuned programs per bucket of sizes, chosen by measurement.

Beyond the paper (issue 16). MetaSchedule cannot tune a function with a symbolic dimension, and
Relax runs a dynamic function with untuned code. ``eto dispatch`` (:func:`build_dispatch`) takes
the programs a database holds for one operator at several sizes of a dimension (tuned, reused or
instant: ``eto tune`` / ``eto retune --vary``), makes each runnable at every size
(:mod:`tuner.analysis.symbolic`: ``pad`` to the program's tile multiple, or ``mask`` the remainder), times
every candidate at sampled sizes, and chooses the buckets (:func:`tuner.analysis.symbolic.choose_buckets`):
how many, where they split, which program serves each. The result is one Relax function,
``main``, whose branches on the size call the bucket programs (:func:`dispatch_module`); it is
checked against numpy in every bucket and exported as a shared library that
``tvm.relax.VirtualMachine`` loads.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from tuner.analysis.symbolic import KINDS, Kind, choose_buckets, symbolic_module, tile_multiples, traffic_weights
from tuner.tvm_errors import TVM_ERRORS, error_line

from eto.errors import InputError
from eto.store.database import Database
from eto.operators import Operator
from eto.operators.opsets import parse_ints

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target
    from tvm.tirx import PrimFunc


@dataclass(frozen=True)
class Candidate:
    """A stored program run one way at every size: the program of ``source`` (an operator at one
    size of the dimension), padded or masked."""

    source: Operator
    record: "TuningRecord" = field(repr=False, compare=False)
    kind: Kind
    method: str = "backend"  # how the database got the program (backend, reuse, instant...)

    @property
    def name(self) -> str:
        return f"{self.source.name}:{self.kind}"


def parse_symbolic(text: str) -> dict[str, str]:
    """``M=seq,N=seq``: operator parameters and the symbolic dimension each becomes."""
    items = [tuple(x.strip() for x in t.partition("=")) for t in text.split(",") if t.strip()]
    if not items or not all(p and eq and name for p, eq, name in items):
        raise InputError(f"--symbolic {text!r}: expected PARAM=NAME[,PARAM=NAME], e.g. M=seq,N=seq")
    return {p: name for p, _, name in items}


def parse_sizes(text: str) -> list[int]:
    """``1,2,4,16:512:16``: sizes and inclusive ranges START:STOP[:STEP], sorted, distinct."""
    return sorted(parse_ints(text, f"--sizes {text!r}"))


def symbolic_dims(op: Operator, symbolic: Mapping[str, str]) -> dict[str, str]:
    """``symbolic`` checked: parameters of ``op`` (bare operators only), each variable a bare
    dimension of some input (so the size can be read from the arguments). InputError otherwise."""
    if op.fusion:
        raise InputError(f"{op.name}: a fused task has no symbolic form; dispatch the bare operator")
    if not symbolic:
        raise InputError("name at least one symbolic parameter, e.g. M=seq")
    unknown = [p for p in symbolic if p not in dict(op.params)]
    if unknown:
        raise InputError(f"{op.type} has no parameter {', '.join(unknown)} (its parameters: "
                         f"{', '.join(k for k, _ in op.params)})")
    names = set(symbolic.values())
    if len(names) != 1:
        raise InputError(f"a dispatch branches on one size: give every parameter the same name, not {sorted(names)}")
    (name,) = names
    if not name.isidentifier() or re.fullmatch(r"T|R|I|Mod|main|zp?|xp?\d+|bucket\d+.*", name):
        raise InputError(f"symbolic dimension name {name!r} must be a Python identifier other than the "
                         "dispatch's own names (T, R, I, Mod, main, z, zp, x0, xp0, bucket0...)")
    marker = {p: -(i + 1) for i, p in enumerate(symbolic)}
    shapes = op.spec.input_shapes({**dict(op.params), **marker})
    if not any(m in s for s in shapes for m in marker.values()):
        raise InputError(f"{name} is not a dimension of any input of {op.type}; cannot dispatch on it")
    return dict(symbolic)


def at_size(op: Operator, symbolic: Mapping[str, str], size: int) -> Operator:
    """``op`` with every symbolic parameter set to ``size``."""
    return op.replace(**{p: size for p in symbolic})


def size_of(op: Operator, template: Operator, symbolic: Mapping[str, str]) -> int | None:
    """The size at which ``op`` is ``template`` (all symbolic parameters equal), else None."""
    if op.type != template.type or op.fusion or template.fusion:
        return None
    values = {op[p] for p in symbolic}
    if len(values) != 1:
        return None
    (v,) = values
    return v if isinstance(v, int) and at_size(template, symbolic, v) == op else None


def candidates(op: Operator, symbolic: Mapping[str, str], database: Database, target: "str | Target",
               kinds: Sequence[Kind] = KINDS) -> list[Candidate]:
    """The best stored program of each size of ``op``'s dimension in ``database``, once per kind,
    in increasing size."""
    found = []
    for p in database.best_programs(target):
        s = size_of(p.op, op, symbolic)
        if s is not None:
            found.append((s, p))
    found.sort(key=lambda sp: sp[0])
    return [Candidate(p.op, p.tuning_record, k, p.method) for _, p in found for k in kinds]


# -- the compiled function ------------------------------------------------------------------------
def dispatch_module(op: Operator, symbolic: Mapping[str, str], buckets: Sequence[tuple[int, Candidate]],
                    dtype: str = "float32") -> tuple["IRModule", dict[str, "PrimFunc"]]:
    """A Relax module whose ``main`` takes ``op``'s inputs at any size of the symbolic dimension and
    returns its output, running the candidate of the first bucket whose upper bound is >= the size
    (the last bucket: every larger size too), and the PrimFuncs it calls by name (padding, kernel,
    crop per bucket). O(buckets x trace length).

    The PrimFuncs are compiled one per module (:func:`compile_dispatch`) and called with
    ``call_dps_packed``: compiled together with other functions, LLVM inlines a kernel's body into
    its packed wrapper and loses the pointers' ``noalias``, which cost a symbolic kernel 3-5x here.
    """
    import tvm
    from tvm.script import ir as I
    from tvm.script import relax as R
    from tvm.script import tirx as T

    symbolic = symbolic_dims(op, symbolic)
    if not buckets:
        raise ValueError("a dispatch needs at least one bucket")
    var = {name: _var(name) for name in set(symbolic.values())}
    p_sym = {**dict(op.params), **{p: var[v] for p, v in symbolic.items()}}
    in_shapes, out_shape = op.spec.input_shapes(p_sym), op.spec.output_shape(p_sym)
    funcs: dict[str, "PrimFunc"] = {}
    args = ", ".join(f"x{i}: R.Tensor({_shape_text(s, quoted=True)}, {dtype!r})" for i, s in enumerate(in_shapes))
    ret = f"R.Tensor({_shape_text(out_shape, quoted=True)}, {dtype!r})"
    xs = ", ".join(f"x{i}" for i in range(len(in_shapes)))
    lines, calls = [], []
    for b, (upper, cand) in enumerate(buckets):
        # one Relax function per bucket: Relax plans memory per function, and storage planned
        # across the branches of one function was reused at the wrong size (a crash at the split)
        defs, fs = _bucket(op, symbolic, var, cand, b, dtype, f"({args}) -> {ret}")
        funcs.update(fs)
        lines += defs
        calls.append((upper, [f"z = Mod.bucket{b}({xs})"]))
    lines.append(f"    @R.function\n    def main({args}) -> {ret}:")
    lines += _if_chain(calls, str(var[sorted(var)[0]]), indent=8)
    lines.append("        return z")
    src = "@I.ir_module\nclass Mod:\n" + "\n".join(lines) + "\n"
    return tvm.script.from_source(src, extra_vars={"I": I, "T": T, "R": R}), funcs


def _var(name: str):
    from tvm import tirx

    return tirx.Var(name, "int64")


def _shape_text(shape: Sequence, *, quoted: bool = False) -> str:
    """A shape in TVMScript; ``quoted``: a bare variable as a string (how a signature declares it)."""
    items = [str(d) for d in shape]
    return "(" + ", ".join(f'"{s}"' if quoted and s.isidentifier() else s for s in items) + ("," if len(items) == 1 else "") + ")"


def _if_chain(body: list[tuple[int, list[str]]], v: str, indent: int) -> list[str]:
    pad = " " * indent
    if len(body) == 1:
        return [pad + s for s in body[0][1]]
    (upper, stmts), rest = body[0], body[1:]
    out = [f"{pad}if R.prim_value({v} <= T.int64({upper})):"]
    out += [pad + "    " + s for s in stmts]
    out.append(f"{pad}else:")
    out += _if_chain(rest, v, indent + 4)
    return out


def _bucket(op: Operator, symbolic: Mapping[str, str], var: Mapping, cand: Candidate, b: int,
            dtype: str, header: str) -> tuple[list[str], dict]:
    """The Relax function ``bucket{b}`` (text lines, with the helpers it calls) and the PrimFuncs
    of one bucket. ``header`` is the functions' parameter list and return annotation."""
    from tvm import te, tirx

    p_sym = {**dict(op.params), **{p: var[v] for p, v in symbolic.items()}}
    in_shapes, out_shape = op.spec.input_shapes(p_sym), op.spec.output_shape(p_sym)
    n_in = len(in_shapes)
    xs = ", ".join(f"x{i}" for i in range(n_in))
    out_ty = f"R.Tensor({_shape_text(out_shape)}, {dtype!r})"

    def function(name: str, body: list[str]) -> list[str]:
        return [f"    @R.function\n    def {name}{header}:"] + [f"        {st}" for st in body] + ["        return z"]

    if cand.kind == "mask":
        func = symbolic_module(op.prim_func(dtype, symbolic=dict(symbolic)), cand.record)["main"]
        call = f"z = R.call_dps_packed({_name('k', b)!r}, ({xs}{',' if n_in == 1 else ''}), out_ty={out_ty})"
        return function(f"bucket{b}", [call]), {_name("k", b): func}
    mult = tile_multiples(op.prim_func(dtype, symbolic={p: p for p in symbolic}), cand.record)
    q = {p: tirx.Var(f"q_{p}", "int64") for p in symbolic}
    p_pad = {**dict(op.params), **{p: q[p] * mult.get(p, 1) for p in symbolic}}
    tensors = op.spec.te(p_pad, dtype)  # inputs then the output; the tile counts come before it
    kernel = te.create_prim_func(tensors[:-1] + [q[p] for p in symbolic] + tensors[-1:])
    funcs = {_name("k", b): symbolic_module(kernel, cand.record)["main"]}
    counts = [f"R.prim_value({tirx.ceildiv(var[v], mult.get(p, 1))})" for p, v in symbolic.items()]
    # a size that is already a tile multiple runs the kernel on the arguments themselves
    exact = [f"z = R.call_dps_packed({_name('k', b)!r}, ({', '.join([f'x{i}' for i in range(n_in)] + counts)}), "
             f"out_ty={out_ty})"]
    padded = {**dict(op.params), **{p: tirx.ceildiv(var[v], mult.get(p, 1)) * mult.get(p, 1)
                                     for p, v in symbolic.items()}}
    pad_in, pad_out = op.spec.input_shapes(padded), op.spec.output_shape(padded)
    stmts, names = [], []
    for i, (s, sp) in enumerate(zip(in_shapes, pad_in)):
        if [str(d) for d in s] == [str(d) for d in sp]:
            names.append(f"x{i}")
            continue
        funcs[_name("p", b, i)] = _pad_func(s, sp, dtype)
        stmts.append(f"xp{i} = R.call_dps_packed({_name('p', b, i)!r}, (x{i},), out_ty=R.Tensor({_shape_text(sp)}, {dtype!r}))")
        names.append(f"xp{i}")
    stmts.append(f"zp = R.call_dps_packed({_name('k', b)!r}, ({', '.join(names + counts)}), "
                 f"out_ty=R.Tensor({_shape_text(pad_out)}, {dtype!r}))")
    funcs[_name("c", b)] = _crop_func(pad_out, out_shape, dtype)
    stmts.append(f"z = R.call_dps_packed({_name('c', b)!r}, (zp,), out_ty={out_ty})")
    whole = " and ".join(sorted({f"{v} % {mult.get(p, 1)} == 0" for p, v in symbolic.items()}))
    dispatch = [f"if R.prim_value({whole}):", f"    z = Mod.bucket{b}_exact({xs})", "else:",
                f"    z = Mod.bucket{b}_padded({xs})"]
    return (function(f"bucket{b}_exact", exact) + function(f"bucket{b}_padded", stmts)
            + function(f"bucket{b}", dispatch)), funcs


def _name(kind: str, *index: int) -> str:
    """The symbol of a bucket's PrimFunc: ``eto_k0`` (kernel), ``eto_p0_1`` (padding of input 1)..."""
    return "eto_" + kind + "_".join(str(i) for i in index)


def _pad_func(shape, padded, dtype):
    """x (``shape``) zero-padded to ``padded``; the outer two loops fused and parallel."""
    from tvm import te, tirx

    x = te.placeholder(shape, dtype, name="x")
    grown = [i for i, (d, dp) in enumerate(zip(shape, padded)) if str(d) != str(dp)]

    def value(*idx):
        cond = tirx.all(*[idx[i] < shape[i] for i in grown]) if len(grown) > 1 else idx[grown[0]] < shape[grown[0]]
        return tirx.if_then_else(cond, x(*idx), tirx.const(0, dtype))

    return _parallel(te.create_prim_func([x, te.compute(padded, value, name="pad")]), "pad")


def _crop_func(padded, shape, dtype):
    from tvm import te

    zp = te.placeholder(padded, dtype, name="zp")
    return _parallel(te.create_prim_func([zp, te.compute(shape, lambda *i: zp(*i), name="crop")]), "crop")


def _parallel(func, block: str):
    from tvm.ir import IRModule
    from tvm.s_tir import Schedule

    sch = Schedule(IRModule({"main": func}))
    loops = sch.get_loops(sch.get_sblock(block))
    if len(loops) >= 2:
        sch.parallel(sch.fuse(*loops[:-1]))
    else:
        sch.parallel(loops[0])
    return sch.mod["main"]


# -- measuring and choosing -----------------------------------------------------------------------
class DispatchFunction:
    """A built dispatch (or one candidate at every size): call it on numpy inputs of any size."""

    def __init__(self, executable, op: Operator, symbolic: Mapping[str, str]):
        import tvm
        from tvm import relax

        self.executable = executable
        self.op, self.symbolic = op, dict(symbolic)
        self._dev = tvm.cpu()
        self._vm = relax.VirtualMachine(executable, self._dev)

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        import tvm

        return self._vm["main"](*[tvm.runtime.tensor(np.asarray(a, order="C"), self._dev) for a in inputs]).numpy()

    def time(self, inputs: Sequence[np.ndarray], *, repeat: int = 3, min_repeat_ms: int = 20) -> float:
        """Median seconds per call (``time_evaluator``: calls fill ``min_repeat_ms``, ``repeat`` times)."""
        import tvm

        args = [tvm.runtime.tensor(np.asarray(a, order="C"), self._dev) for a in inputs]
        timer = self._vm.time_evaluator("main", self._dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
        return float(np.median(timer(*args).results))


def compile_dispatch(op: Operator, symbolic: Mapping[str, str], buckets: Sequence[tuple[int, Candidate]],
                     target: "Target") -> DispatchFunction:
    """Build :func:`dispatch_module`: the Relax ``main``, each PrimFunc alone, linked into one library."""
    import tvm
    from tvm.ir import IRModule

    main, funcs = dispatch_module(op, symbolic, buckets)
    executable = tvm.compile(main, target=target)
    for name, f in funcs.items():
        executable.mod.import_module(tvm.compile(IRModule({name: f.with_attr("global_symbol", name)}), target=target).mod)
    return DispatchFunction(executable, op, symbolic)


def check(fn: DispatchFunction, sizes: Sequence[int], *, seed: int = 0) -> None:
    """Output against numpy at each size; ValueError naming the first size that differs."""
    for s in sizes:
        o = at_size(fn.op, fn.symbolic, s)
        x = o.random_inputs(seed)
        got, want = fn(*x), o.reference(*x)
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        if got.shape != tuple(o.output_shape) or not err <= 1e-3 * (1 + float(np.max(np.abs(want), initial=0))):
            raise ValueError(f"the dispatch for {fn.op.type} differs from numpy at size {s} (max abs error {err:.3g})")


@dataclass(frozen=True)
class DispatchReport:
    """What ``eto dispatch`` measured and chose (written beside the library as ``PATH.json``)."""

    op: str
    symbolic: dict[str, str]
    sizes: tuple[int, ...]
    candidates: tuple[str, ...]
    latency_s: tuple[tuple[float, ...], ...]  # [candidate][size]
    buckets: tuple[dict, ...]  # from, to, candidate, method
    dispatch_latency_s: tuple[float, ...]  # the built function, re-timed per sampled size
    seconds: float
    skipped: tuple[str, ...] = ()  # candidates that could not be built, with the reason
    weights: tuple[float, ...] | None = None  # per sampled size, from --traffic (None: all alike)

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def build_dispatch(op: Operator, symbolic: Mapping[str, str], database: Database, target: "Target", *,
                   sizes: Sequence[int], max_buckets: int | None = None, tolerance: float = 0.05,
                   kinds: Sequence[Kind] = KINDS, log: Callable[[str], None] | None = None,
                   min_repeat_ms: int = 20, traffic: Mapping[int, float] | None = None,
                   ) -> tuple[DispatchFunction, DispatchReport]:
    """Measure every candidate of ``database`` at ``sizes``, choose the buckets, build and check the
    function (see the module docstring). ``traffic`` (size -> requests, e.g. from a serving log)
    weights the choice towards the sizes users ask for (:func:`tuner.analysis.symbolic.traffic_weights`).
    InputError when the database holds no program of the operator at any size of the dimension, a
    ValueError when the built function differs from numpy."""
    from eto.target import use_threads

    say = log or (lambda _m: None)
    start = time.perf_counter()
    use_threads()  # candidates are timed in this process
    symbolic = symbolic_dims(op, symbolic)
    sizes = sorted(set(int(s) for s in sizes))
    if not sizes or sizes[0] < 1:
        raise InputError("sizes must be positive integers")
    weights = traffic_weights(sizes, traffic) if traffic else None
    if weights is not None and not any(weights):
        raise InputError("traffic: no requests at any size")
    cands = candidates(op, symbolic, database, target, kinds)
    if not cands:
        dims = ", ".join(f"{p}={v}" for p, v in symbolic.items())
        raise InputError(f"{database.path} holds no program of {op.type} with {dims} at any size for this target: "
                         f"tune it at one or more sizes first (eto tune, or eto retune --vary)")
    inputs = {s: at_size(op, symbolic, s).random_inputs(0) for s in sizes}
    rows, usable, skipped = [], [], []
    for c in cands:
        try:
            fn = compile_dispatch(op, symbolic, [(sizes[-1], c)], target)
            check(fn, [sizes[0], sizes[-1]])
        except TVM_ERRORS as exc:  # no symbolic replay, a wrong result (ValueError), TVM's refusal: named, skipped
            skipped.append(f"{c.name}: {error_line(exc, 200)}")
            say(f"skipped {c.name}: {skipped[-1]}")
            continue
        row = tuple(fn.time(inputs[s], min_repeat_ms=min_repeat_ms) for s in sizes)
        rows.append(row)
        usable.append(c)
        say(f"timed {c.name} at {len(sizes)} sizes ({len(usable)}/{len(cands)})")
    if not usable:
        raise InputError(f"no stored program of {op.type} runs at a symbolic size: " + "; ".join(skipped))
    choice = choose_buckets(rows, sizes, max_buckets=max_buckets, tolerance=tolerance, weights=weights)
    buckets = [(u, usable[c]) for u, c in zip(choice.uppers, choice.candidates)]
    fn = compile_dispatch(op, symbolic, buckets, target)
    edges = sorted({1, *[u for u, _ in buckets], *[u + 1 for u, _ in buckets[:-1]], sizes[-1]})
    check(fn, edges)
    final = tuple(fn.time(inputs[s], min_repeat_ms=min_repeat_ms) for s in sizes)
    lo, table = 1, []
    for i, (u, c) in enumerate(buckets):  # the last bucket serves every larger size too
        table.append({"from": lo, "to": u if i < len(buckets) - 1 else None, "candidate": c.name, "method": c.method})
        lo = u + 1
    report = DispatchReport(op.name, dict(symbolic), tuple(sizes), tuple(c.name for c in usable),
                            tuple(rows), tuple(table), final, time.perf_counter() - start, tuple(skipped),
                            None if weights is None else tuple(weights))
    return fn, report


def save(fn: DispatchFunction, report: DispatchReport, path: str) -> None:
    """The function as a shared library (``tvm.runtime.load_module`` + ``relax.VirtualMachine``)
    and its report beside it (``PATH.json``)."""
    fn.executable.export_library(path)
    with open(path + ".json", "w") as f:
        json.dump(report.to_json(), f, indent=1)
