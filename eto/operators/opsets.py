"""Operator sets: the distinct operators to tune, each with its frequency (paper section 4).

A set is built from a model's layer list (one operator per layer, repeats included) by counting;
built-in sets count the layer lists of :mod:`eto.operators.zoo` (which does not import this module). JSON form::

    {"name": "resnet50", "operators": [{"type": "C2D", "params": {...}, "frequency": 3}, ...]}
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from eto.errors import InputError
from eto.operators import MAX_PARAM, Operator
from eto.operators.zoo import BUILTIN


@dataclass(frozen=True)
class OperatorEntry:
    """A distinct operator and how many times it occurs in the model(s)."""

    op: Operator
    frequency: int

    def __iter__(self) -> Iterator[Any]:  # allows ``for op, freq in opset``
        return iter((self.op, self.frequency))


@dataclass(frozen=True)
class OperatorSet:
    name: str
    entries: tuple[OperatorEntry, ...]
    description: str = ""

    @classmethod
    def from_layers(cls, name: str, layers: Iterable[Operator], description: str = "") -> "OperatorSet":
        """Count the distinct operators of a layer list, keeping first-occurrence order."""
        counts = Counter(layers)
        return cls(name, tuple(OperatorEntry(op, n) for op, n in counts.items()), description)

    @classmethod
    def union(cls, name: str, sets: Iterable["OperatorSet"], description: str = "") -> "OperatorSet":
        """Merge sets (e.g. several models or batch sizes), adding frequencies of shared operators."""
        counts: Counter[Operator] = Counter()
        for s in sets:
            for e in s.entries:
                counts[e.op] += e.frequency
        return cls(name, tuple(OperatorEntry(op, n) for op, n in counts.items()), description)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[OperatorEntry]:
        return iter(self.entries)

    @property
    def operators(self) -> list[Operator]:
        return [e.op for e in self.entries]

    def count_by_type(self) -> dict[str, int]:
        return dict(Counter(e.op.type for e in self.entries))

    def filter(self, predicate: Callable[[Operator], bool]) -> "OperatorSet":
        return OperatorSet(self.name, tuple(e for e in self.entries if predicate(e.op)), self.description)

    @property
    def total_flops(self) -> int:
        return sum(e.op.flops * e.frequency for e in self.entries)

    # -- JSON -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "operators": [{**e.op.to_dict(), "frequency": e.frequency} for e in self.entries],
        }

    @classmethod
    def from_json(cls, data: Any, *, source: str = "<json>") -> "OperatorSet":
        if not isinstance(data, dict) or not isinstance(data.get("operators"), list):
            raise InputError(f"{source}: an operator set is an object with an 'operators' list")
        entries = []
        for i, item in enumerate(data["operators"]):
            try:
                if not isinstance(item, dict):
                    raise InputError("entry is not an object")
                freq = item.get("frequency", 1)
                if not isinstance(freq, int) or isinstance(freq, bool) or not 1 <= freq <= MAX_PARAM:
                    raise InputError(f"frequency must be a positive integer up to {MAX_PARAM}, got {freq!r}")
                op = Operator.from_dict(item)
                if op.spec.backend_only:  # a model's function: no loop nest without its model
                    raise InputError(f"{op.type}: a model function's program comes from its model "
                                     "(eto tune --model), not from an operator-set file")
                entries.append(OperatorEntry(op, freq))
            except ValueError as exc:
                raise InputError(f"{source}: operator #{i}: {exc}") from None
        name = data.get("name") or os.path.splitext(os.path.basename(source))[0]
        merged = OperatorSet.union(name, [OperatorSet(name, tuple(entries))], data.get("description", ""))
        return merged

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "OperatorSet":
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory, not an operator-set file") from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of too many digits
            raise InputError(f"{path}: not valid JSON ({exc})") from None
        return cls.from_json(data, source=str(path))


def builtin_opsets() -> dict[str, str]:
    """Names of the built-in sets with one-line descriptions."""
    return {name: b.description for name, b in BUILTIN.items()}


def builtin_opset(name: str, **dims: int) -> OperatorSet:
    """A built-in set by name (case and ``-``/``_`` insensitive), at its default sizes or ``dims``."""
    key = name.lower().replace("-", "_")
    if key not in BUILTIN:
        raise InputError(f"unknown operator set {name!r}; built-in sets: {', '.join(BUILTIN)}")
    b = BUILTIN[key]
    if not dims:
        return OperatorSet.from_layers(key, b.build(), b.description)
    label = ",".join(f"{k}={v}" for k, v in dims.items())
    return OperatorSet.from_layers(f"{key}@{label}", b.build(**dims), f"{b.description}, with {label}")


def load_opset(name_or_path: str) -> OperatorSet:
    """A built-in set by name, or a JSON file by path."""
    if os.path.exists(name_or_path) or name_or_path.endswith(".json"):
        return OperatorSet.load(name_or_path)
    return builtin_opset(name_or_path)


def parse_ints(text: str, where: str) -> list[int]:
    """``1,2,16:512:16``: integers and inclusive ranges START:STOP[:STEP], distinct, in the order
    given, each in 1..MAX_PARAM; otherwise an InputError that starts with ``where`` (the option and
    the text the user gave)."""
    out: list[int] = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            parts = [int(v) for v in item.split(":")]
        except ValueError:
            raise InputError(f"{where}: {item!r} is not an integer or START:STOP[:STEP]") from None
        if len(parts) == 1:
            out += parts
        elif len(parts) in (2, 3) and (len(parts) == 2 or parts[2] >= 1):
            out += range(parts[0], parts[1] + 1, parts[2] if len(parts) == 3 else 1)
        else:
            raise InputError(f"{where}: {item!r} is not START:STOP[:STEP] with a positive step")
    if not out or min(out) < 1 or max(out) > MAX_PARAM:
        raise InputError(f"{where}: values must lie in 1..{MAX_PARAM} (got {out[:4] or 'none'})")
    return list(dict.fromkeys(out))


def parse_vary(text: str) -> tuple[str, list[int]]:
    """``DIM=VALUES``, VALUES integers and inclusive ranges: ``1,2,4``, ``16:512:16`` (:func:`parse_ints`)."""
    dim, sep, values = text.partition("=")
    dim = dim.strip()
    if not sep or not dim or not values.strip():
        raise InputError(f"--vary {text!r}: expected DIM=VALUES, e.g. seq=16:512:16 or batch=1,2,4")
    return dim, parse_ints(values, f"--vary {text!r}")


def vary(opset: str | OperatorSet, dim: str, values: Iterable[int]) -> list[tuple[int, OperatorSet]]:
    """The set at each value of one dimension: a new shape per value (dynamic-shape retuning).

    A built-in set varies its named dimensions (``batch``, ``seq``, ``hw``: :data:`eto.operators.zoo.BUILTIN`),
    its layer list rebuilt at each size. Any other set (a JSON file, ``--op`` texts, a model's
    operators) varies an operator parameter by name (``N``, ``M``, ``H``...): every operator with
    that parameter gets the value (InputError when none has it, or a shape becomes impossible).
    """
    values = list(values)
    if isinstance(opset, str) and not (os.path.exists(opset) or opset.endswith(".json")):
        return [(v, builtin_opset(opset, **{dim: v})) for v in values]
    base = load_opset(opset) if isinstance(opset, str) else opset
    if not any(dim in dict(e.op.params) for e in base):
        have = sorted({p for e in base for p, _ in e.op.params})
        raise InputError(f"no operator of {base.name} has a parameter {dim!r}; parameters: {', '.join(have)}")
    out = []
    for v in values:
        layers = [_with(e.op, dim, v) for e in base for _ in range(e.frequency)]
        out.append((v, OperatorSet.from_layers(f"{base.name}@{dim}={v}", layers, base.description)))
    return out


def _with(op: Operator, dim: str, value: int) -> Operator:
    if dim not in dict(op.params):
        return op
    try:
        return op.replace(**{dim: value})
    except ValueError as exc:
        raise InputError(f"{op.name} with {dim}={value}: {exc}") from None
