"""Winograd convolutions in a model (``--layout NHWC-winograd``, eto/models/winograd.py).

Scale ci: Relax modules of a few 3x3 convolutions rewritten and compiled, against numpy's direct
convolution; the tiny CNN of tests/test_model_path.py tuned at 4 trials per task, built and compared
with PyTorch, its Winograd GEMMs planned as the catalogue's BMM.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from eto.cli import main


def _conv_nhwc(x: np.ndarray, w_ohwi: np.ndarray, pads: tuple[int, int, int, int]) -> np.ndarray:
    """Direct 3x3 stride-1 convolution in float64: NHWC data, OHWI weight, (top, left, bottom, right) pads."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (pads[0], pads[2]), (pads[1], pads[3]), (0, 0)])
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    out = np.zeros((x.shape[0], oh, ow, w_ohwi.shape[0]))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nhwc,oc->nhwo", xp[:, i:i + oh, j:j + ow], w_ohwi[:, i, j].astype(np.float64))
    return out


def _module(shape, layers):
    """A Relax function of convolutions, each ``(weight, pads, bias | None, relu, residual[, stride])``."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for w, pads, bias, relu, residual, *stride in layers:
                z = bb.emit(relax.op.nn.conv2d(y, relax.const(w), strides=stride or 1, padding=pads, data_layout="NHWC",
                                               kernel_layout="OHWI"))
                if bias is not None:
                    z = bb.emit(relax.op.add(z, relax.const(bias)))
                if residual:
                    z = bb.emit(relax.op.add(z, y))
                y = bb.emit(relax.op.nn.relu(z)) if relu else z
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _calls(mod) -> list[str]:
    import tvm
    from tvm import relax

    names = []
    for b in mod["main"].body.blocks[0].bindings:
        v = b.value
        if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op):
            names.append(v.args[0].name_hint if v.op.name == "relax.call_tir" else v.op.name.removeprefix("relax."))
    return names


def test_convolutions_by_winograd_match_direct_convolution():
    """Bias, residual add and ReLU are absorbed into the output transform; padding
    may be asymmetric, the batch more than 1 and the output not a multiple of the tile; a convolution
    with too few channels, or with stride 2, stays direct."""
    from eto.models.winograd import winograd_convolutions

    rng = np.random.default_rng(0)
    c = 16
    w = [rng.normal(0, 0.2, (c, 3, 3, c)).astype("float32") for _ in range(3)]
    bias = rng.normal(size=(1, 1, 1, c)).astype("float32")
    layers = [(w[0], (1, 1, 1, 1), bias, True, False),  # conv + bias + relu: one output transform
              (w[1], (1, 1, 1, 1), bias, True, True),  # + a residual: absorbed too
              (w[2], (0, 1, 2, 1), None, False, False)]  # asymmetric pads, no epilogue
    x = rng.normal(size=(2, 10, 9, c)).astype("float32")  # 18 tiles of 4x4, the last row and column cut
    mod = _module(x.shape, layers)
    rewritten = winograd_convolutions(mod)
    assert all(n.startswith("winograd4_") for n in _calls(rewritten) if "winograd" in n)
    calls = _calls(rewritten)
    assert "nn.conv2d" not in calls and calls.count("matmul") == 3
    outputs = [n for n in calls if "_output" in n]
    assert [o.split("_output")[1] for o in outputs] == ["_relu", "_add_relu", ""], calls
    assert "nn.relu" not in calls and "add" not in calls

    want = x.astype(np.float64)
    for wi, pads, b, relu, residual in layers:
        z = _conv_nhwc(want, wi, pads) + (b if b is not None else 0)
        z = z + want if residual else z
        want = np.maximum(z, 0) if relu else z
    _check(mod, rewritten, x, want)

    # 6x6: 4 tiles of 4x4 are too few, so F(2, 3); a strided and a 3-channel convolution stay direct
    x = rng.normal(size=(1, 6, 6, 3)).astype("float32")
    layers = [(rng.normal(size=(c, 3, 3, 3)).astype("float32"), (1, 1, 1, 1), None, False, False),
              (w[0], (1, 1, 1, 1), bias, True, False), (w[1], (1, 1, 1, 1), None, False, False, 2)]
    mod = _module(x.shape, layers)
    rewritten = winograd_convolutions(mod)
    assert [n.split("_")[0] if "winograd" in n else n for n in _calls(rewritten)] == \
        ["nn.conv2d", "winograd2", "matmul", "winograd2", "nn.conv2d"]
    want = _conv_nhwc(x, layers[0][0], (1, 1, 1, 1))
    want = _conv_nhwc(np.maximum(_conv_nhwc(want, w[0], (1, 1, 1, 1)) + bias, 0), w[1], (1, 1, 1, 1))[:, ::2, ::2]
    _check(mod, rewritten, x, want)


def _check(mod, rewritten, x, want) -> None:
    """Both modules, compiled for the CPU, compute ``want`` from ``x``."""
    import tvm
    from tvm import relax

    target = tvm.target.Target({"kind": "llvm"})
    for m in (mod, rewritten):
        vm = relax.VirtualMachine(tvm.compile(m, target), tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_the_tile_size_keeps_enough_tiles_for_the_gemm():
    from eto.models.winograd import MIN_TILES, tile_size

    assert tile_size(1, 56, 56) == 4 and tile_size(1, 14, 14) == 4  # 16 tiles of 4x4
    assert tile_size(1, 7, 7) == 2  # 4 tiles of 4x4 are too few; 16 of 2x2
    assert tile_size(4, 7, 7) == 4  # a batch of 4 gives 16 tiles again
    assert tile_size(1, 3, 3) == 2 and MIN_TILES > 4  # too few tiles at any size: the smallest m


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    pytest.importorskip("torch")
    from eto.models.examples import export

    return export("tiny_cnn", str(tmp_path_factory.mktemp("models") / "tiny_cnn.pt2"))


@pytest.mark.slow
def test_a_winograd_model_tunes_builds_and_matches_pytorch(model, capsys, tmp_path):
    """The tiny CNN's two 16-channel 3x3 convolutions become one BMM task (same shape) between two
    scheduled transforms nothing tunes; its 3-channel stem stays a direct C2DNHWC."""
    import torch

    import eto
    from eto.models.examples import example
    from eto.models.tasks import SCHEDULED

    db = tmp_path / "db"
    code = main([str(a) for a in ("tune", "--model", model, "--layout", "NHWC-winograd", "--db", db, "--trials", "4",
                                  "--trials-per-iter", "4", "--search", "light", "--json")])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert "2 convolutions by Winograd: their transforms are scheduled by eto (2 functions)" in err
    keys = [r["key"] for r in json.loads(out)["operators"]]
    assert sum(k.startswith("BMM(") for k in keys) == 1 and sum(k.startswith("C2DNHWC(") for k in keys) == 1, keys
    built = eto.build(model, database=db, layout="NHWC-winograd")
    assert not built.missing
    tasks = built.built.tasks
    scheduled = [t for t in tasks.tasks if t.reason == SCHEDULED]
    assert len(scheduled) == 2 and not tasks.left_alone
    x = np.random.default_rng(3).uniform(-1, 1, (1, 3, 16, 16)).astype("float32")
    module, _ = example("tiny_cnn")
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(built(x)[0], want, rtol=1e-4, atol=1e-4)


def test_a_profile_folds_each_winograd_convolutions_transforms_into_its_gemm_call():
    """As ONNX Runtime runs one node per convolution, a profile (eto/models/profile.py) sees one call:
    the GEMM's, with both transforms' seconds; VM builtins between them stay calls of their own."""
    from types import SimpleNamespace

    import tvm

    from eto.models.winograd import fold_transform_calls, input_transform, output_transform

    def task(func):
        return SimpleNamespace(mod=tvm.IRModule({"main": func}))

    tasks = {"in": task(input_transform((1, 14, 12, 32), (1, 1, 1, 1), 4)),
             "out": task(output_transform((1, 14, 12, 48), 4, relu=True)), "gemm": SimpleNamespace(), "conv": None}
    calls = [("conv", 1.0), ("in", 2.0), ("vm.builtin.alloc", 0.5), ("gemm", 3.0), ("out", 4.0), ("conv", 1.0)]
    folded, convs = fold_transform_calls(calls, tasks)
    assert folded == [("conv", 1.0), ("vm.builtin.alloc", 0.5), ("gemm", 9.0), ("conv", 1.0)]
    assert convs == {2: ((1, 32, 14, 12), (48, 32, 3, 3), (1, 48, 14, 12))}
    assert fold_transform_calls(calls[:2], tasks) == (calls[:2], {})  # a chain cut short: left as it is
