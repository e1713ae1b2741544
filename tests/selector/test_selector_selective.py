"""Selective Tuning's similarity rate and clustering (the paper's set baseline) against brute force."""

import itertools
import math

import pytest

from selector import ROOT, LoopNestOp, selective_clusters, selective_plan, similarity_rate
from selector.selective import split_choices


def choices(extent: int, levels: int) -> set[tuple[int, ...]]:
    """Every split of a loop into ``levels`` tiles, the outermost taking the rest: the inner factors."""
    divisors = [d for d in range(1, extent + 1) if extent % d == 0]
    return {t for t in itertools.product(divisors, repeat=levels - 1) if extent % math.prod(t) == 0}


def op(name: str, space, reduction=(4,), type_="BMM", sketch="k1", frequency=1, tuned=False) -> LoopNestOp:
    return LoopNestOp(name=name, type=type_, sketch=sketch, space=tuple(space), reduction=tuple(reduction),
                      frequency=frequency, tuned=tuned)


@pytest.mark.parametrize("extent", [1, 2, 7, 12, 36, 64, 96, 210])
@pytest.mark.parametrize("levels", [1, 2, 3, 4])
def test_split_choices_counts_the_splits(extent, levels):
    assert split_choices(extent, levels) == len(choices(extent, levels))


def test_similarity_rate_is_the_product_of_per_loop_jaccard_indices():
    a, b = op("a", (2, 24, 36), (12,)), op("b", (2, 16, 36), (18,))
    want = 1.0
    for x, y, n in [(2, 2, 4), (24, 16, 4), (36, 36, 4), (12, 18, 2)]:
        ca, cb = choices(x, n), choices(y, n)
        want *= len(ca & cb) / len(ca | cb)
    assert similarity_rate(a, b) == pytest.approx(want)
    assert similarity_rate(a, a) == 1.0
    assert similarity_rate(a, b) == similarity_rate(b, a)
    # ST compares one template only: another type or sketch set is not similar at all
    assert similarity_rate(a, op("c", (2, 24, 36), (12,), type_="DENSE")) == 0.0
    assert similarity_rate(a, op("d", (2, 24, 36), (12,), sketch="k2")) == 0.0


def brute_force_clusters(ops, threshold):
    """ST's clustering written out directly: every maximal clique by enumeration of subsets."""
    n = len(ops)
    rate = [[similarity_rate(ops[i], ops[j]) if i != j else 1.0 for j in range(n)] for i in range(n)]
    adj = lambda i, j: i != j and rate[i][j] >= threshold  # noqa: E731
    cliques = []
    for r in range(n, 0, -1):
        for c in itertools.combinations(range(n), r):
            if all(adj(i, j) for i, j in itertools.combinations(c, 2)) and not any(set(c) < set(d) for d in cliques):
                cliques.append(c)
    return cliques, rate


SETS = [
    [op("a", (1, 128, 768)), op("b", (1, 128, 3072)), op("c", (12, 128, 128), (64,)),
     op("d", (12, 128, 64), (128,)), op("e", (1, 7, 7)), op("f", (1, 49, 49)),
     op("g", (1, 128, 768), type_="DENSE")],
    # a chain of ever larger loops: neighbours are similar, ends are not, so cliques overlap
    [op(str(x), (x,)) for x in (2, 8, 32, 128, 512, 2048)],
]


@pytest.mark.parametrize("ops", SETS)
@pytest.mark.parametrize("threshold", [0.01, 0.05, 0.1, 0.2, 1.0])
def test_clusters_follow_selective_tunings_rules(ops, threshold):
    rep = selective_clusters(ops, threshold=threshold)
    cliques, rate = brute_force_clusters(ops, threshold)
    assert set(rep) == {o.name for o in ops}
    idx = {o.name: i for i, o in enumerate(ops)}
    cluster: dict[str, set[int]] = {}
    for name, r in rep.items():
        cluster.setdefault(r, set()).add(idx[name])
    for r, members in cluster.items():
        assert rep[r] == r  # a representative represents itself
        assert any(members <= set(c) for c in cliques)  # a cluster lies inside one maximal clique
        sums = {m: sum(rate[m][q] for q in members) for m in members}
        assert sums[idx[r]] == pytest.approx(max(sums.values()))  # the most similar member represents it
    for o in ops:  # an operator of several cliques sits with the members it is most similar to
        i = idx[o.name]
        mine = cluster[rep[o.name]]
        for c in cliques:
            if i in c:
                other = next((m for m in cluster.values() if m & set(c) and m <= set(c)), set())
                assert sum(rate[i][q] for q in mine - {i}) >= sum(rate[i][q] for q in other - {i}) - 1e-12
    if threshold == 1.0:  # only identical loop nests would join
        assert len(cluster) == len(ops)


def test_clustering_joins_similar_operators_and_rejects_a_bad_threshold():
    rep = selective_clusters(SETS[0])
    assert rep == {"a": "a", "b": "a", "c": "c", "d": "c", "e": "e", "f": "e", "g": "g"}
    with pytest.raises(ValueError, match="threshold"):
        selective_clusters(SETS[0], threshold=0)


def test_selective_plan_roots_one_representative_per_cluster():
    ops = [op("a", (1, 128, 768)), op("b", (1, 128, 3072)), op("c", (12, 128, 128), (64,)), op("e", (1, 7, 7))]
    rep = selective_clusters(ops)
    plan = selective_plan(ops, backend_cost=lambda o: 100.0, reuse_cost=lambda a, b: 3.0)
    assert plan.parent == {o.name: (ROOT if rep[o.name] == o.name else rep[o.name]) for o in ops}
    assert set(plan.backend) == set(rep.values())
    seen = {ROOT}
    for name in plan.order:  # parents first
        assert plan.parent[name] in seen
        seen.add(name)
    assert plan.total_cost == pytest.approx(100.0 * len(set(rep.values())) + 3.0 * (len(ops) - len(set(rep.values()))))
    assert plan.baseline_cost == pytest.approx(100.0 * len(ops))
    assert plan.used_bridges == ()
