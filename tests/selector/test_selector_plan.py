"""OC graph construction, tuned (prior-database) operators, Plan and replan."""

import json
import math

import pytest

from selector import (ROOT, LoopNestOp, analytic_cost, analytic_cost_fn, bridge_operators,
                      build_oc_graph, distance_preference, replan, select_reuse_pairs)


def bmm(name, ext, **kw):
    return LoopNestOp(name=name, type="BMM", sketch="K", space=tuple(ext[:3]), reduction=(ext[3],), **kw)


def bert():
    return [bmm("qk", [12, 128, 128, 64]), bmm("sv", [12, 128, 64, 128]), bmm("proj", [1, 128, 768, 768]),
            bmm("ffn1", [1, 128, 3072, 768]), bmm("ffn2", [1, 128, 768, 3072])]


def table_cost(table, default=math.inf):
    return lambda a, b: table.get((b.name, a.name), default)


# -- OC graph -----------------------------------------------------------------------------------

def test_oc_graph_structure():
    ops = bert()
    bridges = bridge_operators(ops)
    calls = []

    def cost(alpha, beta):
        calls.append((alpha.name, beta.name))
        return 7.0

    G = build_oc_graph(ops, cost_fn=cost, backend_cost=1000, bridges=bridges)
    assert G.graph["root"] == ROOT == "root"
    assert G.graph["terminals"] == ("qk", "sv", "proj", "ffn1", "ffn2")
    assert set(G.graph["bridges"]) == {b.name for b in bridges}
    assert G.graph["candidate_pairs"] == 24 == len(calls)
    for v in list(ops) + bridges:
        assert G.edges[ROOT, v.name]["weight"] == 1000 and G.edges[ROOT, v.name]["kind"] == "backend"
        assert G.nodes[v.name]["op"] is v
    # edge beta -> alpha carries cost_fn(alpha, beta)
    assert ("ffn1", "proj") in calls and G.edges["proj", "ffn1"]["kind"] == "reuse"
    assert not G.has_edge("qk", "proj")  # not a reuse pair


def test_oc_graph_edge_direction_uses_cost_fn_arguments_in_order():
    a, b = bmm("big", [1, 128, 768, 768]), bmm("small", [1, 128, 768, 64])
    G = build_oc_graph([a, b], cost_fn=lambda alpha, beta: 1.0 if alpha.name == "big" else 2.0,
                       backend_cost=10)
    assert G.edges["small", "big"]["weight"] == 1.0   # big reuses small's program
    assert G.edges["big", "small"]["weight"] == 2.0


@pytest.mark.parametrize("bad", [-0.5, float("nan"), "3"])
def test_oc_graph_rejects_bad_costs_naming_the_edge(bad):
    a, b = bmm("a", [1, 128, 768, 768]), bmm("b", [1, 128, 768, 64])
    with pytest.raises(ValueError, match="b -> a|a -> b"):
        build_oc_graph([a, b], cost_fn=lambda alpha, beta: bad, backend_cost=10)
    with pytest.raises(ValueError, match="root -> a"):
        build_oc_graph([a, b], cost_fn=lambda alpha, beta: 1.0, backend_cost=lambda op: bad)


def test_infinite_reuse_cost_vetoes_the_pair():
    a, b = bmm("a", [1, 128, 768, 768]), bmm("b", [1, 128, 768, 64])
    G = build_oc_graph([a, b], cost_fn=lambda alpha, beta: math.inf if alpha.name == "a" else 1.0,
                       backend_cost=10)
    assert not G.has_edge("b", "a") and G.has_edge("a", "b") and G.graph["candidate_pairs"] == 1


def test_duplicate_and_reserved_names():
    with pytest.raises(ValueError, match="duplicate"):
        build_oc_graph([bmm("a", [1, 2, 3, 4]), bmm("a", [1, 2, 3, 5])], cost_fn=lambda a, b: 1, backend_cost=1)
    with pytest.raises(ValueError, match="reserved"):
        build_oc_graph([bmm("root", [1, 2, 3, 4])], cost_fn=lambda a, b: 1, backend_cost=1)


# -- tuned (prior database) operators -------------------------------------------------------------

def _zoo(seed: int, priors: int):
    """A few requested matmuls and ``priors`` stored ones of the same kind, at random sizes."""
    import random

    rng = random.Random(seed)
    size = lambda: [rng.choice([1, 2]), rng.choice([64, 128]), rng.choice([64, 256, 768]), rng.choice([64, 768])]  # noqa: E731
    asked = [bmm(f"op{i}", size()) for i in range(4)]
    stored = [bmm(f"prior:{i}", size(), tuned=True) for i in range(priors)]
    return asked, stored


@pytest.mark.parametrize("seed", range(6))
def test_a_prior_gets_no_reuse_edge_and_the_plan_stays_optimal(seed):
    """No estimate is asked for a reuse *into* a stored operator (free from the root), and the plan is as
    cheap as one over the graph with those edges: stored operators given cost 0 but not marked tuned."""
    asked, stored = _zoo(seed, 6)
    cost = lambda a, b: 1.0 + sum(abs(x - y) for x, y in zip(a.extents, b.extents)) / 100  # noqa: E731
    asks = []

    def counted(alpha, beta):
        asks.append(alpha.name)
        return cost(alpha, beta)

    G = build_oc_graph(asked + stored, cost_fn=counted, backend_cost=1000)
    assert not any(name.startswith("prior:") for name in asks)
    assert all(not v.startswith("prior:") or u == ROOT for u, v in G.edges)
    plan = select_reuse_pairs(asked + stored, cost_fn=cost, backend_cost=1000, bridges="none", solver="exact")
    free = {op.name for op in stored}
    untagged = [LoopNestOp(name=o.name, type=o.type, sketch=o.sketch, space=o.space, reduction=o.reduction)
                for o in asked + stored]
    full = select_reuse_pairs(untagged, cost_fn=cost, backend_cost=lambda o: 0.0 if o.name in free else 1000.0,
                              bridges="none", solver="exact")
    assert plan.total_cost == pytest.approx(full.total_cost)


def test_two_priors_get_no_bridge_between_them_but_a_prior_and_a_request_do():
    a = bmm("prior:a", [1, 128, 768, 64], tuned=True)
    b = bmm("prior:b", [1, 64, 256, 768], tuned=True)
    assert bridge_operators([a, b]) == []
    assert [o.extents for o in bridge_operators([bmm("a", [1, 128, 768, 64]), b])] == [(1, 64, 256, 64)]
    new = bmm("new", [1, 256, 64, 768])
    assert {o.extents for o in bridge_operators([a, b, new])} == {(1, 128, 64, 64), (1, 64, 64, 768)}


def test_a_request_with_a_free_source_of_its_own_gets_no_bridge_to_another_prior():
    far = bmm("prior:far", [1, 64, 256, 768], tuned=True)  # incomparable with the request: a bridge would serve it
    req = bmm("a", [1, 128, 768, 64])
    assert [o.extents for o in bridge_operators([req, far])] == [(1, 64, 256, 64)]
    near = bmm("prior:near", [1, 128, 768, 128], tuned=True)  # dominates the request: reused in one step
    assert bridge_operators([req, far, near]) == []
    served = bmm("b", [1, 64, 128, 128])  # near dominates it too: two served requests get no bridge
    assert bridge_operators([req, served, far, near]) == []
    # a prior the planner would never tune it from (``admits``: eto's reduction rules) does not serve it
    veto = lambda alpha, beta: beta.name != "prior:near"  # noqa: E731
    assert {o.extents for o in bridge_operators([req, served, far, near], admits=veto)} == {
        (1, 64, 128, 64), (1, 64, 256, 64)}  # req's with the request and the prior far serves, and with far
    lone = bmm("c", [1, 256, 64, 256])  # comparable with no prior: it keeps its bridges to requests and priors
    assert {o.extents for o in bridge_operators([req, served, lone, far, near])} == {
        (1, 128, 64, 64), (1, 64, 64, 128), (1, 64, 64, 256), (1, 128, 64, 128)}
    # the plan over the smaller graph costs what the plan over every bridge did
    cost = lambda a, b: 10.0 + sum(abs(x - y) for x, y in zip(a.extents, b.extents)) / 64  # noqa: E731
    ops = [req, served, lone, far, near]
    pruned = select_reuse_pairs(ops, cost_fn=cost, backend_cost=1000, solver="exact")
    untagged = [bmm(o.name, list(o.extents)) for o in (far, near)]  # as requests: bridges to every pair
    every = [b for b in bridge_operators([req, served, lone] + untagged) if b.extents not in {o.extents for o in ops}]
    full = select_reuse_pairs(ops + every, cost_fn=cost, backend_cost=1000, bridges="none", solver="exact")
    assert len(every) > 4 and pruned.total_cost == pytest.approx(full.total_cost)


def test_replan_keeps_a_bridge_whose_operators_are_all_tuned_now():
    ops = [bmm("a", [1, 128, 768, 64]), bmm("b", [1, 64, 256, 768])]
    plan = select_reuse_pairs(ops, cost_fn=lambda a, b: 5.0, backend_cost=100)
    (bridge,) = [b.name for b in plan.bridges]
    again = replan(plan, tuned=["a", "b", bridge])  # names the bridge: it must still be made
    assert [b.name for b in again.bridges] == [bridge] and again.order == ()


def test_nearest_sources_keeps_each_requests_nearest_stored_operators_of_its_class():
    import math

    from selector import nearest_sources

    asked, stored = _zoo(3, 12)
    stored.append(LoopNestOp(name="prior:other", type="C2D", sketch="K", space=(1, 8, 8, 8), reduction=(8, 3, 3),
                             tuned=True))
    kept = nearest_sources(asked, stored, 2)
    dist = lambda a, b: sum(abs(math.log(x) - math.log(y)) for x, y in zip(a.extents, b.extents))  # noqa: E731
    expected = set()
    for a in asked:
        expected |= {b.name for b in sorted(stored[:-1], key=lambda b: dist(a, b))[:2]}
    assert {b.name for b in kept} == expected and len(kept) < 12
    assert nearest_sources([replace_tuned(a) for a in asked], stored, 2) == []  # nothing left to tune: no source


def replace_tuned(op):
    from dataclasses import replace

    return replace(op, tuned=True)


def test_tuned_operators_are_free_sources():
    prior = bmm("prior", [1, 128, 768, 768], tuned=True)
    new = [bmm("ffn1", [1, 128, 3072, 768]), bmm("ffn2", [1, 128, 768, 3072])]
    G = build_oc_graph([prior, *new], cost_fn=lambda a, b: 50.0, backend_cost=1000)
    assert G.edges[ROOT, "prior"]["weight"] == 0
    plan = select_reuse_pairs([prior, *new], cost_fn=lambda a, b: 50.0, backend_cost=1000, bridges="none")
    assert plan.parent == {"prior": ROOT, "ffn1": "prior", "ffn2": "prior"}
    assert plan.total_cost == 100
    assert plan.backend == () and plan.prior == ("prior",)
    assert plan.order == ("ffn1", "ffn2")        # nothing to do for the prior operator
    assert plan.edge_costs[(ROOT, "prior")] == 0


def test_distance_preference_takes_the_near_source_and_the_plan_keeps_the_costs():
    """A new length of a tuned matmul, and a wider matmul at that length: by cost alone the plan
    derives the matmul from the wide one (4x away in N) for 0.5 s less; preferring near sources it
    takes the same matmul at the old length (1.5x away in M). Edge costs stay the estimates; the
    solver's objective is the weighed sum, the optimum over all 4 trees here (brute force)."""
    prior = bmm("p128", [1, 128, 768, 768], tuned=True)
    ops = [prior, bmm("a", [1, 192, 768, 768]), bmm("f", [1, 192, 3072, 768])]
    table = {("p128", "a"): 10.5, ("p128", "f"): 12.0, ("f", "a"): 10.0, ("a", "f"): 12.5}
    cost = table_cost(table)
    plain = select_reuse_pairs(ops, cost_fn=cost, backend_cost=100.0, bridges="none")
    assert plain.parent["a"] == "f" and plain.total_cost == 22.0
    pref = distance_preference(0.2)
    near = select_reuse_pairs(ops, cost_fn=cost, backend_cost=100.0, bridges="none", preference=pref)
    assert near.parent == {"p128": ROOT, "a": "p128", "f": "a"}
    assert near.total_cost == 23.0 == sum(near.edge_costs.values())  # seconds, not weights
    by_name = {o.name: o for o in ops}

    def weighed(parents):
        return sum(table[(b, a)] * pref(by_name[a], by_name[b]) for a, b in parents.items())

    trees = [{"a": pa, "f": pf} for pa in ("p128", "f") for pf in ("p128", "a") if (pa, pf) != ("f", "a")]
    assert near.solution.cost == pytest.approx(min(weighed(t) for t in trees))
    assert near.to_json()["solver"]["objective"] == pytest.approx(weighed({"a": "p128", "f": "a"}))
    assert pref(by_name["a"], prior) == pytest.approx(1 + 0.2 * math.log(1.5))
    # the weight never exceeds the backend's (a preference does not send an operator to the backend)
    G = build_oc_graph(ops, cost_fn=cost, backend_cost=11.0, preference=distance_preference(5.0))
    assert G.edges["p128", "a"]["weight"] == 11.0 and G.edges["p128", "f"]["weight"] == 12.0
    assert G.edges["p128", "a"]["cost"] == 10.5
    with pytest.raises(ValueError, match="preference of edge p128 -> a is below 1"):
        build_oc_graph(ops, cost_fn=cost, backend_cost=100.0, preference=lambda a, b: 0.5)
    with pytest.raises(ValueError, match="distance weight must be a finite number >= 0"):
        distance_preference(-0.1)


# -- select_reuse_pairs / Plan --------------------------------------------------------------------

def test_plan_on_bert_with_and_without_bridges():
    ops = bert()
    none = select_reuse_pairs(ops, bridges="none")
    hop1 = select_reuse_pairs(ops, bridges="1hop", solver="exact")
    assert none.candidate_pairs == 4 and hop1.candidate_pairs == 24
    assert none.bridges == () and len(hop1.bridges) == 3
    assert hop1.total_cost < none.total_cost < none.baseline_cost == 5000
    assert hop1.solution.optimal and none.solution.optimal
    # every requested operator is in the tree, parents are tuned before children
    for plan in (none, hop1):
        assert {op.name for op in ops} <= set(plan.parent)
        position = {name: i for i, name in enumerate(plan.order)}
        for child, parent in plan.parent.items():
            if parent != ROOT:
                assert position[parent] < position[child]
        assert plan.total_cost == pytest.approx(sum(plan.edge_costs.values()))
        assert set(plan.used_bridges) <= {b.name for b in plan.bridges}
        assert set(plan.backend) == {c for c, p in plan.parent.items() if p == ROOT}


def test_plan_json_and_tree_format():
    plan = select_reuse_pairs(bert(), bridges="1hop")
    data = json.loads(json.dumps(plan.to_json()))
    for key in ("total_cost", "edges", "bridges", "candidate_pairs", "backend", "order"):
        assert key in data
    assert data["candidate_pairs"] == 24
    assert data["total_cost"] == plan.total_cost
    assert all(len(e) == 2 for e in data["edges"])
    assert {p for p, _ in data["edges"]} >= {"root"}
    assert {b["name"] for b in data["bridges"]} == {b.name for b in plan.bridges}
    assert all("extents" in b for b in data["bridges"])
    assert sorted(data["bridges_used"]) == sorted(plan.used_bridges)
    text = plan.format_tree()
    lines = text.splitlines()
    assert lines[0].startswith("root")
    assert len(lines) == 1 + len(plan.edges)
    for name in plan.parent:
        assert name in text
    child_line = next(line for line in lines if "reuse" in line)
    assert child_line.index("─") > 0


def test_bridges_argument_validation():
    with pytest.raises(ValueError):
        select_reuse_pairs(bert(), bridges="2hop")
    assert len(select_reuse_pairs(bert(), bridges=2).bridges) == 4
    assert len(select_reuse_pairs(bert(), bridges="all").bridges) == 4


def test_default_cost_is_the_analytic_estimate():
    ops = bert()
    G = build_oc_graph(ops, cost_fn=analytic_cost_fn(1000), backend_cost=1000)
    plan = select_reuse_pairs(ops, backend_cost=1000, bridges="none")
    for (p, c), cost in plan.edge_costs.items():
        assert cost == G.edges[p, c]["weight"]


def test_steiner_plan_uses_bridge_only_when_it_pays():
    # Two incomparable operators; their bridge is worth it only if reuse is cheap.
    a = bmm("a", [1, 128, 768, 64])
    b = bmm("b", [1, 128, 64, 768])
    cheap = select_reuse_pairs([a, b], cost_fn=lambda x, y: 10.0, backend_cost=1000, bridges="1hop")
    assert cheap.used_bridges == ("bridge:BMM[1,128,64,64]",)
    assert cheap.total_cost == 1000 + 10 + 10
    assert cheap.order[0] == cheap.backend[0] and len(cheap.backend) == 1
    dear = select_reuse_pairs([a, b], cost_fn=lambda x, y: 600.0, backend_cost=1000, bridges="1hop")
    assert dear.used_bridges == () and dear.total_cost == 2000


def test_sketch_check_is_applied():
    plan = select_reuse_pairs(bert(), bridges="1hop", sketch_check=lambda op: op.extents[0] == 1)
    assert all(b.extents[0] == 1 for b in plan.bridges) and len(plan.bridges) == 2


# -- re-estimation and replan ----------------------------------------------------------------------

def test_multi_sketch_kind_costs_max_until_first_is_tuned():
    ops = [LoopNestOp(name=f"n{i}", type="FRB", sketch="two-sketches", space=(b,), reduction=(r,),
                      sketch_count=2) for i, (b, r) in enumerate([(8, 4096), (4, 4096), (8, 2048)])]
    first = select_reuse_pairs(ops, backend_cost=1000, bridges="none")
    assert set(first.backend) == {"n0", "n1", "n2"} and first.total_cost == 3000
    assert len(first.replan_after) == 1
    second = replan(first, tuned=first.replan_after)
    tuned_name = first.replan_after[0]
    assert second.operators[tuned_name].tuned and second.edge_costs[(ROOT, tuned_name)] == 0
    assert second.total_cost < 2000 and second.replan_after == ()
    assert tuned_name not in second.order


def test_a_pending_multi_sketch_kind_keeps_the_cost_functions_batch():
    """The estimator prices a plan's pairs in one batch (``prefetch``, on every core); a set with a
    multi-sketch kind still untuned wraps the cost function, and the wrapper must pass the batch on,
    less the pairs it prices itself (MobileNetV2 with all bridges: 47 s in this process, 15 s)."""
    ops = [LoopNestOp(name=f"n{i}", type="FRB", sketch="two-sketches", space=(b,), reduction=(r,),
                      sketch_count=2) for i, (b, r) in enumerate([(8, 4096), (4, 4096)])]
    ops += bert()
    asked: list[list] = []

    def cost(alpha, beta):
        return 10.0

    cost.prefetch = lambda pairs: asked.append(list(pairs))
    plan = select_reuse_pairs(ops, cost_fn=cost, backend_cost=1000, bridges="none")
    assert len(asked) == 1 and asked[0]
    assert all(a.type != "FRB" for a, _ in asked[0])  # priced at the backend's cost until one is tuned
    assert {(a.name, b.name) for a, b in asked[0]} >= {(e.child, e.parent) for e in plan.edges if e.parent != ROOT}
    assert any(e.parent != ROOT for e in plan.edges)


def test_replan_accumulates_tuned_operators_and_accepts_new_costs():
    ops = bert()
    plan = select_reuse_pairs(ops, bridges="1hop")
    first = plan.order[0]
    p2 = replan(plan, tuned=[first])
    assert p2.operators[first].tuned and first not in p2.order
    second = p2.order[0]
    p3 = replan(p2, tuned=[second], cost_fn=lambda a, b: 1.0)
    assert p3.operators[first].tuned and p3.operators[second].tuned
    assert all(c == 1.0 for (p, _), c in p3.edge_costs.items() if p != ROOT)
    with pytest.raises(ValueError, match="nope"):
        replan(plan, tuned=["nope"])


def test_analytic_cost_properties():
    a = bmm("a", [1, 128, 768, 768])
    same = bmm("same", [1, 128, 768, 768])
    near = bmm("near", [1, 128, 768, 384])
    far = bmm("far", [1, 128, 96, 64])
    assert analytic_cost(a, same) == 10.0                    # 1 * (1 + 1) + 8
    assert analytic_cost(a, near) < analytic_cost(a, far)    # farther shapes cost more trials
    assert analytic_cost(a, far, budget=50) == 50            # capped at the budget
    # near: r1 = 384/768, r2 = 2 -> d_B = 1 + 3.5*log2(4) = 8, d_T = 1 + 3*log2(2) = 4,
    # d_M = 1 + log2(2) = 2 (of 768's 18 LShapes): d_B * (d_T + d_M) + 4 unroll + 4 vector options
    assert analytic_cost(a, near) == 56.0
    fn = analytic_cost_fn(1000)
    assert fn(a, far) == analytic_cost(a, far, budget=1000)
