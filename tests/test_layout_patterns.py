"""The patterns real networks are made of, channels last (eto/models/nhwc.py): every convolution the
catalogue holds converted, transposes only where the layout must change, never an internal error.

Each pattern is a tiny ONNX graph written with ``onnx.helper`` in the form exporters and model zoos
write it (a ``Dropout`` node left in an inference graph, a channel shuffle as two reshapes around a
transpose, ``Split`` into branches, ``Resize``, a batch norm after a concat, attention over patches).
The fast tests convert them; the slow ones build them and compare with ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

C = 16  # channels: enough for Winograd (eto.models.winograd.MIN_CHANNELS)


def _w(name: str, *shape: int, seed: int = 0) -> "onnx.TensorProto":
    return numpy_helper.from_array(np.random.default_rng(seed + len(name)).uniform(-0.5, 0.5, shape).astype("float32"),
                                   name)


def _ints(name: str, values) -> "onnx.TensorProto":
    return numpy_helper.from_array(np.array(values, "int64"), name)


def _conv(x: str, out: str, cin: int, cout: int, k: int = 3, *, group: int = 1, relu: bool = True) -> tuple[list, list]:
    pad = k // 2
    nodes = [helper.make_node("Conv", [x, f"{out}_w", f"{out}_b"], [f"{out}_c" if relu else out],
                              kernel_shape=[k, k], pads=[pad] * 4, group=group)]
    if relu:
        nodes.append(helper.make_node("Relu", [f"{out}_c"], [out]))
    return nodes, [_w(f"{out}_w", cout, cin // group, k, k), _w(f"{out}_b", cout)]


def _model(nodes: list, inits: list, out_shape: list[int], *, hw: int = 8, opset: int = 13) -> "onnx.ModelProto":
    graph = helper.make_graph(nodes, "pattern", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _parts(*parts: tuple[list, list]) -> tuple[list, list]:
    return [n for p in parts for n in p[0]], [i for p in parts for i in p[1]]


def fire_with_dropout(opset: int = 13):
    """SqueezeNet's Fire module as a model zoo stores it: a squeeze, two expand branches concatenated, a
    ``Dropout`` (two outputs: a tuple ``ConvertLayout`` once failed on), then a classifier."""
    nodes, inits = _parts(_conv("x", "s", C, C, 1), _conv("s", "e1", C, C, 1), _conv("s", "e3", C, C, 3))
    nodes += [helper.make_node("Concat", ["e1", "e3"], ["cat"], axis=1),
              helper.make_node("Dropout", ["cat"], ["d", "mask"]),
              helper.make_node("Conv", ["d", "head_w"], ["head"], kernel_shape=[1, 1]),
              helper.make_node("GlobalAveragePool", ["head"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    return _model(nodes, inits + [_w("head_w", 10, 2 * C, 1, 1)], [1, 10], opset=opset)


def channel_shuffle():
    """ShuffleNet's unit: ``Split`` into two halves, one through convolutions (depthwise among them),
    concatenated back, then the channel shuffle: a 4-D to 5-D reshape, a transpose of the group axes, back."""
    half = C // 2
    nodes, inits = _parts(_conv("a1", "b1", half, half, 1), _conv("b1", "b2", half, half, 3, group=half, relu=False),
                          _conv("b2", "b3", half, half, 1))
    nodes = [helper.make_node("Split", ["x", "halves"], ["a0", "a1"], axis=1), *nodes,
             helper.make_node("Concat", ["a0", "b3"], ["cat"], axis=1),
             helper.make_node("Reshape", ["cat", "s5"], ["r5"]),
             helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t5", "s4"], ["shuffled"])]
    n2, i2 = _conv("shuffled", "y", C, C, 3)
    return _model(nodes + n2, inits + i2 + [_ints("halves", [half, half]), _ints("s5", [1, 2, half, 8, 8]),
                                            _ints("s4", [1, C, 8, 8])], [1, C, 8, 8])


def dense_block():
    """DenseNet: after a stem convolution, each layer's output concatenated to its input, a batch norm and
    ReLU after each concat (no convolution before it to fold into), an average pool between blocks."""
    nodes, inits = _parts(_conv("x", "stem", C, C, 3), _conv("stem", "l1", C, C, 3))
    nodes += [helper.make_node("Concat", ["stem", "l1"], ["cat"], axis=1),
              helper.make_node("BatchNormalization", ["cat", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
              helper.make_node("Relu", ["bn"], ["r"])]
    n2, i2 = _conv("r", "l2", 2 * C, C, 1)
    rng = np.random.default_rng(5)
    stats = [numpy_helper.from_array(rng.uniform(0.5, 1.5, 2 * C).astype("float32"), n) for n in ("bn_s", "bn_v")]
    stats += [numpy_helper.from_array(rng.uniform(-0.5, 0.5, 2 * C).astype("float32"), n) for n in ("bn_b", "bn_m")]
    nodes += n2 + [helper.make_node("AveragePool", ["l2"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return _model(nodes, inits + i2 + stats, [1, C, 4, 4])


def upsample_and_pad():
    """A segmentation head: max pool, a convolution, bilinear ``Resize`` back up, a ``Pad``, a multiply
    by a per-channel constant (broadcast [1, C, 1, 1]), added to the skip connection."""
    nodes, inits = _parts(_conv("p", "c", C, C, 3))
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]), *nodes,
             helper.make_node("Resize", ["c", "", "scales"], ["up"], mode="linear"),
             helper.make_node("Mul", ["up", "gain"], ["g"]),
             helper.make_node("Add", ["g", "x"], ["sum"]),
             helper.make_node("Pad", ["sum", "pads"], ["padded"], mode="constant")]
    n2, i2 = _conv("padded", "y", C, C, 3)
    inits += i2 + [numpy_helper.from_array(np.array([1, 1, 2, 2], "float32"), "scales"),
                   numpy_helper.from_array(np.linspace(0.5, 1.5, C, dtype="float32").reshape(1, C, 1, 1), "gain"),
                   _ints("pads", [0, 0, 1, 1, 0, 0, 1, 1])]
    return _model(nodes + n2, inits, [1, C, 10, 10])


def patch_attention():
    """ViT's start: a strided patch convolution, the patches flattened into tokens, one attention head."""
    nodes = [helper.make_node("Conv", ["x", "pw", "pb"], ["patches"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Reshape", ["patches", "tok"], ["t0"]),
             helper.make_node("Transpose", ["t0"], ["t"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "wq"], ["q"]), helper.make_node("MatMul", ["t", "wk"], ["k"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Softmax", ["s"], ["a"], axis=-1),
             helper.make_node("MatMul", ["a", "t"], ["y"])]
    inits = [_w("pw", C, C, 2, 2), _w("pb", C), _ints("tok", [1, C, 16]), _w("wq", C, C), _w("wk", C, C)]
    return _model(nodes, inits, [1, 16, C])


def grouped_convolution():
    """ResNeXt's grouped 3x3 (4 groups: neither ungrouped nor depthwise, so it stays NCHW between transposes)."""
    nodes, inits = _parts(_conv("x", "a", C, C, 1), _conv("a", "g", C, C, 3, group=4), _conv("g", "y", C, C, 1))
    return _model(nodes, inits, [1, C, 8, 8])


PATTERNS = {"fire_with_dropout": fire_with_dropout, "channel_shuffle": channel_shuffle, "dense_block": dense_block,
            "upsample_and_pad": upsample_and_pad, "patch_attention": patch_attention,
            "grouped_convolution": grouped_convolution}
#: convolutions each pattern has, and how many of them the catalogue holds channels last
CONVOLUTIONS = {"fire_with_dropout": (4, 4), "channel_shuffle": (4, 4), "dense_block": (3, 3),
                "upsample_and_pad": (2, 2), "patch_attention": (1, 1), "grouped_convolution": (3, 2)}


def _bound(proto):
    from tvm import relax

    from eto.models.load import onnx_to_relax
    from eto.models.tasks import fold_batch_norms

    mod = onnx_to_relax(proto.SerializeToString(), name="pattern").mod
    func = mod["main"]
    if func.attrs is not None and "params" in func.attrs:
        mod, params = relax.frontend.detach_params(mod)
        n = int(func.attrs["num_input"])
        mod = relax.transform.BindParams("main", dict(zip(mod["main"].params[n:], params["main"])))(mod)
    return fold_batch_norms(mod)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_goes_channels_last_whole(name):
    from eto.models.nhwc import channels_last

    converted, done = channels_last(_bound(PATTERNS[name]()))
    assert (done.convolutions, done.converted) == CONVOLUTIONS[name] and not done.left_as_written, done
    # added: one into NHWC at the input, one back where the output leaves (or the tokens are formed); a
    # pair around each region that must be NCHW: the shuffle's 5-D reshape, the grouped convolution, and
    # the Pad TVM's ONNX importer writes as a TE function (opaque to ConvertLayout); the model input,
    # used twice in upsample_and_pad, is transposed once for each use
    assert done.transposes <= {"channel_shuffle": 4, "grouped_convolution": 4, "upsample_and_pad": 5}.get(name, 2), \
        done.describe()
    assert "relax.nn.dropout" not in str(converted) and "relax.nn.batch_norm" not in str(converted)


def test_a_dropout_in_an_inference_graph_no_longer_breaks_relaxs_conversion():
    """The model zoo's Fire module made ConvertLayout fail with an internal error ("Expected nested to
    match tuple"); the inference form drops the dropout first."""
    import tvm
    from tvm import relax

    mod = _bound(fire_with_dropout(opset=9))
    with pytest.raises(tvm.error.InternalError, match="nested"):
        relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
    from eto.models.nhwc import channels_last

    assert channels_last(mod)[1].converted == 4


def test_a_model_relax_cannot_convert_at_all_stays_as_written_with_the_reason(monkeypatch):
    """Without the inference form the dropout breaks ConvertLayout whatever is converted: the model is
    left as written, and the conversion says so, instead of an internal error."""
    import eto.models.nhwc as nhwc

    monkeypatch.setattr(nhwc, "inference_form", lambda mod: mod)
    mod = _bound(fire_with_dropout())
    converted, done = nhwc.channels_last(mod)
    assert converted.same_as(mod) and (done.convolutions, done.converted, done.transposes) == (4, 0, 0)
    assert done.left_as_written.startswith("all 4 left as written: Relax's ConvertLayout fails on this model "
                                           "whatever is converted") and "nested" in done.left_as_written


@pytest.mark.parametrize("seed", range(20))
def test_the_convertible_convolutions_are_a_maximal_set_found_in_few_tries(seed):
    """Against brute force: failures caused by single items and by pairs together; the set found works, no
    left-out item can be added to it, and far fewer tries than subsets are made."""
    import itertools
    import random

    from eto.models.nhwc import convertible

    rng = random.Random(seed)
    n = rng.randint(1, 12)
    bad = {i for i in range(n) if rng.random() < 0.15}
    pairs = {tuple(sorted(rng.sample(range(n), 2))) for _ in range(rng.randint(0, 2))} if n > 1 else set()
    tries = []

    def works(chosen: frozenset) -> bool:
        tries.append(chosen)
        return not chosen & bad and not any(a in chosen and b in chosen for a, b in pairs)

    kept = convertible(list(range(n)), works)
    calls = len(tries)
    assert works(frozenset(kept)) and all(not works(frozenset(kept) | {i}) for i in range(n) if i not in kept)
    if not pairs:  # single causes only: exactly the others are kept (the maximum)
        assert set(kept) == set(range(n)) - bad
    best = max(len(c) for r in range(n + 1) for c in itertools.combinations(range(n), r) if works(frozenset(c)))
    assert len(kept) >= best - len(pairs)
    assert calls <= 1 + 2 * (len(bad) + len(pairs)) * max(1, n.bit_length()) + 1, calls


def test_transpose_pairs_that_undo_each_other_are_cancelled():
    import tvm
    from tvm import relax

    from eto.models.nhwc import _count_calls, cancel_transposes

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 2, 3, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
            b = bb.emit(relax.op.permute_dims(a, [0, 3, 1, 2]))  # undoes a
            c = bb.emit(relax.op.permute_dims(b, [0, 2, 3, 1]))
            d = bb.emit(relax.op.permute_dims(c, [0, 2, 1, 3]))  # does not undo c
            out = bb.emit_output(relax.op.add(d, d))
        bb.emit_func_output(out)
    mod = cancel_transposes(bb.get())
    assert _count_calls(mod, "relax.permute_dims") == 2
    ex = tvm.compile(mod, target="llvm")
    data = np.arange(24, dtype="float32").reshape(1, 2, 3, 4)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
    np.testing.assert_array_equal(got, 2 * data.transpose(0, 2, 3, 1).transpose(0, 2, 1, 3))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PATTERNS))
@pytest.mark.parametrize("layout", ["auto", "NHWC-winograd"])
def test_every_pattern_builds_and_matches_onnx_runtime(name, layout):
    ort = pytest.importorskip("onnxruntime")
    from eto.models.build import build_model
    from eto.models.layout import with_layout
    from eto.models.load import onnx_to_relax
    from eto.target import parse_target

    proto = PATTERNS[name]()
    x = np.random.default_rng(1).uniform(-1, 1, (1, C, 8, 8)).astype("float32")
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    model = with_layout(onnx_to_relax(proto.SerializeToString(), name=name), layout)
    built = build_model(model, None, parse_target("cpu"))
    assert built.tasks.layout.conversion.converted == CONVOLUTIONS[name][1]
    np.testing.assert_allclose(built.run([x])[0], want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))


def test_a_channel_slice_between_transposes_that_undo_each_other_is_taken_in_the_outer_layout():
    """ShuffleNet's split after its shuffle: NHWC -> NCHW, a slice of channels, back to NHWC becomes one
    slice of the NHWC tensor's last axis (a negative axis too), and a concat of such slices back to NHWC
    one concat on the last axis; an identity transpose goes; the same numbers."""
    import tvm
    from tvm import relax

    from eto.models.nhwc import _count_calls, cancel_transposes

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 5, 8), "float32"))  # NHWC
    with bb.function("main", [x]):
        with bb.dataflow():
            same = bb.emit(relax.op.permute_dims(x, [0, 1, 2, 3]))
            nchw = bb.emit(relax.op.permute_dims(same, [0, 3, 1, 2]))
            half = bb.emit(relax.op.strided_slice(nchw, [1], [4], [8], [1]))  # the second half of the channels
            odd = bb.emit(relax.op.strided_slice(nchw, [-3], [1], [8], [2]))  # the odd channels
            back = bb.emit(relax.op.add(relax.op.permute_dims(half, [0, 2, 3, 1]), bb.emit(
                relax.op.permute_dims(odd, [0, 2, 3, 1]))))
            joined = bb.emit(relax.op.concat([odd, half], axis=1))  # ShuffleNet's join, in NCHW
            out = bb.emit_output(relax.Tuple([back, bb.emit(relax.op.permute_dims(joined, [0, 2, 3, 1]))]))
        bb.emit_func_output(out)
    mod = cancel_transposes(bb.get())
    assert _count_calls(mod, "relax.permute_dims") == 0, mod
    data = np.random.default_rng(0).standard_normal((1, 3, 5, 8)).astype("float32")
    got = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(data))
    np.testing.assert_array_equal(got[0].numpy(), data[..., 4:8] + data[..., 1:8:2])
    np.testing.assert_array_equal(got[1].numpy(), np.concatenate([data[..., 1:8:2], data[..., 4:8]], axis=-1))
