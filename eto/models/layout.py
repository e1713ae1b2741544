"""The layout a model's convolutions are tuned and built in: NCHW as the model is written, or NHWC.

Frameworks write CNNs in NCHW; CPU libraries run them channels last (ONNX Runtime's MLAS in
channel-blocked NCHWc, oneDNN in NHWC or blocked layouts), because a CPU vectorises the contiguous
axis and the channels are the axis every convolution reduces or produces. MetaSchedule's programs
follow the layout they are given: at the same budget (64 trials) its programs for common CNN
convolutions ran 1.6-3.6x faster in NHWC than in NCHW on a 2-core AMD EPYC
(``python -m experiments.tools.layout_probe``). ``--layout NHWC`` converts every ungrouped 2-D
convolution with Relax's ``ConvertLayout`` after the batch norms are folded, before the model is
fused (:func:`eto.models.tasks.prepare`): the transposes it inserts sit only where the layout
changes (the model's input, a flatten, a grouped convolution left in NCHW), the weights' are folded
into constants, and the convolutions become the catalogue's ``C2DNHWC``
(:mod:`eto.operators.channels_last`). Grouped and depthwise convolutions stay NCHW.

A database holds the functions of the layout it was tuned in: build and bench the model with the
same ``--layout`` (otherwise its convolutions are named as having no program).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from eto.errors import InputError
from eto.models.load import RelaxModel

if TYPE_CHECKING:  # pragma: no cover
    import tvm

#: The layouts a model's convolutions can be tuned and built in.
Layout = Literal["NCHW", "NHWC"]
LAYOUTS: tuple[str, ...] = get_args(Layout)


def with_layout(model: RelaxModel, layout: str = "NCHW") -> RelaxModel:
    """``model`` to be prepared with its convolutions in ``layout`` (NCHW: as written)."""
    if layout not in LAYOUTS:
        raise InputError(f"unknown layout {layout!r}: one of {', '.join(LAYOUTS)}")
    if layout == model.layout:
        return model
    return model._replace(layout=layout, source=f"{model.source}, {layout}")


def convert_layout(mod: "tvm.IRModule", layout: str) -> "tvm.IRModule":
    """``mod``'s ungrouped 2-D convolutions in ``layout`` (NHWC data, OHWI weights), constants folded."""
    from tvm import relax

    if layout == "NCHW":
        return mod

    def desired(call) -> dict:
        if call.op.name == "relax.nn.conv2d" and int(call.attrs.groups) == 1:
            return {"relax.nn.conv2d": ["NHWC", "OHWI"]}
        return {}

    return relax.transform.FoldConstant()(relax.transform.ConvertLayout({}, layout_cb=desired)(mod))
