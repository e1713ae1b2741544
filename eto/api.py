"""eto's Python API, in the style of MetaSchedule's ``tune_relax`` / ``compile_relax``.

>>> import eto
>>> report = eto.tune("quickstart", database="eto-db", trials=64)      # doctest: +SKIP
>>> model = eto.build("resnet.onnx", database="eto-db")                 # doctest: +SKIP
>>> outputs = model(np.random.rand(1, 3, 224, 224).astype("float32"))  # doctest: +SKIP

Every entry point takes keyword-only options; :func:`tune` and :func:`retune` take either a
:class:`~eto.options.TuneOptions` or its fields as flat keywords (``trials=``, ``strategy=`` ...), which
are checked when the options are made, before anything is tuned. The command line (``eto tune``,
``eto retune``, ``eto build``) runs the same functions underneath.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, Union

import numpy as np

from eto.operators.opsets import OperatorSet, load_opset, vary
from eto.options import TuneOptions
from eto.store.database import Database
from eto.store.programs import DatabaseWithPriors
from eto.store.models import record_layout
from tuner.measure import deadline

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.target import Target

    from eto.models.build import BuiltModel
    from eto.models.layout import Layout
    from eto.models.load import RelaxModel
    from eto.runs.tuning import TuneReport
    from eto.shapes.retune import RetuneReport
    from eto.store.models import ModelLayout
    from tuner.measure.measurer import Measurer

#: What can be tuned: an operator set, a built-in set's name, a path to an operator-set JSON file,
#: an ONNX model or a ``torch.export`` archive (``.pt2``), or a Relax ``IRModule``.
Tunable = Union[OperatorSet, str, "os.PathLike[str]", "IRModule", "RelaxModel"]
#: What can be built: a model file or a Relax ``IRModule``.
Buildable = Union[str, "os.PathLike[str]", "IRModule", "RelaxModel"]

MODEL_SUFFIXES = (".onnx", ".pt2")


def _database(database: "str | os.PathLike[str] | Database", *, readonly: bool = False) -> Database:
    return database if isinstance(database, (Database, DatabaseWithPriors)) else Database(os.fspath(database),
                                                                                        readonly=readonly)


def open_database(database: "str | os.PathLike[str] | Database", priors: Sequence["str | os.PathLike[str]"] = (), *,
                  log: Callable[[str], None] | None = None) -> "Database | DatabaseWithPriors":
    """The database a run writes, read together with every prior database (read, never written): their
    programs cost nothing in the plan and serve as reuse sources. Nothing is copied here; :func:`tune`
    copies the priors' results of the operators it tunes, so the written database alone then holds
    every program its operators need. Every prior is checked before anything is created."""
    for prior in priors:
        if not os.path.isdir(prior):
            raise FileNotFoundError(errno.ENOENT, "no such prior database directory", os.fspath(prior))
    db = _database(database)
    path = os.path.abspath(db.path)
    read = [Database(os.fspath(p), readonly=True) for p in priors if os.path.abspath(p) != path]
    if not read:
        return db
    if log is not None:
        log(f"prior database(s) {', '.join(str(p.path) for p in read)}: {sum(len(p) for p in read)} programs, "
            f"read in place")
    return DatabaseWithPriors(db, read)


def _options(options: TuneOptions | None, flat: Mapping[str, Any]) -> TuneOptions:
    if options is not None and flat:
        raise TypeError(f"give options or flat option keywords ({', '.join(flat)}), not both")
    return options if options is not None else TuneOptions.of(**flat)


def _relax_model(model: Buildable, dims: Mapping[str, int] | None) -> "RelaxModel":
    """A model file or a Relax module as eto's :class:`~eto.models.load.RelaxModel`."""
    from eto.models.load import RelaxModel, bind_dims, load_relax

    if isinstance(model, RelaxModel):
        return bind_dims(model, dims) if dims else model
    if isinstance(model, (str, os.PathLike)):
        return load_relax(model, dims=dims)
    from tvm.ir import IRModule

    if isinstance(model, IRModule):
        wrapped = RelaxModel(model, "module", "<IRModule>")
        return bind_dims(wrapped, dims) if dims else wrapped
    raise TypeError(f"expected a model file or a Relax IRModule, got {type(model).__name__}")


def operator_set(what: Tunable, *, target: "str | Target" = "cpu", dims: Mapping[str, int] | None = None,
                 fast_math: bool = False, layout: "Layout | None" = None) -> OperatorSet:
    """The operator set :func:`tune` would tune for ``what`` (see :data:`Tunable`): a model's fused tasks
    as Relax compiles them for ``target`` (``dims`` binds its symbolic dimensions; ``fast_math`` first
    rewrites its functions with fast approximations; ``layout``: its convolutions' layout, None:
    ``auto``, :mod:`eto.models.layout`), or the set itself."""
    return _operator_set(what, target=target, dims=dims, fast_math=fast_math, layout=layout, database=None)[0]


def _operator_set(what: Tunable, *, target: "str | Target", dims: Mapping[str, int] | None, fast_math: bool,
                  layout: "Layout | None", database: "Database | str | os.PathLike[str] | None"
                  ) -> "tuple[OperatorSet, ModelLayout | None]":
    """:func:`operator_set`, and for a model the layout line ``database`` is to record (the layout
    it last tuned the model in where ``layout`` is None)."""
    if isinstance(what, OperatorSet):
        return what, None
    if isinstance(what, (str, os.PathLike)) and not os.fspath(what).endswith(MODEL_SUFFIXES):
        return load_opset(os.fspath(what)), None
    from eto.models.fast_math import fast_math as approximate
    from eto.models.layout import layout_from_database
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    target = parse_target(target)
    model = layout_from_database(approximate(_relax_model(what, dims), fast_math), database, target, layout,
                                 building=False)
    tasks = model_tasks(model, target)
    return tasks.opset, tasks.layout.entry(model.name, target)


def tune(
    what: Tunable,
    *,
    target: "str | Target" = "cpu",
    database: "str | os.PathLike[str] | Database" = "eto-db",
    options: TuneOptions | None = None,
    priors: Sequence["str | os.PathLike[str]"] = (),
    dims: Mapping[str, int] | None = None,
    fast_math: bool = False,
    layout: "Layout | None" = None,
    measurer: "Measurer | Sequence[Measurer] | None" = None,
    log: Callable[[str], None] | None = None,
    on_batch: Callable[[str, int, int, float], None] | None = None,
    verbose: bool = False,
    **flat_options: Any,
) -> "TuneReport":
    """Tune ``what`` into ``database`` and return the report (one row per operator, bridges too).

    ``what``: an operator set, a built-in set's name (``"quickstart"``, ``"resnet50"`` ...), a path to an
    operator-set JSON file, an ONNX model or a ``.pt2`` archive, or a Relax ``IRModule`` (its fused tasks are
    tuned). ``options``: a :class:`~eto.options.TuneOptions`, or its fields as keywords (``trials=64``,
    ``strategy="global"`` ...); ``method="metaschedule"`` tunes every operator with MetaSchedule alone.
    ``time_budget=1200`` (seconds) sizes the run to the time instead of the trials: the plan fits most
    of it, the rest improves the operators with the most latency to gain, the run stops on time, and
    the report's ``pending`` rows are left for the next call (docs/pipeline.md, "Time budget").
    ``priors``: databases read, never written, whose programs are reused; the results of the operators
    this call tunes are copied into ``database`` (so it alone builds them), nothing else.
    A rerun of the same call resumes: operators the database holds are not tuned again. ``dims``,
    ``fast_math``, ``layout``: how a model is read and compiled (:func:`operator_set`).

    ``measurer``: where candidates run (default: this machine); several (one per RPC device) tune the
    plan's independent subtrees at once. ``log(message)`` for progress messages, ``on_batch(label,
    measured, budget, best_seconds)`` after each measured batch (:func:`eto.runs.tuning.progress_printer`
    prints them); ``verbose``: MetaSchedule's own logging on stderr (``method="metaschedule"``).
    """
    from eto.target import parse_target

    method = flat_options.pop("method", None)
    alone = method in ("metaschedule", "ansor")
    if method is not None and not alone:
        flat_options["method"] = method
    opts = _options(options, flat_options)
    if alone and isinstance(measurer, (list, tuple)):
        raise TypeError("several measurers tune a plan's subtrees at once: method eto only")
    target = parse_target(target)
    with deadline.until(opts.time_budget):  # reading a model counts against its budget too
        opset, entry = _operator_set(what, target=target, dims=dims, fast_math=fast_math, layout=layout,
                                     database=database)
        db = open_database(database, priors, log=log)
        if entry is not None:  # build() compiles the model in the layout it was tuned in
            record_layout(db.path, entry)
        if isinstance(db, DatabaseWithPriors):  # the written database alone then builds what it tuned
            copied = db.keep([e.op for e in opset], target)
            if log is not None and copied["results"]:
                log(f"{copied['results']} prior results ({copied['records']} records) of this run's operators "
                    f"copied into {db.path}")
        return _tune(opset, target, db, opts, alone, measurer=measurer, on_batch=on_batch, log=log, verbose=verbose)


def _tune(opset: OperatorSet, target: "Target", db: Database, opts: TuneOptions, alone: bool, *,
          measurer: "Measurer | Sequence[Measurer] | None", on_batch: Callable[[str, int, int, float], None] | None,
          log: Callable[[str], None] | None, verbose: bool) -> "TuneReport":
    if alone:
        from eto.runs.tuning import tune_with_backend

        return tune_with_backend(opset, target, db, opts.backend, measurer=measurer, timing=opts.timing,
                                 on_batch=on_batch, verbose=verbose)
    from eto.runs.pipeline import tune as run

    return run(opset, target, db, opts, measurer=measurer, on_batch=on_batch, log=log)


def retune(
    what: "Tunable | Sequence[tuple[int, OperatorSet]]",
    *,
    dim: str,
    sizes: Sequence[int] | None = None,
    database: "str | os.PathLike[str] | Database" = "eto-db",
    target: "str | Target" = "cpu",
    options: TuneOptions | None = None,
    instant_only: bool = False,
    log: Callable[[str], None] | None = None,
    **flat_options: Any,
) -> "RetuneReport":
    """``what`` at new ``sizes`` of dimension ``dim``, from what ``database`` holds.

    Each new operator gets an instant program at once (no measurement, checked against numpy), then,
    unless ``instant_only``, a tuned one: the plan reuses the database's programs wherever it can. For a
    model, ``dim`` names one of its symbolic dimensions; for an operator set, an operator parameter
    (``"M"``, ``"H"`` ...). ``what`` may also be the new sets themselves, ``(size, operator set)`` pairs
    made by the caller (as ``eto retune`` makes a model's tasks at each size); then ``sizes`` is theirs.
    ``time_budget=`` (seconds) counts from the call: the instant programs first, then the plan fitted
    to what is left, as :func:`tune` does. ``log(message)`` for progress messages.
    """
    from eto.shapes.retune import retune as run
    from eto.target import parse_target

    opts = _options(options, flat_options)
    target = parse_target(target)
    db = None
    if isinstance(what, (list, tuple)):
        shapes = list(what)
    elif sizes is None:
        raise TypeError("retune needs sizes= (or the new sets as (size, operator set) pairs)")
    elif isinstance(what, OperatorSet) or (isinstance(what, (str, os.PathLike))
                                           and not os.fspath(what).endswith(MODEL_SUFFIXES)):
        shapes = vary(what if isinstance(what, OperatorSet) else os.fspath(what), dim, list(sizes))
    else:  # a model: each size in the layout the database tuned it in (recorded for eto.build at that size)
        db = _database(database)
        sized = [(v, *_operator_set(what, target=target, dims={dim: v}, fast_math=False, layout=None, database=db))
                 for v in sizes]
        shapes = [(v, opset) for v, opset, _ in sized]
        for _, _, entry in sized:
            record_layout(db.path, entry)
    with deadline.until(opts.time_budget):  # from here, as eto retune: the instant programs count too
        db = db if db is not None else _database(database)
        return run(shapes, target, db, opts, dim=dim, instant_only=instant_only, log=log)


@dataclass(frozen=True)
class Model:
    """A model compiled with a database's programs: call it with numpy arrays or DLPack tensors
    (PyTorch's, for one) and get numpy arrays back; :meth:`save` writes a shared library that
    :func:`load` (or TVM's ``relax.VirtualMachine``) runs."""

    built: "BuiltModel"

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        return self.built.run([_array(x) for x in inputs])

    @property
    def applied_flops_share(self) -> float:
        """Share of the model's tunable FLOPs that run a program from the database."""
        return self.built.applied_flops_share

    @property
    def missing(self) -> tuple[str, ...]:
        """The tunable tasks on TVM's default schedule: the database had no program for them, or one that
        did not apply (warned about with TVM's error)."""
        return tuple(t.name for t in self.built.missing)

    def save(self, path: "str | os.PathLike[str]") -> None:
        self.built.executable.export_library(os.fspath(path))


def _array(x: Any) -> np.ndarray:
    """A numpy array from a numpy array, a DLPack tensor (copied where it is not contiguous on the CPU),
    or anything numpy reads."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (RuntimeError, TypeError, BufferError):
            pass
    if hasattr(x, "numpy"):
        return np.asarray(x.numpy())
    return np.asarray(x)


def build(model: Buildable, *, database: "str | os.PathLike[str] | Database | None" = "eto-db",
          target: "str | Target" = "cpu", dims: Mapping[str, int] | None = None, fast_math: bool = False,
          layout: "Layout | None" = None) -> Model:
    """Compile ``model`` (a model file or a Relax ``IRModule``) for ``target`` with ``database``'s programs
    (None: TVM's default schedules only) into a :class:`Model`, called with numpy arrays or DLPack tensors.
    The tasks the database holds no program for keep TVM's defaults, named in :attr:`Model.missing`.
    ``fast_math``: as the database was tuned (:func:`operator_set`); ``layout``: None for the one the
    database recorded for the model (``auto`` if none), else checked against it
    (:class:`~eto.store.models.LayoutMismatch` where the database tuned the model in other layouts only)."""
    from eto.models.build import build_model
    from eto.models.fast_math import fast_math as approximate
    from eto.models.layout import layout_from_database
    from eto.target import parse_target

    db = None if database is None else _database(database, readonly=True)
    target = parse_target(target)
    built = layout_from_database(approximate(_relax_model(model, dims), fast_math), db, target, layout, building=True)
    return Model(build_model(built, db, target))


def load(path: "str | os.PathLike[str]", *, device: str = "cpu") -> Callable[..., list[np.ndarray]]:
    """A model :meth:`Model.save` (or ``eto build -o``) wrote, as a function of numpy arrays."""
    import tvm
    from tvm import relax

    dev = tvm.cpu() if device == "cpu" else tvm.cuda()
    vm = relax.VirtualMachine(tvm.runtime.load_module(os.fspath(path)), dev)

    def run(*inputs: Any) -> list[np.ndarray]:
        from eto.models.build import flatten

        args = [tvm.runtime.tensor(np.asarray(_array(x), order="C"), dev) for x in inputs]
        return flatten(vm["main"](*args))

    return run


__all__ = ["Buildable", "Database", "Model", "Tunable", "build", "load", "open_database", "operator_set", "retune",
           "tune"]
