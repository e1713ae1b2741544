"""The models built in code (:mod:`eto.models.examples`) that builds are checked against.

A built model is judged by its outputs against PyTorch's, which proves something only if the reference
model's output depends on its input: untrained, a deep network without residuals (MobileNetV2) shrinks
its activations to nothing and outputs its classifier's bias for any input.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["mobilenetv2", "resnet18", "tiny_mobilenet", "tiny_cnn"])
def test_an_example_models_output_depends_on_its_input(name):
    from eto.models.examples import example

    module, x = example(name)
    with torch.no_grad():
        a, b = module(x), module(torch.randn_like(x))
    scale = float(a.abs().mean())
    assert scale > 1e-2
    assert float((a - b).abs().max()) > 0.1 * scale


def test_batch_norms_carry_their_inputs_statistics_and_the_same_seed_gives_the_same_model():
    from eto.models.examples import example

    module, x = example("tiny_mobilenet")
    norms = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and not module.training and all(not m.training for m in norms)
    assert all(float((m.running_var - 1).abs().max()) > 1e-3 for m in norms)  # not PyTorch's defaults
    again, y = example("tiny_mobilenet")
    other, _ = example("tiny_mobilenet", seed=1)
    with torch.no_grad():
        assert torch.equal(module(x), again(y))
        assert not torch.equal(module(x), other(x))
