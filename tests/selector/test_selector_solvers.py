"""Arborescence and directed Steiner tree solvers against brute force and stated guarantees."""

import itertools
import math
import random

import networkx as nx
import numpy as np
import pytest

from selector import (dual_ascent_bound, edmonds, min_cost_arborescence, solve, steiner_approx,
                      steiner_exact)


# -- helpers ----------------------------------------------------------------------------------

def random_instance(rng, n_terminals, n_steiner, density, wmax=20, root_p=0.85):
    """Random digraph; integer weights (zero allowed) so that ties are exact."""
    T = [f"t{i}" for i in range(n_terminals)]
    S = [f"s{i}" for i in range(n_steiner)]
    G = nx.DiGraph()
    G.add_node("r")
    G.add_nodes_from(T + S)
    for v in T + S:
        if rng.random() < root_p:
            G.add_edge("r", v, weight=rng.randint(wmax // 2, wmax))
    for u, v in itertools.permutations(T + S, 2):
        if rng.random() < density:
            G.add_edge(u, v, weight=rng.randint(0, wmax))
    for t in T:
        if not nx.has_path(G, "r", t):
            G.add_edge("r", t, weight=wmax)
    return G, T, S


def brute_force(G, root, T, S):
    """Optimal Steiner tree cost: best min-cost arborescence (networkx) over all Steiner subsets."""
    best = math.inf
    for k in range(len(S) + 1):
        for subset in itertools.combinations(S, k):
            H = G.subgraph([root, *T, *subset]).copy()
            H.remove_edges_from(list(H.in_edges(root)))
            try:
                A = nx.minimum_spanning_arborescence(H)
            except nx.NetworkXException:
                continue
            best = min(best, A.size(weight="weight"))
    return best


def cheapest_tree_without_steiner(G, root, T):
    """The cheapest arborescence on root + terminals (no Steiner node), by trying every choice of each
    terminal's parent (at most 5^5 here); inf if there is none. networkx's minimum_spanning_arborescence
    is no oracle for it: 3.6 raises "No minimum spanning arborescence in G" on some graphs that have one
    (seen on 5-terminal instances of random_instance)."""
    choices = [[u for u in (root, *T) if u != t and G.has_edge(u, t)] for t in T]
    best = math.inf
    for parents in itertools.product(*choices):
        parent = dict(zip(T, parents))
        if all(_reaches(parent, t, root) for t in T):
            best = min(best, sum(G.edges[parent[t], t]["weight"] for t in T))
    return best


def _reaches(parent, v, root):
    for _ in range(len(parent) + 1):
        if v == root:
            return True
        v = parent[v]
    return False  # a cycle


def assert_valid_tree(G, root, terminals, sol):
    parents = {}
    for u, v in sol.edges:
        assert G.has_edge(u, v), (u, v)
        assert v not in parents, f"{v} has two parents"
        assert v != root
        parents[v] = u
    for t in terminals:
        v, seen = t, set()
        while v != root:
            assert v in parents, f"{t} not connected to the root"
            assert v not in seen, "cycle"
            seen.add(v)
            v = parents[v]
    assert sol.cost == pytest.approx(sum(G.edges[e]["weight"] for e in sol.edges))


def instances(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        yield random_instance(rng, rng.randint(1, 5), rng.randint(0, 6), rng.choice([0.15, 0.35, 0.7]))


# -- Edmonds ----------------------------------------------------------------------------------

def test_edmonds_matches_networkx_on_random_graphs():
    rng = random.Random(1)
    for _ in range(60):
        n = rng.randint(2, 25)
        G = nx.DiGraph()
        G.add_nodes_from(range(n))
        for v in range(1, n):
            G.add_edge(0, v, weight=float(rng.randint(50, 100)))
        for u, v in itertools.permutations(range(1, n), 2):
            if rng.random() < 0.3:
                G.add_edge(u, v, weight=float(rng.randint(0, 60)))
        ours = min_cost_arborescence(G, 0)
        ref = nx.minimum_spanning_arborescence(G)
        assert ours.cost == pytest.approx(ref.size(weight="weight"))
        assert ours.optimal and len(ours.edges) == n - 1
        assert_valid_tree(G, 0, range(1, n), ours)


def test_edmonds_ignores_in_edges_of_root():
    # The cheapest in-edge of the root must not make another node the arborescence's root.
    G = nx.DiGraph()
    G.add_edge("root", "a", weight=10)
    G.add_edge("a", "root", weight=0)
    G.add_edge("a", "b", weight=1)
    G.add_edge("b", "a", weight=1)
    sol = min_cost_arborescence(G, "root")
    assert set(sol.edges) == {("root", "a"), ("a", "b")}
    assert sol.cost == 11


def test_edmonds_array_interface_reports_unreachable():
    with pytest.raises(ValueError):
        edmonds(3, 0, np.array([0]), np.array([1]), np.array([1.0]))


# -- exact, approx, arborescence vs brute force ---------------------------------------------

@pytest.mark.slow  # seconds: many MIP solves
def test_exact_equals_brute_force_and_approx_within_guarantee():
    checked = without_steiner = 0
    for G, T, S in instances(seed=2022, count=120):
        opt = brute_force(G, "r", T, S)
        exact = steiner_exact(G, "r", T, time_limit=30)
        assert exact.optimal
        assert exact.cost == pytest.approx(opt), (T, S, list(G.edges(data="weight")))
        assert_valid_tree(G, "r", T, exact)

        approx = steiner_approx(G, "r", T)
        assert_valid_tree(G, "r", T, approx)
        assert approx.cost >= opt - 1e-9
        # stated guarantee: cost <= sum of root distances <= |T| * OPT
        dist = nx.single_source_dijkstra_path_length(G, "r")
        assert approx.cost <= sum(dist[t] for t in T) + 1e-9
        assert approx.cost <= len(T) * opt + 1e-9
        # never worse than the best tree without Steiner nodes, which exists where every terminal is
        # reachable from the root through terminals alone
        no_steiner = cheapest_tree_without_steiner(G, "r", T)
        H = G.subgraph(["r", *T])
        assert (no_steiner < math.inf) == (set(T) <= nx.descendants(H, "r"))
        if no_steiner < math.inf:
            assert approx.cost <= no_steiner + 1e-9
            without_steiner += 1
        assert approx.lower_bound is not None and approx.lower_bound <= opt + 1e-9
        assert dual_ascent_bound(G, "r", T) <= opt + 1e-9
        auto = solve(G, "r", T)
        assert auto.cost == pytest.approx(opt) and auto.optimal
        checked += 1
    assert checked >= 100 and without_steiner >= 100, (checked, without_steiner)  # 109 of 120 have one


#: Instances of random_instance (seed -> its sizes drawn as below) where the heuristic's tree, on the
#: triangle-reduced graph, costs more than the best tree without Steiner nodes, which is on the unreduced
#: one: only the solver's fallback to that tree keeps its guarantee. Found by searching seeds 0-8958 (1 in
#: ~1800 of them; the 120 instances above never need the fallback).
FALLBACK_SEEDS = (772, 2787, 6656, 8015, 8958)


@pytest.mark.parametrize("seed", FALLBACK_SEEDS)
def test_approx_is_never_worse_than_the_best_tree_without_steiner_nodes(seed):
    rng = random.Random(seed)
    G, T, _ = random_instance(rng, rng.randint(2, 5), rng.randint(2, 8), rng.choice([0.15, 0.35, 0.7]))
    approx = steiner_approx(G, "r", T)
    assert_valid_tree(G, "r", T, approx)
    assert approx.cost <= cheapest_tree_without_steiner(G, "r", T) + 1e-9


def test_arborescence_solver_equals_brute_force_without_steiner_nodes():
    rng = random.Random(7)
    for _ in range(100):
        G, T, _ = random_instance(rng, rng.randint(1, 7), 0, rng.choice([0.2, 0.5, 0.8]))
        opt = brute_force(G, "r", T, [])
        for solver in ("arborescence", "auto", "exact", "approx"):
            sol = solve(G, "r", T, solver=solver)
            assert sol.cost == pytest.approx(opt)
            assert sol.optimal and sol.solver == "arborescence"
            assert_valid_tree(G, "r", T, sol)


def test_arborescence_solver_ignores_steiner_nodes():
    G = nx.DiGraph()
    G.add_weighted_edges_from([("r", "a", 10), ("r", "b", 10), ("r", "s", 1), ("s", "a", 1), ("s", "b", 1),
                               ("a", "b", 9)])
    assert solve(G, "r", ["a", "b"], solver="arborescence").cost == 19
    assert solve(G, "r", ["a", "b"], solver="exact").cost == 3


def test_decomposition_into_components():
    # Two independent reuse classes joined only through the root; zero-cost tuned source.
    G = nx.DiGraph()
    G.add_weighted_edges_from([("r", "a1", 100), ("r", "a2", 100), ("a1", "a2", 5), ("a2", "a1", 7),
                               ("r", "b1", 100), ("r", "b2", 100), ("r", "bs", 0), ("bs", "b1", 3),
                               ("bs", "b2", 4), ("r", "c", 100), ("c", "a1", 1)])
    sol = solve(G, "r", ["a1", "a2", "b1", "b2"], solver="exact")
    assert sol.optimal and sol.cost == 100 + 5 + 0 + 3 + 4
    assert ("r", "bs") in sol.edges


@pytest.mark.slow  # seconds: many MIP solves
def test_a_known_solution_spares_the_components_a_change_left_alone(monkeypatch):
    """A re-selection (minor roots, replan) changes one component; the others keep their trees
    without being solved again, and the result equals a fresh solve's."""
    import selector.solvers.steiner as steiner

    def component(G, tag, wmax, rng):
        for i in range(4):
            G.add_edge("r", f"{tag}t{i}", weight=rng.randint(wmax // 2, wmax))
            G.add_edge("r", f"{tag}s{i}", weight=rng.randint(wmax // 2, wmax))
            for j in range(4):
                if i != j:
                    G.add_edge(f"{tag}s{i}", f"{tag}t{j}", weight=rng.randint(0, wmax // 4))
                    G.add_edge(f"{tag}t{i}", f"{tag}t{j}", weight=rng.randint(0, wmax // 2))

    rng = random.Random(7)
    G = nx.DiGraph()
    for tag in "abc":
        component(G, tag, 40, rng)
    T = [v for v in G if "t" in v]
    calls = []
    solve_component = steiner._solve_component
    monkeypatch.setattr(steiner, "_solve_component", lambda comp, *a: calls.append(comp.nodes) or
                        solve_component(comp, *a))
    first = solve(G, "r", T, solver="exact")
    assert len(calls) == 3
    H = G.copy()
    H.edges["r", "bt0"]["weight"] = 1  # only component b changes
    calls.clear()
    again = solve(H, "r", T, solver="exact", known=first)
    assert len(calls) == 1 and all(v.startswith("b") for v in calls[0] if v != "r")
    fresh = solve(H, "r", T, solver="exact")
    assert again.optimal and again.cost == fresh.cost == brute_force(H, "r", T, [v for v in H if "s" in v])
    assert {e for e in again.edges if "b" not in e[1]} == {e for e in first.edges if "b" not in e[1]}
    calls.clear()
    assert solve(G, "r", T, solver="approx", known=first).cost >= first.cost and len(calls) == 3  # another solver


def test_dual_ascent_is_tight_on_a_shared_bridge():
    # a cheap Steiner node feeding three terminals: the LP (and dual ascent) is integral here
    G = nx.DiGraph()
    G.add_weighted_edges_from([("r", "s", 10), *[("r", t, 10) for t in "abc"], *[("s", t, 1) for t in "abc"]])
    assert dual_ascent_bound(G, "r", list("abc")) == pytest.approx(13)
    sol = solve(G, "r", list("abc"), solver="approx")
    assert sol.cost == 13 and sol.optimal and sol.lower_bound == pytest.approx(13)


@pytest.mark.serial  # a time limit: which solves run depends on the clock
def test_time_limited_exact_still_returns_a_valid_tree(monkeypatch):
    import scipy.optimize

    limits = []
    milp = scipy.optimize.milp

    def timed_milp(*args, options=None, **kwargs):
        limits.append((options or {}).get("time_limit"))
        return milp(*args, options=options, **kwargs)

    monkeypatch.setattr(scipy.optimize, "milp", timed_milp)
    rng = random.Random(3)
    G, T, S = random_instance(rng, 25, 25, 0.3, wmax=1000)
    sol = solve(G, "r", T, solver="exact", time_limit=0.5)
    assert_valid_tree(G, "r", T, sol)
    assert sol.lower_bound is not None and sol.lower_bound <= sol.cost + 1e-9
    # the limit reaches HiGHS: each LP and MIP solve is given what is left of the 0.5 s, never more
    assert limits and all(limit is not None and 0 < limit <= 0.5 for limit in limits)


# -- bad input ----------------------------------------------------------------------------------

def test_unreachable_terminal_is_named():
    G = nx.DiGraph()
    G.add_weighted_edges_from([("r", "a", 1), ("b", "a", 1)])
    G.add_node("lonely")
    for solver in ("auto", "exact", "approx", "arborescence"):
        with pytest.raises(ValueError, match="'lonely'"):
            solve(G, "r", ["a", "lonely"], solver=solver)
    with pytest.raises(ValueError, match="'b'"):
        min_cost_arborescence(G, "r")


def test_terminal_reachable_only_through_steiner_nodes():
    G = nx.DiGraph()
    G.add_weighted_edges_from([("r", "s", 1), ("s", "t", 1)])
    assert solve(G, "r", ["t"]).cost == 2
    with pytest.raises(ValueError, match="'t'"):
        solve(G, "r", ["t"], solver="arborescence")


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "12"])
def test_bad_weights_rejected_naming_the_edge(bad):
    G = nx.DiGraph()
    G.add_edge("r", "a", weight=1.0)
    G.add_edge("r", "b", weight=1.0)
    G.add_edge("a", "b", weight=bad)
    with pytest.raises(ValueError, match="'a' -> 'b'"):
        solve(G, "r", ["a", "b"])


def test_missing_weight_and_unknown_nodes():
    G = nx.DiGraph()
    G.add_edge("r", "a")
    with pytest.raises(ValueError, match="weight"):
        solve(G, "r", ["a"])
    G.edges["r", "a"]["weight"] = 1
    with pytest.raises(ValueError, match="'zz'"):
        solve(G, "r", ["zz"])
    with pytest.raises(ValueError, match="root"):
        solve(G, "nope", ["a"])
    with pytest.raises(ValueError, match="solver"):
        solve(G, "r", ["a"], solver="magic")


def test_empty_terminal_set():
    G = nx.DiGraph()
    G.add_edge("r", "a", weight=3)
    sol = solve(G, "r", [])
    assert sol.cost == 0 and sol.edges == () and sol.optimal


# -- the solver modules directly ---------------------------------------------------------------

def test_mip_alone_equals_brute_force():
    """The flow MIP on its own (solve() skips it when the heuristic meets the bound)."""
    from selector.solvers.indexed import IndexedGraph
    from selector.solvers.trees import is_tree, tree_cost
    from selector.solvers.mip import flow_variable_count, mip

    for G, T, S in instances(seed=7, count=40):
        g = IndexedGraph.from_networkx(G, "r", T)
        pe, proven, bound = mip(g, math.inf)
        assert proven and is_tree(g, pe)
        assert tree_cost(g, pe) == pytest.approx(brute_force(G, "r", T, S))
        assert bound == pytest.approx(tree_cost(g, pe))
        assert flow_variable_count(g) == len(T) * G.number_of_edges()


def test_mip_branches_where_the_lp_relaxation_is_fractional():
    """The LP relaxation alone proves most instances; where it is fractional (2 of 920 random
    instances, both here) the branch and bound must still reach the brute-force optimum."""
    import numpy as np
    from scipy.optimize import Bounds, milp

    from selector.solvers.indexed import IndexedGraph
    from selector.solvers.trees import is_tree, tree_cost
    from selector.solvers.mip import _model, mip

    fractional = 0
    for seed in (8, 11):
        for G, T, S in instances(seed=seed, count=40):
            g = IndexedGraph.from_networkx(G, "r", T)
            c, rows = _model(g)
            x = milp(c, integrality=np.zeros(len(c)), bounds=Bounds(0, 1), constraints=rows).x[:len(g.src)]
            if np.all((x < 1e-6) | (x > 1 - 1e-6)):
                continue
            fractional += 1
            pe, proven, bound = mip(g, math.inf)
            assert proven and is_tree(g, pe)
            assert tree_cost(g, pe) == pytest.approx(brute_force(G, "r", T, S))
            assert bound == pytest.approx(tree_cost(g, pe))
    assert fractional == 2


def test_steiner_module_keeps_its_public_names():
    import selector
    import selector.solvers.steiner as steiner
    from selector.solvers.dual_ascent import dual_ascent_bound

    for name in steiner.__all__:
        assert hasattr(steiner, name), name
    assert steiner.dual_ascent_bound is dual_ascent_bound is selector.dual_ascent_bound
    assert steiner.solve is selector.solve
    assert callable(selector.replan) and "replan" in selector.__all__
