"""`eto plan`: reuse pair selection on the built-in sets and on plain graphs."""

import json

import pytest

from eto.options import TuneOptions
from tuner.reuse.options import ReuseOptions
from eto.cli import main


@pytest.fixture(autouse=True)
def _away_from_a_users_database(tmp_path, monkeypatch):
    """`eto plan` reads ``--db`` (default ``eto-db`` in the working directory): a database the README's main
    job left in the checkout would teach the plans its time model. Each test plans from an empty folder."""
    monkeypatch.chdir(tmp_path)


def plan_json(capsys, *argv):
    code = main(["plan", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow  # the tuner's estimates, in worker processes
@pytest.mark.parametrize("opset,bridges,count", [
    ("resnet50", "1hop", 44), ("resnet50", "all", 49), ("mobilenetv2", "1hop", 81), ("mobilenetv2", "all", 121),
])
def test_bridge_counts_match_the_paper(capsys, opset, bridges, count):
    assert len(plan_json(capsys, "--opset", opset, "--bridges", bridges)["bridges"]) == count


def test_bert_reuse_pairs(capsys):
    assert plan_json(capsys, "--opset", "bert_base", "--bridges", "none")["candidate_pairs"] == 4
    d = plan_json(capsys, "--opset", "bert_base", "--bridges", "1hop", "--max-reduction-ratio", "inf")
    assert d["candidate_pairs"] == 24 and len(d["bridges"]) == 3  # the paper's reuse pairs
    assert d["cost_unit"] == "seconds" and 0 < d["total_cost"] < d["baseline_cost"]
    # the cap drops the 6 whose reduction grows more than 4x (K 64 or 128 to 768 or 3072)
    assert plan_json(capsys, "--opset", "bert_base", "--bridges", "1hop")["candidate_pairs"] == 18


@pytest.mark.slow  # the tuner's estimates, in worker processes
def test_plan_is_a_tree_over_the_set(capsys):
    from eto.operators.opsets import builtin_opset

    d = plan_json(capsys, "--opset", "resnet50", "--bridges", "1hop")
    children = [c for _, c in d["edges"]]
    assert len(children) == len(set(children))  # one parent each
    names = {e.op.name for e in builtin_opset("resnet50")}
    assert names <= set(children)
    parents = {c: p for p, c in d["edges"]}
    for name in names:  # every operator hangs off the root through its ancestors
        seen = 0
        while name != "root":
            name = parents[name]
            seen += 1
            assert seen < 200
    assert d["total_cost"] < d["baseline_cost"]


def test_prior_database_makes_operators_free(capsys, tmp_path):
    from eto.store.database import Database
    from eto.operators.opsets import builtin_opset
    from eto.target import parse_target
    from tests.test_database import make_records

    target = parse_target("cpu")
    bert = builtin_opset("bert_base")
    db = Database(tmp_path / "db")
    for e in bert:
        db.commit(e.op, target, make_records(e.op, [[1e-3]], target), method="backend", candidates=1, seconds=1)
    d = plan_json(capsys, "--opset", "bert_base", "--prior", str(tmp_path / "db"))
    assert d["total_cost"] == 0 and sorted(d["prior"]) == sorted(e.op.name for e in bert)


def test_plain_graph(capsys, tmp_path):
    g = tmp_path / "g.json"
    # root -> a (10), root -> b (10), a -> s (1), s -> b (1): the Steiner node s makes b cheap.
    g.write_text(json.dumps({"root": "r", "terminals": ["a", "b"],
                             "arcs": [["r", "a", 10], ["r", "b", 10], ["a", "s", 1], ["s", "b", 1], [1, "b", 0]]}))
    d = plan_json(capsys, "--graph", str(g), "--solver", "exact")
    assert d["total_cost"] == 12 and sorted(map(tuple, d["edges"])) == [("a", "s"), ("r", "a"), ("s", "b")]


@pytest.mark.parametrize("content,message", [
    ("{not json", "g.json"),
    (json.dumps({"root": "r", "terminals": ["a"]}), "arcs"),
    (json.dumps({"root": "r", "terminals": ["a"], "arcs": [["r", "a", -1]]}), "negative"),
    (json.dumps({"root": "r", "terminals": ["a"], "arcs": [["r", "a", "NaN"]]}), "cost"),
])
def test_malformed_graph_files_exit_2(capsys, tmp_path, content, message):
    g = tmp_path / "g.json"
    g.write_text(content)
    assert main(["plan", "--graph", str(g)]) == 2
    assert message in capsys.readouterr().err


def test_unreachable_terminal_is_named(capsys, tmp_path):
    g = tmp_path / "g.json"
    g.write_text(json.dumps({"root": "r", "terminals": ["a", "lonely"], "arcs": [["r", "a", 1], ["lonely", "a", 1]]}))
    assert main(["plan", "--graph", str(g)]) == 2
    assert "lonely" in capsys.readouterr().err


@pytest.mark.parametrize("strategy", ["global", "per-b"])
def test_plan_with_the_tuners_trial_estimator(capsys, strategy):
    """`--cost estimate`: every reuse edge costs what the estimator says the tuner's strategy and
    ranked top-k measure (tests/tuner checks that the estimator counts what the tuner measures),
    in seconds by the time model, and a root edge the backend budget in seconds."""
    from tvm.ir import IRModule

    from eto.planning.lead_sources import LeadCount
    from eto.operators.opsets import builtin_opset
    from eto.target import parse_target
    from eto.planning.time_priors import learn_time_model
    from tuner.reuse.estimate import estimate_trials
    from tuner.analysis.features import loop_nest_of, major_block
    from tuner.reuse.ranked import DEFAULT_TOP_K
    from tuner.reuse.space import target_limits

    d = plan_json(capsys, "--opset", "bert_base", "--bridges", "none", "--cost", "estimate", "--strategy", strategy,
                  "--plan-budget", "1000")
    limits = target_limits("cpu", parse_target("cpu"))  # the plan's: num-cores of the target it tunes for
    ops = {e.op.name: e.op for e in builtin_opset("bert_base")}

    def nest(op):
        mod = IRModule({"main": op.prim_func()})
        return loop_nest_of(mod, major_block(mod))

    tm = learn_time_model(None, parse_target("cpu"), "cpu")  # an empty database: this CPU's defaults
    candidates = {(p, c): n for p, c, n in d["edge_candidates"]}
    reuse = [(p, c, cost) for p, c, cost in d["edge_costs"] if p != "root"]
    assert reuse, "BERT-Base has reuse pairs: the plan should use one"
    leads = LeadCount(None, None, ops.values())  # the seeds the pipeline adds to round T's lead
    for p, c, cost in reuse:
        ranked = estimate_trials("cpu", nest(ops[c]), nest(ops[p]), ReuseOptions(strategy=strategy, top_k=DEFAULT_TOP_K),
                                 samples=8, limits=limits).mean
        want = tm.reuse_candidates(ranked + leads(ops[c], ops[p]))  # as far off as this CPU's runs found it
        assert leads(ops[c], ops[p]) >= 2  # β untuned: its runner-ups expected
        assert candidates[(p, c)] == pytest.approx(want)
        assert cost == pytest.approx(tm.reuse_seconds(want, ops[c].flops / 1e9, ops[c].type))  # α's size and type
        assert ranked < estimate_trials("cpu", nest(ops[c]), nest(ops[p]), ReuseOptions(strategy=strategy, top_k=None),
                                        samples=8, limits=limits).mean
    roots = [c for p, c, _ in d["edge_costs"] if p == "root"]
    # a root: the backend's budget, then its polish (eto.runs.polish), estimated as a (dearer) reuse from itself
    polish = {c: estimate_trials("cpu", nest(ops[c]), nest(ops[c]), ReuseOptions(strategy=strategy, top_k=DEFAULT_TOP_K),
                                 samples=8, limits=limits).mean + leads(ops[c], ops[c]) for c in roots}
    polish = {c: tm.reuse_candidates(n) for c, n in polish.items()}
    assert all(candidates[("root", c)] == pytest.approx(1000 + polish[c]) for c in roots)
    assert d["total_cost"] == pytest.approx(sum(tm.backend_seconds(1000, ops[c].flops / 1e9)
                                                + tm.polish_seconds(polish[c], ops[c].flops / 1e9, ops[c].type)
                                                for c in roots)
                                            + sum(cost for _, _, cost in reuse))


def test_hot_operators_are_backend_roots_with_extra_budget():
    """Frequency-aware planning: a dominant operator is never derived by reuse and costs more budget."""
    from eto.operators import Operator
    from eto.operators.opsets import OperatorEntry, OperatorSet
    from eto.planning.planner import hot_operators, plan_operator_set

    small = Operator.create("BMM", B=2, M=32, N=32, K=16)
    big = Operator.create("BMM", B=2, M=32, N=32, K=32)
    opset = OperatorSet("s", (OperatorEntry(big, 1), OperatorEntry(small, 20)))
    # frequency x FLOPs: small 20 x 16 against big 1 x 32, shares 10/11 and 1/11
    assert hot_operators(opset, 0.5) == {small}
    assert hot_operators(opset, 0.05) == {small, big}
    with pytest.raises(ValueError, match="hot share"):
        hot_operators(opset, 0)

    plain = plan_operator_set(opset, TuneOptions.of(trials=1000, bridges="none", cost="analytic", top_k=None))
    assert list(plain.plan.parent.values()).count("root") == 1  # reuse is cheaper than the backend
    hot = plan_operator_set(opset, TuneOptions.of(trials=1000, bridges="none", cost="analytic", polish=False, top_k=None), hot={small})  # the backend's budget alone (a polish is costed as in the test below)
    assert hot.plan.parent["BMM[2,32,32,16]"] == "root"
    assert hot.candidates("root", "BMM[2,32,32,16]") == 2000
    assert hot.plan.total_cost == pytest.approx(hot.time_model.backend_seconds(2000, small.flops / 1e9)
                                                + hot.plan.edge_costs[(hot.plan.parent["BMM[2,32,32,32]"],
                                                                       "BMM[2,32,32,32]")])


def test_a_models_functions_outside_the_catalogue_are_never_planned():
    """TASK operators (a model's softmax, norms, element-wise functions) are not OC-graph nodes:
    nothing reuses them and the pipeline tunes them with their own budget; the plan of the rest is
    the plan without them."""
    from eto.operators import Operator
    from eto.operators.opsets import OperatorEntry, OperatorSet
    from eto.planning.planner import plan_operator_set

    bmms = [OperatorEntry(Operator.create("BMM", B=2, M=32, N=32, K=k), 1) for k in (16, 32)]
    task = Operator.parse("TASK(size=2048,hash=99)+softmax")
    without = plan_operator_set(OperatorSet("s", tuple(bmms)), TuneOptions.of(trials=1000, bridges="none", cost="analytic", top_k=None))
    planned = plan_operator_set(OperatorSet("s", (*bmms, OperatorEntry(task, 3))), TuneOptions.of(trials=1000, bridges="none", cost="analytic", top_k=None))
    assert task not in planned.operators.values() and planned.plan.parent == without.plan.parent
    assert planned.plan.total_cost == pytest.approx(without.plan.total_cost)


def test_subtrees_are_balanced_over_devices():
    """Scale-out: each subtree goes whole to one worker, parents first, largest estimated cost first."""
    from eto.operators.opsets import load_opset
    from eto.runs.pipeline import balance_subtrees
    from eto.planning.planner import plan_operator_set

    plan = plan_operator_set(load_opset("resnet50"), TuneOptions.of(trials=1000, bridges="none", cost="analytic", top_k=None)).plan
    trees = plan.subtrees()
    assert sorted(n for t in trees for n in t) == sorted(plan.order)
    for t in trees:
        assert plan.parent[t[0]] == "root" and all(plan.parent[n] in t for n in t[1:])
    groups = balance_subtrees(plan, 3)
    assert sorted(n for g in groups for n in g) == sorted(plan.order)
    for g in groups:  # parents before children inside each worker's list
        assert all(plan.parent[n] == "root" or g.index(plan.parent[n]) < g.index(n) for n in g)
    cost = [sum(plan.edge_costs[(plan.parent[n], n)] for n in g) for g in groups]
    biggest = max(sum(plan.edge_costs[(plan.parent[n], n)] for n in t) for t in trees)
    assert max(cost) - min(cost) <= biggest  # the LPT bound


def test_replan_after_a_multi_sketch_kind_is_tuned():
    """Section 6.1: a kind with two sketches costs the backend budget until one of its operators is
    tuned; planning again makes that operator a free root and its kind reusable at estimated cost."""
    from eto.operators.opsets import load_opset
    from eto.planning.planner import plan_operator_set

    planned = plan_operator_set(load_opset("mobilenetv2"), TuneOptions.of(trials=1000, bridges="none", cost="analytic", top_k=None))
    (first,) = planned.plan.replan_after
    assert planned.operators[first].sketch_count() == 2
    again = planned.replan([first])
    assert again.plan.replan_after == () and again.plan.parent[first] == "root"
    assert again.plan.edge_costs[("root", first)] == 0
    assert again.plan.total_cost == pytest.approx(
        planned.plan.total_cost - planned.plan.edge_costs[(planned.plan.parent[first], first)])


def test_plans_cost_the_strategy_that_tuning_runs(tmp_path):
    """One default reuse strategy everywhere: the tuner, the estimator, the pipeline and both commands;
    and the pipeline hands its strategy to the planner (so a plan never costs other rounds than run)."""
    import inspect

    import eto.planning.budget
    import eto.runs.pipeline
    from eto.cli import build_parser
    from tuner.reuse.estimate import estimate_trials
    from tuner.reuse.ranked import DEFAULT_TOP_K, resolve_top_k
    from tuner.reuse.space import DEFAULT_STRATEGY

    defaults = {"ReuseOptions": inspect.signature(ReuseOptions).parameters["strategy"].default}
    defaults["TuneOptions"] = TuneOptions().reuse.strategy
    parser = build_parser()
    defaults["eto tune"] = parser.parse_args(["tune"]).strategy
    defaults["eto plan"] = parser.parse_args(["plan"]).strategy
    assert set(defaults.values()) == {DEFAULT_STRATEGY}, defaults
    top_k = {"ReuseOptions": ReuseOptions().top_k, "TuneOptions": TuneOptions().reuse.top_k}
    top_k["eto tune"] = parser.parse_args(["tune"]).top_k
    top_k["eto plan"] = parser.parse_args(["plan"]).top_k
    assert set(top_k.values()) == {"auto"}, top_k

    class Planned(Exception):
        pass

    def plan_and_stop(opset, options, **kwargs):  # what the planner resolves "auto" to, for the run's target
        raise Planned(options.reuse.strategy, resolve_top_k(options.reuse.top_k, kwargs["target"]))

    from eto.store.database import Database
    from eto.operators.opsets import load_opset

    for strategy in ("per-b", "global"):
        with pytest.MonkeyPatch.context() as mp, pytest.raises(Planned) as planned:
            mp.setattr(eto.planning.budget, "plan_operator_set", plan_and_stop)
            eto.runs.pipeline.tune(load_opset("bert_base"), "cpu", Database(tmp_path / strategy), TuneOptions.of(strategy=strategy, top_k=3))
        assert planned.value.args == (strategy, 3)
    # "auto": the planner gets the number the reuse tuner will run on that target
    for target, workers, k in (("cpu", 16, DEFAULT_TOP_K), ("nvidia/nvidia-h100", 16, 16),
                               ("nvidia/nvidia-h100", 2, DEFAULT_TOP_K)):
        with pytest.MonkeyPatch.context() as mp, pytest.raises(Planned) as planned:
            mp.setattr(eto.planning.budget, "plan_operator_set", plan_and_stop)
            mp.setattr("tuner.reuse.ranked.physical_cores", lambda: workers)
            eto.runs.pipeline.tune(load_opset("bert_base"), target, Database(tmp_path / f"{workers}"))
        assert planned.value.args == (DEFAULT_STRATEGY, k), (target, workers)


def test_top_k_option_takes_auto_a_number_or_zero_and_names_a_bad_value(capsys):
    from eto.cli import build_parser, main
    from eto.cli.flags import top_k_of

    parser = build_parser()
    assert [top_k_of(parser.parse_args(["tune", *a])) for a in ([], ["--top-k", "8"], ["--top-k", "0"])] == \
        ["auto", 8, None]
    for bad in ("-1", "many"):
        assert main(["plan", "--opset", "bert_base", "--cost", "analytic", "--top-k", bad]) == 2
        assert f"--top-k must be 'auto' or a number >= 0, got '{bad}'" in capsys.readouterr().err


def test_the_plan_roots_the_operator_whose_backend_trials_are_cheap():
    """A backend trial of a big operator costs more seconds (each candidate runs longer): with reuse
    equally cheap both ways, the backend tunes the small operator and the big one is derived."""
    from eto.operators import Operator
    from eto.operators.opsets import OperatorEntry, OperatorSet
    from eto.planning.planner import plan_operator_set
    from eto.planning.time_model import Line, TimeModel

    small = Operator.create("BMM", B=1, M=128, N=128, K=64)
    big = Operator.create("BMM", B=1, M=128, N=3072, K=256)  # K within the reduction cap of small's
    assert small.sketch_key() == big.sketch_key()
    tm = TimeModel(Line(0.0, 0.7, 2.0), Line(4.0, 0.45, 0.4))
    for order in ((big, small), (small, big)):
        opset = OperatorSet("s", tuple(OperatorEntry(op, 1) for op in order))
        planned = plan_operator_set(opset, TuneOptions.of(trials=100, bridges="none", polish=False, top_k=None), cost_fn=lambda a, b: 20.0, time_model=tm)
        assert planned.plan.parent[small.name] == "root" and planned.plan.parent[big.name] == small.name
        g = big.flops / 1e9
        assert planned.plan.total_cost == pytest.approx(tm.backend_seconds(100, small.flops / 1e9)
                                                        + tm.reuse_seconds(20, g))
    # charged alike (no growth with size), the tie goes either way: the size is what decides
    flat = TimeModel(Line(0.0, 0.7), Line(4.0, 0.45))
    tied = plan_operator_set(OperatorSet("s", (OperatorEntry(big, 1), OperatorEntry(small, 1))), TuneOptions.of(trials=100, bridges="none", polish=False, top_k=None), cost_fn=lambda a, b: 20.0, time_model=flat)
    assert tied.plan.total_cost == pytest.approx(70 + 4 + 0.45 * 20)
    # a database whose batch matmul reuses ran at half the line prices this type's reuse edges so
    kinds = TimeModel(Line(0.0, 0.7), Line(4.0, 0.45), reuse_kind={"BMM": 0.5, "C2D": 3.0})
    cheap = plan_operator_set(OperatorSet("s", (OperatorEntry(big, 1), OperatorEntry(small, 1))), TuneOptions.of(trials=100, bridges="none", polish=False, top_k=None), cost_fn=lambda a, b: 20.0, time_model=kinds)
    assert cheap.plan.total_cost == pytest.approx(70 + 0.5 * (4 + 0.45 * 20))


def test_a_polished_root_costs_its_backend_budget_and_a_self_reuse():
    """With ``polish`` (the pipeline's default) a root edge costs the backend's trials plus the
    self-reuse that polishes the root (eto.runs.polish), estimated like any reuse: α = β."""
    from eto.operators import Operator
    from eto.operators.opsets import OperatorEntry, OperatorSet
    from eto.planning.planner import plan_operator_set
    from eto.planning.time_model import Line, TimeModel

    small = Operator.create("BMM", B=1, M=128, N=128, K=64)
    big = Operator.create("BMM", B=1, M=128, N=3072, K=256)
    tm = TimeModel(Line(0.0, 0.7, 2.0), Line(4.0, 0.45, 0.4))
    asked = []

    def cost(a, b):
        asked.append((a.name, b.name))
        return 12.0 if a.name == b.name else 20.0

    opset = OperatorSet("s", (OperatorEntry(small, 1), OperatorEntry(big, 1)))
    plain = plan_operator_set(opset, TuneOptions.of(trials=100, bridges="none", polish=False, top_k=None), cost_fn=cost, time_model=tm)
    assert all(a != b for a, b in asked)  # without polish no self-reuse is costed
    planned = plan_operator_set(opset, TuneOptions.of(trials=100, bridges="none", top_k=None), cost_fn=cost, time_model=tm)
    assert planned.plan.parent == plain.plan.parent == {small.name: "root", big.name: small.name}
    g = small.flops / 1e9
    assert planned.plan.edge_costs[("root", small.name)] == pytest.approx(
        tm.backend_seconds(100, g) + tm.reuse_seconds(tm.reuse_candidates(12.0), g))
    assert planned.candidates("root", small.name) == pytest.approx(100 + tm.reuse_candidates(12.0))
    assert planned.plan.total_cost == pytest.approx(plain.plan.total_cost + tm.reuse_seconds(12.0, g))
    # the baseline stays MetaSchedule's: every operator with the backend's budget, no polish
    assert planned.plan.baseline_cost == pytest.approx(plain.plan.baseline_cost) == pytest.approx(
        tm.backend_seconds(100, g) + tm.backend_seconds(100, big.flops / 1e9))


def test_no_reuse_edge_grows_the_reduction_past_the_cap(capsys):
    """A reuse searches near its source's reduction tiling, so the plan never derives an operator from
    one whose reduction is more than MAX_REDUCTION_RATIO times smaller (uncapped, ResNet-50's plan does:
    its large 1x1 convolutions from a 64-channel bridge, its 3x3 ones from a 3-channel bridge). Priced as hot
    runs cost, where a root costs more against a reuse than cold."""
    import math

    from eto.operators.opsets import load_opset
    from eto.planning.planner import MAX_REDUCTION_RATIO, MINOR_SHARE, plan_operator_set

    def worst(planned, but=None):
        ops = planned.operators
        return max(math.prod(ops[c].reduction) / math.prod(ops[p].reduction)
                   for c, p in planned.plan.parent.items() if p != "root" and c != but)

    opset = load_opset("resnet50")
    capped = plan_operator_set(opset, TuneOptions.of(trials=1000, cost="analytic", timing="hot", top_k=None))
    uncapped = plan_operator_set(opset, TuneOptions.of(trials=1000, cost="analytic", timing="hot", max_reduction_ratio=None, top_k=None))
    stem = next(e.op.name for e in opset if dict(e.op.params)["KH"] == 7)  # minor: see the next test
    assert worst(capped, but=stem) <= MAX_REDUCTION_RATIO < worst(uncapped)
    assert capped.plan.total_cost >= uncapped.plan.total_cost  # the cap only removes edges
    one = plan_operator_set(opset, TuneOptions.of(trials=1000, cost="analytic", timing="hot", max_reduction_ratio=1.0, top_k=None))
    assert worst(one) <= 2  # twice the cap, for minor roots only (next test)
    work = {e.op.name: e.frequency * e.op.flops for e in opset}
    over = [c for c, p in one.plan.parent.items()
            if p != "root" and math.prod(one.operators[c].reduction) > math.prod(one.operators[p].reduction)]
    assert over and all(work[c] <= MINOR_SHARE * sum(work.values()) for c in over)
    lifted = plan_json(capsys, "--opset", "resnet50", "--plan-budget", "1000", "--cost", "analytic",
                       "--max-reduction-ratio", "inf", "--timing", "hot")
    assert lifted["total_cost"] == pytest.approx(uncapped.plan.total_cost)
    assert main(["plan", "--opset", "resnet50", "--cost", "analytic", "--max-reduction-ratio", "0.5"]) == 2
    assert "--max-reduction-ratio must be >= 1" in capsys.readouterr().err


def test_the_estimator_is_not_asked_for_edges_the_cap_removes():
    """Planning's cost is the trial estimator over every pair; pairs over the reduction cap (a
    quarter of ResNet-50's) never become edges, so they are not estimated, except the relaxed
    minor roots' pairs within twice the cap (asked for once more, in the second selection)."""
    from eto.operators.opsets import load_opset
    from eto.planning.planner import MAX_REDUCTION_RATIO, carries_reduction, plan_operator_set, reduction_ratio

    asked: list[list] = []

    def cost(alpha, beta):
        return 10.0

    cost.prefetch = lambda pairs: asked.append(list(pairs))
    planned = plan_operator_set(load_opset("resnet50"), TuneOptions.of(trials=200, top_k=None), cost_fn=cost)
    assert len(asked) == 2  # ResNet-50's stem is a minor root: selected twice
    everything = plan_operator_set(load_opset("resnet50"), TuneOptions.of(trials=200, max_reduction_ratio=None, top_k=None), cost_fn=cost)
    assert len(asked) == 3 and len(asked[0]) < len(asked[2])
    assert all(carries_reduction(a, b) and reduction_ratio(a, b) <= MAX_REDUCTION_RATIO for a, b in asked[0])
    relaxed = {a.name for a, b in asked[1] if reduction_ratio(a, b) > MAX_REDUCTION_RATIO}
    assert relaxed and all(planned.plan.parent[n] != "root" for n in relaxed if n in planned.plan.parent)
    assert all(reduction_ratio(a, b) <= 2 * MAX_REDUCTION_RATIO for a, b in asked[1] if a.name in relaxed)
    assert everything.plan.total_cost <= planned.plan.total_cost


def test_a_minor_root_the_cap_isolates_reuses_within_twice_the_cap():
    """ResNet-50's stem (3 input channels, 7x7: 2.9% of the FLOPs) is a root only because every path
    to it grows the kernel taps 5.4x; it is planned again with the cap doubled and derived by reuse.
    The same stem carrying most of the set's work stays a backend root."""
    import math

    from eto.operators.opsets import OperatorSet, load_opset
    from eto.planning.planner import MAX_REDUCTION_RATIO, MINOR_SHARE, minor_roots, plan_operator_set

    opset = load_opset("resnet50")
    stem = next(e.op for e in opset if dict(e.op.params)["KH"] == 7)
    planned = plan_operator_set(opset, TuneOptions.of(trials=1000, cost="analytic", timing="hot", top_k=None))
    ops, parent = planned.operators, planned.plan.parent
    assert parent[stem.name] != "root"
    ratio = math.prod(ops[stem.name].reduction) / math.prod(ops[parent[stem.name]].reduction)
    assert MAX_REDUCTION_RATIO < ratio <= 2 * MAX_REDUCTION_RATIO
    assert minor_roots(planned.plan, set(planned.plan.backend)) == set()  # nothing left to relax
    uncapped = plan_operator_set(opset, TuneOptions.of(trials=1000, cost="analytic", timing="hot", max_reduction_ratio=None, top_k=None)).plan
    assert minor_roots(uncapped, set(uncapped.backend), share=1.0) <= {n for n, p in parent.items() if p == "root"}
    layers = [e.op for e in opset for _ in range(e.frequency)]
    heavy = OperatorSet.from_layers("heavy stem", layers + [stem] * 60, "the stem as most of the work")
    assert stem.flops * 61 > MINOR_SHARE * sum(e.frequency * e.op.flops for e in heavy)
    assert plan_operator_set(heavy, TuneOptions.of(trials=1000, cost="analytic", timing="hot", top_k=None)).plan.parent[stem.name] == "root"


def test_distance_weight_takes_the_near_source_at_about_the_same_cost(capsys):
    """A matmul at a new length, a wider one beside it, and the matmul at the old length: by cost
    alone the plan derives the matmul from the wider one (10 candidates against 10.5); preferring
    near sources (eto.options.DISTANCE_WEIGHT) from the old length (1.5x away, not 4x). Costs stay
    seconds."""
    from eto.operators import Operator
    from eto.operators.opsets import OperatorSet, load_opset
    from eto.options import DISTANCE_WEIGHT
    from eto.planning.planner import plan_operator_set

    old, new, wide = (Operator.create("BMM", B=1, M=m, N=n, K=768) for m, n in ((128, 768), (192, 768), (192, 3072)))
    opset = OperatorSet.from_layers("lengths", [old, new, wide])
    table = {(old.name, new.name): 10.5, (wide.name, new.name): 10.0, (old.name, wide.name): 12.0,
             (new.name, wide.name): 12.5}

    def candidates(alpha, beta):
        return table.get((beta.name, alpha.name), 1000.0)

    paper = plan_operator_set(opset, TuneOptions.of(trials=200, bridges="none", distance_weight=0, top_k=None), cost_fn=candidates)
    near = plan_operator_set(opset, TuneOptions.of(trials=200, bridges="none", top_k=None), cost_fn=candidates)
    assert DISTANCE_WEIGHT > 0
    assert paper.plan.parent[new.name] == wide.name and near.plan.parent[new.name] == old.name
    assert paper.plan.backend == near.plan.backend == (old.name,)
    assert paper.plan.total_cost < near.plan.total_cost == pytest.approx(sum(near.plan.edge_costs.values()))
    cli = plan_json(capsys, "--opset", "bert_base", "--plan-budget", "200", "--cost", "analytic", "--distance-weight", "0")
    api = plan_operator_set(load_opset("bert_base"), TuneOptions.of(trials=200, cost="analytic", distance_weight=0, top_k=None))
    assert cli["total_cost"] == pytest.approx(api.plan.total_cost)
    assert main(["plan", "--opset", "bert_base", "--cost", "analytic", "--distance-weight", "-1"]) == 2
    assert "--distance-weight must be a finite number >= 0" in capsys.readouterr().err


@pytest.mark.slow  # eto tune imports TVM (no build)
@pytest.mark.parametrize("extra", [(), ("--trials", "8", "--bridges", "none"), ("--plan-budget", "300", "--no-polish")])
def test_plan_previews_the_plan_tune_runs_with_the_same_arguments(capsys, tmp_path, monkeypatch, extra):
    """``eto plan`` and ``eto tune`` given the same arguments print the same plan line (tune stopped at its
    first backend run, after it logged the plan)."""
    from eto.runs.derive import RunContext

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop("planned")

    argv = ["--opset", "quickstart", "--cost", "analytic", "--db", str(tmp_path / "db"), *extra]
    assert main(["plan", *argv]) == 0
    previewed = capsys.readouterr().out.splitlines()[0].split("; ", 1)[1]
    monkeypatch.setattr(RunContext, "backend", stop)
    assert main(["tune", *argv]) == 3  # Stop escapes the command: an internal error
    logged = [line.removeprefix("eto: ") for line in capsys.readouterr().err.splitlines() if line.startswith("eto: plan:")]
    assert logged == [previewed]
    assert not any((tmp_path / "db").glob("*.json*"))  # nothing was tuned


def test_the_plan_says_which_timing_its_seconds_are_for(capsys, tmp_path):
    """A run timed cold is priced by cold runs (eto/planning/time_priors.py): `eto plan` names the timing
    its costs are for, and a reuse's seconds differ by it."""
    lines = {}
    for timing in ("cold", "hot"):
        assert main(["plan", "--opset", "quickstart", "--cost", "analytic", "--timing", timing,
                     "--db", str(tmp_path / "none")]) == 0
        out = capsys.readouterr().out
        assert f"(this CPU's prior for {timing} timing)" in out
        lines[timing] = out[out.index("a reuse "):]
    assert lines["cold"] != lines["hot"]
