"""Layer lists of the paper's networks (Table 2), written from the published architectures.

Each ``*_layers`` function returns one operator per layer in execution order (repeats included);
:meth:`eto.operators.opsets.OperatorSet.from_layers` counts the frequencies. This module knows nothing of
operator sets: ``eto.operators.opsets`` imports it, never the other way round. Only the operator types the
paper tunes are listed: pooling, normalisation, activations and (for ResNet-50, as in the paper)
the final fully connected layer are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from eto.errors import InputError
from eto.operators import Operator


def _c2d(n: int, ci: int, h: int, co: int, k: int, s: int = 1, p: int | None = None) -> Operator:
    return Operator.create("C2D", N=n, CI=ci, H=h, W=h, CO=co, KH=k, KW=k, stride=s,
                           padding=k // 2 if p is None else p)


# -- CNNs ---------------------------------------------------------------------------------------
def _out(h: int, k: int, s: int, p: int) -> int:
    """Output size of a convolution or pooling window."""
    return (h + 2 * p - k) // s + 1


def resnet50_layers(batch: int = 1, hw: int = 224) -> list[Operator]:
    """ResNet-50 v1 at ``hw`` x ``hw``: stride 2 on the first 1x1 conv of a downsampling block."""
    b = batch
    layers = [_c2d(b, 3, hw, 64, 7, 2, 3)]
    cin, h = 64, _out(_out(hw, 7, 2, 3), 3, 2, 1)  # the stem, then its 3x3/2 max pool
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            out = _out(h, 1, s, 0)
            layers += [_c2d(b, cin, h, planes, 1, s, 0), _c2d(b, planes, out, planes, 3),
                       _c2d(b, planes, out, planes * 4, 1, 1, 0)]
            if i == 0:
                layers.append(_c2d(b, cin, h, planes * 4, 1, s, 0))  # projection shortcut
            cin, h = planes * 4, out
    return layers


def mobilenet_v2_layers(batch: int = 1, hw: int = 224) -> list[Operator]:
    """MobileNetV2 1.0 at ``hw`` x ``hw``; the classifier is the 1x1 convolution on the pooled 1x1 map."""
    b = batch
    layers = [_c2d(b, 3, hw, 32, 3, 2, 1)]
    cin, h = 32, _out(hw, 3, 2, 1)
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            st = s if i == 0 else 1
            hidden = cin * t
            if t != 1:
                layers.append(_c2d(b, cin, h, hidden, 1, 1, 0))
            layers.append(Operator.create("DEP", N=b, C=hidden, H=h, W=h, KH=3, KW=3, stride=st, padding=1))
            h = (h - 1) // st + 1
            layers.append(_c2d(b, hidden, h, c, 1, 1, 0))
            cin = c
    layers.append(_c2d(b, 320, h, 1280, 1, 1, 0))
    layers.append(_c2d(b, 1280, 1, 1000, 1, 1, 0))
    return layers


def resnest50_layers(batch: int = 1) -> list[Operator]:
    """ResNeSt-50 (radix 2, cardinality 1, deep stem, avg-down, avd) at 224x224.

    The split-attention 3x3 convolution is a group conv with radix x cardinality = 2 groups; its
    attention branch has two 1x1 convolutions on the pooled 1x1 map (fc1, fc2).
    """
    b = batch
    layers = [_c2d(b, 3, 224, 32, 3, 2, 1), _c2d(b, 32, 112, 32, 3), _c2d(b, 32, 112, 64, 3)]
    cin, h = 64, 56
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        gw = planes  # group width = planes * bottleneck_width / 64 * cardinality
        for i in range(blocks):
            s = stride if i == 0 else 1
            inter = max(gw * 2 // 4, 32)
            layers += [
                _c2d(b, cin, h, gw, 1, 1, 0),
                Operator.create("GRP", N=b, CI=gw, H=h, W=h, CO=gw * 2, KH=3, KW=3, groups=2, padding=1),
                _c2d(b, gw, 1, inter, 1, 1, 0),
                _c2d(b, inter, 1, gw * 2, 1, 1, 0),
            ]
            h //= s  # avd: the 3x3 average pool does the striding
            layers.append(_c2d(b, gw, h, planes * 4, 1, 1, 0))
            if i == 0:
                layers.append(_c2d(b, cin, h, planes * 4, 1, 1, 0))  # after the avg-down pool
            cin = planes * 4
    return layers


def r2plus1d_18_layers(batch: int = 1, frames: int = 16, size: int = 112) -> list[Operator]:
    """R(2+1)D-18 (torchvision ``r2plus1d_18``): every 3x3x3 conv split into (1,3,3) then (3,1,1)."""
    b = batch

    def c3d(ci, d, h, co, k, s, p):
        return Operator.create("C3D", N=b, CI=ci, D=d, H=h, W=h, CO=co, KD=k[0], KH=k[1], KW=k[2],
                               stride=s, padding=p)

    layers = [c3d(3, frames, size, 45, (1, 7, 7), (1, 2, 2), (0, 3, 3))]
    d, h = frames, size // 2
    layers.append(c3d(45, d, h, 64, (3, 1, 1), 1, (1, 0, 0)))
    cin = 64
    for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for i in range(2):
            s = stride if i == 0 else 1
            mid = (cin * planes * 27) // (cin * 9 + 3 * planes)
            layers.append(c3d(cin, d, h, mid, (1, 3, 3), (1, s, s), (0, 1, 1)))
            h2 = (h - 1) // s + 1
            layers.append(c3d(mid, d, h2, planes, (3, 1, 1), (s, 1, 1), (1, 0, 0)))
            d2 = (d - 1) // s + 1
            # conv2 reuses the block's midplanes (computed from the block's input channels)
            layers.append(c3d(planes, d2, h2, mid, (1, 3, 3), 1, (0, 1, 1)))
            layers.append(c3d(mid, d2, h2, planes, (3, 1, 1), 1, (1, 0, 0)))
            if i == 0 and (s != 1 or cin != planes):
                layers.append(c3d(cin, d, h, planes, (1, 1, 1), s, 0))
            cin, d, h = planes, d2, h2
    return layers


def dcgan_generator_layers(batch: int = 1, nz: int = 100, ngf: int = 64) -> list[Operator]:
    """DCGAN generator (Radford et al.) producing 64x64 images: five transposed convolutions."""
    def t2d(ci, h, co, s, p):
        return Operator.create("T2D", N=batch, CI=ci, H=h, W=h, CO=co, KH=4, KW=4, stride=s, padding=p)

    return [t2d(nz, 1, ngf * 8, 1, 0), t2d(ngf * 8, 4, ngf * 4, 2, 1), t2d(ngf * 4, 8, ngf * 2, 2, 1),
            t2d(ngf * 2, 16, ngf, 2, 1), t2d(ngf, 32, 3, 2, 1)]


# -- Transformers -------------------------------------------------------------------------------
def bert_layers(batch: int = 1, seq: int = 128, hidden: int = 768, heads: int = 12,
                layers: int = 12) -> list[Operator]:
    """BERT encoder matmuls as batch matmuls ``[b, i, j, k]``.

    Linear layers act on the ``batch*seq`` tokens (``[1, batch*seq, out, in]``); attention is a
    batch matmul over ``batch*heads``: scores ``[bh, seq, seq, d]`` and context ``[bh, seq, d, seq]``.
    """
    d, ffn, tokens = hidden // heads, 4 * hidden, batch * seq

    def bmm(b, m, n, k):
        return Operator.create("BMM", B=b, M=m, N=n, K=k)

    per_layer = [bmm(1, tokens, hidden, hidden)] * 3 + [
        bmm(batch * heads, seq, seq, d),
        bmm(batch * heads, seq, d, seq),
        bmm(1, tokens, hidden, hidden),
        bmm(1, tokens, ffn, hidden),
        bmm(1, tokens, hidden, ffn),
    ]
    return per_layer * layers


def _bert_large(batch: int, seq: int) -> list[Operator]:
    return bert_layers(batch, seq, hidden=1024, heads=16, layers=24)


def quickstart_layers() -> list[Operator]:
    """A small CNN block and attention products: a few minutes of tuning on 2 cores (eto tune's default)."""
    return [_c2d(1, 16, 14, 16, 3), _c2d(1, 32, 14, 32, 3), _c2d(1, 32, 14, 32, 3), _c2d(1, 32, 28, 32, 3),
            Operator.create("BMM", B=2, M=64, N=64, K=32), Operator.create("BMM", B=4, M=64, N=64, K=64)]


@dataclass(frozen=True)
class Builtin:
    """A built-in set: its layer list builder and the dimensions a user may vary (with defaults)."""

    description: str
    layers: Callable[..., list[Operator]]
    dims: dict[str, int] = field(default_factory=dict)

    def build(self, **dims: int) -> list[Operator]:
        unknown = set(dims) - set(self.dims)
        if unknown:
            can = ", ".join(self.dims) or "none"
            raise InputError(f"cannot vary {', '.join(sorted(unknown))}: this set's dimensions are {can}")
        return self.layers(**{**self.dims, **dims})


def _resnet50_l() -> list[Operator]:
    return resnet50_layers(1) + resnet50_layers(16)


def _bert_l() -> list[Operator]:
    return [op for f in (bert_layers, _bert_large) for b in (1, 16) for s in (64, 128) for op in f(b, s)]


#: A set covering several models or batch sizes is the concatenation of their layer lists:
#: counting it adds the frequencies of shared operators.
BUILTIN: dict[str, Builtin] = {
    "quickstart": Builtin("a small CNN block and attention products: 3 C2D + 2 BMM (eto tune's default)",
                          quickstart_layers),
    "resnet50": Builtin("ResNet-50 v1, batch 1: 20 C2D", resnet50_layers, {"batch": 1, "hw": 224}),
    "resnet50_l": Builtin("ResNet-50 at batch 1 and 16: 40 C2D", _resnet50_l),
    "mobilenetv2": Builtin("MobileNetV2 1.0, batch 1: 21 C2D + 10 DEP", mobilenet_v2_layers, {"batch": 1, "hw": 224}),
    "resnest50": Builtin("ResNeSt-50 (2s1x64d), batch 1: 26 C2D + 7 GRP", resnest50_layers, {"batch": 1}),
    "r2plus1d18": Builtin("R(2+1)D-18, batch 1, 16x112x112 clips: C3D", r2plus1d_18_layers,
                          {"batch": 1, "frames": 16, "size": 112}),
    "dcgan": Builtin("DCGAN generator, batch 1, 64x64: 5 T2D", dcgan_generator_layers, {"batch": 1}),
    "bert_base": Builtin("BERT-Base, batch 1, sequence 128: 5 BMM", bert_layers, {"batch": 1, "seq": 128}),
    "bert_l": Builtin("BERT-Base and BERT-Large, batch 1 and 16, sequence 64 and 128: 36 BMM", _bert_l),
}
