"""``eto build``: a model compiled with the database's programs applied to its fused tasks.

The model is prepared as :mod:`eto.models.tasks` prepares it for tuning, each tunable task gets its
operator's fastest stored program (one eto's correctness gate passed; an instant program, as
``eto retune`` stores first, where no tuned one is faster), and the model is compiled as MetaSchedule's
``compile_relax`` compiles one (:func:`compile_fused`): ``MetaScheduleApplyDatabase`` replaces every
function it finds in the database, the rest keep TVM's default schedules; on CPUs the programs'
weights are pre-packed at build time. A program tuned on another model's copy of a function serves this
one even where their block names differ (:func:`portable_trace`). The tasks that got no program are
named, with their share of the model's tunable FLOPs, and so are those whose program did not apply, with
TVM's error (:attr:`BuiltModel.fallbacks`), so a stale or partial database is never silent.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from tuner.analysis.kinds import is_cpu
from tuner.tvm_errors import TVM_ERRORS, error_line

from eto.store.database import PREDICTED
from eto.store.errors import UnreadableRecord
from eto.target import warn_target_mismatch
from eto.models.prepack import task_symbol
from eto.models.tasks import ModelTask, ModelTasks, model_tasks

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from tvm.s_tir.schedule import Trace
    from tvm.target import Target

    from eto.store.database import Database
    from eto.models.load import RelaxModel


@dataclass(frozen=True)
class BuiltModel:
    """A compiled model and which of its tasks run the database's programs."""

    executable: Any  # tvm.relax.VMExecutable
    tasks: ModelTasks
    applied: tuple[ModelTask, ...]  # tunable tasks that run a stored program
    missing: tuple[ModelTask, ...]  # tunable tasks on TVM's default schedule: no stored program, or a failed one
    target: "Target"
    instant: tuple[ModelTask, ...] = ()  # of ``applied``: those running an instant program (not tuned yet)
    #: of ``missing``: those whose stored program did not apply, each with why (TVM's error)
    fallbacks: tuple[tuple[ModelTask, str], ...] = ()

    @property
    def unprogrammed(self) -> tuple[ModelTask, ...]:
        """The tunable tasks the database holds no program for (``missing`` less the fallbacks)."""
        failed = {t.name for t, _ in self.fallbacks}
        return tuple(t for t in self.missing if t.name not in failed)

    @property
    def applied_flops_share(self) -> float:
        """Share of the model's tunable FLOPs (weighted by calls) that run a stored program."""
        total = sum(t.flops * t.weight for t in self.applied + self.missing)
        return sum(t.flops * t.weight for t in self.applied) / total if total else 1.0

    def vm(self):
        from tvm import relax

        return relax.VirtualMachine(self.executable, _device(self.target))

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The model's outputs (flattened) on numpy inputs."""
        return flatten(self.vm()["main"](*[_tensor(a, _device(self.target)) for a in inputs]))

    def kernel_times(self, inputs: Sequence[np.ndarray], *, runs: int = 5) -> dict[str, list[float]]:
        """Each function the model calls (its fused tasks, the VM's builtins), the seconds of each of its
        calls within whole-model runs (the median over ``runs`` per call site, in call order): a task
        can run slower in the model than alone (other tasks' data in the caches, real inputs), and a
        model's gap to another build is traced to its tasks this way. Timed by the VM's
        instrument hook around each call (adds about a microsecond to each)."""
        import statistics

        calls: dict[str, list[float]] = {}
        vm, dev = self.instrumented_vm(lambda task, secs: calls.setdefault(task, []).append(secs)), _device(self.target)
        args = [_tensor(a, dev) for a in inputs]
        vm["main"](*args)  # warm: first-call allocation and loading
        calls.clear()
        for _ in range(runs):
            vm["main"](*args)
        out = {}
        for symbol, secs in calls.items():
            per_run = len(secs) // runs  # the function's call sites in one run, in order
            out[symbol] = [statistics.median(secs[i::per_run]) for i in range(per_run)]
        return out

    def instrumented_vm(self, on_call: "Callable[[str, float], None]") -> Any:
        """The model's VM, calling ``on_call(task, seconds)`` after each function it calls (its fused
        task, less :data:`~eto.models.prepack.PREPACKED`; a VM builtin): the VM's instrument hook."""
        import time

        vm, start = self.vm(), {}

        def instrument(func, symbol, before, ret, *call_args) -> int:
            if before:
                start[symbol] = time.perf_counter()
            else:
                on_call(task_symbol(symbol), time.perf_counter() - start[symbol])
            return 0  # VMInstrumentReturnKind.NO_OP: run on

        vm.set_instrument(instrument)
        return vm

    def time(self, inputs: Sequence[np.ndarray], *, repeat: int = 10, min_repeat_ms: int = 100) -> list[float]:
        """``repeat`` seconds-per-run, each the mean of runs filling ``min_repeat_ms``."""
        vm, dev = self.vm(), _device(self.target)
        timer = vm.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
        return [float(t) for t in timer(*[_tensor(a, dev) for a in inputs]).results]


def build_model(model: "RelaxModel", database: "Database | None", target: "Target", *,
                tasks: ModelTasks | None = None) -> BuiltModel:
    """Compile ``model`` for ``target`` with ``database``'s programs (None: TVM's defaults only), in the
    layout ``model`` names (:func:`eto.models.layout.layout_from_database` gives it the database's).
    A task whose stored program does not apply keeps TVM's default schedule, with a warning naming the
    task and TVM's error: one stale program costs its task's speed, not the build."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    if database is not None:
        warn_target_mismatch(database, target)
    tasks = tasks or model_tasks(model, target)
    ms_db = ms.database.MemoryDatabase()
    applied, missing, instant, fallbacks = [], [], [], []
    for t in tasks.tasks:
        if t.op is None:
            continue
        # the fastest stored: a tuned program, or an instant one (eto retune: a new size served at once)
        best = database.best(t.op, target) if database is not None else None
        if best is None:
            missing.append(t)
            continue
        try:
            rec = best.tuning_record
            trace = portable_trace(rec.trace, rec.workload.mod, t.mod)
        except (UnreadableRecord, NotPortable) as exc:
            warnings.warn(f"{t.name}: TVM's default schedule instead of the stored program for {t.op.name}: {exc}",
                          RuntimeWarning, stacklevel=2)
            missing.append(t)
            fallbacks.append((t, str(exc)))
            continue
        if best.method == PREDICTED:
            instant.append(t)
        ms_db.commit_tuning_record(TuningRecord(trace, ms_db.commit_workload(t.mod), rec.run_secs, target,
                                                ArgInfo.from_prim_func(t.mod["main"])))
        applied.append(t)
    ex = compile_fused(ms_db, tasks.fused, target)
    return BuiltModel(ex, tasks, tuple(applied), tuple(missing), target, tuple(instant), tuple(fallbacks))


def compile_fused(ms_db: Any, fused: "tvm.IRModule", target: "Target") -> Any:
    """MetaSchedule's ``compile_relax`` from the fused module on: the database's programs applied,
    then, on CPUs, each program's weight packing run once, on the constants (:mod:`eto.models.prepack`),
    so the built model reads packed weights and never packs them at run time."""
    import tvm
    from tvm import relax
    from tvm.relax import pipeline
    from tvm.s_tir import dlight as dl

    from eto.models.prepack import after_database

    gpu = pipeline.BackendDispatcher.is_gpu_target(target)
    fallback = [dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                        dl.gpu.Fallback())] if gpu else []

    @tvm.transform.module_pass(opt_level=3)
    def _pipeline(mod: "tvm.IRModule", _ctx: Any) -> "tvm.IRModule":
        passes = [relax.transform.MetaScheduleApplyDatabase(enable_warning=False), *after_database(target), *fallback,
                  *_lowering(target)]
        return tvm.transform.Sequential(passes)(mod)

    with target, ms_db, tvm.transform.PassContext(opt_level=3):
        return relax.build(fused, target=target, relax_pipeline=_pipeline)


def _lowering(target: "Target") -> list:
    """The passes after the database is applied, as ``compile_relax`` takes them (its own list where
    the target's backend registers none: TVM 0.27's generic CPU backend)."""
    from tvm import relax
    from tvm.relax import pipeline

    try:
        return [*pipeline.dataflow_lower_passes(target), *pipeline.finalize_passes(target)]
    except (ValueError, AttributeError):
        t = relax.transform
        return [t.RewriteDataflowReshape(), t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(),
                t.StaticPlanBlockMemory(), t.LowerAllocTensor(), t.KillAfterLastUse(), t.LowerRuntimeBuiltin(),
                t.ComputePrimValue(), t.VMShapeLower(), t.AttachGlobalSymbol()]


class NotPortable(Exception):
    """A stored program's trace that does not apply to a model's function: the message says why."""


def portable_trace(trace: "Trace", tuned: "tvm.IRModule", mod: "tvm.IRModule") -> "Trace":
    """``trace``, tuned on ``tuned``, as it applies to ``mod``, the same function from another model.

    A stored program is found by its function's structure, but its trace names the blocks it
    schedules, and some block names come from the model's variables (a mean's ``lv200_red`` in a
    ``torch.export`` file is ``lv375_red`` in the ONNX file of the same network). Where the names
    differ, the trace's block names are mapped by position (the functions are structurally equal,
    so their blocks come in the same order) and replayed on ``mod``; :class:`NotPortable` (with TVM's
    error where the replay failed) if it still does not apply.
    The trace is replayed even where the names agree: one operator can come from two functions with
    the same block names and another structure (an ONNX file's classifier against the torch.export
    file's), and a trace that does not replay would fail the whole build. O(instructions + blocks)."""
    from tvm.s_tir.schedule import Schedule, Trace

    old, new = _block_names(tuned), _block_names(mod)
    if old != new and (len(old) != len(new) or len(set(old)) != len(old)):
        raise NotPortable(f"its blocks [{', '.join(old)}] are not the function's [{', '.join(new)}]")
    rename = dict(zip(old, new))
    insts, decisions = trace.as_json()
    insts = [[kind, inputs, [rename.get(a, a) if isinstance(a, str) else a for a in attrs], outputs]
             for kind, inputs, attrs, outputs in insts]
    sch = Schedule(mod)
    try:
        Trace.apply_json_to_schedule([insts, decisions], sch)
    except TVM_ERRORS as exc:  # a schedule primitive that refuses the function (a split of another extent)
        raise NotPortable(f"its trace does not replay: {error_line(exc)}") from None
    return trace if old == new else sch.trace


def _block_names(mod: "tvm.IRModule") -> list[str]:
    """The names of ``mod``'s blocks in program order."""
    from tvm.s_tir.stmt import SBlock

    from eto.models.nhwc import tir_statements

    return [stmt.name_hint for stmt in tir_statements(mod["main"].body) if isinstance(stmt, SBlock)]


def model_inputs(tasks: ModelTasks, seed: int = 0) -> list[np.ndarray]:
    """Random inputs of the model's input shapes and dtypes (weights are bound into the module)."""
    rng = np.random.default_rng(seed)
    out = []
    for p in tasks.bound["main"].params[:tasks.num_inputs]:
        shape = [int(d) for d in p.ty.shape]
        dtype = str(p.ty.dtype)
        out.append(np.asarray(rng.uniform(-1.0, 1.0, size=shape) if "float" in dtype  # 0-d inputs too
                              else rng.integers(0, 2, size=shape), dtype=dtype))
    return out


def flatten(value: Any) -> list[np.ndarray]:
    """A VM result (a tensor or nested tuples of them) as a flat list of numpy arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [a for v in value for a in flatten(v)]


def _tensor(a: np.ndarray, dev) -> Any:
    import tvm

    return tvm.runtime.tensor(np.asarray(a, order="C"), dev)


def _device(target: "Target"):
    import tvm

    return tvm.cpu() if is_cpu(target) else tvm.cuda()
