"""Do real models, imported through TVM's Relax frontends, give eto's built-in operator sets?

ResNet-50, MobileNetV2 and BERT-Base are written here in PyTorch (torchvision does not run beside
the CPU build of torch this project installs; BERT is ``transformers.BertModel(BertConfig())`` when
transformers is installed, else a compact re-implementation), with random weights and nothing
downloaded. Each is imported with :func:`eto.models.extract_from_torch` (torch.export +
``from_exported_program``) and, at ``--scale small|paper``, also exported to ONNX with PyTorch's
TorchScript exporter and read by :func:`eto.models.extract_from_onnx`. The extracted sets are
compared with ``builtin_opset("resnet50" | "mobilenetv2" | "bert_base")``; every difference is
printed with its explanation.

    python -m experiments.model_import_check --scale ci|small|paper

Writes experiments/results/model_import_check.json and prints the differences.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from eto.models import ModelOperators, extract_from_onnx, extract_from_torch
from eto.operators import Operator
from eto.operators.opsets import builtin_opset

ROOT_DIR = Path(__file__).resolve().parents[1]


# -- models -------------------------------------------------------------------------------------
def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act(inplace=True)) if act else nn.Sequential(*layers)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int, v1_5: bool) -> None:
        super().__init__()
        s1, s3 = (1, stride) if v1_5 else (stride, 1)  # v1 (the paper's) strides the first 1x1 conv
        self.body = nn.Sequential(_conv_bn(cin, planes, 1, s1), _conv_bn(planes, planes, 3, s3),
                                  _conv_bn(planes, planes * 4, 1, act=None))
        self.down = (_conv_bn(cin, planes * 4, 1, stride, act=None)
                     if stride != 1 or cin != planes * 4 else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.down(x))


class ResNet50(nn.Module):
    """ResNet-50 v1 (``v1_5=False``, the paper's and eto's) or v1.5 (torchvision's ``resnet50``)."""

    def __init__(self, v1_5: bool = False) -> None:
        super().__init__()
        layers, cin = [_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(blocks):
                layers.append(Bottleneck(cin, planes, stride if i == 0 else 1, v1_5))
                cin = planes * 4
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
        super().__init__()
        hidden = cin * t
        layers = [_conv_bn(cin, hidden, 1, act=nn.ReLU6)] if t != 1 else []
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6), _conv_bn(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """torchvision's ``mobilenet_v2`` (width 1.0): the classifier is Dropout + Linear(1280, 1000)."""

    def __init__(self) -> None:
        super().__init__()
        layers, cin = [_conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                           (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(320, 1280, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class MiniBert(nn.Module):
    """BERT-Base's encoder and pooler (post-norm, GELU), for when transformers is not installed."""

    def __init__(self, hidden: int = 768, heads: int = 12, layers: int = 12, vocab: int = 30522, seq: int = 512) -> None:
        super().__init__()
        self.heads = heads
        self.word, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "q": nn.Linear(hidden, hidden), "k": nn.Linear(hidden, hidden), "v": nn.Linear(hidden, hidden),
            "o": nn.Linear(hidden, hidden), "ln1": nn.LayerNorm(hidden), "fc1": nn.Linear(hidden, 4 * hidden),
            "fc2": nn.Linear(4 * hidden, hidden), "ln2": nn.LayerNorm(hidden)}) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, ids):
        b, s = ids.shape
        x = self.word(ids) + self.pos(torch.arange(s))
        for blk in self.blocks:
            d = x.shape[-1] // self.heads
            q, k, v = (blk[n](x).view(b, s, self.heads, d).transpose(1, 2) for n in "qkv")
            ctx = ((q @ k.transpose(-2, -1)) / math.sqrt(d)).softmax(-1) @ v
            x = blk["ln1"](x + blk["o"](ctx.transpose(1, 2).reshape(b, s, -1)))
            x = blk["ln2"](x + blk["fc2"](nn.functional.gelu(blk["fc1"](x))))
        return torch.tanh(self.pooler(x[:, 0]))


def bert_base() -> tuple[nn.Module, str]:
    try:
        from transformers import BertConfig, BertModel
    except ImportError:
        return MiniBert(), "MiniBert (transformers not installed)"
    import transformers

    return BertModel(BertConfig()), f"transformers {transformers.__version__} BertModel(BertConfig())"


# -- comparison ---------------------------------------------------------------------------------
def explain(model: str, op: Operator, side: str) -> str:
    """Why an operator is only on one side (every expected difference is named here)."""
    if model.startswith("resnet50") and op.type == "DENSE" and side == "extracted":
        return "the final fully connected layer: eto's resnet50 set leaves it out, as the paper does"
    if model == "mobilenetv2" and side == "extracted" and op == Operator.create("DENSE", M=1, N=1000, K=1280):
        return ("torchvision's classifier is Linear(1280, 1000) on the pooled vector: DENSE[1,1000|1280]; "
                "eto's set models it as the paper's 1x1 convolution on the 1x1 map, C2D[1,1000,1,1|1280,1,1] "
                "-- the same loop nest up to unit loops")
    if model == "mobilenetv2" and side == "builtin" and op.type == "C2D" and op["H"] == 1:
        return "the classifier as the paper's 1x1 convolution (the extracted model has a Linear: DENSE)"
    if model == "bert_base" and op == Operator.create("DENSE", M=1, N=768, K=768):
        return "BERT's pooler, Linear(768, 768) on the [CLS] vector: not part of the paper's encoder set"
    if model == "resnet50_v1.5":  # differences of placement and, for the 3x3 convs, of frequency
        return ("torchvision's v1.5 strides the 3x3 convolution of a downsampling block instead of the "
                "first 1x1 (eto and the paper use v1)")
    return "UNEXPECTED"


def compare(model: str, result: ModelOperators, builtin_name: str) -> dict:
    builtin = {e.op: e.frequency for e in builtin_opset(builtin_name)}
    got = {e.op: e.frequency for e in result.opset}
    diffs = []
    for op in got.keys() - builtin.keys():
        diffs.append({"side": "extracted only", "op": op.name, "key": op.key, "frequency": got[op],
                      "why": explain(model, op, "extracted")})
    for op in builtin.keys() - got.keys():
        diffs.append({"side": "built-in only", "op": op.name, "key": op.key, "frequency": builtin[op],
                      "why": explain(model, op, "builtin")})
    for op in builtin.keys() & got.keys():
        if builtin[op] != got[op]:
            why = (explain(model, op, "frequency") if model == "resnet50_v1.5" else "UNEXPECTED")
            diffs.append({"side": "frequency", "op": op.name, "key": op.key, "frequency": [got[op], builtin[op]],
                          "why": why})
    return {
        "builtin": builtin_name,
        "extracted_distinct": len(got), "extracted_calls": sum(got.values()),
        "builtin_distinct": len(builtin), "builtin_calls": sum(builtin.values()),
        "common_distinct": len(builtin.keys() & got.keys()),
        "differences": sorted(diffs, key=lambda d: (d["side"], d["key"])),
        "unexpected": sum(d["why"] == "UNEXPECTED" for d in diffs),
        "unsupported": [u.to_json() for u in result.unsupported],
        "source": result.source,
    }


class _Positional(nn.Module):
    """Calls a model with keyword inputs: the TorchScript ONNX exporter passes inputs positionally,
    which transformers' ``BertModel.forward`` (``input_ids, ..., use_cache``) does not accept."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids):
        out = self.model(input_ids=ids)
        return (out.last_hidden_state, out.pooler_output) if hasattr(out, "pooler_output") else out


def onnx_export(model: nn.Module, inputs: tuple) -> bytes:
    if type(model).__module__.startswith("transformers"):
        model = _Positional(model)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, buf, dynamo=False, opset_version=17)
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=("ci", "small", "paper"), default="small",
                    help="ci: torch frontend only; small/paper: torch and ONNX frontends")
    ap.add_argument("--out", default=str(ROOT_DIR / "experiments" / "results" / "model_import_check.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    frontends = ("torch",) if args.scale == "ci" else ("torch", "onnx")
    image = (torch.randn(1, 3, 224, 224),)
    bert, bert_label = bert_base()
    models = [
        ("resnet50", ResNet50(v1_5=False), image, "resnet50", "ResNet-50 v1 (stride on the first 1x1 conv)"),
        ("resnet50_v1.5", ResNet50(v1_5=True), image, "resnet50", "ResNet-50 v1.5 (torchvision's stride placement)"),
        ("mobilenetv2", MobileNetV2(), image, "mobilenetv2", "MobileNetV2 1.0, torchvision-style classifier"),
        ("bert_base", bert, (torch.zeros(1, 128, dtype=torch.long),), "bert_base", bert_label + ", batch 1, seq 128"),
    ]
    rows = []
    for key, model, inputs, builtin_name, label in models:
        model.eval()
        for fe in frontends:
            t0 = time.perf_counter()
            try:
                if fe == "torch":
                    result = extract_from_torch(model, inputs, name=key)
                else:
                    result = extract_from_onnx(onnx_export(model, inputs), name=key)
            except Exception as exc:  # report, keep going: e.g. an exporter that cannot trace the model
                rows.append({"model": key, "label": label, "frontend": fe, "error": f"{type(exc).__name__}: {exc}"[:500],
                             "seconds": round(time.perf_counter() - t0, 2)})
                print(f"{key:14s} {fe:5s}  ERROR {rows[-1]['error'][:200]}")
                continue
            row = {"model": key, "label": label, "frontend": fe, "seconds": round(time.perf_counter() - t0, 2),
                   **compare(key, result, builtin_name)}
            rows.append(row)
            print(f"{key:14s} {fe:5s}  {row['extracted_distinct']:3d} distinct / {row['extracted_calls']:3d} calls "
                  f"(built-in {builtin_name}: "
                  f"{row['builtin_distinct']} / {row['builtin_calls']}), common {row['common_distinct']}, "
                  f"{len(row['differences'])} differences ({row['unexpected']} unexpected), "
                  f"{len(row['unsupported'])} unsupported, {row['seconds']:.1f} s")
            for d in row["differences"]:
                print(f"    {d['side']:14s} {d['op']:44s} x{d['frequency']}: {d['why']}")
    import tvm

    out = {
        "experiment": "model_import_check", "scale": args.scale,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "tvm": tvm.__version__,
                     "onnx": _version("onnx"), "transformers": _version("transformers")},
        "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
        "models": rows,
        "unexpected_differences": sum(r.get("unexpected", 0) for r in rows),
        "errors": sum("error" in r for r in rows),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(args.out)}: {out['unexpected_differences']} unexpected differences, "
          f"{out['errors']} errors")
    return 1 if out["unexpected_differences"] or out["errors"] else 0


def _version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
