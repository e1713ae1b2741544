"""Operator sets of models: walking a Relax module and collecting its tunable calls.

Every tunable call is mapped to a catalogue :class:`~eto.operators.Operator`
(:mod:`eto.models.mapping`); the distinct operators with their counts form the
:class:`~eto.operators.opsets.OperatorSet`. Calls of a tunable kind that cannot be mapped are listed in
:attr:`ModelOperators.unsupported` with a count and a reason, never dropped silently.
Element-wise, pooling and normalisation ops are not tunable operator types and are not listed.

Only ``main`` (or every Relax function nobody calls) is walked, following calls into other Relax
functions once per call site. ``call_tir`` functions that a frontend lowers itself (the ONNX
importer's ``Clip``) are skipped when element-wise and listed when they have a reduction loop.
Frequencies count calls in the imported graph: PyTorch's TorchScript ONNX exporter merges identical
subexpressions, so a layer applied twice to the same tensor counts once there.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.report import plural
from eto.models.load import (ModelImportError, RelaxModel, exported_program_to_relax, load_relax, onnx_to_relax,
    torch_to_relax)
from eto.models.mapping import Unmapped, call_operators, describe_call

if TYPE_CHECKING:  # pragma: no cover
    import tvm

#: Lowered calls: listed only when the callee may hide a conv/matmul (see ``_Walker._has_reduction``).
_LOWERED_REASON = ("a TIR function with a reduction loop (a frontend-lowered op, or a module legalized "
                   "before extraction): its operator cannot be read back")
_PACKED_REASON = "an opaque packed function: its operator cannot be seen"


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
        text += (f"; {plural(sum(kinds.values()), 'unsupported call')} not included "
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
            if name == "relax.call_tir" and self._has_reduction(call.args[0]):
                raise Unmapped(describe_call(call), _LOWERED_REASON)
            if name == "relax.call_dps_packed":
                raise Unmapped(describe_call(call), _PACKED_REASON)
            ops = call_operators(call, self.bindings)
        except Unmapped as u:
            self.unsupported[(name, u.call, u.reason)] += 1
            return
        self.layers.extend(ops or ())


# -- from model files and objects -----------------------------------------------------------------
def extract_from_onnx(model: Any, *, name: str | None = None,
                      shapes: Mapping[str, Sequence[int]] | None = None) -> ModelOperators:
    """The operator set of an ONNX model: a path, serialized bytes or an ``onnx.ModelProto``.

    ``shapes`` gives static shapes to inputs whose dimensions are symbolic (e.g. a dynamic batch);
    calls that stay dynamic are listed as unsupported.
    """
    return _extract(onnx_to_relax(model, name=name, shapes=shapes))


def extract_from_torch(module: Any, example_inputs: Any, *, name: str | None = None,
                       example_kwargs: Mapping[str, Any] | None = None, decompose: bool = True) -> ModelOperators:
    """The operator set of a ``torch.nn.Module`` run on ``example_inputs`` (see :func:`torch_to_relax`)."""
    return _extract(torch_to_relax(module, example_inputs, name=name, example_kwargs=example_kwargs,
                                   decompose=decompose))


def extract_from_exported_program(ep: Any, *, name: str = "model", decompose: bool = True,
                                  source: str = "torch.export ExportedProgram") -> ModelOperators:
    """The operator set of a ``torch.export.ExportedProgram``."""
    return _extract(exported_program_to_relax(ep, name=name, decompose=decompose, source=source))


def extract_from_file(path: str | os.PathLike, *, name: str | None = None,
                      shapes: Mapping[str, Sequence[int]] | None = None,
                      dims: Mapping[str, int] | None = None) -> ModelOperators:
    """An ONNX model or a ``torch.export.save`` archive (``.pt2``), recognised by content.

    ``dims`` sets symbolic dimensions by name (ONNX ``dim_param``, ``torch.export``'s ``s0``...).
    """
    return _extract(load_relax(path, name=name, shapes=shapes, dims=dims))


def load_model_opset(path: str | os.PathLike, name: str | None = None) -> OperatorSet:
    """The operator set of a model file, for ``eto tune --model FILE``.

    Unsupported calls are summarised in the set's ``description``; use :func:`extract_from_file`
    for the structured list.
    """
    return extract_from_file(path, name=name).opset


def _extract(model: RelaxModel) -> ModelOperators:
    return extract_from_relax(model.mod, model.name, source=model.source)
