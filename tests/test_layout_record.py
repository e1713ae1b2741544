"""The layout a database records for each model (eto/store/models.py) and how runs choose one
(eto/models/layout.py): ``auto`` by default, the recorded one for builds, a contradiction refused (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eto.cli import main
from eto.store.models import LayoutMismatch, ModelLayout, read_layouts, record_layout, recorded_layout

CPU = json.dumps({"kind": "llvm", "mcpu": "x"})
GPU = json.dumps({"kind": "cuda", "arch": "sm_80"})


def test_a_database_records_each_models_layout_and_merges_its_sizes(tmp_path):
    record_layout(tmp_path, ModelLayout("m", CPU, "auto", "auto", ("1x8x8x16->16/p1,1,1,1",), ("1x4x4x16->16/p1,1,1,1",)))
    record_layout(tmp_path, ModelLayout("m", CPU, "auto", "auto", ("1x8x8x16->16/p1,1,1,1",), ("1x4x4x16->16/p1,1,1,1",)))
    assert len(read_layouts(tmp_path).entries) == 1  # the same line twice is one line
    # another size of the model (eto retune): its convolutions decided, the earlier decisions kept
    record_layout(tmp_path, ModelLayout("m", CPU, "auto", "auto", ("2x8x8x16->16/p1,1,1,1",), ()))
    latest = read_layouts(tmp_path).of("m", "llvm")[-1]
    assert latest.decisions == {"2x8x8x16->16/p1,1,1,1": True, "1x8x8x16->16/p1,1,1,1": True,
                                "1x4x4x16->16/p1,1,1,1": False}
    record_layout(tmp_path, ModelLayout("m", GPU, "auto", "NCHW"))
    assert [e.resolved for e in read_layouts(tmp_path).of("m", "cuda")] == ["NCHW"]


def test_a_build_gets_the_recorded_layout_and_a_contradiction_is_a_named_error(tmp_path):
    record_layout(tmp_path, ModelLayout("m", CPU, "NHWC", "NHWC"))
    layouts = read_layouts(tmp_path)
    assert recorded_layout(layouts, "m", "llvm", None, db_label="db").layout == "NHWC"
    assert recorded_layout(layouts, "m", "llvm", "NHWC", db_label="db").layout == "NHWC"
    assert recorded_layout(layouts, "other", "llvm", "NCHW", db_label="db") is None  # nothing recorded of it
    with pytest.raises(LayoutMismatch, match=r"db: m was tuned with --layout NHWC, not NCHW: .* build with --layout "
                                             r"NHWC or without --layout"):
        recorded_layout(layouts, "m", "llvm", "NCHW", db_label="db")


def test_an_unreadable_layout_line_is_skipped_and_counted(tmp_path):
    record_layout(tmp_path, ModelLayout("m", CPU, "NHWC", "NHWC"))
    with open(tmp_path / "eto_models.json", "a") as f:
        f.write('{"model": "m", "layout": "NCHW"}\nnot json\n')
    layouts = read_layouts(tmp_path)
    assert [e.layout for e in layouts.entries] == ["NHWC"]
    assert len(layouts.skipped) == 2 and layouts.skipped[0].startswith("line 2: KeyError")


def test_auto_is_channels_last_on_a_cpu_and_as_written_on_a_gpu():
    from tvm.target import Target

    from eto.models.layout import resolve

    assert resolve("auto", Target({"kind": "llvm"})) == "auto"
    assert resolve("auto", Target("nvidia/nvidia-a100", host={"kind": "llvm"})) == "NCHW"
    assert resolve("NHWC", Target("nvidia/nvidia-a100", host={"kind": "llvm"})) == "NHWC"


def test_winograd_is_predicted_where_its_saved_multiplications_outweigh_its_traffic():
    from eto.models.winograd import predicted_faster

    def fast(key: str, peak: float = 1e11, bandwidth: float = 2e10) -> bool:
        return predicted_faster(key, peak_flops=peak, bandwidth=lambda _n: bandwidth)

    assert fast("1x28x28x128->128/p1,1,1,1")  # many channels: the GEMM's 4x fewer multiplications win
    assert not fast("1x8x8x16->16/p1,1,1,1")  # few channels, few tiles: the transforms' traffic dominates
    # the same convolution on cores whose memory is slow against their arithmetic: direct
    assert fast("1x14x14x64->64/p1,1,1,1") and not fast("1x14x14x64->64/p1,1,1,1", bandwidth=1e9)


@pytest.fixture(scope="module")
def onnx_cnn(tmp_path_factory):
    """A two-convolution CNN as an ONNX file (onnx.helper: no PyTorch)."""
    pytest.importorskip("onnx")
    from tests.test_layout_patterns import grouped_convolution

    path = tmp_path_factory.mktemp("model") / "m.onnx"
    path.write_bytes(grouped_convolution().SerializeToString())
    return path


def test_eto_build_in_another_layout_than_the_database_tuned_exits_2_naming_both(onnx_cnn, tmp_path, capsys):
    db = tmp_path / "db"
    db.mkdir()
    from eto.target import parse_target, target_key

    record_layout(db, ModelLayout("m", target_key(parse_target("cpu")), "NHWC", "NHWC"))
    code = main(["build", "--model", str(onnx_cnn), "--db", str(db), "--layout", "NHWC-winograd", "-o",
                 str(tmp_path / "m.so")])
    err = capsys.readouterr().err
    assert code == 2 and "m was tuned with --layout NHWC, not NHWC-winograd" in err, err[-1500:]
    assert not (tmp_path / "m.so").exists()


@pytest.mark.slow
def test_eto_build_without_a_flag_compiles_the_layout_the_database_recorded(onnx_cnn, tmp_path, capsys):
    """No program needed: the layout alone decides the functions, and so the tasks the build names."""
    import eto

    db = tmp_path / "db"
    db.mkdir()
    from eto.target import parse_target, target_key

    record_layout(db, ModelLayout("m", target_key(parse_target("cpu")), "NCHW", "NCHW"))
    built = eto.build(onnx_cnn, database=db)
    assert built.built.tasks.layout.resolved == "NCHW"
    assert {t.op.type for t in built.built.missing} == {"C2D", "GRP"}
    x = np.random.default_rng(0).uniform(-1, 1, (1, 16, 8, 8)).astype("float32")
    fresh = eto.build(onnx_cnn, database=None)  # no database: auto, channels last
    assert fresh.built.tasks.layout.resolved in ("auto", "NHWC")
    np.testing.assert_allclose(built(x)[0], fresh(x)[0], rtol=1e-4, atol=1e-4)
