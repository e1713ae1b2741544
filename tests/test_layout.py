"""Models tuned and built with the channels last (``--layout NHWC``, eto/models/layout.py).

Scale ci: the tiny CNN of tests/test_model_path.py (three convolutions with bias, ReLU and residual
adds, a mean, a classifier), converted to NHWC, tuned at 4 trials per task, built and compared with
PyTorch; its convolutions become the catalogue's C2DNHWC, planned, reused and bridged as NCHW ones.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from eto.cli import main
from eto.errors import InputError
from eto.operators import Operator

from tests.test_model_path import failed_rows


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_layout_applies_to_models_only_and_names_its_choices(capsys):
    code, _, err = run(capsys, "tune", "--opset", "quickstart", "--layout", "NHWC", "--trials", "2")
    assert code == 2 and "--layout applies to --model" in err
    from eto.models.layout import with_layout
    from eto.models.load import RelaxModel

    with pytest.raises(InputError, match="unknown layout 'NCHWc'.*NCHW, NHWC"):
        with_layout(RelaxModel(None, "m", "here"), "NCHWc")


def test_a_channels_last_convolution_is_its_loop_nest_in_nhwc_order():
    op = Operator.from_loop_nest("C2DNHWC", [1, 8, 8, 32, 3, 3, 16])
    assert op.input_shapes == [(1, 10, 10, 16), (32, 3, 3, 16)] and op.output_shape == (1, 8, 8, 32)
    assert op.flops == Operator.from_loop_nest("C2D", [1, 32, 8, 8, 16, 3, 3]).flops
    assert op.sketch_key() != Operator.from_loop_nest("C2D", [1, 32, 8, 8, 16, 3, 3]).sketch_key()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    pytest.importorskip("torch")
    from eto.models.examples import export

    d = tmp_path_factory.mktemp("models")
    paths = {name: export(name, str(d / f"{name}.pt2")) for name in ("tiny_cnn", "tiny_mobilenet")}
    if _has_onnx():
        paths["tiny_mobilenet.onnx"] = export("tiny_mobilenet", str(d / "tiny_mobilenet.onnx"), onnx=True)
    return paths


def _has_onnx() -> bool:
    try:
        import onnx  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def model(models):
    return models["tiny_cnn"]


@pytest.mark.slow
@pytest.mark.parametrize("file", ["tiny_mobilenet", "tiny_mobilenet.onnx"])
def test_a_mobilenet_runs_channels_last_from_input_to_classifier(models, file):
    """Depthwise convolutions and ReLU6 follow the layout: no transpose is left between layers, only
    at the model's input and before its classifier; built, it matches PyTorch. ReLU6 arrives as
    ``clip`` from torch.export and as ``call_tir`` of TE maximum/minimum from TVM's ONNX importer."""
    import torch

    import eto
    from eto.models import load_relax
    from eto.models.examples import example
    from eto.models.layout import with_layout
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    if file not in models:
        pytest.skip("onnx is not installed")
    path = models[file]
    tasks = model_tasks(with_layout(load_relax(path), "NHWC"), parse_target("cpu")).tasks
    kinds = sorted(t.op.type for t in tasks if t.op is not None)
    assert kinds.count("DEPNHWC") == 2 and kinds.count("C2DNHWC") == 6 and "C2D" not in kinds and "DEP" not in kinds
    assert sum("transpose" in t.name for t in tasks) == 2  # the input, and the flatten before the classifier
    assert any(t.op.type == "DEPNHWC" and t.op.fusion.endswith("maximum+minimum") for t in tasks if t.op)
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, 16, 16)).astype("float32")
    module, _ = example("tiny_mobilenet")
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(eto.build(path, database=None, layout="NHWC")(x)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_channels_last_model_tunes_builds_and_matches_pytorch(model, capsys, tmp_path):
    import torch

    import eto
    from eto.models.examples import example

    db = tmp_path / "db"
    code, out, err = run(capsys, "tune", "--model", model, "--layout", "NHWC", "--db", db, "--trials", "4",
                         "--trials-per-iter", "4", "--search", "light", "--json", "-q")
    assert code == 0, err[-2000:] + failed_rows(out)
    rows = json.loads(out)["operators"]
    convs = [r for r in rows if "conv2d" in r["key"]]
    assert len(convs) == 3 and all(r["key"].startswith("C2DNHWC(") and r["status"] == "tuned" for r in convs)
    # planned as NCHW convolutions are: at the default budget, one root and reuse for the others
    code, out, _ = run(capsys, "plan", "--model", model, "--layout", "NHWC", "--json")
    plan = json.loads(out)
    assert code == 0 and sum(a != "root" and "C2DNHWC" in b for a, b in plan["edges"]) == 2
    built = eto.build(model, database=db, layout="NHWC")
    assert not built.missing
    x = np.random.default_rng(3).uniform(-1, 1, (1, 3, 16, 16)).astype("float32")
    module, _ = example("tiny_cnn")
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(built(x)[0], want, rtol=1e-4, atol=1e-4)
    # pre-packed weights (eto/models/prepack.py): every convolution's program packs its weight in the
    # layout its loops read, once, when the model is built; the VM calls no packing at run time
    assert "TransformLayout" in (db / "database_tuning_record.json").read_text()
    called = set(re.findall(r"call\s+(\S+)", built.built.executable.as_text()))
    fused = {gv.name_hint for gv in built.built.tasks.fused.get_global_vars() if "conv2d" in gv.name_hint}
    assert len(fused) == 3 and {c for c in called if "conv2d" in c} == {f"{n}_prepacked" for n in fused}, called
    # the database records the layout: a build without the flag uses it, one in another layout is refused
    code, _, err = run(capsys, "build", "--model", model, "--db", db, "-o", tmp_path / "same.so")
    assert code == 0 and "has no program" not in err, err[-2000:]
    code, _, err = run(capsys, "build", "--model", model, "--db", db, "--layout", "NCHW", "-o", tmp_path / "nchw.so")
    assert code == 2 and "was tuned with --layout NHWC, not NCHW" in err and not (tmp_path / "nchw.so").exists()


@pytest.mark.slow
def test_the_default_layout_tunes_builds_and_matches_pytorch_without_a_flag(model, capsys, tmp_path):
    """No ``--layout`` anywhere: ``auto`` tunes the convolutions channels last (Winograd where predicted
    faster), the database records it with its decisions, and the build compiles the same functions."""
    import torch

    import eto
    from eto.models.examples import example
    from eto.store.models import read_layouts

    db = tmp_path / "db"
    code, out, err = run(capsys, "tune", "--model", model, "--db", db, "--trials", "4", "--trials-per-iter", "4",
                         "--search", "light", "--json")
    assert code == 0 and "layout auto" in err, err[-2000:] + failed_rows(out)
    (entry,) = read_layouts(db).entries
    assert (entry.model, entry.layout, entry.resolved) == ("tiny_cnn", "auto", "auto")  # Winograd or not
    assert len(entry.winograd) + len(entry.direct) == 1  # the two 16-channel 3x3 convolutions share a shape
    keys = {r["key"].split("(")[0] for r in json.loads(out)["operators"]}
    assert "C2DNHWC" in keys and "C2D" not in keys and ("BMM" in keys) == bool(entry.winograd)
    built = eto.build(model, database=db)
    assert not built.missing and built.built.tasks.layout.winograd == entry.winograd
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, 16, 16)).astype("float32")
    module, _ = example("tiny_cnn")
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(built(x)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_channels_last_task_gets_bridges_in_its_layout(model):
    import torch

    from eto.models import load_relax
    from eto.models.layout import with_layout
    from eto.models.bridges import bridge_task
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    cpu = parse_target("cpu")
    tasks = model_tasks(with_layout(load_relax(model), "NHWC"), cpu)
    member = next(t.op for t in tasks.catalogue if t.op.fusion == "pad+conv2d+add+relu")
    assert member.type == "C2DNHWC"
    bridge = bridge_task(Operator.from_loop_nest("C2DNHWC", [1, 10, 10, 24, 3, 3, 16]), member, cpu)
    assert bridge is not None and bridge.fusion == member.fusion
    assert [tuple(int(d) for d in p.shape) for p in bridge.prim_func().params][:2] == [(1, 12, 12, 16), (24, 3, 3, 16)]
    x, w, b = bridge.random_inputs(seed=2)
    conv = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(0, 3, 1, 2))
    want = torch.relu(conv.permute(0, 2, 3, 1) + torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(bridge.reference(x, w, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_cnn_is_planned_channels_last_by_default_on_a_cpu_and_as_written_when_asked(model, capsys):
    """``auto``, the default, converts the convolutions (C2DNHWC); ``--layout NCHW`` keeps them as written (C2D)."""
    code, out, err = run(capsys, "plan", "--model", model, "--trials", "4", "--json")
    assert code == 0 and "layout auto" in err, err[-2000:]
    assert "C2DNHWC(" in out and "C2D(" not in out
    code, out, err = run(capsys, "plan", "--model", model, "--trials", "4", "--layout", "NCHW", "--json")
    assert code == 0 and "layout NCHW" in err and "C2D(" in out and "C2DNHWC(" not in out, err[-2000:]
