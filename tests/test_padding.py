"""Linear layers of awkward row counts padded (eto.models.padding): same outputs, tiles on the rows."""

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm import relax  # noqa: E402

from eto.models.load import RelaxModel  # noqa: E402
from eto.models.padding import pad_channels, pad_rows, padded_channels, padded_rows  # noqa: E402


@pytest.mark.parametrize("rows, padded", [(197, 200), (577, 584), (394, 400), (151, 152),
                                          (128, 128), (196, 196), (49, 49), (50, 50), (31, 31)])
def test_only_rows_without_a_tile_from_4_to_16_are_padded_to_a_multiple_of_8(rows, padded):
    assert padded_rows(rows) == padded


def _two_linear_layers(rows: int, rng) -> tuple["tvm.IRModule", list[np.ndarray]]:
    """x -> relu(x @ w1 + b) and x @ w2 + x @ w1: one activation feeding two matmuls, weights bound."""
    w1, w2 = (rng.standard_normal((64, 64)).astype("float32") for _ in range(2))
    b = rng.standard_normal(64).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, rows, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y1 = bb.emit(relax.op.matmul(x, relax.const(w1)))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y1, relax.const(b)))))
            y2 = bb.emit(relax.op.matmul(x, relax.const(w2)))
            out = bb.emit_output(relax.op.add(h, y2))
        bb.emit_func_output(out)
    return bb.get(), [w1, w2, b]


def _matmul_shapes(mod) -> list[tuple[int, ...]]:
    found = []

    @relax.expr_functor.visitor
    class Matmuls(relax.PyExprVisitor):
        def visit_call_(self, call):
            if call.op == tvm.ir.Op.get("relax.matmul"):
                found.append(tuple(int(d) for d in call.args[0].ty.shape))

    Matmuls().visit_expr(mod["main"])
    return found


def test_a_197_row_linear_layer_runs_on_200_rows_and_returns_the_same_197():
    rng = np.random.default_rng(0)
    mod, (w1, w2, b) = _two_linear_layers(197, rng)
    padded = pad_rows(mod)
    # one pad of the shared activation, both matmuls on 200 rows, the output still 197 rows
    assert _matmul_shapes(padded) == [(1, 200, 64), (1, 200, 64)]
    assert padded.script().count("R.nn.pad(") == 1
    x = rng.standard_normal((1, 197, 64)).astype("float32")
    vm = relax.VirtualMachine(tvm.compile(padded, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    want = np.maximum(x @ w1 + b, 0) + x @ w2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_row_count_that_tiles_is_left_as_written():
    from tvm_ffi import structural_equal

    mod, _ = _two_linear_layers(128, np.random.default_rng(1))
    assert _matmul_shapes(pad_rows(mod)) == [(1, 128, 64), (1, 128, 64)]
    assert structural_equal(pad_rows(mod)["main"], mod["main"])


def test_the_padded_matmul_is_planned_as_a_catalogue_operator_not_searched_as_a_task():
    from eto.models.tasks import model_tasks

    mod, _ = _two_linear_layers(197, np.random.default_rng(2))
    tasks = model_tasks(RelaxModel(mod, "two_linear", "test"), tvm.target.Target("llvm"))
    matmuls = [t for t in tasks.tasks if "matmul" in t.name]
    assert matmuls and all(t in tasks.catalogue for t in matmuls)
    assert {(dict(t.op.params)["M"], dict(t.op.params)["K"]) for t in matmuls} == {(200, 64)}


@pytest.mark.parametrize("channels, padded", [(58, 64), (116, 128), (40, 48), (232, 240), (464, 464), (24, 24), (3, 3), (20, 20)])
def test_channels_are_padded_to_a_multiple_of_the_vector_where_it_costs_at_most_a_quarter_more(channels, padded):
    assert padded_channels(channels, 16) == padded


def test_channels_last_convolutions_with_58_channels_run_on_64_and_return_the_same():
    """A 1x1 convolution to 58 channels, then a 3x3 depthwise one: both on 64 channels, outputs as before."""
    rng = np.random.default_rng(3)
    pointwise = rng.standard_normal((58, 1, 1, 24)).astype("float32")
    depthwise = rng.standard_normal((58, 3, 3, 1)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 10, 10, 24), "float32"))
    layouts = dict(data_layout="NHWC", kernel_layout="OHWI")
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(x, relax.const(pointwise), **layouts))))
            out = bb.emit_output(relax.op.nn.conv2d(y, relax.const(depthwise), padding=1, groups=58, **layouts))
        bb.emit_func_output(out)
    mod = bb.get()
    padded = pad_channels(mod, 16)
    assert padded.script().count("R.nn.conv2d(") == 2 and "groups=64" in padded.script()
    data = rng.standard_normal((1, 10, 10, 24)).astype("float32")
    results = []
    for m in (mod, padded):
        vm = relax.VirtualMachine(tvm.compile(m, target="llvm"), tvm.cpu())
        results.append(vm["main"](tvm.runtime.tensor(data)).numpy())
    assert results[1].shape == (1, 10, 10, 58)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-4)
