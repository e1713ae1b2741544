"""``eto bench --profile``: where a built model's latency goes, task by task, against the fp32 peak and ORT.

eto's build (:mod:`eto.models.build`) runs whole, each VM call timed by the VM's instrument hook; each
fused task gets its calls, time, share of the model's latency, GFLOP/s and their fraction of the fp32
peak, and whether its arithmetic intensity puts it under the memory roof, where a low fraction is
expected (:mod:`eto.models.roofline`). An ONNX file also runs in ONNX Runtime with its profiler on,
after eto's runs (not between them), and eto's conv/matmul calls are matched to the nodes computing the
same layers (:func:`match_calls`); an unmatched task shows no ONNX Runtime time. A Winograd convolution
(``--layout NHWC-winograd``) is its GEMM's row, its two transforms' time folded in, matched as one layer.

Each task that runs a tuned program also gets its time alone: its calls at the latency the database
recorded for that program, timed on its own while it was tuned (cold or hot, as that run timed it:
:mod:`tuner.measure.timing`). A task slower in the model than alone
loses to the model around it (its weights and inputs out of the caches the other tasks used), not to its
program: on ResNet-50 in NHWC the 1x1 convolutions ran 1.01-1.38x their time alone and the 3x3 ones
0.98-1.09x (docs/models.md). The database's latencies are from the hour it was tuned; a machine whose
speed changes by the hour shifts the whole column, not one row. A Winograd GEMM's row has no time alone
(the database records the GEMM without its transforms)."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from eto.errors import InputError
from eto.models.roofline import Peak, fp32_peak, memory_bandwidth, reached_peak, working_set_bandwidth
from eto.models.tasks import SCHEDULED
from eto.models.winograd import fold_transform_calls
from eto.operators.channels_last import nchw_shapes
from eto.report import format_table
from tuner.analysis.kinds import is_cpu

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure
    from tvm.target import Target

    from eto.models.build import BuiltModel
    from eto.models.load import RelaxModel
    from eto.models.tasks import ModelTask
    from eto.store.database import Database

Key = tuple  # a layer as both sides see it: (kind, data shape, [weight shape,] output shape), unit dims dropped

#: eto operator types by the kind of layer their anchor computes; ONNX Runtime's ops likewise
_KINDS = {**dict.fromkeys(("C1D", "C2D", "C3D", "GRP", "DEP", "C2DNHWC", "DEPNHWC"), "conv"),
          "T2D": "conv_transpose", "BMM": "matmul", "DENSE": "matmul"}
_ORT_KINDS = {"Conv": "conv", "FusedConv": "conv", "ConvTranspose": "conv_transpose", "MatMul": "matmul",
              "FusedMatMul": "matmul", "Gemm": "matmul", "FusedGemm": "matmul"}


@dataclass(frozen=True)
class OrtNode:
    """One node ONNX Runtime ran: its (fused) name, op, shapes, and its median seconds per run."""

    name: str
    op: str
    inputs: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]
    seconds: float


def parse_ort_trace(events: Sequence[Mapping[str, Any]], *, skip: int = 0) -> tuple[list[OrtNode], list[float]]:
    """ONNX Runtime's profile (``enable_profiling``: a Chrome trace of ``model_run`` events and, inside
    each, one ``<node>_kernel_time`` event per node) as the nodes of one run in order, each its median
    over the runs after the first ``skip`` (warm-up), and each of those runs' seconds."""
    events = sorted(events, key=lambda e: e["ts"])
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][skip:]
    kernels = [e for e in events if e.get("cat") == "Node" and str(e.get("name")).endswith("_kernel_time")]
    per_run: list[dict[tuple[str, int], Mapping[str, Any]]] = []
    for run in runs:
        seen: Counter = Counter()  # a node name twice in one run: keyed by its occurrence
        per_run.append({})
        for e in kernels:
            if run["ts"] <= e["ts"] <= run["ts"] + run["dur"]:
                per_run[-1][(e["name"], seen[e["name"]])] = e
                seen[e["name"]] += 1
    nodes = [OrtNode(e["name"].removesuffix("_kernel_time"), str(a.get("op_name", "?")),
                     _shapes(a.get("input_type_shape")), _shapes(a.get("output_type_shape")),
                     statistics.median(r[k]["dur"] for r in per_run if k in r) * 1e-6)
             for k, e in (per_run[0].items() if per_run else ()) for a in [e.get("args", {})]]
    return nodes, [r["dur"] * 1e-6 for r in runs]


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    """``[{"float": [1, 3, 224, 224]}, ...]`` -> ``((1, 3, 224, 224), ...)``."""
    return tuple(tuple(int(d) for d in shape) for item in value or () for shape in item.values())


def layer_key(kind: str | None, inputs: Sequence[Sequence[int]], output: Sequence[int]) -> Key | None:
    """A conv or matmul layer as eto's operator and ONNX Runtime's node both describe it: kind, data, weight (convs
    only: eto holds a matmul's weight in its own layout, ORT may prepack it out of its record) and output shapes."""
    squeeze = [tuple(int(d) for d in s if int(d) != 1) for s in (*inputs[:1 if kind == "matmul" else 2], output)]
    if kind is None or len(squeeze) < (3 if kind != "matmul" else 2):
        return None
    return (kind, *squeeze)


def node_key(node: OrtNode) -> Key | None:
    return layer_key(_ORT_KINDS.get(node.op), node.inputs, node.outputs[0]) if node.outputs else None


def match_calls(call_keys: Iterable[Key | None], node_keys: Iterable[Key | None]) -> tuple[dict[int, int], list[str]]:
    """eto's calls to ONNX Runtime's nodes (index to index), and notes on what is left unmatched. Calls and nodes
    of one key pair up in order, only where eto makes as many such calls as ONNX Runtime runs such nodes: another
    count means the two split or fused the graph differently there, and any pairing would be a guess."""
    calls, nodes = defaultdict(list), defaultdict(list)
    for found, keys in ((calls, call_keys), (nodes, node_keys)):
        for i, k in enumerate(keys):
            if k is not None:
                found[k].append(i)
    matched, notes, name = {}, [], lambda k: f"{k[0]} {' x '.join(map(str, k[1:-1]))} -> {k[-1]}"
    for k, sites in calls.items():
        if len(nodes.get(k, ())) == len(sites):
            matched.update(zip(sites, nodes[k]))
        else:
            notes.append(f"{name(k)}: eto calls it {len(sites)} time(s), ONNX Runtime runs {len(nodes.get(k, ()))}: "
                         "not matched")
    return matched, notes + [f"{name(k)}: ONNX Runtime runs it {len(js)} time(s), eto never: not matched"
                             for k, js in nodes.items() if k not in calls]


@dataclass(frozen=True)
class TaskRow:
    """One task of the built model: all its calls in one inference."""

    task: str
    anchor: str  # the op its anchor block computes (conv2d, matmul); "-" for tasks without one
    operator: str | None
    calls: int
    seconds: float
    share: float  # of the model's latency
    flops: int
    bytes: int  # its arguments, each read or written once
    gflops: float | None
    peak_fraction: float | None
    intensity: float | None  # FLOPs per byte
    bound: str  # compute | memory | - (no FLOPs known)
    ort_seconds: float | None = None  # the matched ONNX Runtime nodes (None: not every call matched)
    ort_nodes: tuple[str, ...] = ()
    alone_seconds: float | None = None  # its calls at its tuned program's recorded latency (None: no such program)
    ridge: float | None = None  # FLOP/B under which it is memory-bound: the peak over the copy speed at its size

    @property
    def ratio(self) -> float | None:
        """eto's time over ONNX Runtime's for the same layers."""
        return self.seconds / self.ort_seconds if self.ort_seconds else None

    @property
    def in_model(self) -> float | None:
        """Its time in the model over its time alone (above 1: the model around it slows it)."""
        return self.seconds / self.alone_seconds if self.alone_seconds else None


@dataclass(frozen=True)
class ProfileReport:
    """A model's latency split by task, against the roofline and (for ONNX files) ONNX Runtime."""

    model: str
    target: str
    peak: Peak
    rounds: int
    model_seconds: float  # eto's whole model, the median of its instrumented runs
    rows: tuple[TaskRow, ...]  # by time, largest first
    other_seconds: float  # calls that are no task of the model (the VM's builtins)
    ort_model_seconds: float | None = None  # ONNX Runtime's whole model, the median of its profiled runs
    ort_other: Mapping[str, float] | None = None  # ONNX Runtime's unmatched nodes' seconds, by op
    notes: tuple[str, ...] = ()

    @property
    def explained(self) -> float:
        """The share of eto's latency its tasks' calls explain (the rest: the VM and its builtins)."""
        return sum(r.seconds for r in self.rows) / self.model_seconds

    @property
    def ort_explained(self) -> float | None:
        """The share of ONNX Runtime's latency its nodes matched to eto's tasks explain."""
        return sum(r.ort_seconds or 0.0 for r in self.rows) / self.ort_model_seconds if self.ort_model_seconds else None

    @property
    def in_model(self) -> float | None:
        """The tasks with a tuned program: their time in the model over their time alone."""
        alone = [r for r in self.rows if r.alone_seconds]
        return sum(r.seconds for r in alone) / sum(r.alone_seconds for r in alone) if alone else None

    def to_json(self) -> dict:
        return {**{k: v for k, v in asdict(self).items() if k not in ("peak", "rows", "ort_other")},
                "peak": {**asdict(self.peak), "ridge": self.peak.ridge}, "explained": self.explained,
                "ort_explained": self.ort_explained, "ort_other": dict(self.ort_other or {}),
                "in_model": self.in_model, "rows": [{**asdict(r), "ratio": r.ratio, "in_model": r.in_model}
                                                    for r in self.rows]}

    def table(self) -> str:
        """The rows as a text table, the roofline above it, the totals and notes below."""
        ort, p, ms = self.ort_model_seconds, self.peak, lambda s: _num(s and s * 1e3, ".3f")
        in_model = self.in_model  # None: no task runs a tuned program, no "alone" columns
        rows = [[r.task, r.anchor, r.calls, ms(r.seconds), f"{r.share:.1%}", _num(r.gflops, ".1f"),
                 _num(r.peak_fraction, ".1%"), _num(r.intensity, ".1f"), r.bound]
                + ([ms(r.alone_seconds), _num(r.in_model, ".2f", "x")] if in_model else [])
                + ([ms(r.ort_seconds), _num(r.ratio, ".2f", "x")] if ort else []) for r in self.rows]
        head = ["task", "anchor", "calls", "ms", "share", "GFLOP/s", "% peak", "FLOP/B", "bound"] + (
            ["alone ms", "in model"] if in_model else [])
        other = sorted((self.ort_other or {}).items(), key=lambda kv: -kv[1])
        return "\n".join([
            f"{self.model} on {self.target}: fp32 peak {p.flops / 1e9:.1f} GFLOP/s ({p.how})" + (
                f"; memory {p.bandwidth / 1e9:.1f} GB/s ({p.bandwidth_how}): tasks under {p.ridge:.1f} FLOP/B are "
                "memory-bound, under less where a call's arguments fit the caches (a row's bound reads the copy "
                "speed at its size)" if p.bandwidth else ""),
            format_table(head + (["ORT ms", "eto/ORT"] if ort else []), rows, align="llrrrrrrlrrrr"),
            f"total: eto {ms(self.model_seconds)} ms per inference (median of {self.rounds} instrumented runs), its "
            f"tasks {self.explained:.1%} of it, other calls (VM builtins) {ms(self.other_seconds)} ms",
            *([f"total: the tasks with a tuned program ran {in_model:.2f}x their time alone (the latencies the "
               "database recorded while tuning them)"] if in_model else []),
            *([f"total: ONNX Runtime {ms(ort)} ms per inference (median of {self.rounds} profiled runs), eto/ORT "
               f"{self.model_seconds / ort:.2f}x; its nodes matched to eto's tasks {self.ort_explained:.1%} of it, "
               f"unmatched nodes {ms(sum(v for _, v in other))} ms ("
               + ", ".join(f"{k} {ms(v)}" for k, v in other[:4]) + ")"] if ort else []),
            *(f"note: {n}" for n in self.notes)])


def _num(value: float | None, fmt: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{suffix}"


def profile_model(model: "RelaxModel | str | os.PathLike[str]",
                  database: "Database | str | os.PathLike[str] | None" = None, *, target: "str | Target" = "cpu",
                  onnx: "str | os.PathLike[str] | None" = None, rounds: int = 10,
                  dims: Mapping[str, int] | None = None, log: Callable[[str], None] = lambda m: None) -> ProfileReport:
    """Build ``model`` (a model file, in the layout ``database`` tuned it in, or a
    :class:`~eto.models.load.RelaxModel`) for a CPU with ``database``'s programs (None: TVM's default
    schedules) and profile it (see the module docstring). ``onnx``: the same model
    as an ONNX file, for ONNX Runtime's columns (default: ``model`` where it is one). ``rounds`` runs each."""
    from eto.models.build import build_model, model_inputs
    from eto.models.load import load_relax
    from eto.store.database import Database
    from eto.target import parse_target, use_threads

    threads, target = use_threads(), parse_target(target)
    if not is_cpu(target):
        raise InputError(f"a profile times a CPU build against the CPU's roofline, not a {target.kind.name} build: "
                         "give a CPU target (--target cpu)")
    if isinstance(database, (str, os.PathLike)):
        database = Database(os.fspath(database), readonly=True)
    if isinstance(model, (str, os.PathLike)):  # a file: in the layout the database tuned it in
        from eto.models.layout import layout_from_database

        onnx = onnx or (model if os.fspath(model).endswith(".onnx") else None)
        model = layout_from_database(load_relax(model, dims=dims), database, target, None, building=True)
    built = build_model(model, database, target)
    tasks = built.tasks
    if built.missing:
        log(f"{len(built.missing)} task(s) run TVM's default schedules, without a program in the database or with "
            "one that did not apply: " + ", ".join(t.name for t in built.missing))
    peak = Peak(fp32_peak(threads), threads, f"measured: TVM FMA kernel, {threads} thread(s)", memory_bandwidth(),
                "measured: a one-thread numpy copy")
    with tempfile.TemporaryDirectory(prefix="eto-profile-") as tmp:
        session, notes = _ort_session(onnx, threads, tmp)
        calls, walls, ort = _timed_rounds(built, model_inputs(tasks), session, rounds, log)
    name = f"{target.kind.name} -mcpu={target.attrs.get('mcpu', '?')}, {threads} thread(s)"
    return _report(model.name, name, tasks.tasks, peak, calls, walls, ort, notes, alone=_alone(built, database))


def _alone(built: "BuiltModel", database: "Database | None") -> dict[str, float]:
    """Seconds per call of each task that runs a tuned program (not an instant one): its recorded latency."""
    if database is None:
        return {}
    instant = {t.name for t in built.instant}
    records = {t.name: database.best(t.op, built.target, predicted=False)
               for t in built.applied if t.op is not None and t.name not in instant}
    return {name: r.latency_s for name, r in records.items() if r is not None}


def _ort_session(path: "str | os.PathLike[str] | None", threads: int, folder: str) -> tuple[Any, list[str]]:
    """An ONNX Runtime session with its profiler on, or None and why there is none."""
    if path is None:
        return None, ["no ONNX file (eto bench --onnx FILE): ONNX Runtime's columns are left out"]
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1  # spinning: bench.onnxruntime_session
        opts.add_session_config_entry("session.force_spinning_stop", "1")
        opts.enable_profiling, opts.profile_file_prefix = True, os.path.join(folder, "ort")
        return ort.InferenceSession(os.fspath(path), sess_options=opts, providers=["CPUExecutionProvider"]), []
    except Exception as e:  # noqa: BLE001 -- no ONNX Runtime, or its own error (an Exception): eto's columns stand
        why = "pip install onnxruntime" if isinstance(e, ImportError) else f"it cannot run {os.fspath(path)}: {e}"
        return None, [f"no ONNX Runtime ({why}): its columns are left out"]


def _timed_rounds(built: "BuiltModel", inputs: Sequence[np.ndarray], session: Any, rounds: int,
                  log: Callable[[str], None], warmup: int = 2):
    """eto's calls (the median seconds of each call site, in call order) and whole runs' seconds, and
    ONNX Runtime's nodes and runs' seconds: eto's runs first, then ONNX Runtime's, after ``warmup`` each."""
    import tvm

    calls: list[tuple[str, float]] = []
    vm, dev = built.instrumented_vm(lambda task, secs: calls.append((task, secs))), tvm.cpu()
    args = [tvm.runtime.tensor(np.asarray(a, order="C"), dev) for a in inputs]
    feed = {i.name: np.asarray(a, order="C") for i, a in zip(session.get_inputs(), inputs)} if session else {}
    runs, walls = [], []
    for r in range(warmup + rounds):  # eto's rounds, then ONNX Runtime's: interleaved, each one's idle
        calls.clear()  # threads (spinning, waking) slowed the other's next run up to 2x on 2 cores
        t0 = time.perf_counter()
        vm["main"](*args)
        walls.append(time.perf_counter() - t0)
        runs.append(list(calls))
        log(f"round {r + 1}/{warmup + rounds}: eto {walls[-1] * 1e3:.3f} ms")
    for _ in range(warmup + rounds if session is not None else 0):
        session.run(None, feed)
    ort = None
    if session is not None:
        with open(session.end_profiling()) as f:
            ort = parse_ort_trace(json.load(f), skip=warmup)
    runs, sequence = runs[warmup:], [s for s, _ in runs[-1]]
    if any([s for s, _ in run] != sequence for run in runs):
        raise RuntimeError("the model's VM called other functions from one run to the next")
    return [(s, statistics.median(run[i][1] for run in runs)) for i, s in enumerate(sequence)], walls[warmup:], ort


def _report(model: str, target: str, tasks: Sequence["ModelTask"], peak: Peak, calls: list[tuple[str, float]],
            walls: list[float], ort: tuple[list[OrtNode], list[float]] | None, notes: list[str], *,
            alone: Mapping[str, float] | None = None) -> ProfileReport:
    """The rows from eto's calls (the VM's function, its seconds), ONNX Runtime's nodes, and the tasks'
    seconds per call alone (``alone``, by task name)."""
    by_name = {t.name: t for t in tasks}
    calls, convs = fold_transform_calls(calls, by_name)  # a Winograd convolution: one call, as ORT's one node
    folded = {calls[i][0] for i in convs}  # their GEMM's recorded time leaves the transforms out
    alone = {k: v for k, v in (alone or {}).items() if k not in folded}
    sites = [i for i, (s, _) in enumerate(calls) if s in by_name]  # eto's task calls, in order
    nodes, ort_walls = ort or ([], [])
    ops = [by_name[calls[i][0]].op for i in sites]
    matched, more = match_calls([layer_key("conv", convs[i][:2], convs[i][2]) if i in convs else
                                 layer_key(_KINDS.get(op.type), *nchw_shapes(op.anchor))
                                 if op is not None and op.type in _KINDS else None for i, op in zip(sites, ops)],
                                map(node_key, nodes))
    model_s, rows = statistics.median(walls), []
    mine_of = {t.name: [k for k, i in enumerate(sites) if calls[i][0] == t.name] for t in tasks}
    seconds = {name: sum(calls[sites[k]][1] for k in mine) for name, mine in mine_of.items() if mine}
    top = reached_peak(peak.flops, [t.flops * len(mine_of[t.name]) / seconds[t.name]
                                    for t in tasks if t.name in seconds and t.flops])
    if top > peak.flops:
        peak = replace(peak, flops=top, how=f"{peak.how}: {peak.flops / 1e9:.1f} GFLOP/s, raised to the "
                                   "fastest task's (the short measurement came out below it)")
    for task in tasks:
        mine = mine_of[task.name]
        if mine:
            ort_s = sum(nodes[matched[k]].seconds for k in mine) if ort and all(k in matched for k in mine) else None
            row = _row(task, len(mine), seconds[task.name], model_s, peak, ort_s,
                       tuple(nodes[matched[k]].name for k in mine if k in matched))
            rows.append(replace(row, alone_seconds=alone[task.name] * len(mine)) if task.name in (alone or {}) else row)
    unmatched = [n for j, n in enumerate(nodes) if j not in set(matched.values())]
    other = {op: sum(n.seconds for n in unmatched if n.op == op) for op in dict.fromkeys(n.op for n in unmatched)}
    lowered = [t.name for t in tasks if t.name not in {s for s, _ in calls} and t.reason != SCHEDULED]
    notes = [*notes, *(more if ort else []), *(f"{t}: no call of its own (the VM runs it as a builtin)" for t in lowered),
             *([f"{len(convs)} Winograd convolution calls: each GEMM's row includes its transforms"] if convs else [])]
    return ProfileReport(model, target, peak, len(walls), model_s, tuple(sorted(rows, key=lambda r: -r.seconds)),
                         sum(secs for s, secs in calls if s not in by_name), statistics.median(ort_walls)
                         if ort_walls else None, other if ort else None, tuple(notes))


def _row(task: "ModelTask", calls: int, seconds: float, model_s: float, peak: Peak, ort_seconds: float | None,
         ort_nodes: tuple[str, ...]) -> TaskRow:
    nbytes = calls * sum(int(np.prod([int(d) for d in p.shape])) * np.dtype(str(p.dtype)).itemsize
                         for p in task.mod["main"].params if getattr(p, "shape", None) is not None)
    flops, op = task.flops * calls, task.op
    intensity = flops / nbytes if flops and nbytes else None
    anchor = next((t for t in op.fusion.split("+") if t != "pad"), "-") if op is not None and op.type in _KINDS else "-"
    ridge = peak.flops / working_set_bandwidth(nbytes // max(calls, 1)) if peak.bandwidth and nbytes else None
    bound = "-" if intensity is None or ridge is None else "memory" if intensity < ridge else "compute"
    return TaskRow(task.name, anchor, op.name if op is not None else None, calls, seconds, seconds / model_s, flops,
                   nbytes, flops / seconds / 1e9 if flops else None, flops / seconds / peak.flops if flops else None,
                   intensity, bound, ort_seconds, ort_nodes, ridge=ridge)


def profile_figure(report: ProfileReport) -> "Figure":
    """Horizontal bars, a pair per task (the most time on top): eto's milliseconds and ONNX Runtime's
    for the same layers where they were matched. Needs matplotlib; built without pyplot."""
    from matplotlib.figure import Figure  # pip install 'eto[experiments]'

    rows, ort = list(reversed(report.rows)), report.ort_model_seconds
    fig = Figure(figsize=(8.0, 1.2 + 0.28 * len(rows)), layout="constrained")
    ax, ys = fig.add_subplot(), np.arange(len(rows))
    ax.barh(ys + 0.2, [r.seconds * 1e3 for r in rows], 0.4, label="eto")
    if ort is not None:
        ax.barh(ys - 0.2, [(r.ort_seconds or 0.0) * 1e3 for r in rows], 0.4, label="ONNX Runtime (matched nodes)")
    ax.set_yticks(ys, [f"{r.task} ({r.share:.0%})" for r in rows], fontsize=7)
    ax.set(xlabel="ms per inference", title=f"{report.model}: eto {report.model_seconds * 1e3:.2f} ms"
           + (f", ONNX Runtime {ort * 1e3:.2f} ms" if ort else ""))
    ax.legend(fontsize=8)
    return fig
