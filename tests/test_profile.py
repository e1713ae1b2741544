"""``eto bench --profile`` (:mod:`eto.models.profile`): a built model's latency task by task, against the
cores' fp32 peak and ONNX Runtime's profile of the same layers.

Fast: ONNX Runtime's trace read from a hand-written trace, eto's calls matched to its nodes (never by a
guess), the table and JSON of a hand-made report. Slow: a tiny ONNX CNN profiled from Python and from
the command line.
"""

from __future__ import annotations

import json
import math

import pytest

from eto.models.profile import (OrtNode, Peak, ProfileReport, TaskRow, layer_key, match_calls, node_key,
                                parse_ort_trace)


def _node(name: str, ts: int, dur: int, op: str, inputs, outputs) -> dict:
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "ph": "X",
            "args": {"op_name": op, "input_type_shape": [{"float": s} for s in inputs],
                     "output_type_shape": [{"float": s} for s in outputs], "provider": "CPUExecutionProvider"}}


def _trace() -> list[dict]:
    """Three runs (the first a warm-up) of a conv, the same Reorder node twice, and a Gemm whose weight
    ONNX Runtime prepacked out of its record; fences and session events around them."""
    events = [{"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 50, "args": {}}]
    for run, (t0, scale) in enumerate([(100, 10), (1000, 1), (2000, 3)]):
        events.append({"cat": "Session", "name": "model_run", "ts": t0, "dur": 100 * scale, "args": {}})
        events += [_node("/c1/Conv_output_0_nchwc", t0 + 1, 20 * scale, "Conv",
                         [[1, 3, 16, 16], [16, 3, 3, 3], [16]], [[1, 16, 16, 16]]),
                   {"cat": "Node", "name": "/c1/Conv_output_0_nchwc_fence_after", "ts": t0 + 2, "dur": 0},
                   _node("ReorderOutput", t0 + 30, 4 * scale, "ReorderOutput", [[1, 16, 16, 16]], [[1, 16, 16, 16]]),
                   _node("ReorderOutput", t0 + 40, 6 * scale, "ReorderOutput", [[1, 16, 16, 16]], [[1, 16, 16, 16]]),
                   _node("/fc/Gemm", t0 + 50, 5 * scale, "Gemm", [[1, 16], [10]], [[1, 10]])]
    return events[::-1]  # the reader sorts by time


def test_ort_trace_gives_each_node_its_median_after_the_warm_up():
    nodes, runs = parse_ort_trace(_trace(), skip=1)
    assert runs == pytest.approx([100e-6, 300e-6])  # the warm-up run left out
    assert [(n.name, n.op) for n in nodes] == [("/c1/Conv_output_0_nchwc", "Conv"), ("ReorderOutput", "ReorderOutput"),
                                              ("ReorderOutput", "ReorderOutput"), ("/fc/Gemm", "Gemm")]
    # the median of the kept runs (scales 1 and 3: 2x), each occurrence of a repeated name on its own
    assert [n.seconds for n in nodes] == pytest.approx([40e-6, 8e-6, 12e-6, 10e-6])
    assert nodes[0].inputs == ((1, 3, 16, 16), (16, 3, 3, 3), (16,)) and nodes[0].outputs == ((1, 16, 16, 16),)
    everything, _ = parse_ort_trace(_trace())
    assert everything[0].seconds == pytest.approx(60e-6)  # warm-up kept: the median of 200, 20 and 60 us
    assert parse_ort_trace([]) == ([], [])


def test_calls_match_nodes_by_layer_in_order_and_never_by_a_guess():
    conv = [(1, 64, 56, 56), (64, 64, 3, 3)], (1, 64, 56, 56)
    down = [(1, 64, 56, 56), (128, 64, 1, 1)], (1, 128, 28, 28)
    body = [(1, 64, 56, 56), (128, 64, 3, 3)], (1, 128, 28, 28)  # same data and output as ``down``: the weight tells
    eto = [layer_key("conv", *conv), layer_key("conv", *body), layer_key("conv", *down), layer_key("conv", *conv),
           None, layer_key("matmul", [(1, 512), (1000, 512)], (1, 1000)),
           layer_key("conv", [(1, 3, 8, 8), (8, 3, 3, 3)], (1, 8, 8, 8))]

    def node(name, op, inputs, output):
        return OrtNode(name, op, tuple(inputs), (output,), 1e-6)

    ort = [node("a", "Conv", *conv), node("down", "Conv", *down), node("body", "FusedConv", *body),
           node("b", "Conv", *conv), node("pool", "MaxPool", [(1, 64, 56, 56)], (1, 64, 28, 28)),
           node("fc", "Gemm", [(1, 512), (1000,)], (1, 1000)),  # weight prepacked: data and output decide
           node("x1", "Conv", [(1, 3, 8, 8), (8, 3, 3, 3)], (1, 8, 8, 8)),
           node("x2", "Conv", [(1, 3, 8, 8), (8, 3, 3, 3)], (1, 8, 8, 8)),
           node("t", "ConvTranspose", [(1, 8, 8, 8), (8, 4, 2, 2)], (1, 4, 16, 16))]
    matched, notes = match_calls(eto, [node_key(n) for n in ort])
    # in order within a layer, the 3x3 and the 1x1 stride-2 convolution told apart by their weights
    assert {i: ort[j].name for i, j in matched.items()} == {0: "a", 1: "body", 2: "down", 3: "b", 5: "fc"}
    # eto calls the 3x8 layer once, ONNX Runtime runs two such nodes: no pairing; an ORT-only layer is named
    assert len(notes) == 2 and "eto calls it 1 time(s), ONNX Runtime runs 2" in notes[0] and "(8, 3, 3, 3)" in notes[0]
    assert notes[1].startswith("conv_transpose") and "eto never" in notes[1]
    assert layer_key("conv", [(1, 3, 8, 8)], (1, 8, 8, 8)) is None and layer_key(None, *conv) is None  # no weight known


def _report(ort: bool) -> ProfileReport:
    peak = Peak(100e9, 2, "measured: TVM FMA kernel, 2 thread(s)", 10e9, "measured: a one-thread numpy copy")
    conv = TaskRow("fused_conv2d_add_relu", "conv2d", "C2D[...]", 2, 3e-3, 0.6, 30_000_000, 1_000_000, 10.0, 0.1,
                   30.0, "compute", 1e-3 if ort else None, ("/a", "/b") if ort else ())
    mean = TaskRow("mean", "-", "TASK[...]", 1, 1e-3, 0.2, 0, 4096, None, None, None, "-")
    return ProfileReport("net", "llvm -mcpu=znver4, 2 thread(s)", peak, 5, 5e-3, (conv, mean), 0.5e-3,
                         2e-3 if ort else None, {"MaxPool": 0.5e-3} if ort else None,
                         ("conv [3, 8] -> [8]: eto calls it 1 time(s), ONNX Runtime runs 2: not matched",))


def test_the_table_shows_shares_the_roofline_and_ort_where_matched(tmp_path):
    report = _report(ort=True)
    assert report.explained == pytest.approx(0.8) and report.ort_explained == pytest.approx(0.5)
    assert report.rows[0].ratio == pytest.approx(3.0) and report.rows[1].ratio is None
    lines = report.table().splitlines()
    assert "fp32 peak 100.0 GFLOP/s (measured: TVM FMA kernel" in lines[0] and "tasks under 10.0 FLOP/B" in lines[0]
    assert lines[1].split() == ["task", "anchor", "calls", "ms", "share", "GFLOP/s", "%", "peak", "FLOP/B", "bound",
                                "ORT", "ms", "eto/ORT"]
    assert lines[3].split() == ["fused_conv2d_add_relu", "conv2d", "2", "3.000", "60.0%", "10.0", "10.0%", "30.0",
                                "compute", "1.000", "3.00x"]
    assert lines[4].split() == ["mean", "-", "1", "1.000", "20.0%", "-", "-", "-", "-", "-", "-"]  # nothing guessed
    assert lines[5].startswith("total: eto 5.000 ms") and "its tasks 80.0% of it" in lines[5]
    assert "ONNX Runtime 2.000 ms" in lines[6] and "eto/ORT 2.50x" in lines[6] and "MaxPool 0.500" in lines[6]
    assert lines[7].startswith("note: conv [3, 8]")
    data = json.loads(json.dumps(report.to_json()))
    assert data["rows"][0]["ratio"] == pytest.approx(3.0) and data["peak"]["ridge"] == pytest.approx(10.0)
    assert data["explained"] == pytest.approx(0.8) and data["ort_other"] == {"MaxPool": 0.5e-3}
    without = _report(ort=False).table()  # no ONNX file: ONNX Runtime's columns and total left out
    assert "ORT ms" not in without and "ONNX Runtime 2" not in without
    pytest.importorskip("matplotlib")
    from eto.models.profile import profile_figure

    profile_figure(report).savefig(tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0


# -- a real model ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from eto.models.examples import export

    return export("tiny_cnn", str(tmp_path_factory.mktemp("models") / "tiny_cnn.onnx"), onnx=True)


@pytest.mark.slow
@pytest.mark.serial  # times the model
def test_profile_of_a_tiny_cnn_explains_its_latency_and_matches_ort(tiny_onnx):
    pytest.importorskip("onnxruntime")
    from eto.models import load_relax
    from eto.models.profile import profile_model
    from eto.models.roofline import working_set_bandwidth

    from eto.models.layout import with_layout

    # no database: TVM's default schedules; NCHW, so each convolution pairs with ONNX Runtime's node
    report = profile_model(with_layout(load_relax(tiny_onnx), "NCHW"), None, onnx=tiny_onnx, rounds=3)
    rows = {r.task: r for r in report.rows}
    assert [r.seconds for r in report.rows] == sorted((r.seconds for r in report.rows), reverse=True)
    assert sum(r.share for r in report.rows) == pytest.approx(report.explained)
    assert 0.2 < report.explained <= 1.0 and report.peak.flops > 1e9 and report.peak.bandwidth > 1e8
    for r in report.rows:
        if r.flops:  # GFLOP/s is the FLOPs over the time; the fraction of the peak follows from it
            assert r.gflops == pytest.approx(r.flops / r.seconds / 1e9)
            assert r.peak_fraction == pytest.approx(r.gflops * 1e9 / report.peak.flops)
            # memory-bound under the peak over the copy speed at the size of one call's arguments (cached or not)
            assert r.ridge == pytest.approx(report.peak.flops / working_set_bandwidth(r.bytes // r.calls))
            assert r.bound == ("memory" if r.intensity < r.ridge else "compute")
    convs = [r for r in report.rows if r.anchor == "conv2d"]
    assert len(convs) == 3 and all(r.calls == 1 for r in convs)
    # each convolution matched to the ONNX Runtime node of its own layer (c1 is the one with 3 input channels)
    assert all(r.ort_seconds > 0 and len(r.ort_nodes) == 1 for r in convs)
    first = next(r for r in convs if r.flops == 2 * 16 * 16 * 16 * 3 * 9)
    assert "/c2/" not in first.ort_nodes[0] and "/c3/" not in first.ort_nodes[0]
    assert {r.ort_nodes[0].split("/")[1] for r in convs if r is not first} == {"c2", "c3"}
    matmul = next(r for r in report.rows if r.anchor == "matmul")
    assert matmul.ort_nodes == ("/fc/Gemm",)
    # (a task's name is Relax's, numbered as its passes add functions: mean, or mean1 on a CPU)
    mean = next(r for name, r in rows.items() if name.rstrip("0123456789") == "mean")
    assert mean.anchor == "-" and mean.ort_seconds is None  # no anchor: no pairing
    assert report.ort_model_seconds > 0 and 0 < report.ort_explained <= 1.0
    assert "ReduceMean" in report.ort_other and not math.isnan(report.model_seconds)
    # a Relax module without its ONNX file: ONNX Runtime's columns are left out, and said so
    alone = profile_model(load_relax(tiny_onnx), None, rounds=1)
    assert alone.ort_model_seconds is None and all(r.ort_seconds is None for r in alone.rows)
    assert any("no ONNX file" in n for n in alone.notes) and "ORT ms" not in alone.table()


@pytest.mark.slow
@pytest.mark.serial
def test_eto_bench_profile_prints_the_table_json_and_plot(tiny_onnx, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from eto.cli import main

    db = tmp_path / "db"
    db.mkdir()  # empty: every task keeps TVM's default schedule
    # NHWC, not auto: auto's Winograd choice for the 3x3 convolutions follows the peak and bandwidth this
    # process measures, and Winograd adds a task (CI once had 6 rows)
    layout = ["--layout", "NHWC"]
    assert main(["bench", "--model", tiny_onnx, "--db", str(db), "--profile", "--rounds", "2", *layout]) == 0
    out = capsys.readouterr().out
    assert "fp32 peak" in out and "ORT ms" in out and "total: eto" in out and "total: ONNX Runtime" in out
    assert "fused_conv2d_add_relu" in out and "untuned" not in out  # the profile, not the methods' table
    plot = tmp_path / "profile.png"
    assert main(["bench", "--model", tiny_onnx, "--db", str(db), "--profile", "--rounds", "1", "--json",
                 "--plot", str(plot), *layout]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "tiny_cnn" and len(data["rows"]) == 6 and data["ort_model_seconds"] > 0
    assert plot.stat().st_size > 0


def test_a_peak_measured_below_the_fastest_task_is_raised_to_it_and_says_so():
    """On a busy VM the short FMA measurement can come out below what a tuned matmul reaches; a profile
    against it would show tasks above 100% of the peak. The peak is raised to the fastest task's."""
    from types import SimpleNamespace

    from eto.models.profile import _report

    op = SimpleNamespace(type="OTHER", fusion="f", name="OTHER[4]")  # no layer to match with ONNX Runtime
    mod = {"main": SimpleNamespace(params=[])}
    fast = SimpleNamespace(name="fast", op=op, flops=200, mod=mod)
    slow = SimpleNamespace(name="slow", op=op, flops=100, mod=mod)
    calls = [("fast", 1e-9), ("slow", 1e-9)]  # 200 and 100 GFLOP/s
    low = Peak(1.5e11, 2, "measured")
    report = _report("m", "llvm", [fast, slow], low, calls, [3e-9], None, [])
    assert report.peak.flops == 2e11 and "raised to the fastest task's" in report.peak.how
    assert {r.task: r.peak_fraction for r in report.rows} == {"fast": 1.0, "slow": 0.5}
    high = Peak(4e11, 2, "measured")
    report = _report("m", "llvm", [fast, slow], high, calls, [3e-9], None, [])
    assert report.peak == high and {r.task: r.peak_fraction for r in report.rows} == {"fast": 0.5, "slow": 0.25}


def test_each_tuned_task_is_set_beside_its_time_alone():
    """A task slower in the model than its program alone loses to the model around it, not to its program:
    the rows and the total say by how much; a task without a tuned program shows none (never a guess)."""
    from types import SimpleNamespace

    from eto.models.profile import _report

    op = SimpleNamespace(type="OTHER", fusion="f", name="OTHER[4]")
    mod = {"main": SimpleNamespace(params=[])}
    conv = SimpleNamespace(name="conv", op=op, flops=100, mod=mod)
    pool = SimpleNamespace(name="pool", op=op, flops=0, mod=mod)
    calls = [("conv", 3e-6), ("pool", 1e-6), ("conv", 3e-6)]  # two calls of 3 us against 2 us alone each
    report = _report("m", "llvm", [conv, pool], Peak(1e12, 2, "measured"), calls, [8e-6], None, [],
                     alone={"conv": 2e-6})
    rows = {r.task: r for r in report.rows}
    assert rows["conv"].alone_seconds == pytest.approx(4e-6) and rows["conv"].in_model == pytest.approx(1.5)
    assert rows["pool"].alone_seconds is None and rows["pool"].in_model is None
    assert report.in_model == pytest.approx(1.5)
    lines = report.table().splitlines()
    assert lines[1].split()[10:] == ["alone", "ms", "in", "model"]  # after "bound" ("% peak" is two words)
    assert lines[3].split()[-2:] == ["0.004", "1.50x"] and lines[4].split()[-2:] == ["-", "-"]
    assert "ran 1.50x their time alone" in report.table()
    data = json.loads(json.dumps(report.to_json()))
    assert data["in_model"] == pytest.approx(1.5) and data["rows"][0]["in_model"] == pytest.approx(1.5)
    assert "alone ms" not in _report("m", "llvm", [conv, pool], Peak(1e12, 2, "measured"), calls, [8e-6], None,
                                     []).table()  # no tuned program: no column
