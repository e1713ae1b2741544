"""The operator model of the paper (Definition 1): a type, its parameters and its major loop nest.

Every operator type is an :class:`OperatorType` subclass registered by its paper abbreviation
(``C2D``, ``BMM``, ...). An :class:`Operator` is a frozen, hashable record ``(type, params)``; all
derived facts (loop nest, FLOPs, shapes, the TE program, the numpy reference) come from its type.

TVM is imported lazily (only by :meth:`OperatorType.te` and :meth:`Operator.prim_func`) so that
commands that only inspect operators answer in well under a second.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import numpy as np

from eto.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from tvm import te, tirx

ParamValue = int | tuple[int, ...]

#: The paper's default for parameters a loop nest cannot determine (Definition 5).
WINDOW_DEFAULTS = {"stride": 1, "padding": 0, "dilation": 1}

#: MetaSchedule/Ansor consider rfactor (CPU) or cross-thread reduction (GPU) only when the space
#: loops cannot fill the machine; this is the GPU bound (max threads per block), the paper's target.
DEFAULT_PARALLEL_LIMIT = 1024

#: The largest parameter value (TVM's default index type is int32); larger ones also overflow float FLOP counts.
MAX_PARAM = 2**31 - 1


@dataclass(frozen=True)
class Param:
    """One parameter of an operator type. ``ndim`` > 0 marks a per-spatial-axis window parameter."""

    name: str
    doc: str
    default: ParamValue | None = None
    ndim: int = 0


class OperatorType(ABC):
    """The definition of one operator type: parameters, major loop nest, program and reference."""

    #: Paper abbreviation, e.g. ``"C2D"``.
    name: ClassVar[str]
    #: One line for ``eto ops types``.
    description: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]
    #: Names of the space loops and reduction loops of the major loop nest, in the paper's order.
    space_names: ClassVar[tuple[str, ...]]
    reduction_names: ClassVar[tuple[str, ...]]
    #: Parameters a loop nest cannot determine and that are not window defaults (e.g. ``groups``):
    #: :meth:`from_loop_nest` takes them from the caller.
    structural: ClassVar[tuple[str, ...]] = ()
    #: Whether the program has several loop nests with individual structures (composite sketch).
    composite: ClassVar[bool] = False
    #: A model's function outside the catalogue (:mod:`eto.operators.task`): tuned by the backend,
    #: never planned, reused or bridged.
    backend_only: ClassVar[bool] = False

    # -- parameters -----------------------------------------------------------------------
    def normalize(self, params: Mapping[str, Any]) -> dict[str, ParamValue]:
        """Fill defaults, expand window parameters to one value per spatial axis, validate."""
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known)
        if unknown:
            raise InputError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}; "
                             f"expected {', '.join(p.name for p in self.params)}")
        out: dict[str, ParamValue] = {}
        for p in self.params:
            value = params.get(p.name, p.default)
            if value is None:
                raise InputError(f"{self.name}: missing parameter {p.name} ({p.doc})")
            out[p.name] = _coerce(self.name, p, value)
        self.validate(out)
        return out

    def validate(self, p: Mapping[str, ParamValue]) -> None:
        """Reject impossible parameters with an :class:`~eto.errors.InputError` naming the parameter."""
        for param in self.params:
            values = p[param.name]
            values = values if isinstance(values, tuple) else (values,)
            lowest = 0 if param.name in ("padding", "output_padding") else 1
            if any(v < lowest for v in values):
                bound = "non-negative" if lowest == 0 else "positive"
                raise InputError(f"{self.name}: parameter {param.name} must be {bound}, got {p[param.name]}")
            if any(v > MAX_PARAM for v in values):
                raise InputError(f"{self.name}: parameter {param.name} must be at most {MAX_PARAM}, "
                                 f"got {p[param.name]}")

    # -- loop nest ------------------------------------------------------------------------
    @abstractmethod
    def loop_nest(self, p: Mapping[str, ParamValue]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(space extents, reduction extents) of the major loop nest."""

    @abstractmethod
    def params_from_loop_nest(
        self, extents: Sequence[int], structural: Mapping[str, ParamValue]
    ) -> dict[str, ParamValue]:
        """Parameters of an operator with this major loop nest, stride 1, padding 0, dilation 1."""

    # -- program --------------------------------------------------------------------------
    @abstractmethod
    def input_shapes(self, p: Mapping[str, ParamValue]) -> list[tuple[int, ...]]:
        """Shapes of the inputs, in the order of :meth:`te` and :meth:`reference`."""

    @abstractmethod
    def output_shape(self, p: Mapping[str, ParamValue]) -> tuple[int, ...]: ...

    @abstractmethod
    def te(self, p: Mapping[str, ParamValue], dtype: str) -> list["te.Tensor"]:
        """Input placeholders followed by the output tensor."""

    @abstractmethod
    def reference(self, p: Mapping[str, ParamValue], *inputs: np.ndarray) -> np.ndarray:
        """What the program computes, in numpy (float64 accumulation)."""

    def flops(self, p: Mapping[str, ParamValue]) -> int:
        """Floating-point operations: one multiply-add (2 FLOPs) per major-loop-nest iteration."""
        space, reduction = self.loop_nest(p)
        return 2 * math.prod(space) * math.prod(reduction)

    def sketch_key(self, p: Mapping[str, ParamValue], parallel_limit: int) -> str:
        """A cheap stand-in for the sketch set K (reuse condition 1), computed without TVM.

        Multi-level tiling applies to every type here; MetaSchedule and Ansor add a second sketch
        (rfactor on CPU, cross-thread reduction on GPU) when the space loops are fewer than the
        reduction loops and do not exceed the machine's parallelism. That rule is what separates
        the paper's ``C2D (K2)`` classifier of MobileNetV2 from the other 1x1 convolutions.
        """
        return f"{self.name}:mlt+rf" if self._has_rfactor_sketch(p, parallel_limit) else f"{self.name}:mlt"

    def sketch_count(self, p: Mapping[str, ParamValue], parallel_limit: int) -> int:
        """How many sketches the set K has (two when the rfactor rule of :meth:`sketch_key` adds one).

        The selector cannot estimate reuse costs for a kind with several sketches before one of its
        operators is tuned (section 6.1), so it needs this number, not just the key.
        """
        return 2 if self._has_rfactor_sketch(p, parallel_limit) else 1

    def _has_rfactor_sketch(self, p: Mapping[str, ParamValue], parallel_limit: int) -> bool:
        space, reduction = self.loop_nest(p)
        s, r = math.prod(space), math.prod(reduction)
        return s <= parallel_limit and s < r


def _coerce(type_name: str, param: Param, value: Any) -> ParamValue:
    """Accept ints (broadcast over spatial axes) or sequences; reject anything else by name."""
    if param.ndim:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return (int(value),) * param.ndim
        if isinstance(value, (list, tuple)) and len(value) == param.ndim and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
        ):
            return tuple(int(v) for v in value)
        raise InputError(
            f"{type_name}: parameter {param.name} must be an int or {param.ndim} ints, got {value!r}"
        )
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    raise InputError(f"{type_name}: parameter {param.name} must be an int, got {value!r}")


_REGISTRY: dict[str, OperatorType] = {}


def register(cls: type[OperatorType]) -> type[OperatorType]:
    _REGISTRY[cls.name] = cls()
    return cls


def operator_type(name: str) -> OperatorType:
    """The registered type called ``name`` (case-insensitive); an InputError lists the known ones."""
    try:
        return _REGISTRY[name.upper()]
    except KeyError:
        raise InputError(
            f"unknown operator type {name!r}; known types: {', '.join(_REGISTRY)}"
        ) from None


def operator_types() -> list[OperatorType]:
    return list(_REGISTRY.values())


@dataclass(frozen=True)
class Operator:
    """An operator to tune: its type and normalized parameters. Hashable; equal iff same program."""

    type: str
    params: tuple[tuple[str, ParamValue], ...]
    #: A model's fused task (:mod:`eto.models.tasks`): the Relax ops fused into the function that
    #: Relax compiles, e.g. ``"conv2d+add+relu"``; empty for the bare operator (the catalogue's TE
    #: program). Part of identity, not of the sketch key: a program of one epilogue is reused for
    #: another (the tuner maps the write stage, :attr:`tuner.analysis.sketch.Sketch.family`).
    fusion: str = ""
    #: The fused task's PrimFunc (what Relax compiles); not part of identity: a database reloads the
    #: operator without it, and the model supplies it again.
    task: Any = field(default=None, repr=False, compare=False, hash=False)
    _p: dict = field(default=None, init=False, repr=False, compare=False, hash=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_p", dict(self.params))

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def create(cls, type: str, /, **params: Any) -> "Operator":
        """Validated construction: ``Operator.create("C2D", N=1, CI=64, H=56, W=56, CO=64, KH=3, KW=3)``."""
        spec = operator_type(type)
        norm = spec.normalize(params)
        return cls(spec.name, tuple((p.name, norm[p.name]) for p in spec.params))

    @classmethod
    def from_loop_nest(cls, type: str, extents: Sequence[int], /, **structural: Any) -> "Operator":
        """The operator whose major loop nest has ``extents`` (Definition 5 needs this for bridges).

        Parameters the loop nest cannot determine get the paper's defaults (stride 1, padding 0,
        dilation 1); structural ones (``groups`` of GRP, ``capsule`` of CAP) come from the caller.
        """
        spec = operator_type(type)
        n = len(spec.space_names) + len(spec.reduction_names)
        extents = [int(e) for e in extents]
        if len(extents) != n:
            raise InputError(
                f"{spec.name}: a loop nest has {n} extents "
                f"({', '.join(spec.space_names + spec.reduction_names)}), got {len(extents)}"
            )
        for name, e in zip(spec.space_names + spec.reduction_names, extents):
            if e < 1:
                raise InputError(f"{spec.name}: loop extent {name} must be positive, got {e}")
        missing = [s for s in spec.structural if s not in structural]
        if missing:
            raise InputError(f"{spec.name}: from_loop_nest needs structural parameter(s) {', '.join(missing)}")
        return cls.create(spec.name, **spec.params_from_loop_nest(extents, structural))

    def with_fusion(self, fusion: str, task: "tirx.PrimFunc | None" = None) -> "Operator":
        """This operator as the anchor of a fused task: ``fusion`` names the fused ops, ``task`` is
        the function Relax compiles (needed to tune it; a database reads the operator without it)."""
        if not re.fullmatch(r"[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*", fusion):
            raise InputError(f"fusion must be op names joined by '+', e.g. 'conv2d+add+relu', got {fusion!r}")
        return Operator(self.type, self.params, fusion, task)

    @property
    def anchor(self) -> "Operator":
        """The bare operator (no fusion): what the catalogue, bridges and numpy know."""
        return Operator(self.type, self.params) if self.fusion else self

    @classmethod
    def parse(cls, text: str) -> "Operator":
        """Read the :attr:`key` form back: ``C2D(N=1,CI=64,H=56,W=56,CO=64,KH=3,KW=3,padding=1)``.

        Omitted parameters take their defaults; ``1x2`` gives a per-axis value.
        """
        m = re.fullmatch(r"\s*([A-Za-z0-9]+)\s*\((.*)\)\s*(?:\+\s*(\S+)\s*)?", text)
        if not m:
            raise InputError(f"cannot read operator {text!r}: expected TYPE(name=value,...), e.g. "
                             "'BMM(B=1,M=128,N=768,K=768)'")
        params: dict[str, Any] = {}
        for item in filter(None, (s.strip() for s in m.group(2).split(","))):
            name, eq, value = item.partition("=")
            if not eq or not re.fullmatch(r"-?\d+(x-?\d+)*", value.strip()):
                raise InputError(f"cannot read operator {text!r}: bad parameter {item!r} (want name=int or name=AxB)")
            if name.strip() in params:
                raise InputError(f"cannot read operator {text!r}: parameter {name.strip()} given twice")
            try:
                parts = [int(v) for v in value.strip().split("x")]
            except ValueError:  # more digits than int() reads
                raise InputError(f"cannot read operator {text!r}: parameter {name.strip()} is too large") from None
            params[name.strip()] = parts[0] if len(parts) == 1 else tuple(parts)
        op = cls.create(m.group(1), **params)
        return op.with_fusion(m.group(3)) if m.group(3) else op

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Operator":
        if not isinstance(d, Mapping) or not isinstance(d.get("type"), str):
            raise InputError(f"operator entry has no 'type' string: {d!r}")
        params = d.get("params", {})
        if not isinstance(params, Mapping):
            raise InputError(f"{d['type']}: 'params' must be an object of name: value, got {params!r}")
        op = cls.create(d["type"], **params)
        return op.with_fusion(d["fusion"]) if d.get("fusion") else op

    def to_dict(self) -> dict[str, Any]:
        d = {"type": self.type, "params": {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}}
        return {**d, "fusion": self.fusion} if self.fusion else d

    def replace(self, **params: Any) -> "Operator":
        """A copy with some parameters changed (e.g. another batch size), re-validated."""
        op = Operator.create(self.type, **{**self._p, **params})
        return op.with_fusion(self.fusion) if self.fusion else op

    # -- derived facts --------------------------------------------------------------------
    @property
    def spec(self) -> OperatorType:
        return operator_type(self.type)

    def __getitem__(self, name: str) -> ParamValue:
        return self._p[name]

    @property
    def space(self) -> tuple[int, ...]:
        return self.spec.loop_nest(self._p)[0]

    @property
    def reduction(self) -> tuple[int, ...]:
        return self.spec.loop_nest(self._p)[1]

    @property
    def extents(self) -> tuple[int, ...]:
        """The major loop nest L (space loops then reduction loops), as in the paper."""
        space, reduction = self.spec.loop_nest(self._p)
        return space + reduction

    @property
    def flops(self) -> int:
        return self.spec.flops(self._p)

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        return self._task_shapes()[:-1] if self.fusion else self.spec.input_shapes(self._p)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self._task_shapes()[-1] if self.fusion else self.spec.output_shape(self._p)

    def _task_shapes(self) -> list[tuple[int, ...]]:
        """A fused task's argument shapes, output last (Relax's destination-passing convention)."""
        func = self.prim_func()
        return [tuple(int(d) for d in p.shape) for p in func.params]

    @property
    def dtypes(self) -> list[str]:
        """Argument dtypes, output last: a fused task's own (a model may run in float16), else the
        catalogue's float32."""
        if self.fusion:
            return [str(p.dtype) for p in self.prim_func().params]
        return ["float32"] * (len(self.input_shapes) + 1)

    @property
    def structural(self) -> dict[str, ParamValue]:
        return {k: self._p[k] for k in self.spec.structural}

    def sketch_key(self, parallel_limit: int = DEFAULT_PARALLEL_LIMIT) -> str:
        """A TVM-free stand-in for the sketch set K: operators whose design spaces have the same
        sketch families (:attr:`tuner.analysis.sketch.Sketch.family`) have the same key. The fusion is not
        part of it: an epilogue changes how a tiled block's result is written back, which the
        reuse tuner maps, not how the anchor's loops are tiled."""
        return self.spec.sketch_key(self._p, parallel_limit)

    def sketch_count(self, parallel_limit: int = DEFAULT_PARALLEL_LIMIT) -> int:
        return self.spec.sketch_count(self._p, parallel_limit)

    @property
    def key(self) -> str:
        """Unique, stable text form: ``C2D(N=1,CI=64,...,stride=1x1,...)``; used as database key."""
        key = f"{self.type}(" + ",".join(f"{k}={_fmt(v)}" for k, v in self.params) + ")"
        return f"{key}+{self.fusion}" if self.fusion else key

    @property
    def name(self) -> str:
        """Short display name: type, loop nest, then the non-default window parameters."""
        extra = []
        for k, v in self.params:
            if k in WINDOW_DEFAULTS or k == "output_padding":
                vals = v if isinstance(v, tuple) else (v,)
                default = 0 if k == "output_padding" else WINDOW_DEFAULTS[k]
                if any(x != default for x in vals):
                    extra.append(f"{k[0] if k != 'output_padding' else 'op'}{_fmt(v)}")
            elif k in self.spec.structural:
                extra.append(f"{k}{_fmt(v)}")
        name = f"{self.type}[{','.join(map(str, self.extents))}]" + ("/" + ",".join(extra) if extra else "")
        return f"{name}+{self.fusion}" if self.fusion else name

    def __str__(self) -> str:
        return self.name

    # -- programs -------------------------------------------------------------------------
    def te(self, dtype: str = "float32") -> list["te.Tensor"]:
        return self.spec.te(self._p, dtype)

    def prim_func(self, dtype: str = "float32", *, symbolic: Mapping[str, str] | None = None) -> "tirx.PrimFunc":
        """The naive program (Figure 2a) as a TIR PrimFunc, ready for MetaSchedule.

        ``symbolic`` makes parameters symbolic: ``{"M": "seq", "N": "seq"}`` gives M and N one
        int64 variable ``seq`` (what :func:`tuner.analysis.symbolic.symbolic_module` schedules).
        """
        from tvm import te, tirx

        if self.fusion:
            if self.task is None:
                raise InputError(f"{self.name}: a fused task's program comes from its model (eto tune --model); "
                                 "this operator was read without it")
            if symbolic:
                raise InputError(f"{self.name}: a fused task has no symbolic form")
            return self.task
        if not symbolic:
            return te.create_prim_func(self.te(dtype)).with_attr("global_symbol", "main")
        unknown = [k for k in symbolic if k not in self._p]
        if unknown:
            raise InputError(f"{self.type} has no parameter {', '.join(unknown)}")
        names = {v: tirx.Var(v, "int64") for v in symbolic.values()}
        p = {**self._p, **{k: names[v] for k, v in symbolic.items()}}
        return te.create_prim_func(self.spec.te(p, dtype)).with_attr("global_symbol", "main")

    def random_inputs(self, seed: int = 0, dtype: str = "float32") -> list[np.ndarray]:
        """Inputs in [-1, 1]; a fused task's in its own arguments' dtypes (:attr:`dtypes`)."""
        rng = np.random.default_rng(seed)
        dtypes = self.dtypes[:-1] if self.fusion else [dtype] * len(self.input_shapes)
        return [np.asarray(rng.uniform(-1.0, 1.0, size=s), dtype=dt) for s, dt in zip(self.input_shapes, dtypes)]

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """numpy's result; a fused task's is its unscheduled PrimFunc's, built for the CPU."""
        if not self.fusion:
            return self.spec.reference(self._p, *inputs)
        from tvm.ir import IRModule

        from tuner.measure.apply import build, run_once
        from eto.target import cpu_target

        lib = build(IRModule({"main": self.prim_func()}), cpu_target())
        return run_once(lib, inputs, self.output_shape, self.dtypes[-1])


def _fmt(v: ParamValue) -> str:
    if isinstance(v, tuple):
        return str(v[0]) if len(set(v)) == 1 else "x".join(map(str, v))
    return str(v)
