"""Whether the default layout, ``auto``, compiles the benchmark models exactly as the layout chosen by hand
for them did (ResNet-50: ``NHWC-winograd``, MobileNetV2: ``NHWC``, the BERT-Base layer: as written):
the same module (structural hash of the prepared model) builds the same programs, so the same speed.

    python -m experiments.tools.default_layout

Prints one line per model: what ``auto`` chose on this machine, and whether the modules are the same.
Measures nothing but the cores' peak and bandwidth ``auto`` predicts Winograd from; a second or two a model.
"""

from __future__ import annotations

import sys

HAND_PICKED = {"resnet50": "NHWC-winograd", "mobilenetv2": "NHWC", "bert_layer": "NCHW"}


def main() -> int:
    import tvm_ffi

    from eto.models.examples import example
    from eto.models.layout import with_layout
    from eto.models.load import torch_to_relax
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    target, same = parse_target("cpu"), True
    for name, hand in HAND_PICKED.items():
        module, x = example(name)
        model = torch_to_relax(module, x, name=name)
        auto, picked = (model_tasks(with_layout(model, layout), target) for layout in ("auto", hand))
        equal = tvm_ffi.structural_hash(auto.bound) == tvm_ffi.structural_hash(picked.bound)
        same &= equal
        print(f"{name}: auto = {auto.layout.describe()}; {'the same module as' if equal else 'NOT the module of'} "
              f"--layout {hand}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
