"""Constant folding in numpy (eto/models/constants.py): the same module as Relax's FoldConstant, no TIR built."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from eto.models.constants import evaluate


def test_arithmetic_keeps_the_dtype_and_leaves_integers_and_mixed_dtypes_alone():
    x, y = np.array([1.0, 4.0], np.float32), np.array([2.0], np.float32)
    out = evaluate("relax.divide", [x, y], None)
    assert out.dtype == np.float32 and out.tolist() == [0.5, 2.0]
    assert evaluate("relax.sqrt", [y], None).dtype == np.float32
    assert evaluate("relax.divide", [np.array([3], np.int32), np.array([2], np.int32)], None) is None
    assert evaluate("relax.add", [x, np.array([1.0])], None) is None  # float32 + float64: Relax's to decide


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("suffix", [".pt2", ".onnx"])
def test_a_model_folds_to_what_fold_constant_gives_without_building_tir(layout, suffix, monkeypatch, tmp_path):
    pytest.importorskip("torch")
    if suffix == ".onnx":
        pytest.importorskip("onnx")
    import tvm
    import tvm.tirx.build  # noqa: F401
    from tvm import relax

    from eto.models import constants
    from eto.models.examples import export
    from eto.models.load import load_relax
    from eto.models.nhwc import inference_form

    model = load_relax(export("tiny_mobilenet", str(tmp_path / f"m{suffix}"), onnx=suffix == ".onnx"))
    mod = model.mod
    if mod["main"].attrs is not None and "params" in mod["main"].attrs:  # weights as parameters: bind them
        mod, params = relax.frontend.detach_params(mod)
        num_inputs = int(mod["main"].attrs["num_input"])
        mod = relax.transform.BindParams("main", dict(zip(mod["main"].params[num_inputs:], params["main"])))(mod)
    mod = relax.transform.FoldBatchnormToConv2D()(mod)
    if layout == "NHWC":  # as eto's layout pass converts it (ConvertLayout crashes on a training-form graph)
        mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(inference_form(mod))
    builds = []
    build_module = sys.modules["tvm.tirx.build"]  # what tvm.tirx.build (registered as "tirx.build") calls
    real = build_module.tir_to_runtime
    monkeypatch.setattr(build_module, "tir_to_runtime", lambda *a, **k: builds.append(a) or real(*a, **k))
    expected = relax.transform.FoldConstant()(mod)
    assert builds  # Relax's pass builds and runs each constant expression
    builds.clear()
    folded = constants.fold_constants(mod)
    assert builds == []  # every constant expression of a batch norm fold and a weight transpose, in numpy
    tvm.ir.assert_structural_equal(folded, expected)  # the same bindings and the same constant bits
