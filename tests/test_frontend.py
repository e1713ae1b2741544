"""Operator sets of real models (issue 7): Relax graphs, PyTorch modules, ONNX files, the CLI.

The Relax-level tests need only TVM; the PyTorch and ONNX ones skip cleanly without ``torch`` /
``onnx`` (CI installs both: ``pip install torch==2.13.0 onnx``).
"""

from __future__ import annotations

import io
import json
import math
import sys
import warnings

import pytest

from eto.cli import main
from eto.models import (
    MissingExtraError,
    ModelFileError,
    ModelOperators,
    bind_dims,
    extract_from_file,
    extract_from_onnx,
    extract_from_relax,
    extract_from_torch,
    load_model_opset,
    symbolic_dims,
)
from eto.models.load import exported_program_to_relax
from eto.operators import Operator
from eto.operators.opsets import OperatorSet, builtin_opset


def op(type_, **params) -> Operator:
    return Operator.create(type_, **params)


def as_dict(result: ModelOperators) -> dict[Operator, int]:
    return {e.op: e.frequency for e in result.opset}


def unsupported(result: ModelOperators) -> dict[tuple[str, str], int]:
    """(op, first words of the reason) -> count: exact enough to catch a wrong mapping or count."""
    counts: dict[tuple[str, str], int] = {}
    for u in result.unsupported:
        key = (u.op, u.reason.split(":")[0])
        counts[key] = counts.get(key, 0) + u.count
    return counts


# -- Relax graphs built directly: every mapping rule, no optional package needed ------------------
@pytest.fixture(scope="module")
def relax_mod():
    from tvm import relax, tirx, topi

    def T(shape, dtype="float32"):
        return relax.TensorType(shape, dtype)

    n = tirx.Var("n", "int64")
    x = relax.Var("x", T((1, 8, 16, 16)))
    xdyn = relax.Var("xdyn", T((n, 8, 16, 16)))
    xh = relax.Var("xh", T((1, 16, 16, 8)))
    x16 = relax.Var("x16", T((1, 8, 16, 16), "float16"))
    v3 = relax.Var("v3", T((2, 4, 6, 6, 6)))
    tok = relax.Var("tok", T((2, 6, 32)))
    q = relax.Var("q", T((2, 6, 4, 8)))
    w = {k: relax.Var(f"w_{k}", T(s)) for k, s in {
        "c2d": (16, 8, 3, 3), "dep": (8, 1, 3, 3), "grp": (16, 2, 3, 3), "hwio": (3, 3, 8, 16),
        "c3d": (4, 2, 3, 3, 3), "c1d": (8, 6, 3), "t2d": (8, 4, 4, 4), "fc": (32, 64), "m2": (192, 10)}.items()}
    w16 = relax.Var("w16", T((16, 8, 3, 3), "float16"))
    params = [x, xdyn, xh, x16, v3, tok, q, *w.values(), w16]

    bb = relax.BlockBuilder()
    sub_x = relax.Var("sx", T((1, 8, 16, 16)))
    sub_w = relax.Var("sw", T((16, 8, 3, 3)))
    with bb.function("block", [sub_x, sub_w], private=True):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(sub_x, sub_w, padding=1))
        bb.emit_func_output(out)
    block = bb.get().get_global_var("block")

    nn = relax.op.nn
    with bb.function("main", params):
        with bb.dataflow():
            outs = [
                bb.emit(nn.conv2d(x, w["c2d"], strides=2, padding=1)),                  # C2D
                bb.emit(nn.conv2d(x, w["c2d"], strides=2, padding=1)),                  # same: frequency 2
                bb.emit(nn.conv2d(x, w["dep"], padding=(1, 1), groups=8)),              # DEP
                bb.emit(nn.conv2d(x, w["grp"], padding=1, dilation=2, groups=4)),       # GRP
                bb.emit(nn.conv2d(x, w["c2d"], padding=(0, 0, 1, 1))),                  # asymmetric
                bb.emit(nn.conv2d(xdyn, w["c2d"], padding=1)),                          # dynamic
                bb.emit(nn.conv2d(xh, w["hwio"], data_layout="NHWC", kernel_layout="HWIO")),  # layout
                bb.emit(nn.conv2d(x16, w16)),                                           # float16
                bb.emit(nn.conv3d(v3, w["c3d"], padding=1, groups=2)),                  # grouped 3-D
                bb.emit(nn.conv1d(tok, w["c1d"], padding=1)),                           # C1D ([2, 6, 32] as NCW)
                bb.emit(nn.conv2d_transpose(x, w["t2d"], strides=2, padding=1)),        # T2D
                bb.emit(relax.op.matmul(tok, w["fc"])),                                 # linear on tokens
                bb.emit(relax.op.matmul(relax.op.reshape(tok, (12, 32)), w["fc"])),     # flattened tokens
                bb.emit(relax.op.matmul(relax.op.reshape(tok, (2, 192)), w["m2"])),
                bb.emit(relax.op.matmul(q, relax.op.permute_dims(q, (0, 1, 3, 2)))),    # [B,S,H,D] batched
                bb.emit(nn.attention(q, q, q)),                                         # two BMMs
                bb.emit(relax.op.einsum((tok, tok), "bij,bkj->bik")),                   # listed
                bb.emit(relax.Call(block, [x, w["c2d"]])),                              # subfunction, twice
                bb.emit(relax.Call(block, [x, w["c2d"]])),
                bb.emit_te(topi.nn.relu, x),                                            # lowered, element-wise
                bb.emit_te(topi.sum, x, axis=1),                                        # lowered, reduces: listed
            ]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()


def test_relax_graph_maps_every_rule(relax_mod):
    r = extract_from_relax(relax_mod, "hand")
    assert as_dict(r) == {
        op("C2D", N=1, CI=8, H=16, W=16, CO=16, KH=3, KW=3, stride=2, padding=1): 2,
        op("DEP", N=1, C=8, H=16, W=16, KH=3, KW=3, padding=1): 1,
        op("GRP", N=1, CI=8, H=16, W=16, CO=16, KH=3, KW=3, groups=4, padding=1, dilation=2): 1,
        op("C1D", N=2, CI=6, L=32, CO=8, K=3, padding=1): 1,
        op("T2D", N=1, CI=8, H=16, W=16, CO=4, KH=4, KW=4, stride=2, padding=1): 1,
        op("BMM", B=1, M=12, N=64, K=32): 2,      # rank-3 tokens and flattened tokens agree
        op("DENSE", M=2, N=10, K=192): 1,         # a reshape that does not keep K is a plain matmul
        op("BMM", B=12, M=4, N=4, K=8): 1,        # batch axes multiplied: 2*6
        op("BMM", B=8, M=6, N=6, K=8): 1,         # attention scores [B*H, Sq, Skv, D]
        op("BMM", B=8, M=6, N=8, K=6): 1,         # attention context [B*H, Sq, Dv, Skv]
        op("C2D", N=1, CI=8, H=16, W=16, CO=16, KH=3, KW=3, padding=1): 2,  # two calls of @block
    }
    assert unsupported(r) == {
        ("relax.nn.conv2d", "asymmetric padding (before (0, 0), after (1, 1))"): 1,
        ("relax.nn.conv2d", "dynamic shape"): 1,
        ("relax.nn.conv2d", "layout NHWC/HWIO/NHWC"): 1,
        ("relax.nn.conv2d", "dtype float16"): 1,
        ("relax.nn.conv3d", "grouped 3-D convolution (groups=2)"): 1,
        ("relax.einsum", "einsum is not mapped to a catalogue operator (write it as matmul to tune it)"): 1,
        ("relax.call_tir", "a TIR function with a reduction loop (a frontend-lowered op, or a module legalized "
                           "before extraction)"): 1,
    }
    asym = next(u for u in r.unsupported if "asymmetric" in u.reason)
    assert "padding=[0,0,1,1]" in asym.call and "1x8x16x16 float32" in asym.call
    lowered = next(u for u in r.unsupported if u.op == "relax.call_tir")
    assert lowered.call.startswith("sum(1x8x16x16 float32) -> 1x16x16 float32")
    assert "7 unsupported calls not included" in r.opset.description


def test_relax_requires_a_module():
    with pytest.raises(TypeError, match="tvm.IRModule"):
        extract_from_relax("not a module")


# -- PyTorch and ONNX: the same small models through both frontends --------------------------------
def _torch():
    torch = pytest.importorskip("torch")
    return torch


def small_cnn():
    """Stem conv, depthwise, pointwise, a group conv used twice, a transposed conv, conv1d, Linear."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class SmallCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(16)
            self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
            self.pw = nn.Conv2d(16, 32, 1)
            self.grp = nn.ModuleList([nn.Conv2d(32, 32, 3, padding=1, groups=4) for _ in range(2)])
            self.up = nn.ConvTranspose2d(32, 8, 4, stride=2, padding=1)
            self.seq = nn.Conv1d(32, 16, 3, padding=2, dilation=2)
            self.seq_grouped = nn.Conv1d(16, 16, 3, padding=1, groups=2)  # deliberately unsupported
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = F.relu(self.bn(self.stem(x)))
            x = F.relu(self.pw(F.relu(self.dw(x))))
            for g in self.grp:
                x = F.relu(g(x))
            up = self.up(x)
            s = self.seq_grouped(self.seq(x.flatten(2)))
            return self.fc(s.mean(-1)), up

    torch.manual_seed(0)
    return SmallCNN().eval(), (torch.randn(1, 3, 32, 32),)


CNN_EXPECTED = {
    op("C2D", N=1, CI=3, H=32, W=32, CO=16, KH=3, KW=3, stride=2, padding=1): 1,
    op("DEP", N=1, C=16, H=16, W=16, KH=3, KW=3, padding=1): 1,
    op("C2D", N=1, CI=16, H=16, W=16, CO=32, KH=1, KW=1): 1,
    op("GRP", N=1, CI=32, H=16, W=16, CO=32, KH=3, KW=3, groups=4, padding=1): 2,
    op("T2D", N=1, CI=32, H=16, W=16, CO=8, KH=4, KW=4, stride=2, padding=1): 1,
    op("C1D", N=1, CI=32, L=256, CO=16, K=3, padding=2, dilation=2): 1,
    op("DENSE", M=1, N=10, K=16): 1,
}
CNN_UNSUPPORTED = {("relax.nn.conv1d", "grouped 1-D convolution (groups=2)"): 1}


def transformer():
    """Two pre-norm encoder blocks: explicit attention matmuls on [B, H, S, D] and a GELU MLP."""
    torch = _torch()
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d: int = 32, heads: int = 4, ffn: int = 64) -> None:
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

        def forward(self, x):
            b, s, d = x.shape
            h = self.ln1(x)
            q, k, v = (m(h).view(b, s, self.heads, d // self.heads).transpose(1, 2) for m in (self.q, self.k, self.v))
            att = (q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)).softmax(-1)
            x = x + self.o((att @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    torch.manual_seed(0)
    return nn.Sequential(Block(), Block()).eval(), (torch.randn(2, 6, 32),)


TRANSFORMER_EXPECTED = {
    op("BMM", B=1, M=12, N=32, K=32): 8,   # q, k, v, o of two blocks on 2x6 tokens
    op("BMM", B=8, M=6, N=6, K=8): 2,      # scores [B*H, S, S, D]
    op("BMM", B=8, M=6, N=8, K=6): 2,      # context [B*H, S, D, S]
    op("BMM", B=1, M=12, N=64, K=32): 2,   # fc1
    op("BMM", B=1, M=12, N=32, K=64): 2,   # fc2
}


def onnx_bytes(model, inputs) -> bytes:
    """The same module exported with PyTorch's TorchScript ONNX exporter (needs no onnxscript)."""
    torch = _torch()
    pytest.importorskip("onnx")
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, buf, dynamo=False, opset_version=17)
    return buf.getvalue()


def test_torch_cnn_exact():
    model, inputs = small_cnn()
    r = extract_from_torch(model, inputs)
    assert as_dict(r) == CNN_EXPECTED
    assert unsupported(r) == CNN_UNSUPPORTED
    assert r.opset.name == "smallcnn" and "PyTorch module SmallCNN" in r.source


def test_onnx_cnn_exact():
    model, inputs = small_cnn()
    r = extract_from_onnx(onnx_bytes(model, inputs), name="cnn")
    assert as_dict(r) == CNN_EXPECTED
    assert unsupported(r) == CNN_UNSUPPORTED
    assert r.opset.name == "cnn"


@pytest.mark.parametrize("decompose", [True, False])
def test_torch_transformer_exact(decompose):
    # With decomposition torch flattens tokens (view + addmm) and attention (bmm); without, the
    # ranks stay: both must give BERT's modelling.
    model, inputs = transformer()
    r = extract_from_torch(model, inputs, decompose=decompose)
    assert as_dict(r) == TRANSFORMER_EXPECTED
    assert r.unsupported == ()


def test_onnx_transformer_exact():
    model, inputs = transformer()
    r = extract_from_onnx(onnx_bytes(model, inputs))
    assert as_dict(r) == TRANSFORMER_EXPECTED
    assert r.unsupported == ()


@pytest.mark.parametrize("decompose", [True, False])
def test_torch_sdpa_is_two_batch_matmuls(decompose):
    torch = _torch()

    class Attention(torch.nn.Module):
        def forward(self, q, k, v):  # [B, H, S, D]
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    q, kv = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 10, 8)
    r = extract_from_torch(Attention(), (q, kv, kv), decompose=decompose)
    assert as_dict(r) == {op("BMM", B=8, M=6, N=10, K=8): 1, op("BMM", B=8, M=6, N=8, K=10): 1}


def handmade_onnx(batch: int | str = 1):
    """An ONNX graph written with onnx.helper: what PyTorch never exports (asymmetric pads, Gemm).

    A string ``batch`` makes the image batch symbolic (a dynamic input).
    """
    pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def init(name, *shape):
        return numpy_helper.from_array(np.zeros(shape, np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),                   # C2D
        helper.make_node("Conv", ["a", "w2"], ["b"], pads=[0, 0, 1, 1], strides=[2, 2]),   # asymmetric
        helper.make_node("Conv", ["a", "w2"], ["b2"], pads=[0, 0, 1, 1], strides=[2, 2]),  # twice
        helper.make_node("Conv", ["b", "w3"], ["c"], group=8, pads=[1, 1, 1, 1]),          # DEP
        helper.make_node("Flatten", ["c"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc"], ["g"], transB=1),                            # DENSE [N, K] weight
        helper.make_node("MatMul", ["t", "m"], ["h"]),                                     # linear on tokens
        helper.make_node("Cast", ["t"], ["t16"], to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["m"], ["m16"], to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["t16", "m16"], ["h16"]),                               # float16
    ]
    graph = helper.make_graph(
        nodes, "handmade",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 9, 9]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 5, 16])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("g", "h", "b2")]
        + [helper.make_tensor_value_info("h16", TensorProto.FLOAT16, None)],
        [init("w1", 8, 4, 3, 3), init("w2", 8, 8, 3, 3), init("w3", 8, 1, 3, 3), init("fc", 10, 128),
         init("m", 16, 24)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_graph_with_asymmetric_padding_gemm_and_float16():
    model = handmade_onnx()
    r = extract_from_onnx(model)
    assert as_dict(r) == {
        op("C2D", N=1, CI=4, H=9, W=9, CO=8, KH=3, KW=3, padding=1): 1,
        op("DEP", N=1, C=8, H=4, W=4, KH=3, KW=3, padding=1): 1,
        op("DENSE", M=1, N=10, K=128): 1,
        op("BMM", B=1, M=5, N=24, K=16): 1,
    }
    assert unsupported(r) == {
        ("relax.nn.conv2d", "asymmetric padding (before (0, 0), after (1, 1))"): 2,
        ("relax.matmul", "dtype float16"): 1,
    }
    assert r.opset.name == "handmade"
    dynamic = extract_from_onnx(handmade_onnx("N"))
    assert as_dict(dynamic) == {op("BMM", B=1, M=5, N=24, K=16): 1}
    assert unsupported(dynamic) == {("relax.nn.conv2d", "dynamic shape"): 4, ("relax.matmul", "dynamic shape"): 1,
                                    ("relax.matmul", "dtype float16"): 1}
    assert as_dict(extract_from_onnx(handmade_onnx("N"), shapes={"x": (1, 4, 9, 9)})) == as_dict(r)


# -- files and the CLI --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cnn_onnx_file(tmp_path_factory):
    model, inputs = small_cnn()
    path = tmp_path_factory.mktemp("models") / "cnn.onnx"
    path.write_bytes(onnx_bytes(model, inputs))
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_files_by_content(cnn_onnx_file, tmp_path):
    torch = _torch()
    r = extract_from_file(cnn_onnx_file)
    assert as_dict(r) == CNN_EXPECTED and r.opset.name == "cnn"
    renamed = tmp_path / "model.bin"  # dispatch is by content, not by extension
    renamed.write_bytes(cnn_onnx_file.read_bytes())
    assert as_dict(extract_from_file(renamed)) == CNN_EXPECTED
    model, inputs = transformer()
    pt2 = tmp_path / "encoder.pt2"
    torch.export.save(torch.export.export(model, inputs), str(pt2))
    r = extract_from_file(pt2)
    assert as_dict(r) == TRANSFORMER_EXPECTED and r.opset.name == "encoder"
    opset = load_model_opset(pt2)
    assert isinstance(opset, OperatorSet) and sum(e.frequency for e in opset) == 16


def test_corrupt_and_non_model_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("just some text, not a model\n")
    as_json = tmp_path / "set.json"
    as_json.write_text('{"operators": []}')
    toml = tmp_path / "pyproject.toml"
    toml.write_text('[project]\nname = "x"\n')
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    cases = [(text, "not an ONNX model"), (as_json, "a JSON file, not a model"), (toml, "not an ONNX model"),
             (empty, "empty file")]
    for path, words in cases:
        with pytest.raises(ModelFileError, match=words) as info:
            extract_from_file(path)
        assert str(path) in str(info.value) and isinstance(info.value, ValueError)
    with pytest.raises(FileNotFoundError, match="no such file"):
        extract_from_file(tmp_path / "missing.onnx")
    truncated = tmp_path / "broken.onnx"
    truncated.write_bytes(handmade_onnx().SerializeToString()[:300])
    with pytest.raises(ModelFileError, match="not an ONNX model") as info:
        extract_from_file(truncated)
    assert str(truncated) in str(info.value)
    _torch()
    zipped = tmp_path / "broken.pt2"
    zipped.write_bytes(b"PK\x03\x04" + b"\0" * 64)
    with pytest.raises(ModelFileError, match="not a readable torch.export .pt2") as info:
        extract_from_file(zipped)
    assert str(zipped) in str(info.value)


def test_cli_from_model_json_and_table(capsys, cnn_onnx_file, tmp_path):
    code, out, _ = run(capsys, "ops", "from-model", cnn_onnx_file, "--json", "--name", "mine")
    assert code == 0
    data = json.loads(out)
    code, shown, _ = run(capsys, "ops", "show", "mobilenetv2", "--json")
    assert {tuple(sorted(i)) for i in data["operators"]} == {tuple(sorted(json.loads(shown)[0]))}
    assert data["name"] == "mine" and sum(i["frequency"] for i in data["operators"]) == 8
    assert data["unsupported"] == [{"op": "relax.nn.conv1d", "call": data["unsupported"][0]["call"],
                                    "reason": data["unsupported"][0]["reason"], "count": 1}]
    assert "grouped 1-D" in data["unsupported"][0]["reason"]
    saved = tmp_path / "mine.json"  # the JSON is an operator-set file: eto ops show / eto tune --opset read it
    saved.write_text(out)
    assert {e.op: e.frequency for e in OperatorSet.load(saved)} == CNN_EXPECTED
    code, out, _ = run(capsys, "ops", "from-model", cnn_onnx_file)
    assert code == 0
    assert out.startswith("cnn: 7 distinct operators, 8 layers")
    assert "GRP" in out and "unsupported: 1 call not in the set" in out and "grouped 1-D" in out


def test_cli_from_model_bad_files_exit_2(capsys, tmp_path):
    text = tmp_path / "readme.txt"
    text.write_text("hello\n")
    code, out, err = run(capsys, "ops", "from-model", text)
    assert code == 2 and out == "" and str(text) in err and "not an ONNX model" in err
    code, _, err = run(capsys, "ops", "from-model", tmp_path / "missing.onnx")
    assert code == 2 and "no such file" in err
    good = tmp_path / "good.onnx"
    good.write_bytes(handmade_onnx("N").SerializeToString())
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(good.read_bytes()[:300])
    code, _, err = run(capsys, "ops", "from-model", broken)
    assert code == 2 and str(broken) in err and "Traceback" not in err
    code, _, err = run(capsys, "ops", "from-model", good, "--input-shape", "x=1,a")
    assert code == 2 and "--input-shape" in err
    code, out, _ = run(capsys, "ops", "from-model", good)
    assert code == 0 and "dynamic shape" in out
    code, out, _ = run(capsys, "ops", "from-model", good, "--input-shape", "x=1,4,9,9")
    assert code == 0 and "dynamic shape" not in out and "unsupported: 3 calls not in the set" in out
    code, out, _ = run(capsys, "ops", "from-model", good, "--dim", "N=4", "--json")  # a symbolic size by name
    assert code == 0 and {"type": "DENSE", "params": {"M": 4, "N": 10, "K": 128}} in [
        {k: o[k] for k in ("type", "params")} for o in json.loads(out)["operators"]]
    code, _, err = run(capsys, "ops", "from-model", good, "--dim", "seq=4")
    assert code == 2 and "no symbolic dimension 'seq'; its symbolic dimensions: N (input x, axis 0)" in err
    code, _, err = run(capsys, "ops", "from-model", good, "--dim", "N=0")
    assert code == 2 and "--dim 'N=0'" in err


def test_symbolic_dimension_of_a_torch_export_program_set_per_size():
    torch = _torch()
    from torch.export import Dim

    ep = torch.export.export(torch.nn.Linear(16, 32), (torch.randn(3, 16),),
                             dynamic_shapes=({0: Dim("tokens", min=2, max=512)},))
    model = exported_program_to_relax(ep, name="lin")
    [(name, where)] = symbolic_dims(model).items()  # torch.export renames Dims s0, s27...
    assert where.endswith("axis 0") and name.startswith("s")
    sizes = [(v, extract_from_relax(bind_dims(model, {name: v}).mod, f"lin@{name}={v}")) for v in (8, 64)]
    assert [(v, r.opset.name, as_dict(r)) for v, r in sizes] == [
        (8, f"lin@{name}=8", {op("DENSE", M=8, N=32, K=16): 1}),
        (64, f"lin@{name}=64", {op("DENSE", M=64, N=32, K=16): 1})]


def test_missing_extras_say_what_to_install(monkeypatch, tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x08\x12\x00")  # starts like an ONNX ModelProto
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'eto\[onnx\]'"):
        extract_from_onnx(model)
    with pytest.raises(MissingExtraError, match=r"pip install 'eto\[onnx\]'"):
        extract_from_file(model)
    code, _, err = run(capsys, "ops", "from-model", model)
    assert code == 2 and "pip install 'eto[onnx]'" in err
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'eto\[torch\]'"):
        extract_from_torch(object(), ())


# -- the paper's networks against eto's built-in sets ---------------------------------------------
def _experiment():
    """The architectures of experiments/model_import_check.py (written there once, random weights)."""
    _torch()
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "experiments" / "model_import_check.py"
    spec = importlib.util.spec_from_file_location("model_import_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # imports whole networks: seconds
@pytest.mark.parametrize("model, builtin, extra", [
    ("ResNet50", "resnet50", {op("DENSE", M=1, N=1000, K=2048): 1}),   # the fc layer the paper leaves out
    ("MobileNetV2", "mobilenetv2", {op("DENSE", M=1, N=1000, K=1280): 1}),  # Linear classifier ...
    ("MiniBert", "bert_base", {op("DENSE", M=1, N=768, K=768): 1}),    # BERT's pooler
])
def test_real_networks_match_builtin_sets(model, builtin, extra):
    torch = _torch()
    exp = _experiment()
    torch.manual_seed(0)
    net = getattr(exp, model)()
    inputs = (torch.zeros(1, 128, dtype=torch.long),) if model == "MiniBert" else (torch.randn(1, 3, 224, 224),)
    r = extract_from_torch(net, inputs)
    expected = {e.op: e.frequency for e in builtin_opset(builtin)}
    if model == "MobileNetV2":  # ... where eto models the classifier as the paper's 1x1 conv on the 1x1 map
        del expected[op("C2D", N=1, CI=1280, H=1, W=1, CO=1000, KH=1, KW=1)]
    assert as_dict(r) == {**expected, **extra}
    assert r.unsupported == ()


def test_cli_tune_model_bad_input_exit_2(capsys, tmp_path):
    text = tmp_path / "readme.txt"
    text.write_text("hello\n")
    code, out, err = run(capsys, "tune", "--model", text, "--db", tmp_path / "db")
    assert code == 2 and "not an ONNX model" in err and "Traceback" not in err
    code, _, err = run(capsys, "tune", "--model", text, "--opset", "resnet50", "--db", tmp_path / "db")
    assert code == 2 and "--opset and --model" in err


@pytest.mark.slow
def test_cli_tune_model_tunes_its_operator_set(capsys, tmp_path):
    from eto.store.database import Database
    from eto.models import extract_from_file
    from eto.target import parse_target

    from eto.models import load_relax
    from eto.models.tasks import model_tasks

    good = tmp_path / "good.onnx"
    good.write_bytes(handmade_onnx(1).SerializeToString())
    catalogue = {e.op for e in extract_from_file(good).opset}
    # what Relax compiles: each of the model's operators fused with what follows it
    wanted = {e.op for e in model_tasks(load_relax(good), parse_target("cpu")).opset}
    fused = {op for op in wanted if not op.spec.backend_only}  # the rest: TASK functions (softmax, ...)
    assert fused and {op.anchor for op in fused} == catalogue and all(op.fusion for op in wanted)
    code, out, err = run(capsys, "tune", "--model", good, "--layout", "NCHW", "--db", tmp_path / "db", "--trials", "2",
                         "--trials-per-iter", "2", "--search", "light", "--json")  # -q would keep messages back
    assert code == 0, err
    assert {r["key"] for r in json.loads(out)["operators"]} == {op.key for op in wanted}
    assert "tuned by the backend" in err  # the model's other tasks are named and tuned, not dropped silently
    assert set(Database(tmp_path / "db").tuned(parse_target("cpu"))) == wanted
