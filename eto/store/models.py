"""Which layout each model in a database was tuned in: ``eto_models.json`` beside the programs.

A model's fused functions depend on its layout (channels last or not, which convolutions Winograd
computes), so a build in another layout finds none of the programs tuned for it. ``eto tune --model``
appends one line per run::

    {"v": 1, "model": "resnet18", "target": "<target key>", "layout": "auto", "resolved": "auto",
     "winograd": ["1x56x56x64->64/p1,1,1,1", ...]}

and ``eto build``/``bench``/``eto.build`` read the latest line of the model (:func:`recorded_layout`):
no flag to repeat, and a flag that contradicts the database is a named error
(:class:`LayoutMismatch`, exit 2). TVM never reads this file. A line that cannot be read is skipped
and counted (:attr:`ModelLayouts.skipped`), never silently.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from eto.errors import InputError
from eto.store.jsonlines import append_lines, dumps

MODELS = "eto_models.json"


class LayoutMismatch(InputError):
    """A build asked for a layout the database holds no tuning of the model in."""


@dataclass(frozen=True)
class ModelLayout:
    """One ``eto tune --model`` run's layout: as asked, as resolved for the target, the Winograd convolutions."""

    model: str
    target: str
    layout: str
    resolved: str
    winograd: tuple[str, ...] = ()  # convolutions (eto.models.winograd.conv_key) computed by Winograd
    direct: tuple[str, ...] = ()  # convolutions Winograd could compute that ``auto`` left direct

    @property
    def decisions(self) -> dict[str, bool]:
        """``{convolution key: by Winograd}`` for every convolution ``auto`` decided."""
        return {**{k: False for k in self.direct}, **{k: True for k in self.winograd}}

    def merged(self, earlier: "ModelLayout") -> "ModelLayout":
        """This line with ``earlier``'s decisions for the convolutions it does not decide (another size
        of the model, ``eto retune``), so one line serves every size tuned."""
        if (earlier.model, earlier.target, earlier.layout) != (self.model, self.target, self.layout):
            return self
        mine = set(self.winograd) | set(self.direct)
        return ModelLayout(self.model, self.target, self.layout, self.resolved,
                           self.winograd + tuple(k for k in earlier.winograd if k not in mine),
                           self.direct + tuple(k for k in earlier.direct if k not in mine))

    def to_json(self) -> dict:
        return {"v": 1, "model": self.model, "target": self.target, "layout": self.layout,
                "resolved": self.resolved, "winograd": list(self.winograd), "direct": list(self.direct)}


@dataclass(frozen=True)
class ModelLayouts:
    """The layout lines of a database, oldest first, and the lines that could not be read."""

    entries: tuple[ModelLayout, ...] = ()
    skipped: tuple[str, ...] = field(default=())  # "line N: why"

    def of(self, model: str, target_kind: str) -> list[ModelLayout]:
        """The lines of ``model`` for targets of ``target_kind`` (``llvm``, ``cuda``), oldest first."""
        return [e for e in self.entries if e.model == model and json.loads(e.target).get("kind") == target_kind]


def read_layouts(db_path: str | os.PathLike) -> ModelLayouts:
    """The layout lines of the database at ``db_path`` (none when it has no such file). O(lines)."""
    path = os.path.join(os.fspath(db_path), MODELS)
    if not os.path.exists(path):
        return ModelLayouts()
    entries, skipped = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, text in enumerate(f, 1):
            try:
                obj = json.loads(text)
                entry = ModelLayout(str(obj["model"]), str(obj["target"]), str(obj["layout"]), str(obj["resolved"]),
                                    tuple(str(k) for k in obj.get("winograd", ())),
                                    tuple(str(k) for k in obj.get("direct", ())))
                json.loads(entry.target)
            except (ValueError, KeyError, TypeError) as exc:
                skipped.append(f"line {n}: {type(exc).__name__}: {exc}")
                continue
            entries.append(entry)
    return ModelLayouts(tuple(entries), tuple(skipped))


def record_layout(db_path: str | os.PathLike, entry: ModelLayout) -> None:
    """Append ``entry`` (merged with the model's latest line in the same layout, :meth:`ModelLayout.merged`)
    unless that is already the model's latest line for the target."""
    same = [e for e in read_layouts(db_path).entries if e.model == entry.model and e.target == entry.target]
    if same:
        entry = entry.merged(same[-1])
    if not same or same[-1] != entry:
        append_lines(os.path.join(os.fspath(db_path), MODELS), [dumps(entry.to_json())])


def recorded_layout(layouts: ModelLayouts, model: str, target_kind: str, asked: str | None, *,
                    db_label: str) -> ModelLayout | None:
    """The layout line a build of ``model`` compiles it by: the latest of the model (for this kind of
    target) when ``asked`` is None, else the latest whose layout is ``asked``; None where the database
    records none for the model. ``asked`` that the database never tuned the model in (while it did in
    another): :class:`LayoutMismatch`."""
    mine = layouts.of(model, target_kind)
    if not mine:
        return None
    if asked is None:
        return mine[-1]
    matching = [e for e in mine if asked in (e.layout, e.resolved)]
    if matching:
        return matching[-1]
    tuned = sorted({e.layout for e in mine})
    raise LayoutMismatch(f"{db_label}: {model} was tuned with --layout {' and '.join(tuned)}, not {asked}: its "
                         f"programs are for the functions of that layout; build with --layout {tuned[-1]} or "
                         "without --layout (the database's layout is then used)")


__all__ = ["MODELS", "LayoutMismatch", "ModelLayout", "ModelLayouts", "read_layouts", "record_layout",
           "recorded_layout"]
