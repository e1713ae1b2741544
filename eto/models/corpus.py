"""A corpus of real architectures, built in code with random weights (no download): what eto's layouts
are proven on beyond its benchmark models.

torchvision's classification families and a segmentation network, and Hugging Face ``transformers``
encoders and a decoder built from their configurations. Each :class:`CorpusModel` makes its module
and example input on demand; :data:`SCALES` picks the models and sizes: ``ci`` a handful of small
ones at small inputs (tests), ``small`` every model at its usual input size. Needs the ``corpus``
extra: ``pip install torch==2.13.0 -e '.[corpus]'``.

PyPI's torchvision wheels are built against PyTorch's CUDA build; under the CPU build of the same
PyTorch their C++ operators (``nms``, ``roi_align``: detection only) cannot load, and torchvision
then fails at import on registering two of them. :func:`torchvision` defines those two operators'
schemas first, so the Python models, which never call them, import.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Literal

Scale = Literal["ci", "small"]
_TORCHVISION_OPS: Any = None


@dataclass(frozen=True)
class CorpusModel:
    """One architecture: its name, family (what it is there to cover), and how to make it."""

    name: str
    family: str
    make: Callable[[Scale], tuple[Any, tuple[Any, ...]]]  # scale -> (module in eval mode, example inputs)
    scales: tuple[str, ...] = ("small",)


def torchvision():
    """``torchvision``, imported under PyTorch's CPU build (see the module's docstring)."""
    global _TORCHVISION_OPS
    import torch

    try:
        import torchvision as tv

        return tv
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    _TORCHVISION_OPS = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _TORCHVISION_OPS.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision as tv

    return tv


def _vision(name: str, size: int = 224, ci_size: int = 64, **kwargs: Any) -> Callable[[Scale], tuple[Any, tuple]]:
    def make(scale: Scale):
        import torch

        torch.manual_seed(0)
        models = torchvision().models
        builder = getattr(models, name, None) or getattr(models.segmentation, name)
        side = ci_size if scale == "ci" else size
        module = informative(builder(weights=None, **kwargs), (1, 3, side, side))
        return module, (torch.randn(1, 3, side, side),)

    return make


def informative(module: Any, shape: tuple[int, ...], *, batch: int = 4) -> Any:
    """``module`` in eval mode with weights whose output depends on its input: every all-zero weight
    (ViT's classifier head starts so) drawn from N(0, 0.02^2), and each batch norm's statistics those of
    its input on a random batch. Why: with untrained statistics a deep network shrinks its input at every
    layer (MobileNets' outputs fell to 1e-9, EfficientNet's to 1e-14) or loses it (GoogLeNet's and
    DeepLabv3's outputs did not change with the input), and a built model that computed nothing would
    still match PyTorch. See :func:`eto.models.examples.calibrate_batch_norms`."""
    import torch

    from eto.models.examples import calibrate_batch_norms

    with torch.no_grad():
        for param in module.parameters():
            if param.dim() >= 2 and not param.any():
                param.normal_(0.0, 0.02)
    return calibrate_batch_norms(module.eval(), shape, batch).eval()  # eval: no dropout, where there is no norm too


class _FirstOutput:
    """A module whose first output (a segmentation's ``out``, a transformer's last hidden state) is the model's."""

    def __new__(cls, module: Any):
        import torch

        class First(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = module

            def forward(self, *args):
                out = self.inner(*args)
                if hasattr(out, "last_hidden_state"):
                    return out.last_hidden_state
                if isinstance(out, dict):
                    return out["out"]
                return out[0] if isinstance(out, (tuple, list)) else out

        return First().eval()


def _segmentation(name: str, **kwargs: Any) -> Callable[[Scale], tuple[Any, tuple]]:
    inner = _vision(name, size=224, ci_size=64, aux_loss=False, weights_backbone=None, **kwargs)  # no download

    def make(scale: Scale):
        module, inputs = inner(scale)
        return _FirstOutput(module), inputs

    return make


def _transformer(kind: str, tokens: int | None = None) -> Callable[[Scale], tuple[Any, tuple]]:
    """A ``transformers`` model from its default config, random weights; ``tokens``: the input's length
    (default 128, 16 at ``ci``)."""

    def make(scale: Scale):
        import torch

        torchvision()  # transformers imports it where it is installed
        import transformers as hf

        torch.manual_seed(0)
        small = scale == "ci"
        if kind == "bert":
            config = hf.BertConfig(**({"num_hidden_layers": 2} if small else {}))
            model = hf.BertModel(config, add_pooling_layer=False)
        elif kind == "distilbert":
            config = hf.DistilBertConfig(**({"n_layers": 2} if small else {}))
            model = hf.DistilBertModel(config)
        elif kind == "gpt2":
            config = hf.GPT2Config(**({"n_layer": 2} if small else {}), use_cache=False)
            model = hf.GPT2Model(config)
        else:
            config = hf.ViTConfig(**({"num_hidden_layers": 2} if small else {}), image_size=32 if small else 224)
            model = hf.ViTModel(config, add_pooling_layer=False)
            return _FirstOutput(model.eval()), (torch.randn(1, 3, config.image_size, config.image_size),)
        length = tokens or (16 if small else 128)
        return _FirstOutput(model.eval()), (torch.randint(0, config.vocab_size, (1, length)),)

    return make


#: Every corpus model, CNNs first. ``ci`` marks the handful the slow test and ``--scale ci`` run.
MODELS: tuple[CorpusModel, ...] = (
    CorpusModel("resnet18", "ResNet (basic blocks)", _vision("resnet18"), ("ci", "small")),
    CorpusModel("resnet50", "ResNet (bottlenecks)", _vision("resnet50")),
    CorpusModel("resnext50_32x4d", "ResNeXt (grouped convolutions)", _vision("resnext50_32x4d")),
    CorpusModel("wide_resnet50_2", "Wide ResNet", _vision("wide_resnet50_2")),
    CorpusModel("vgg11_bn", "VGG (dropout, flatten into a classifier)", _vision("vgg11_bn")),
    CorpusModel("mobilenet_v2", "MobileNet v2 (depthwise, ReLU6)", _vision("mobilenet_v2")),
    CorpusModel("mobilenet_v3_large", "MobileNet v3 (squeeze-excitation, hardswish)", _vision("mobilenet_v3_large"),
                ("ci", "small")),
    CorpusModel("efficientnet_b0", "EfficientNet (SiLU, squeeze-excitation)", _vision("efficientnet_b0")),
    CorpusModel("regnet_y_400mf", "RegNet (grouped, squeeze-excitation)", _vision("regnet_y_400mf")),
    CorpusModel("densenet121", "DenseNet (concat, batch norm after concat)", _vision("densenet121")),
    CorpusModel("googlenet", "GoogLeNet / Inception v1 (concat of branches)", _vision("googlenet", aux_logits=False,
                                                                                      init_weights=True)),
    CorpusModel("inception_v3", "Inception v3 (asymmetric convolutions, concat)",
                _vision("inception_v3", size=299, ci_size=96, aux_logits=False, init_weights=True)),
    CorpusModel("squeezenet1_0", "SqueezeNet (Fire: concat of branches, dropout)", _vision("squeezenet1_0"),
                ("ci", "small")),
    CorpusModel("shufflenet_v2_x1_0", "ShuffleNet v2 (split, channel shuffle)", _vision("shufflenet_v2_x1_0"),
                ("ci", "small")),
    CorpusModel("mnasnet1_0", "MnasNet", _vision("mnasnet1_0")),
    CorpusModel("convnext_tiny", "ConvNeXt (7x7 depthwise, layer norm channels last)", _vision("convnext_tiny")),
    CorpusModel("vit_b_16", "ViT-B/16 (torchvision; patch convolution, attention)", _vision("vit_b_16")),
    CorpusModel("swin_t", "Swin-T (windowed attention, pad, roll)", _vision("swin_t")),
    CorpusModel("lraspp_mobilenet_v3_large", "LR-ASPP segmentation (bilinear resize, sigmoid gate)",
                _segmentation("lraspp_mobilenet_v3_large")),
    CorpusModel("fcn_resnet50", "FCN segmentation (dilated ResNet-50, resize)", _segmentation("fcn_resnet50")),
    CorpusModel("deeplabv3_mobilenet_v3_large", "DeepLabv3 (ASPP: dilated branches, global pool, concat)",
                _segmentation("deeplabv3_mobilenet_v3_large")),
    CorpusModel("bert", "BERT-Base encoder (transformers)", _transformer("bert"), ("ci", "small")),
    CorpusModel("distilbert", "DistilBERT encoder (transformers)", _transformer("distilbert")),
    CorpusModel("gpt2", "GPT-2 decoder (transformers; causal mask)", _transformer("gpt2")),
    CorpusModel("vit_hf", "ViT encoder (transformers)", _transformer("vit")),
)


def corpus(scale: Scale = "small", names: "list[str] | None" = None) -> list[CorpusModel]:
    """The models of ``scale`` (``small``: all), or those named, in the corpus's order."""
    known = {m.name: m for m in MODELS}
    if names:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown corpus model(s) {', '.join(unknown)}: one of {', '.join(known)}")
        return [known[n] for n in names]
    return [m for m in MODELS if scale == "small" or scale in m.scales]


#: The corpus's text models, which also come at other input lengths: ``bert:40`` is BERT on 40 tokens.
TEXT_MODELS = ("bert", "distilbert", "gpt2")


def make_model(name: str, scale: Scale = "small") -> tuple[Any, tuple]:
    """A model's module and inputs by name: a corpus model, a text model at another input length
    (``bert:40``: its weights are the same model's, seeded alike), or a torchvision classification model
    outside the corpus (``resnet34``, ``resnet101``, ``efficientnet_b1`` ...) made the way the corpus makes
    its own, so a model zoo can hold a family's other sizes, and a retune other shapes."""
    known = {m.name: m for m in MODELS}
    base, _, tokens = name.partition(":")
    if tokens:
        if base not in TEXT_MODELS or not tokens.isdigit() or int(tokens) < 1:
            raise ValueError(f"unknown model {name!r}: NAME:TOKENS is a text model ({', '.join(TEXT_MODELS)}) "
                             "at a positive number of tokens, e.g. bert:40")
        return _transformer(base, int(tokens))(scale)
    if name in known:
        return known[name].make(scale)
    if not callable(getattr(torchvision().models, name, None)):
        raise ValueError(f"unknown model {name!r}: a corpus model ({', '.join(known)}) or a torchvision "
                         "classification model")
    return _vision(name)(scale)


def onnx_bytes(module: Any, inputs: tuple) -> bytes:
    """``module`` on ``inputs`` as an ONNX file's bytes: the TorchScript exporter at opset 17, or, for an
    operator it lacks (GPT-2's ``aten::diff``), the ``torch.export``-based one at opset 18."""
    import io

    import torch

    buf = io.BytesIO()
    with torch.no_grad():
        try:
            torch.onnx.export(module, inputs, buf, dynamo=False, opset_version=17)
        except Exception:  # noqa: BLE001 -- the exporter's errors vary by operator
            buf = io.BytesIO()
            torch.onnx.export(module, inputs, buf, dynamo=True, opset_version=18, verbose=False)
    return buf.getvalue()


__all__ = ["MODELS", "TEXT_MODELS", "CorpusModel", "Scale", "corpus", "onnx_bytes", "make_model", "torchvision"]
