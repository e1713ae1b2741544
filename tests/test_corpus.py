"""The corpus of real architectures (eto/models/corpus.py, experiments/corpus.py) at scale ci: a handful
of models outside the benchmarks, through both importers, in every layout, built and checked against
PyTorch (the full corpus: ``python -m experiments.corpus``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")


def test_the_corpus_names_its_models_and_refuses_unknown_ones():
    from eto.models.corpus import MODELS, corpus

    assert len(MODELS) >= 25 and len({m.name for m in MODELS}) == len(MODELS)
    assert {m.name for m in corpus("ci")} < {m.name for m in corpus("small")}
    with pytest.raises(ValueError, match="unknown corpus model.*alexnet.*one of resnet18"):
        corpus("small", ["alexnet"])


def test_a_text_model_comes_at_another_length_and_a_bad_length_is_named():
    """``bert:40``: the same BERT (same seed) on 40 tokens, so a retune can be measured on a new shape."""
    from eto.models.corpus import make_model

    for bad in ("resnet18:40", "bert:forty", "bert:0"):
        with pytest.raises(ValueError, match=f"unknown model '{bad}': NAME:TOKENS is a text model"):
            make_model(bad)
    pytest.importorskip("transformers")
    import torch

    short, (ids,) = make_model("bert:12", "ci")
    again, _ = make_model("bert", "ci")
    assert tuple(ids.shape) == (1, 12)
    assert all(torch.equal(a, b) for a, b in zip(short.state_dict().values(), again.state_dict().values()))


@pytest.mark.slow
@pytest.mark.parametrize("name, importer", [("squeezenet1_0", "pt2"), ("shufflenet_v2_x1_0", "onnx"),
                                            ("bert", "onnx")])
def test_a_corpus_model_builds_in_every_layout_and_matches_pytorch(name, importer):
    """SqueezeNet's Fire modules (concat of branches), ShuffleNet's split and channel shuffle (its ONNX
    export constant-folded by ONNX Runtime first: TVM's importer loses the shuffle's computed shape), a BERT
    encoder: every layout imports, plans, builds and matches PyTorch; every convolution is converted."""
    import importlib.util

    if not all(importlib.util.find_spec(m) for m in ("torchvision", "transformers")):
        pytest.skip("the corpus needs torchvision and transformers: pip install -e '.[corpus]'")
    from experiments.corpus import LAYOUTS, TOLERANCE, check_model

    rows = check_model(name, importer, list(LAYOUTS), "ci", None)
    assert [r["layout"] for r in rows] == list(LAYOUTS)
    for r in rows:
        assert r.get("ok") and not r.get("error"), r
        assert r["max_rel_error"] <= TOLERANCE
        if r["layout"] != "NCHW":
            assert r["channels_last"] == r["convolutions"] and not r["left_as_written"], r
    assert rows[-1]["resolved"] == "NCHW" and rows[-1]["channels_last"] == 0
