"""Built-in operator sets against the paper's Table 2 (the operator shapes of ResNet-50, MobileNetV2 and BERT-Base)."""

from collections import Counter

import pytest

from eto.operators import Operator
from eto.operators.opsets import OperatorSet, builtin_opset, builtin_opsets, load_opset

# [CO, OH, OW, CI, KH, KW] and stride, from the reference (N = 1).
RESNET50 = [
    ((64, 112, 112, 3, 7, 7), 2), ((64, 56, 56, 64, 1, 1), 1), ((64, 56, 56, 64, 3, 3), 1),
    ((256, 56, 56, 64, 1, 1), 1), ((64, 56, 56, 256, 1, 1), 1), ((128, 28, 28, 256, 1, 1), 2),
    ((128, 28, 28, 128, 3, 3), 1), ((512, 28, 28, 128, 1, 1), 1), ((512, 28, 28, 256, 1, 1), 2),
    ((128, 28, 28, 512, 1, 1), 1), ((256, 14, 14, 512, 1, 1), 2), ((256, 14, 14, 256, 3, 3), 1),
    ((1024, 14, 14, 256, 1, 1), 1), ((1024, 14, 14, 512, 1, 1), 2), ((256, 14, 14, 1024, 1, 1), 1),
    ((512, 7, 7, 1024, 1, 1), 2), ((512, 7, 7, 512, 3, 3), 1), ((2048, 7, 7, 512, 1, 1), 1),
    ((2048, 7, 7, 1024, 1, 1), 2), ((512, 7, 7, 2048, 1, 1), 1),
]
MOBILENET_K1 = [(32, 112, 112, 3, 3, 3)] + [
    (co, h, h, ci, 1, 1)
    for co, h, ci in [(16, 112, 32), (96, 112, 16), (24, 56, 96), (144, 56, 24), (24, 56, 144), (32, 28, 144),
                      (192, 28, 32), (32, 28, 192), (64, 14, 192), (384, 14, 64), (64, 14, 384), (96, 14, 384),
                      (576, 14, 96), (96, 14, 576), (160, 7, 576), (960, 7, 160), (160, 7, 960), (320, 7, 960),
                      (1280, 7, 320)]
]
MOBILENET_DEP = {(960, 7, 1), (576, 7, 2), (576, 14, 1), (384, 14, 1), (192, 14, 2), (192, 28, 1),
                 (144, 28, 2), (144, 56, 1), (96, 56, 2), (32, 112, 1)}
BERT_BASE = {(12, 128, 128, 64), (12, 128, 64, 128), (1, 128, 768, 768), (1, 128, 3072, 768), (1, 128, 768, 3072)}


def test_resnet50_has_the_20_reference_conv2d_with_53_layers():
    s = builtin_opset("resnet50")
    assert len(s) == 20 and s.count_by_type() == {"C2D": 20}
    assert sum(e.frequency for e in s) == 53
    got = {(e.op.extents[1:], e.op["stride"][0]) for e in s}
    assert got == set(RESNET50)
    assert all(e.op.extents[0] == 1 for e in s)
    freq = {e.op.extents[1:]: e.frequency for e in s}
    assert freq[(64, 56, 56, 64, 3, 3)] == 3 and freq[(256, 14, 14, 256, 3, 3)] == 6
    assert len({e.op.sketch_key() for e in s}) == 1  # one sketch set: K1


def test_mobilenetv2_has_20_plus_1_conv2d_and_10_depthwise():
    s = builtin_opset("mobilenetv2")
    c2d = [e.op for e in s if e.op.type == "C2D"]
    dep = [e.op for e in s if e.op.type == "DEP"]
    assert len(c2d) == 21 and len(dep) == 10
    sketches = Counter(op.sketch_key() for op in c2d)
    assert sorted(sketches.values()) == [1, 20]  # K1 and the classifier's K2
    k2 = [op for op in c2d if sketches[op.sketch_key()] == 1]
    assert k2[0].extents == (1, 1000, 1, 1, 1280, 1, 1)
    assert {op.extents[1:] for op in c2d if op not in k2} == set(MOBILENET_K1)
    assert {(op.extents[1], op.extents[2], op["stride"][0]) for op in dep} == MOBILENET_DEP
    assert sum(e.frequency for e in s) == 52 + 1


def test_bert_base_has_5_batch_matmuls():
    s = builtin_opset("bert_base")
    assert {e.op.extents for e in s} == BERT_BASE
    assert s.count_by_type() == {"BMM": 5}
    assert {e.op.extents: e.frequency for e in s}[(1, 128, 768, 768)] == 48  # Q, K, V, output x 12 layers


@pytest.mark.parametrize(
    "name,expected",
    [
        ("resnet50_l", {"C2D": 40}),
        ("resnest50", {"C2D": 26, "GRP": 7}),
        ("r2plus1d18", {"C3D": 25}),
        ("dcgan", {"T2D": 5}),
        ("bert_l", {"BMM": 36}),
    ],
)
def test_other_sets_match_table_2(name, expected):
    assert builtin_opset(name).count_by_type() == expected


def test_resnest50_sketch_sets_match_table_2():
    s = builtin_opset("resnest50")
    c2d = Counter(e.op.sketch_key() for e in s if e.op.type == "C2D")
    assert sorted(c2d.values()) == [4, 22]  # 22 C2D (K1) + 4 C2D (K2): the attention fc1 layers


def test_bert_l_duplicates_are_the_seq64_attention_matmuls():
    # 8 configurations x 5 matmuls = 40; with seq = head dim = 64 the score and context matmuls coincide.
    s = builtin_opset("bert_l")
    assert len(s) == 36
    assert sum(e.frequency for e in s) == 4 * (12 * 8) + 4 * (24 * 8)


def test_json_round_trip(tmp_path):
    s = builtin_opset("mobilenetv2")
    path = tmp_path / "mbv2.json"
    s.save(path)
    again = load_opset(str(path))
    assert again.entries == s.entries and again.name == "mobilenetv2"


def test_json_merges_duplicates_and_reports_bad_entries(tmp_path):
    op = {"type": "BMM", "params": {"B": 1, "M": 2, "N": 3, "K": 4}}
    s = OperatorSet.from_json({"operators": [{**op, "frequency": 2}, {**op, "frequency": 3}]})
    assert len(s) == 1 and s.entries[0].frequency == 5
    with pytest.raises(ValueError, match=r"operator #1: unknown operator type 'XYZ'"):
        OperatorSet.from_json({"operators": [op, {"type": "XYZ"}]}, source="f.json")
    with pytest.raises(ValueError, match=r"operator #0: frequency must be a positive integer"):
        OperatorSet.from_json({"operators": [{**op, "frequency": 0}]})
    # a model's function (found by the fuzzer: the plan's first look at it named no file)
    with pytest.raises(ValueError, match=r"f.json: operator #1: TASK: a model function's program comes from its model"):
        OperatorSet.from_json({"operators": [op, {"type": "TASK", "params": {"size": 1, "hash": 1}}]}, source="f.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        load_opset(str(bad))
    with pytest.raises(ValueError, match="unknown operator set 'nope'"):
        builtin_opset("nope")


def test_union_adds_frequencies():
    a = OperatorSet.from_layers("a", [Operator.create("DENSE", M=1, N=2, K=3)] * 2)
    b = OperatorSet.from_layers("b", [Operator.create("DENSE", M=1, N=2, K=3), Operator.create("DENSE", M=2, N=2, K=3)])
    u = OperatorSet.union("u", [a, b])
    assert [e.frequency for e in u] == [3, 1]


def test_every_builtin_set_loads():
    for name in builtin_opsets():
        s = builtin_opset(name)
        assert len(s) > 0 and all(e.frequency >= 1 for e in s)
