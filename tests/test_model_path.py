"""From a model file to a faster model (issue 17): fused tasks, eto tune --model, eto build, eto bench.

Scale ci: a tiny CNN (convolutions with bias, ReLU and residual adds, a mean, a classifier) and a
tiny transformer block (attention, softmax, layer norm, GELU feed-forward), random weights,
exported with torch.export. Every built model's output is compared with PyTorch's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from eto.cli import main
from eto.operators import Operator

torch = pytest.importorskip("torch")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def cpu():
    from eto.target import parse_target

    return parse_target("cpu")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from eto.models.examples import export

    pytest.importorskip("onnx")
    d = tmp_path_factory.mktemp("models")
    files = {name: export(name, str(d / f"{name}.pt2")) for name in ("tiny_cnn", "tiny_transformer")}
    return {**files, "tiny_cnn_onnx": export("tiny_cnn", str(d / "tiny_cnn.onnx"), onnx=True)}


@pytest.fixture(scope="module")
def tuned(files, tmp_path_factory):
    """``eto tune --model`` on each model once per test session (4 trials per task): name -> (a copy of
    the database for this module, the JSON report). Under pytest-xdist the workers share one tuning of
    each model (the first tunes it, under a lock; the others copy it): two modules use these."""
    import contextlib
    import fcntl
    import io
    import os
    import shutil

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, not older ones'
    out: dict = {}

    def get(name: str):
        if name not in out:
            root = shared / f"eto-tuned-{name}"
            with open(f"{root}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not (root / "report.json").exists():
                    shutil.rmtree(root, ignore_errors=True)
                    text, err = io.StringIO(), io.StringIO()
                    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(err):
                        # NCHW, as written: these tests follow the model's own operators (tests/test_layout.py
                        # tunes and builds in the default layout, auto)
                        code = main(["tune", "--model", files[name], "--layout", "NCHW", "--db", str(root / "db"),
                                     "--trials", "4", "--trials-per-iter", "4", "--search", "light", "--json", "--quiet"])
                    assert code == 0, err.getvalue()[-2000:] + failed_rows(text.getvalue())
                    (root / "report.json").write_text(text.getvalue())
            db_dir = tmp_path_factory.mktemp(f"{name}_db")
            shutil.copytree(root / "db", db_dir, dirs_exist_ok=True)
            out[name] = (db_dir, json.loads((root / "report.json").read_text()))
        return out[name]

    return get


def failed_rows(report: str) -> str:
    """The failed operators of ``eto tune --json``'s report (its stdout), with their errors: what a
    failed run's assertion shows (stderr is empty with ``--quiet``)."""
    try:
        rows = json.loads(report)["operators"]
    except (ValueError, KeyError):
        return report[-2000:]
    return "\n".join(f"{r['op']}: {r['method']}, {r['candidates']} candidates: {r['error']}"
                     for r in rows if r["status"] != "tuned")


def pytorch_outputs(name, inputs):
    """The module the file was exported from, run eagerly (same seed: same weights)."""
    from eto.models.examples import example

    module, _ = example(name.removesuffix("_onnx"))
    with torch.no_grad():
        out = module(*[torch.from_numpy(a) for a in inputs])
    return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else [out])]


# -- fused operators ------------------------------------------------------------------------------
def test_a_fused_operator_is_its_own_operator_and_reads_back():
    op = Operator.create("C2D", N=1, CI=16, H=16, W=16, CO=16, KH=3, KW=3, padding=1)
    fused = op.with_fusion("conv2d+add+relu")
    assert fused != op and fused.anchor == op and hash(fused) != hash(op)
    assert fused.key.endswith("+conv2d+add+relu") and fused.name.endswith("+conv2d+add+relu")
    assert Operator.parse(fused.key) == fused and Operator.from_dict(fused.to_dict()) == fused
    # reuse crosses epilogues: the fusion is not part of the sketch key
    assert fused.sketch_key() == op.sketch_key() == fused.anchor.sketch_key()
    assert fused.replace(CO=32).fusion == "conv2d+add+relu"
    with pytest.raises(ValueError, match="comes from its model"):
        fused.prim_func()  # read back from a database, without the model's function
    with pytest.raises(ValueError, match="fusion must be"):
        op.with_fusion("add relu")


@pytest.mark.slow  # a fused task's reference builds its function
def test_fused_tasks_are_mapped_to_the_models_operators(files, cpu):
    from eto.models import load_relax
    from eto.models.tasks import NO_REDUCTION, model_tasks

    tasks = model_tasks(load_relax(files["tiny_cnn"]), cpu)
    tuned = {t.name: t.op for t in tasks.catalogue}
    # three convolutions: bias + ReLU, bias + residual + ReLU (twice: the residual is another input)
    assert sorted(op.fusion for op in tuned.values()) == ["matmul+add", "pad+conv2d+add+add+relu",
                                                          "pad+conv2d+add+add+relu+v2", "pad+conv2d+add+relu"]
    assert {op.anchor.type for op in tuned.values()} == {"C2D", "DENSE"}
    first = next(op for op in tuned.values() if op.fusion == "pad+conv2d+add+relu")
    assert first.anchor == Operator.create("C2D", N=1, CI=3, H=16, W=16, CO=16, KH=3, KW=3, padding=1)
    assert first.input_shapes[0] == (1, 3, 16, 16) and first.output_shape == (1, 16, 16, 16)
    # the mean has a reduction but no operator type, the reshapes none: each becomes a TASK operator
    # of its own function (the backend tunes it), named with the reason, never dropped
    (mean,) = [t for t in tasks.backend_only if "mean" in t.name]
    assert "matches no catalogue operator" in mean.reason and not tasks.left_alone
    assert all(t.reason == NO_REDUCTION for t in tasks.backend_only if t is not mean)
    assert mean.op.type == "TASK" and mean.op.fusion == "mean" and mean.op.flops == 0
    assert mean.op.prim_func().same_as(mean.mod["main"]) and mean.op.output_shape == (1, 16)
    assert Operator.parse(mean.op.key) == mean.op and mean.op.key.startswith("TASK(size=16,hash=")
    assert len({t.op.key for t in tasks.backend_only}) == len(tasks.backend_only)  # one key per function
    catalogue = tasks.opset.filter(lambda op: not op.spec.backend_only)
    assert len(catalogue) == 4 and sum(e.frequency for e in catalogue) == 4
    assert len(tasks.opset) == 4 + len(tasks.backend_only)
    # a fused task's reference is its unscheduled function's output
    inputs = first.random_inputs(seed=1)
    x, w, b = inputs
    conv = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    want = torch.relu(conv + torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(first.reference(*inputs), want, rtol=1e-4, atol=1e-4)


def test_stride_is_told_apart_when_loop_nests_coincide(cpu):
    """A 3x3 convolution at stride 1 on 8x8 and at stride 2 on 16x16 share a loop nest."""
    from eto.models.load import torch_to_relax
    from eto.models.tasks import model_tasks

    net = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, 2, 1, bias=False), torch.nn.Conv2d(8, 8, 3, 1, 1, bias=False))
    tasks = model_tasks(torch_to_relax(net, torch.randn(1, 8, 16, 16)), cpu)
    strides = sorted(t.op.anchor["stride"] for t in tasks.catalogue)
    assert strides == [(1, 1), (2, 2)]


def test_bare_convolution_tasks_get_bridges(cpu):
    """Bridges (section 6) for fused tasks: a convolution alone (no epilogue)."""
    from eto.models.load import torch_to_relax
    from eto.models.bridges import bridge_task
    from eto.models.tasks import model_tasks
    from eto.planning.planner import plan_operator_set
    from eto.options import TuneOptions

    net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, 1, 1, bias=False), torch.nn.Conv2d(16, 32, 3, 1, 1, bias=False),
                              torch.nn.Conv2d(32, 32, 1, 1, 0, bias=False))
    tasks = model_tasks(torch_to_relax(net, torch.randn(1, 8, 12, 12)), cpu)
    ops = [t.op for t in tasks.catalogue]
    assert {op.fusion for op in ops} == {"pad+conv2d"}
    bridge = bridge_task(Operator.from_loop_nest("C2D", [1, 32, 12, 12, 32, 3, 3]), ops[0], cpu)
    assert bridge is not None and bridge.sketch_key() == ops[0].sketch_key()
    assert tuple(int(d) for d in bridge.prim_func().params[0].shape) == (1, 32, 14, 14)
    planned = plan_operator_set(tasks.opset, TuneOptions.of(trials=64, bridges="1hop", cost="analytic", top_k=None), target=cpu)
    assert planned.plan.bridges  # the OC graph has bridges, each one the catalogue could build
    built = [planned.bridges(b) for b in planned.plan.bridges]
    assert built and all(op.fusion == "pad+conv2d" and op.task is not None for op in built)


def _shapes(op):
    return [tuple(int(d) for d in p.shape) for p in op.prim_func().params]


@pytest.mark.slow  # a fused task's reference builds its function
def test_fused_tasks_get_bridges_rebuilt_with_their_epilogue(files, cpu):
    """A bridge of a fused task is the member's function at the bridge's loop nest: the same
    epilogue (bias and residual broadcast as the member's are), the same layouts, the same blocks."""
    from eto.models import load_relax
    from eto.models.bridges import bridge_task
    from eto.models.tasks import model_tasks

    cnn = {t.op.fusion: t.op for t in model_tasks(load_relax(files["tiny_cnn"]), cpu).catalogue}
    member = cnn["pad+conv2d+add+add+relu"]  # conv + bias + residual + ReLU
    bridge = bridge_task(Operator.from_loop_nest("C2D", [1, 24, 10, 10, 16, 3, 3]), member, cpu)
    assert bridge is not None and bridge.fusion == member.fusion and bridge.sketch_key() == member.sketch_key()
    assert _shapes(bridge) == [(1, 16, 12, 12), (24, 16, 3, 3), (1, 24, 1, 1), (1, 24, 10, 10), (1, 24, 10, 10)]
    x, w, b, r = bridge.random_inputs(seed=2)
    conv = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w))
    want = torch.relu(conv + torch.from_numpy(b) + torch.from_numpy(r)).numpy()
    np.testing.assert_allclose(bridge.reference(x, w, b, r), want, rtol=1e-4, atol=1e-4)
    # a task whose residual is its own input (+v2) has a function the recipe cannot tell apart: no bridge
    assert bridge_task(Operator.from_loop_nest("C2D", [1, 24, 10, 10, 16, 3, 3]), cnn["pad+conv2d+add+add+relu+v2"],
                       cpu) is None
    # a matmul with its bias, the weight held K x N as the model holds it; M = N in the member, so the
    # layout is read from the anchor block's indices, not from the sizes
    tr = {t.op.name: t.op for t in model_tasks(load_relax(files["tiny_transformer"]), cpu).catalogue}
    member = tr["BMM[1,16,64,64]+matmul+add"]
    assert _shapes(member) == [(16, 64), (64, 64), (64,), (16, 64)]
    bridge = bridge_task(Operator.create("BMM", B=1, M=16, N=32, K=48), member, cpu)
    assert bridge is not None and _shapes(bridge) == [(16, 48), (48, 32), (32,), (16, 32)]
    x, w, b = bridge.random_inputs(seed=3)
    np.testing.assert_allclose(bridge.reference(x, w, b), x @ w + b, rtol=1e-4, atol=1e-4)
    # loops of extent 1 in the member (its unit batch) cannot grow in a bridge
    assert bridge_task(Operator.create("BMM", B=2, M=16, N=32, K=48), member, cpu) is None
    attention = tr["BMM[4,16,16,16]+matmul"]
    bridge = bridge_task(Operator.create("BMM", B=4, M=16, N=8, K=32), attention, cpu)
    assert bridge is not None and _shapes(bridge) == [(4, 16, 32), (4, 32, 8), (4, 16, 8)]


def test_one_bridge_kind_serves_every_epilogue_of_an_anchor(files, cpu):
    """Reuse crosses epilogues, so a model's matmuls form one kind: its bridges are rebuilt like
    the fusion most of its members share (``matmul+add``), and like another member's where that
    recipe cannot build the loop nest (a batch the unit-batch ``matmul+add`` cannot grow to)."""
    from selector import LoopNestOp

    from eto.models import load_relax
    from eto.models.tasks import model_tasks
    from eto.planning.planner import BridgeCatalogue

    ops = [t.op for t in model_tasks(load_relax(files["tiny_transformer"]), cpu).catalogue]
    assert {op.fusion for op in ops} == {"matmul", "matmul+add"} and len({op.sketch_key() for op in ops}) == 1
    catalogue = BridgeCatalogue.of(ops)
    assert [op.fusion for op in catalogue.members[("BMM", ops[0].sketch_key())]][0] == "matmul+add"

    def node(b, m, n, k):
        return LoopNestOp(name=f"bridge{b}", type="BMM", sketch=ops[0].sketch_key(), space=(b, m, n), reduction=(k,))

    assert catalogue(node(1, 16, 32, 16)).fusion == "matmul+add"
    grown = catalogue(node(4, 16, 8, 16))
    assert grown is not None and grown.fusion == "matmul" and _shapes(grown) == [(4, 16, 16), (4, 16, 8), (4, 16, 8)]


@pytest.mark.slow  # builds the model
def test_batch_norms_are_folded_into_convolutions(cpu):
    """Inference batch norm after a convolution becomes the convolution's bias: one fused task, and
    the built model still computes what PyTorch does."""
    from eto.models.build import build_model
    from eto.models.load import torch_to_relax
    from eto.models.tasks import model_tasks

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
    with torch.no_grad():  # statistics other than the defaults, so a missed or wrong fold shows
        net[1].running_mean.uniform_(-1, 1), net[1].running_var.uniform_(0.5, 2), net[1].weight.uniform_(0.5, 2)
    net.eval()
    x = torch.randn(1, 4, 10, 10)
    model = torch_to_relax(net, x)
    tasks = model_tasks(model, cpu)
    assert [t.op.fusion for t in tasks.catalogue] == ["pad+conv2d+add+relu"]
    assert not [t for t in tasks.tasks if "batch_norm" in t.name]
    built = build_model(model, None, cpu, tasks=tasks)
    with torch.no_grad():
        want = net(x).numpy()
    np.testing.assert_allclose(built.run([x.numpy()])[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # builds and times the model
def test_kernel_times_attribute_a_models_time_to_its_fused_tasks(cpu):
    """Each function the built model calls, timed inside whole-model runs: the fused convolution
    once per run, the two convolutions' call sites told apart, every time positive."""
    from eto.models.build import build_model
    from eto.models.load import torch_to_relax

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, 1, 1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, 1, 1),
                              torch.nn.ReLU()).eval()
    x = torch.randn(1, 4, 10, 10)
    built = build_model(torch_to_relax(net, x), None, cpu)
    times = built.kernel_times([x.numpy()], runs=3)
    tasks = {t.name for t in built.tasks.tasks}
    timed = {name: secs for name, secs in times.items() if name in tasks}
    assert timed and sum(len(v) for v in timed.values()) == 2  # two convolutions, each called once a run
    assert all(s > 0 for v in times.values() for s in v)


# -- tune, build, run ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny_cnn", "tiny_transformer", "tiny_cnn_onnx"])
def test_tune_build_and_run_a_model_matches_pytorch(name, files, tuned, cpu, capsys, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from eto.store.database import Database
    from eto.models import load_relax
    from eto.models.build import build_model, model_inputs

    path, (db_dir, report) = files[name], tuned(name)
    assert report["operators"] and all(r["status"] == "tuned" for r in report["operators"]), \
        [(r["key"], r["status"], r.get("error")) for r in report["operators"] if r["status"] != "tuned"]
    # the database is MetaSchedule's: its JSONDatabase finds every tuned task's function
    model = load_relax(path)
    built = build_model(model, Database(db_dir), cpu)
    tuned = [t for t in built.tasks.tasks if t.op is not None]
    ms_db = ms.database.JSONDatabase(work_dir=str(db_dir))
    assert all(ms_db.has_workload(t.mod) for t in tuned)
    assert len(built.applied) == len(tuned) and not built.missing and built.applied_flops_share == 1.0
    inputs = model_inputs(built.tasks, seed=3)
    for got, want in zip(built.run(inputs), pytorch_outputs(name, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # eto build writes a library and names the tasks left to TVM's defaults
    code, _, err = run(capsys, "build", "--model", path, "--db", db_dir, "-o", tmp_path / "model.so")
    assert code == 0, err
    assert (tmp_path / "model.so").stat().st_size > 0
    assert f"{len(tuned)} of {len(tuned)} tunable tasks run programs" in err and "100.0% of their FLOPs" in err
    # the functions outside the catalogue (the softmax, the mean) were tuned by the backend, not left alone
    other = "softmax" if name == "tiny_transformer" else "mean"
    (task,) = [t for t in built.tasks.backend_only if other in t.name]
    assert task in built.applied and "default schedule" not in err
    row = next(r for r in report["operators"] if r["key"] == task.op.key)
    assert row["method"] == "backend" and 1 < row["candidates"] <= 4  # the reduction: a search
    # an element-wise or layout function's design space is one program: measured once, no search
    from tuner.measure.backend import single_program

    rows = {r["key"]: r for r in report["operators"]}
    plain = [t for t in built.tasks.backend_only if single_program(t.op.prim_func(), cpu)]
    assert task not in plain and all(rows[t.op.key]["candidates"] == 1 for t in plain)
    assert plain or name != "tiny_transformer"  # its reshapes, transposes, GELU


@pytest.mark.slow
def test_a_task_without_a_program_builds_with_a_warning_and_correct_outputs(files, cpu, capsys, tmp_path):
    from eto.store.database import Database
    from eto.models import load_relax
    from eto.models.build import build_model, model_inputs
    from eto.models.tasks import model_tasks

    path = files["tiny_cnn"]
    tasks = model_tasks(load_relax(path), cpu)
    dense = next(t.op for t in tasks.catalogue if t.op.type == "DENSE")
    # tune only the classifier: the convolutions keep TVM's default schedules
    code, _, err = run(capsys, "tune", "--op", dense.anchor.key, "--db", tmp_path / "db", "--trials", "2",
                       "--trials-per-iter", "2", "--search", "light", "--quiet")
    assert code == 0, err
    code, _, err = run(capsys, "build", "--model", path, "--db", tmp_path / "db", "-o", tmp_path / "m.so")
    assert code == 0, err
    warned = [line for line in err.splitlines() if "has no program in" in line]
    assert len(warned) == len(tasks.tasks) and any("fused_conv2d_add_relu" in line for line in warned)
    assert f"0 of {len(tasks.tasks)} tunable tasks" in err  # the bare DENSE is not the fused task Relax compiles
    built = build_model(load_relax(path), Database(tmp_path / "db"), cpu)
    assert built.applied_flops_share == 0.0
    inputs = model_inputs(built.tasks)
    np.testing.assert_allclose(built.run(inputs)[0], pytorch_outputs("tiny_cnn", inputs)[0], rtol=1e-4, atol=1e-4)


def test_bench_counts_every_tuning_result_of_the_target_bridges_included(tmp_path):
    """``eto bench``'s eto tuning time: every result the database holds for the target (a bridge root
    the model does not contain, its polish, a failed attempt, a result copied from a prior), not only
    the model's tasks; another target's results are not counted. The database is written by hand: no TVM."""
    from eto.models.bench import recorded_tuning
    from eto.store.database import META, RECORDS, WORKLOADS, Database
    from eto.target import target_key

    cpu, other = (target_key(json.dumps({"kind": "llvm", "mcpu": m, "num-cores": 2})) for m in ("znver5", "x86-64"))
    dense = Operator.create("DENSE", M=1, N=10, K=512).with_fusion("matmul+add")
    conv = Operator.create("C2D", N=1, CI=8, H=16, W=16, CO=8, KH=3, KW=3, padding=1).with_fusion("pad+conv2d+add")
    bridge = conv.anchor.replace(H=8, W=8).with_fusion("pad+conv2d+add")  # tuned for the plan, not in the model
    results = [(dense, cpu, "backend", 30.0, {}), (bridge, cpu, "backend", 200.0, {}), (bridge, cpu, "polish", 50.0, {}),
               (conv, cpu, "reuse", 10.0, {}), (dense, cpu, "polish", 5.0, {"failed": True}),
               (conv, other, "backend", 1000.0, {}), (dense, cpu, "backend", 7.0, {"merged_from": "prior-db"})]
    (tmp_path / WORKLOADS).write_text(json.dumps(["0x1", "module"]) + "\n")
    (tmp_path / RECORDS).write_text("".join(json.dumps([0, ["trace", [1e-5], "target", []]]) + "\n" for _ in results))
    (tmp_path / META).write_text("".join(json.dumps(
        {"v": 1, "op": op.to_dict(), "op_key": op.key, "target": tk, "method": method, "seconds": s,
         "records": [] if extra.get("failed") else [{"latency_s": 1e-5, "line": i}], "time": float(i),
         **({"merged_from": extra["merged_from"]} if "merged_from" in extra else {})}) + "\n"
        for i, (op, tk, method, s, extra) in enumerate(results)))
    db = Database(tmp_path, readonly=True)
    assert not db.problems and len(db.results()) == len(results)
    recorded = recorded_tuning(db, cpu, {dense.key, conv.key})
    assert recorded.seconds == 30 + 200 + 50 + 10 + 5 + 7  # the bridge's 250 s included, the other target's not
    assert (recorded.results, recorded.model_results, recorded.polishes, recorded.failed) == (6, 4, 2, 1)
    assert recorded.merged_seconds == 7
    assert "all 6 tuning results" in recorded.note and "2 for other operators (the plan's bridges)" in recorded.note
    assert "7 s of it in results copied from other databases" in recorded.note
    assert recorded_tuning(db, other, {dense.key, conv.key}).seconds == 1000


def test_timing_processes_are_joined_per_method():
    from eto.models.bench import BenchReport, MethodResult, join_processes

    def report(eto: list[float], untuned: list[float], err: float) -> BenchReport:
        return BenchReport("m", "llvm", "pytorch", (MethodResult("untuned", tuple(untuned), max_abs_error=1e-6,
                                                                 process_medians_s=(untuned[1],)),
                                                    MethodResult("eto", tuple(eto), 3.0, err, 1.0)))

    joined = join_processes([report([1.0, 2.0, 9.0], [5.0, 6.0, 7.0], 1e-6), report([4.0, 4.0, 4.0], [6.0, 6.0, 6.0], 3e-6)])
    eto = joined.result("eto")
    assert eto.latencies_s == (1.0, 2.0, 9.0, 4.0, 4.0, 4.0) and eto.median_s == 4.0
    assert eto.process_medians_s == (2.0, 4.0)  # a process without its own medians: its latencies' median
    assert eto.max_abs_error == 3e-6 and eto.tuning_s == 3.0 and eto.applied_flops_share == 1.0
    assert joined.result("untuned").process_medians_s == (6.0, 6.0)
    assert BenchReport.from_json(joined.to_json()) == joined
    with pytest.raises(ValueError, match="method 'untuned' is missing"):
        join_processes([joined, BenchReport("m", "llvm", "pytorch", (joined.result("eto"),))])


def test_bench_passes_its_options_to_the_further_timing_processes(monkeypatch, tmp_path):
    """``eto bench --processes N``: each further process's command line, read by eto's own parser, is
    the first's options but ``--processes 1 --json``, no plot, MetaSchedule's work directory shared."""
    import sys

    from eto.cli import build_parser
    from eto.cli import model as cli_model

    class Started(Exception):
        pass

    def start(cmd, **kwargs):
        raise Started(cmd)

    monkeypatch.setattr(cli_model.subprocess, "run", start)
    argv = ["bench", "--model", "m.pt2", "--db", "DB", "--target", "llvm -num-cores 2", "--rounds", "2",
            "--processes", "3", "--dim", "s0=64", "--dim=s1=8", "--fast-math", "--onnx", "m.onnx",
            "--ms-trials", "8", "--ms-search", "light", "--plot", "p.png"]
    args = build_parser().parse_args(argv)
    with pytest.raises(Started) as started:
        cli_model._bench_elsewhere(args, str(tmp_path), 2)
    cmd = started.value.args[0]
    assert cmd[:3] == [sys.executable, "-m", "eto"]
    again = build_parser().parse_args(cmd[3:])
    assert vars(again) == {**vars(args), "processes": 1, "json": True, "plot": None, "ms_work": str(tmp_path)}


@pytest.mark.slow  # a real timing process: imports TVM, builds and times the model
def test_bench_times_again_in_a_fresh_process_with_the_same_options(files, cpu, tmp_path):
    """``eto bench --processes N``: each further process is a real ``eto bench ... --processes 1 --json``
    on the same model, database, target, rounds and baselines, its report the first's shape; a
    process that fails is named with its exit code."""
    from eto.cli import build_parser
    from eto.cli import model as cli_model
    from eto.cli.errors import CLIError
    from eto.models import load_relax
    from eto.models.tasks import model_tasks

    pytest.importorskip("onnxruntime")
    db = tmp_path / "db"
    db.mkdir()  # empty: every task keeps TVM's default schedule
    args = build_parser().parse_args(["bench", "--model", files["tiny_cnn"], "--db", str(db), "--rounds", "2",
                                      "--processes", "3", "--onnx", files["tiny_cnn_onnx"], "--layout", "NCHW"])
    report = cli_model._bench_elsewhere(args, None, 2)
    assert report.target == str(cpu) and report.reference == "pytorch"
    assert {r.method for r in report.results} == {"untuned", "eto", "pytorch", "onnxruntime"}  # --onnx reached it
    for r in report.results:  # --rounds 2 of 3 timings each, one process: --processes 1
        assert len(r.latencies_s) == 2 * 3 and len(r.process_medians_s) == 1 and r.max_abs_error < 1e-4
    assert [t["task"] for t in report.tasks] == [t.name for t in model_tasks(load_relax(files["tiny_cnn"]), cpu).tasks]
    assert not any(t["eto_program"] for t in report.tasks)  # the same (empty) database
    args.db = str(tmp_path / "nowhere")  # the further process exits 2: no such database directory
    with pytest.raises(CLIError, match="timing process 3 of 3 exited 2"):
        cli_model._bench_elsewhere(args, None, 3)


@pytest.mark.slow
def test_bench_compares_builds_with_pytorch(files, tuned, capsys, tmp_path, monkeypatch):
    path, (db_dir, _) = files["tiny_cnn"], tuned("tiny_cnn")
    pytest.importorskip("onnxruntime")
    code, out, err = run(capsys, "bench", "--model", path, "--db", db_dir, "--rounds", "2", "--json",
                         "--plot", tmp_path / "bench.png", "--ms-trials", "2", "--ms-search", "light",
                         "--ms-work", tmp_path / "ms",
                         "--onnx", files["tiny_cnn_onnx"], "--processes", "1")
    assert code == 0, err
    report = json.loads(out)  # MetaSchedule's own logging stays off stdout
    by = {r["method"]: r for r in report["results"]}
    assert set(by) == {"untuned", "eto", "metaschedule", "pytorch", "onnxruntime"} and report["reference"] == "pytorch"
    assert all(r["max_abs_error"] < 1e-4 for r in by.values())
    assert all(len(r["process_medians_s"]) == 1 and len(r["latencies_s"]) == 2 * 3 for r in by.values())
    assert by["eto"]["applied_flops_share"] == 1.0 and by["eto"]["tuning_s"] > 0
    assert by["metaschedule"]["applied_flops_share"] == 1.0 and by["metaschedule"]["tuning_s"] > 0
    from eto.models.bench import MS_TIME_FILE

    assert json.loads((tmp_path / "ms" / MS_TIME_FILE).read_text())["search"] == "light"  # --ms-search reached it
    # eto's build runs the database's programs on every tunable task (which of two builds times faster
    # is a benchmark's question: experiments/model_bench.py), the untuned build none
    assert all(t["eto_program"] for t in report["tasks"] if t["operator"]) and by["untuned"]["applied_flops_share"] is None
    assert (tmp_path / "bench.png").stat().st_size > 0
    # the same two databases task by task (experiments/tools/compare_dbs.py --model): every tunable task
    # found in MetaSchedule's work directory and in eto's database, re-measured side by side
    from experiments.tools import compare_dbs

    assert compare_dbs.main(["--model", path, f"ms=ms:{tmp_path / 'ms'}", f"eto={db_dir}", "--rounds", "1",
                         "--out", str(tmp_path / "tasks.json")]) == 0
    rows = json.loads((tmp_path / "tasks.json").read_text())["per_operator"]
    assert len(rows) == sum(1 for t in report["tasks"] if t["operator"])
    assert all(0 < r[k]["latency_us"] < float("inf") for r in rows for k in ("ms", "eto"))
    # one round, one process: its median is the program's
    assert all(r[k]["per_process_us"] == [pytest.approx(r[k]["latency_us"])] for r in rows for k in ("ms", "eto"))
    assert {r["ms"]["method"] for r in rows} == {"metaschedule"}
    # ... and kernel by kernel inside the two built models: every tunable task's call site in both
    assert compare_dbs.main(["--model", path, "--kernels", f"ms=ms:{tmp_path / 'ms'}", f"eto={db_dir}",
                             "--rounds", "2", "--out", str(tmp_path / "kernels.json")]) == 0
    kernels = json.loads((tmp_path / "kernels.json").read_text())
    sites = {r["kernel"].split("#")[0] for r in kernels["per_kernel"] if "ms" in r and "eto" in r}
    assert {t["task"] for t in report["tasks"] if t["operator"]} <= sites
    assert all(kernels["kernel_sum_us"][k] > 0 for k in ("ms", "eto"))
    with pytest.raises(SystemExit):
        compare_dbs.main(["--opset", "resnet50", "--kernels", f"eto={db_dir}"])  # --kernels needs --model
    code, _, err = run(capsys, "bench", "--model", path, "--db", tmp_path / "nowhere")
    assert code == 2 and "no such database directory" in err
    code, _, err = run(capsys, "bench", "--model", path, "--db", db_dir, "--processes", "0")
    assert code == 2 and "--processes must be at least 1, got 0" in err
    code, _, err = run(capsys, "bench", "--model", path, "--db", db_dir, "--onnx", tmp_path / "missing.onnx")
    assert code == 2 and "missing.onnx: no such file" in err


def _mean(red_name: str, width: int = 16):
    """A mean over H and W whose reduction block is named after a model's variable, as Relax names it."""
    import tvm
    from tvm import te

    x = te.placeholder((1, 8, 8, width), name="x")
    kh, kw = te.reduce_axis((0, 8), name="kh"), te.reduce_axis((0, 8), name="kw")
    red = te.compute((1, 1, 1, width), lambda n, h, w, c: te.sum(x[n, kh, kw, c], axis=[kh, kw]), name=red_name)
    out = te.compute(red.shape, lambda *i: red(*i) / 64.0, name="T_divide")
    return tvm.IRModule({"main": te.create_prim_func([x, out])})


def _schedule(mod, red_name: str):
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(mod)
    block = sch.get_sblock(red_name)
    outer, inner = sch.split(sch.get_loops(block)[3], [None, 4])
    sch.reorder(inner, outer)
    return sch


def test_a_stored_program_applies_to_the_same_function_with_other_block_names():
    """A program tuned on one model's function serves the same function of another model whose block
    names differ (a torch.export file's mean ``lv200_red`` is ``lv375_red`` in the ONNX file)."""
    import tvm
    from tvm.s_tir.schedule import Schedule

    from eto.models.build import NotPortable, _block_names, portable_trace

    tuned, other = _mean("lv200_red"), _mean("lv375_red")
    trace = _schedule(tuned, "lv200_red").trace
    with pytest.raises(Exception):  # as stored, the trace names a block the other function lacks
        trace.apply_to_schedule(Schedule(other), remove_postproc=False)
    assert portable_trace(trace, tuned, tuned) is trace
    moved = portable_trace(trace, tuned, other)
    replayed = Schedule(other)
    moved.apply_to_schedule(replayed, remove_postproc=False)
    tvm.ir.assert_structural_equal(replayed.mod, _schedule(other, "lv375_red").mod)
    from tvm import te

    x = te.placeholder((1, 8, 8, 16), name="x")
    relu = tvm.IRModule({"main": te.create_prim_func([x, te.compute(x.shape, lambda *i: te.max(x(*i), 0.0))])})
    with pytest.raises(NotPortable, match=r"its blocks \[root, lv200_red, T_divide\] are not the function's \[root, compute\]"):
        portable_trace(trace, tuned, relu)  # another function: no program rather than a wrong one
    # the same block names in a function of another structure (an ONNX file's classifier against the
    # torch.export file's): the trace does not replay, so no program, not a build that fails
    y = te.placeholder((1, 8, 16), name="x")
    k = te.reduce_axis((0, 8), name="k")
    red = te.compute((1, 16), lambda n, c: te.sum(y[n, k, c], axis=[k]), name="lv200_red")
    flat = tvm.IRModule({"main": te.create_prim_func([y, te.compute(red.shape, lambda *i: red(*i) / 8.0,
                                                                     name="T_divide")])})
    assert _block_names(flat) == _block_names(tuned)
    with pytest.raises(NotPortable, match="its trace does not replay: "):
        portable_trace(trace, tuned, flat)


@pytest.mark.slow
def test_a_profile_sets_each_tuned_task_beside_its_recorded_time_alone(files, tuned):
    """``eto bench --profile`` with a database: each task running a tuned program gets its calls at the latency
    the database recorded for that program; ``in_model`` is its time in the model over that."""
    pytest.importorskip("onnxruntime")
    import eto
    from eto.models.profile import profile_model
    from eto.store.database import Database
    from eto.target import parse_target

    db_dir, _ = tuned("tiny_cnn_onnx")
    db = Database(db_dir)
    report = profile_model(files["tiny_cnn_onnx"], db, rounds=1)
    convs = [r for r in report.rows if r.anchor == "conv2d"]
    assert len(convs) == 3
    ops = {e.op.name: e.op for e in eto.operator_set(files["tiny_cnn_onnx"], layout="NCHW")}  # as tuned
    for r in convs:
        best = db.best(ops[r.operator], parse_target("cpu"), predicted=False)
        assert r.alone_seconds == pytest.approx(r.calls * best.latency_s) and r.in_model == r.seconds / r.alone_seconds
    assert report.in_model > 0 and "alone ms" in report.table()


def test_the_rebuild_memo_forgets_its_oldest_templates_past_its_cap(monkeypatch):
    """A long-lived process planning model after model keeps at most the cap of templates' checks."""
    from dataclasses import dataclass

    from eto.models import bridges

    @dataclass(frozen=True)
    class Template:
        anchor: str

    rebuilt = []
    monkeypatch.setattr(bridges, "_REBUILDS_ITSELF", {})
    monkeypatch.setattr(bridges, "REBUILDS_ITSELF_CAP", 2)
    monkeypatch.setattr(bridges, "_rebuild", lambda anchor, template, target: rebuilt.append(anchor))
    for name in ("a", "b", "a", "c", "c", "a"):
        assert bridges._rebuilds_itself(Template(name), "llvm") is False
    assert rebuilt == ["a", "b", "c", "a"]  # "a" rebuilt again once "c" pushed it out; "c" remembered
    assert len(bridges._REBUILDS_ITSELF) == 2
