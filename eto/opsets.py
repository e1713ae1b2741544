"""Operator sets: the distinct operators to tune, each with its frequency (paper section 4).

A set is built from a model's layer list (one operator per layer, repeats included) by counting;
built-in sets count the layer lists of :mod:`eto.zoo` (which does not import this module). JSON form::

    {"name": "resnet50", "operators": [{"type": "C2D", "params": {...}, "frequency": 3}, ...]}
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .operators import MAX_PARAM, Operator
from .zoo import BUILTIN


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
            raise ValueError(f"{source}: an operator set is an object with an 'operators' list")
        entries = []
        for i, item in enumerate(data["operators"]):
            try:
                if not isinstance(item, dict):
                    raise ValueError("entry is not an object")
                freq = item.get("frequency", 1)
                if not isinstance(freq, int) or isinstance(freq, bool) or not 1 <= freq <= MAX_PARAM:
                    raise ValueError(f"frequency must be a positive integer up to {MAX_PARAM}, got {freq!r}")
                entries.append(OperatorEntry(Operator.from_dict(item), freq))
            except ValueError as exc:
                raise ValueError(f"{source}: operator #{i}: {exc}") from None
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
            raise ValueError(f"{path}: is a directory, not an operator-set file") from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of too many digits
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        return cls.from_json(data, source=str(path))


def builtin_opsets() -> dict[str, str]:
    """Names of the built-in sets with one-line descriptions."""
    return {name: desc for name, (desc, _) in BUILTIN.items()}


def builtin_opset(name: str) -> OperatorSet:
    """A built-in set by name (case and ``-``/``_`` insensitive)."""
    key = name.lower().replace("-", "_")
    if key not in BUILTIN:
        raise ValueError(f"unknown operator set {name!r}; built-in sets: {', '.join(BUILTIN)}")
    desc, layers = BUILTIN[key]
    return OperatorSet.from_layers(key, layers(), desc)


def load_opset(name_or_path: str) -> OperatorSet:
    """A built-in set by name, or a JSON file by path."""
    if os.path.exists(name_or_path) or name_or_path.endswith(".json"):
        return OperatorSet.load(name_or_path)
    return builtin_opset(name_or_path)
