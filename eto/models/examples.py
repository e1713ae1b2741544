"""PyTorch models built in code (no downloads, random weights): what ``eto build``/``eto bench``
are measured and tested on. Latency does not depend on the weights' values.

``resnet(depth)`` is torchvision's ResNet v1.5 (18: basic blocks, 50: bottlenecks; batch norm in
eval mode), ``mobilenet_v2`` torchvision's MobileNetV2, ``bert_layer`` one BERT-Base encoder layer (self-attention with 12 heads, GELU
feed-forward, post-layer-norm); ``tiny_cnn``, ``tiny_mobilenet`` and ``tiny_transformer`` are their scale-``ci`` cousins.
``example(name)`` gives a module and its example input. Needs ``torch`` (``pip install 'eto[torch]'``).
"""

from __future__ import annotations

import math
from typing import Any


def _nn():
    import torch

    return torch, torch.nn


def resnet(depth: int = 50, num_classes: int = 1000, width: int = 64):
    torch, nn = _nn()
    layers = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3]}
    if depth not in layers:
        raise ValueError(f"resnet depth must be one of {sorted(layers)}, got {depth}")
    bottleneck = depth >= 50

    class Block(nn.Module):
        expansion = 4 if bottleneck else 1

        def __init__(self, cin: int, planes: int, stride: int) -> None:
            super().__init__()
            out = planes * self.expansion
            if bottleneck:
                convs = [nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
                         nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
                         nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)]
            else:
                convs = [nn.Conv2d(cin, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
                         nn.Conv2d(planes, out, 3, 1, 1, bias=False), nn.BatchNorm2d(out)]
            self.body = nn.Sequential(*convs)
            self.down = (nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                         if stride != 1 or cin != out else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    mods: list[Any] = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                       nn.MaxPool2d(3, 2, 1)]
    cin = width
    for i, n in enumerate(layers[depth]):
        for j in range(n):
            block = Block(cin, width * 2**i, 2 if i > 0 and j == 0 else 1)
            mods.append(block)
            cin = width * 2**i * Block.expansion
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*mods).eval()


def bert_layer(hidden: int = 768, heads: int = 12, ffn: int = 3072):
    torch, nn = _nn()

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.o = nn.Linear(hidden, hidden)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

        def forward(self, x):
            b, s, _ = x.shape
            d = hidden // heads

            def split(t):
                return t.reshape(b, s, heads, d).permute(0, 2, 1, 3)

            q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d), dim=-1)
            ctx = torch.matmul(att, v).permute(0, 2, 1, 3).reshape(b, s, hidden)
            x = self.ln1(x + self.o(ctx))
            return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))

    return Layer().eval()


def mobilenet_v2(blocks: tuple[tuple[int, int, int, int], ...] | None = None, num_classes: int = 1000,
                 last: int = 1280):
    """torchvision's MobileNetV2 (width 1.0): inverted residuals (1x1 expand, 3x3 depthwise, 1x1
    project; batch norms, ReLU6), ``blocks`` its (expansion t, channels c, repeats n, stride s) rows."""
    torch, nn = _nn()
    blocks = blocks or ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                        (6, 320, 1, 1))

    def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True):
        mods = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*mods, *([nn.ReLU6()] if act else []))

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
            super().__init__()
            hidden = cin * t
            layers = [conv_bn(cin, hidden, 1)] if t != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, act=False)]
            self.body, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    layers, cin = [conv_bn(3, 32, 3, 2)], 32
    for t, c, n, s in blocks:
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += [conv_bn(cin, last, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(last, num_classes)]
    return nn.Sequential(*layers).eval()


def tiny_cnn():
    """Three convolutions (two with residual adds), a mean and a classifier: 16x16 inputs."""
    torch, nn = _nn()

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2, self.c3 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1), \
                nn.Conv2d(16, 16, 3, padding=1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            z = torch.relu(self.c2(y) + y)
            z = torch.relu(self.c3(z) + y)
            return self.fc(z.mean((2, 3)))

    return Net().eval()


def tiny_transformer():
    return bert_layer(hidden=64, heads=4, ffn=128)


#: name -> (module factory, example input shape)
EXAMPLES = {
    "resnet50": (lambda: resnet(50), (1, 3, 224, 224)),
    "resnet18": (lambda: resnet(18), (1, 3, 224, 224)),
    "mobilenetv2": (mobilenet_v2, (1, 3, 224, 224)),
    # two inverted residuals (one with its residual add) and a classifier: the scale-ci depthwise model
    "tiny_mobilenet": (lambda: mobilenet_v2(((6, 16, 2, 1),), num_classes=10, last=32), (1, 3, 16, 16)),
    "bert_layer": (bert_layer, (1, 128, 768)),
    "tiny_cnn": (tiny_cnn, (1, 3, 16, 16)),
    "tiny_transformer": (tiny_transformer, (1, 16, 64)),
}


def example(name: str, seed: int = 0):
    """``(module, example input)`` of a built-in model, weights and input drawn from ``seed``."""
    torch, _ = _nn()
    if name not in EXAMPLES:
        raise ValueError(f"unknown example model {name!r}; choose from {', '.join(EXAMPLES)}")
    factory, shape = EXAMPLES[name]
    torch.manual_seed(seed)
    module = calibrate_batch_norms(factory(), shape)
    return module, torch.randn(*shape)


def calibrate_batch_norms(module, shape: tuple[int, ...], batch: int = 4):
    """Each batch norm's running statistics set to those of its input on a random batch.

    Why: with PyTorch's default initialisation and untrained statistics (mean 0, variance 1), every
    layer of a deep network without residuals shrinks its input; MobileNetV2's activations fall below
    1e-8 and its output is the classifier's bias for any input, so a built model that computes nothing
    would still "match" PyTorch. Normalised by its own statistics, each layer passes on a signal of
    unit scale, and folding the batch norms into the convolutions is tested with non-trivial values."""
    torch, nn = _nn()
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return module
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: exactly this batch's statistics
    module.train()
    with torch.no_grad():
        module(torch.randn(batch, *shape[1:]))
    return module.eval()


#: name -> (dimension, input axis) that ``export(..., dynamic=True)`` leaves symbolic
DYNAMIC_AXES = {"bert_layer": ("seq", 1), "tiny_transformer": ("seq", 1), "resnet50": ("batch", 0),
                "resnet18": ("batch", 0), "tiny_cnn": ("batch", 0), "mobilenetv2": ("batch", 0),
                "tiny_mobilenet": ("batch", 0)}


def export(name: str, path: str, *, seed: int = 0, onnx: bool = False, dynamic: bool = False) -> str:
    """Save a built-in model as a ``torch.export`` archive (``.pt2``) or an ONNX file; the path.
    ``dynamic``: the model's :data:`DYNAMIC_AXES` dimension stays symbolic (ONNX keeps its name;
    ``torch.export`` renames it ``s0``...), for ``eto retune --model --vary`` and ``--dim``."""
    import warnings

    torch, _ = _nn()
    module, x = example(name, seed)
    dim, axis = DYNAMIC_AXES[name]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if onnx:  # the TorchScript exporter: needs no onnxscript
            torch.onnx.export(module, (x,), path, dynamo=False, opset_version=17, input_names=["input"],
                              dynamic_axes={"input": {axis: dim}} if dynamic else None)
        else:
            shapes = ({axis: torch.export.Dim(dim, min=2, max=4096)},) if dynamic else None
            torch.export.save(torch.export.export(module, (x,), dynamic_shapes=shapes), path)
    return path
