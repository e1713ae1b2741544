"""Definition 5 (bridge operators): hand examples and the paper's operator sets.

Loop nests are the paper's Table 2 models' (ResNet-50's, eto.operators.opsets):
conv2d ``[N, CO, OH, OW, CI, KH, KW]``, depthwise ``[N, C, OH, OW, KH, KW]``, batch_matmul
``[b, i, j, k]``; N = 1.
"""

import itertools

import pytest

from selector import (LoopNestOp, analytic_cost_fn, bridge_of, bridge_operators, build_oc_graph,
                      is_reuse_pair, reuse_pairs)

RESNET50 = [
    [64, 112, 112, 3, 7, 7], [64, 56, 56, 64, 1, 1], [64, 56, 56, 64, 3, 3], [256, 56, 56, 64, 1, 1],
    [64, 56, 56, 256, 1, 1], [128, 28, 28, 256, 1, 1], [128, 28, 28, 128, 3, 3], [512, 28, 28, 128, 1, 1],
    [512, 28, 28, 256, 1, 1], [128, 28, 28, 512, 1, 1], [256, 14, 14, 512, 1, 1], [256, 14, 14, 256, 3, 3],
    [1024, 14, 14, 256, 1, 1], [1024, 14, 14, 512, 1, 1], [256, 14, 14, 1024, 1, 1], [512, 7, 7, 1024, 1, 1],
    [512, 7, 7, 512, 3, 3], [2048, 7, 7, 512, 1, 1], [2048, 7, 7, 1024, 1, 1], [512, 7, 7, 2048, 1, 1],
]
MOBILENETV2_K1 = [[32, 112, 112, 3, 3, 3]] + [s + [1, 1] for s in [
    [16, 112, 112, 32], [96, 112, 112, 16], [24, 56, 56, 96], [144, 56, 56, 24], [24, 56, 56, 144],
    [32, 28, 28, 144], [192, 28, 28, 32], [32, 28, 28, 192], [64, 14, 14, 192], [384, 14, 14, 64],
    [64, 14, 14, 384], [96, 14, 14, 384], [576, 14, 14, 96], [96, 14, 14, 576], [160, 7, 7, 576],
    [960, 7, 7, 160], [160, 7, 7, 960], [320, 7, 7, 960], [1280, 7, 7, 320]]]
MOBILENETV2_K2 = [[1000, 1, 1, 1280, 1, 1]]
MOBILENETV2_DEP = [(960, 7), (576, 7), (576, 14), (384, 14), (192, 14), (192, 28), (144, 28),
                   (144, 56), (96, 56), (32, 112)]
BERT_BASE_BMM = [[12, 128, 128, 64], [12, 128, 64, 128], [1, 128, 768, 768], [1, 128, 3072, 768],
                 [1, 128, 768, 3072]]


def conv(name, ext, sketch="K1"):
    ext = [1, *ext]
    return LoopNestOp(name=name, type="C2D", sketch=sketch, space=ext[:4], reduction=ext[4:])


def resnet50():
    return [conv(f"r50_{i}", e) for i, e in enumerate(RESNET50)]


def mobilenetv2():
    ops = [conv(f"mb_{i}", e) for i, e in enumerate(MOBILENETV2_K1)]
    ops += [conv("mb_fc", MOBILENETV2_K2[0], sketch="K2")]
    ops += [LoopNestOp(name=f"mb_dw{i}", type="DEP", sketch="K3", space=(1, c, o, o), reduction=(3, 3))
            for i, (c, o) in enumerate(MOBILENETV2_DEP)]
    return ops


def bert_base():
    return [LoopNestOp(name=f"bmm{i}", type="BMM", sketch="K", space=tuple(e[:3]), reduction=(e[3],))
            for i, e in enumerate(BERT_BASE_BMM)]


# -- Definition 5 on hand examples ------------------------------------------------------------

def test_paper_bridge_example():
    alpha = conv("alpha", [64, 14, 14, 64, 3, 3])
    beta = conv("beta", [64, 28, 28, 64, 1, 1])
    assert bridge_of(alpha, beta) == (1, 64, 14, 14, 64, 1, 1)
    [gamma] = bridge_operators([alpha, beta])
    assert gamma.extents == (1, 64, 14, 14, 64, 1, 1)
    assert gamma.name == "bridge:C2D[1,64,14,14,64,1,1]"
    assert gamma.bridge and gamma.frequency == 0 and not gamma.tuned
    assert (gamma.type, gamma.sketch) == ("C2D", "K1")
    assert gamma.space == (1, 64, 14, 14) and gamma.reduction == (64, 1, 1)
    for x in (alpha, beta):  # the bridge connects both ways to both
        assert is_reuse_pair(x, gamma) and is_reuse_pair(gamma, x)


def test_no_bridge_for_reuse_pairs_or_other_classes():
    a, b = conv("a", [64, 28, 28, 64, 3, 3]), conv("b", [64, 14, 14, 64, 1, 1])
    assert bridge_of(a, b) is None                       # already a reuse pair
    assert bridge_operators([a, b]) == []
    c = conv("c", [64, 56, 56, 64, 1, 1], sketch="K2")  # different sketch set
    d = conv("d", [64, 14, 14, 64, 3, 3])
    assert bridge_of(c, d) is None
    assert bridge_operators([c, d]) == []


def test_bridge_equal_to_an_existing_operator_is_not_new():
    a = conv("a", [64, 14, 14, 64, 3, 3])
    b = conv("b", [64, 28, 28, 64, 1, 1])
    existing = conv("existing", [64, 14, 14, 64, 1, 1])
    assert bridge_operators([a, b, existing]) == []


def test_sketch_check_vetoes_bridges_and_their_descendants():
    ops = bert_base()
    seen = []

    def check(op):
        seen.append(op.name)
        return op.extents[0] != 12   # reject [12,128,64,64]

    bridges = bridge_operators(ops, hops="all", sketch_check=check)
    names = {b.name for b in bridges}
    assert "bridge:BMM[12,128,64,64]" not in names
    assert names == {"bridge:BMM[1,128,128,64]", "bridge:BMM[1,128,64,128]", "bridge:BMM[1,128,64,64]"}
    assert len(seen) == len(set(seen))  # each candidate checked once
    assert bridge_operators(ops, sketch_check=lambda op: False) == []


def test_sketch_in_name_when_a_type_has_several_sketches():
    ops = [conv("a", [64, 14, 14, 64, 3, 3]), conv("b", [64, 28, 28, 64, 1, 1]),
           conv("c", [64, 14, 14, 64, 3, 3], sketch="K2"), conv("d", [64, 28, 28, 64, 1, 1], sketch="K2")]
    names = sorted(b.name for b in bridge_operators(ops))
    assert names == ["bridge:C2D@K1[1,64,14,14,64,1,1]", "bridge:C2D@K2[1,64,14,14,64,1,1]"]


def test_hops_argument():
    ops = bert_base()
    assert bridge_operators(ops, hops=0) == []
    assert len(bridge_operators(ops, hops=1)) == 3
    assert len(bridge_operators(ops, hops=2)) == 4
    assert len(bridge_operators(ops, hops="all")) == 4
    for bad in (-1, "2", 1.5, True):
        with pytest.raises(ValueError):
            bridge_operators(ops, hops=bad)


def _naive_closure(extents):
    """Reference: recompute all pairwise bridges of the whole pool until nothing new appears."""
    pool, hops = set(map(tuple, extents)), []
    while True:
        new = set()
        for a, b in itertools.combinations(sorted(pool), 2):
            if all(x <= y for x, y in zip(a, b)) or all(x >= y for x, y in zip(a, b)):
                continue
            g = tuple(map(min, a, b))
            if g not in pool:
                new.add(g)
        if not new:
            return hops
        hops.append(new)
        pool |= new


def test_k_hop_sets_match_naive_recomputation():
    ops = mobilenetv2()[:20]
    naive = _naive_closure([o.extents for o in ops])
    got_all = bridge_operators(ops, hops="all")
    assert {b.extents for b in got_all} == set().union(*naive)
    for k in range(1, len(naive) + 1):
        got = {b.extents for b in bridge_operators(ops, hops=k)}
        assert got == set().union(*naive[:k])
    # listed by hop: the first |B_1| are the 1-hop bridges
    assert {b.extents for b in got_all[:len(naive[0])]} == naive[0]


# -- the paper's operator sets ----------------------------------------------------------------

def test_resnet50_bridge_counts():
    ops = resnet50()
    assert len(bridge_operators(ops)) == 44
    assert len(bridge_operators(ops, hops="all")) == 49


def test_mobilenetv2_bridge_counts():
    ops = mobilenetv2()
    assert len(bridge_operators(ops)) == 81
    assert len(bridge_operators(ops, hops="all")) == 121
    by_class = {}
    for b in bridge_operators(ops, hops="all"):
        by_class[(b.type, b.sketch)] = by_class.get((b.type, b.sketch), 0) + 1
    assert by_class == {("C2D", "K1"): 110, ("DEP", "K3"): 11}
    assert len([b for b in bridge_operators(ops) if b.type == "C2D"]) == 70


def test_bert_base_reuse_pairs_with_and_without_bridges():
    ops = bert_base()
    # Figure 6a: 4 reuse pairs, i.e. 2 comparable pairs in both directions:
    # [1,128,768,768] <-> [1,128,3072,768] and [1,128,768,768] <-> [1,128,768,3072].
    assert len(reuse_pairs(ops)) == 4
    bridges = bridge_operators(ops)
    assert sorted(b.extents for b in bridges) == [(1, 128, 64, 128), (1, 128, 128, 64), (12, 128, 64, 64)]
    # Figure 6b: 24 reuse pairs with the 3 one-hop bridges.  These are ordered pairs (= OC-graph
    # reuse edges; root edges not counted): 12 comparable unordered pairs x 2 directions --
    # the 2 above, [12,128,64,64] with both attention BMMs (2), [1,128,128,64] with
    # [12,128,128,64] and the three b=1 BMMs (4), [1,128,64,128] with [12,128,64,128] and the
    # three b=1 BMMs (4).  The bridges are pairwise incomparable (their own bridge
    # [1,128,64,64] is the single 2-hop bridge).
    assert len(reuse_pairs(ops + bridges)) == 24
    G = build_oc_graph(ops, cost_fn=analytic_cost_fn(1000), backend_cost=1000, bridges=bridges)
    assert G.graph["candidate_pairs"] == 24
    assert G.number_of_edges() == 24 + 8   # plus one root edge per node
    assert G.number_of_nodes() == 1 + 5 + 3


def test_closure_of_many_operators_compares_each_pair_once_and_checks_each_bridge_once(monkeypatch):
    """The closure's work (docstring of :func:`bridge_operators`): a hop compares only the operators the
    previous hop added with the pool, so no ordered pair of a class is compared twice (a closure that
    compared the whole pool with itself at each hop would); one sketch check per distinct bridge."""
    from collections import Counter

    import selector.bridge as bridge_module

    ops = [conv(f"b{n}_{i}", e) for n in (1, 16, 4) for i, e in enumerate(RESNET50 + MOBILENETV2_K1)]
    ops = [LoopNestOp(name=o.name, type=o.type, sketch=o.sketch, space=(int(o.name[1:].split("_")[0]),
                      *o.space[1:]), reduction=o.reduction) for o in ops]
    compared, checked = [], []
    comparable_mask = bridge_module.comparable_mask
    monkeypatch.setattr(bridge_module, "comparable_mask",
                        lambda rows, cols: compared.append(len(rows) * len(cols)) or comparable_mask(rows, cols))
    bridges = bridge_operators(ops, hops="all", sketch_check=lambda op: checked.append(op.extents) or True)
    per_class = Counter(o.reuse_class for o in ops + bridges)
    assert len(bridges) > len(ops) and 0 < sum(compared) <= sum(n * n for n in per_class.values())
    assert sorted(checked) == sorted(b.extents for b in bridges)
    keys = {b.extents for b in bridges}
    assert len(keys) == len(bridges)                      # no duplicates
    assert not keys & {o.extents for o in ops}            # nothing equal to an input
    assert all(b.extents in keys for b in bridges)
