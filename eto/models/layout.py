"""The layout a model's convolutions are tuned and built in, chosen per target and recorded per database.

Frameworks write CNNs in NCHW; CPU libraries run them channels last (ONNX Runtime's MLAS in
channel-blocked NCHWc, oneDNN in NHWC or blocked layouts), because a CPU vectorises the contiguous
axis and the channels are the axis every convolution reduces or produces. MetaSchedule's programs
follow the layout they are given: at the same budget (64 trials) its programs for four common CNN
convolutions ran 1.6x, 3.6x and 7.3x faster in NHWC than in NCHW, and one 0.9x as fast, on a 2-core
AMD EPYC (``python -m experiments.tools.layout_probe``).

- ``auto`` (the default of ``eto tune``/``eto.tune``): on a CPU, channels last
  (:func:`~eto.models.nhwc.channels_last`) and each eligible 3x3 convolution by Winograd where it is
  :func:`~eto.models.winograd.predicted_faster` on this machine; on a GPU, as written.
- ``NHWC``: channels last, every convolution direct; ``NHWC-winograd``: every eligible one by Winograd
  (:mod:`eto.models.winograd`); ``NCHW``: as written.

The conversion runs after the batch norms are folded, before the model is fused
(:func:`eto.models.tasks.prepare`); the convolutions become the catalogue's ``C2DNHWC`` and ``DEPNHWC``
(:mod:`eto.operators.channels_last`). A database records the layout each model was tuned in, with
``auto``'s Winograd decisions (:mod:`eto.store.models`): :func:`layout_from_database` gives a build
that layout, so the model is compiled as it was tuned.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Mapping, Sequence, get_args

from eto.errors import InputError
from eto.models.load import RelaxModel
from eto.models.nhwc import LayoutConversion, channels_last
from tuner.analysis.kinds import is_cpu

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from tvm.target import Target

    from eto.store.database import Database
    from eto.store.models import ModelLayout

#: The layouts a model's convolutions can be tuned and built in.
Layout = Literal["auto", "NCHW", "NHWC", "NHWC-winograd"]
LAYOUTS: tuple[str, ...] = get_args(Layout)

_log = logging.getLogger("eto")


def with_layout(model: RelaxModel, layout: str = "NCHW", *, winograd: "Mapping[str, bool] | None" = None) -> RelaxModel:
    """``model`` to be prepared with its convolutions in ``layout`` (NCHW: as written; ``auto``: Winograd
    or direct as ``winograd`` decided by key, as a database recorded it, the others as predicted)."""
    if layout not in LAYOUTS:
        raise InputError(f"unknown layout {layout!r}: one of {', '.join(LAYOUTS)}")
    chosen = None if winograd is None else tuple(sorted(winograd.items()))
    if layout == model.layout and chosen == model.winograd:
        return model
    source = model.source if layout == model.layout else f"{model.source}, {layout}"
    return model._replace(layout=layout, winograd=chosen, source=source)


def layout_from_database(model: RelaxModel, database: "Database | str | os.PathLike[str] | None",
                         target: "Target", asked: str | None, *, building: bool) -> RelaxModel:
    """``model`` in the layout a run compiles it in, given what ``database`` recorded of it
    (:mod:`eto.store.models`).

    Tuning (``building`` False): ``asked``, or else the layout the model was last tuned in, or else
    ``auto``; an ``auto`` the database recorded keeps its Winograd convolutions, so a rerun resumes on
    the same functions. Building: the layout the model was tuned in, checked against ``asked``
    (:class:`~eto.store.models.LayoutMismatch` where it was tuned in others only); for a database that
    records no layout of the model, ``asked``, else NCHW where its convolutions are stored only in NCHW,
    else ``auto``."""
    from eto.store.models import read_layouts, recorded_layout

    if database is None:
        return with_layout(model, asked or "auto")
    path = os.fspath(database if isinstance(database, (str, os.PathLike)) else database.path)
    layouts = read_layouts(path)
    for why in layouts.skipped:
        _log.warning(f"{os.path.join(path, 'eto_models.json')}: {why} (skipped)")
    if building:
        entry = recorded_layout(layouts, model.name, target.kind.name, asked, db_label=path)
    else:
        mine = [e for e in layouts.of(model.name, target.kind.name) if asked in (None, e.layout)]
        entry = mine[-1] if mine else None
    if entry is not None:
        return with_layout(model, entry.layout, winograd=entry.decisions if entry.layout == "auto" else None)
    return with_layout(model, asked or (_stored_layout(database, target) if building else "auto"))


def _stored_layout(database: "Database | str | os.PathLike[str]", target: "Target") -> str:
    """NCHW for a database whose convolutions are all stored NCHW (tuned before layouts were recorded),
    else ``auto``."""
    from eto.store.database import Database

    if isinstance(database, (str, os.PathLike)):
        if not os.path.isdir(database):
            return "auto"
        database = Database(database, readonly=True)
    types = {p.op.type for p in database.programs(target=target)}
    return "NCHW" if types & {"C2D", "DEP", "GRP"} and not types & {"C2DNHWC", "DEPNHWC"} else "auto"


@dataclass(frozen=True)
class LayoutChoice:
    """The layout a model was compiled in: what was asked (``auto`` included), what it resolved to for
    the target, the convolutions computed by Winograd (their :func:`~eto.models.winograd.conv_key`),
    and the channels-last conversion (None in NCHW). A database records it (:mod:`eto.store.models`),
    so a build compiles the model exactly as it was tuned."""

    asked: str
    resolved: str
    winograd: tuple[str, ...] = ()
    direct: tuple[str, ...] = ()  # convolutions Winograd could compute, left direct (``auto`` only)
    conversion: LayoutConversion | None = None

    def entry(self, model: str, target: "Target") -> "ModelLayout":
        """The line a database records for ``model`` compiled so for ``target`` (:mod:`eto.store.models`)."""
        from eto.store.models import ModelLayout
        from eto.target import target_key

        return ModelLayout(model, target_key(target), self.asked, self.resolved, self.winograd, self.direct)

    def describe(self) -> str:
        text = self.resolved if self.asked == self.resolved else f"{self.asked}: {self.resolved}"
        if self.asked == "auto" and self.resolved != "NCHW":
            text += f", {len(self.winograd)} convolution(s) by Winograd where predicted faster"
        return text + (f" ({self.conversion.describe()})" if self.conversion is not None else "")


def resolve(layout: str, target: "Target | None") -> str:
    """``auto`` for ``target``: channels last with Winograd where it pays (``auto``) on a CPU, where
    convolutions vectorise along the channels; NCHW, as written, elsewhere (MetaSchedule's GPU rules
    tile NCHW convolutions). Any other layout as it is."""
    if layout != "auto":
        return layout
    return "auto" if target is None or is_cpu(target) else "NCHW"


def convert_layout(mod: "tvm.IRModule", layout: str, *, target: "Target | None" = None,
                   winograd: "Mapping[str, bool] | None" = None) -> "tuple[tvm.IRModule, LayoutChoice]":
    """``mod``'s ungrouped and depthwise 2-D convolutions in ``layout`` (NHWC data, OHWI weights), constants
    folded; with ``NHWC-winograd``, its eligible 3x3 convolutions then by Winograd; with ``auto`` (on a
    CPU) those ``winograd`` decided for (by key, as a database recorded them) and, among the others,
    those :func:`~eto.models.winograd.predicted_faster` on this machine. A region Relax's
    ``ConvertLayout`` cannot convert stays as written, with a warning naming it (:func:`channels_last`)."""
    from eto.models.winograd import eligible_keys, winograd_convolutions

    resolved = resolve(layout, target)
    if resolved == "NCHW":
        return mod, LayoutChoice(layout, "NCHW")
    converted, done = channels_last(mod)
    if done.left_as_written:
        _log.warning(f"layout {layout}: {done.describe()}")
    if resolved == "NHWC":
        return converted, LayoutChoice(layout, resolved, conversion=done)
    keys = list(dict.fromkeys(eligible_keys(converted)))
    chosen = keys
    if resolved == "auto":
        decided = dict(winograd or {})
        predicted = set(predicted_winograd([k for k in keys if k not in decided]))
        chosen = [k for k in keys if decided.get(k, k in predicted)]
    direct = tuple(k for k in keys if k not in chosen)
    return (winograd_convolutions(converted, set(chosen).__contains__),
            LayoutChoice(layout, resolved, tuple(chosen), direct, done))


def predicted_winograd(keys: "Sequence[str]") -> list[str]:
    """Of the convolutions ``keys``, those Winograd is predicted to run faster on this machine's cores
    (:func:`~eto.models.winograd.predicted_faster`), their peak and bandwidths measured once a process."""
    from eto.models.roofline import working_set_bandwidth
    from eto.models.winograd import predicted_faster

    if not keys:
        return []
    peak = _peak()
    return [k for k in dict.fromkeys(keys) if predicted_faster(k, peak_flops=peak, bandwidth=working_set_bandwidth)]


@functools.lru_cache(maxsize=None)
def _peak() -> float:
    from eto.models.roofline import fp32_peak
    from eto.target import num_threads

    return fp32_peak(num_threads())
