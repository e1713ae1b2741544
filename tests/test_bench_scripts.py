"""The benchmark scripts' bookkeeping (experiments/set_bench.py, reuse_pairs.py, _bench.py, tools/), without tuning.

These are the parts a wrong ratio would come from: the "same" threshold's change of scale, the
spread over seeds, and which cached runs a repeated command may reuse.
"""

from __future__ import annotations

import argparse
import json
import math
import os

import pytest

# the repository root is on sys.path (`python -m pytest` from it), so `experiments` is a package there
from experiments import _bench, model_bench, retune_bench, reuse_pairs, set_bench
from experiments.tools import candidate_costs, code_ab, reuse_ab, reuse_quality, timing_split


def test_same_uses_remeasured_latency_moved_to_the_recorded_scale():
    traj = [(1.0, 10.0), (2.0, 8.0), (3.0, 6.0), (4.0, 5.0)]  # recorded set trajectory, final 5.0
    # MetaSchedule's final set re-measures at 10 (2x its record); eto's at 12 -> 6 on the recorded scale
    best, same, threshold = set_bench.ms_best_and_same(traj, ms_remeasured=10.0, eto_remeasured=12.0)
    assert (best, threshold, same) == (4.0, 6.0, 3.0)
    # eto better than anything MetaSchedule recorded: never reached
    assert set_bench.ms_best_and_same(traj, 10.0, 9.0)[1] is None
    assert set_bench.ms_best_and_same([], 1.0, 1.0) == (None, None, None)
    assert set_bench.ms_best_and_same(traj, math.inf, 1.0) == (4.0, None, None)


def test_spread_skips_missing_values():
    assert set_bench.spread([2.0, None, 1.0, 3.0, math.inf]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert set_bench.spread([None])["median"] is None


def test_timing_split_samples_every_operator_and_skips_failed_timings():
    from types import SimpleNamespace as P

    def prog(op, s):
        return P(op=P(key=op), latency_s=s)

    progs = [prog("a", 3.0), prog("a", 1.0), prog("a", 2.0), prog("b", 5.0), prog("c", 4.0)]
    picked = timing_split.spread(progs, 4)  # round-robin over operators, fastest first
    assert [(p.op.key, p.latency_s) for p in picked] == [("a", 1.0), ("c", 4.0), ("b", 5.0), ("a", 2.0)]
    assert len(timing_split.spread(progs, 99)) == 5
    d = timing_split.deviations([1.1, math.inf, 0.5], [1.0, 1.0, 1.0])  # the failed run is left out
    assert d["n"] == 2 and d["median"] == pytest.approx(0.3) and d["max"] == pytest.approx(0.5)
    assert timing_split.deviations([math.inf], [1.0]) == {"n": 0}


def test_candidate_costs_counts_the_register_blocks_vector_accumulators():
    """A register block's accumulators: its rows times the vectors of its fused innermost tiles
    (BERT's 768-wide matmul: 4 rows of 64 columns in 16 lanes, 16; 32 rows of 32 columns, 64)."""
    from types import SimpleNamespace

    from tuner.analysis.features import TileConfig

    nest = SimpleNamespace(space=(128, 768))

    def block(rows: int, cols: int) -> TileConfig:
        return TileConfig("cpu", ((1, 1, 128 // rows, rows), (12, 1, 64 // cols, cols)), ((32, 24),))

    assert candidate_costs.accumulators(block(4, 64), nest, 16) == 16
    assert candidate_costs.accumulators(block(32, 32), nest, 16) == 64
    assert candidate_costs.accumulators(block(4, 64), nest, 8) == 32  # AVX2: twice the vectors
    whole = TileConfig("cpu", ((1, 1, 1, 128), (12, 1, 1, 64)), ((32, 24),))  # not contiguous: rows of vectors
    assert candidate_costs.accumulators(whole, nest, 16) == 128 * 4


def test_reuse_ab_summary_counts_only_pairs_the_feature_applies_to():
    def row(applies, with_s, without_s, ref_s=None, won=False):
        r = {"applies": applies, "with_over_without": without_s / with_s,
             "with": {"candidates": 14, "seconds": 5.0, "other_write_stage": won},
             "without": {"candidates": 12, "seconds": 4.0, "other_write_stage": False}}
        if ref_s is not None:
            r["throughput_vs_reference"] = {"with": ref_s / with_s, "without": ref_s / without_s}
        return r

    rows = [row(True, 1.0, 2.0, 1.0, won=True), row(True, 1.0, 1.0), row(False, 1.0, 9.0, 9.0)]
    s = reuse_ab.summary(rows)
    assert s["pairs"] == 3 and s["applies"] == 2 and s["other_write_stage_won"] == 1
    assert s["median_with_over_without"] == 1.5  # the pair it does not apply to is left out
    assert s["median_throughput_vs_reference_with"] == 1.0 and s["median_throughput_vs_reference_without"] == 0.5
    assert s["median_candidates_with"] == 14 and s["median_seconds_without"] == 4.0
    with pytest.raises(SystemExit, match="no pair"):
        reuse_ab.pairs_of(argparse.Namespace(pair=None, reuses_of=None), target=None)


def test_reuse_ab_kept_switched_off_leaves_the_kept_tiles_to_round_t_where_it_holds_them():
    """``--switch kept``: off, β's kept tiles lead round T only where round T does not hold them
    (the behaviour before); the switch applies exactly where round T holds them."""
    from types import SimpleNamespace

    def space(in_t, valid=True):
        return SimpleNamespace(kept_tiles=lambda: "kept", kept_in_t_round=lambda: in_t, valid=lambda cfg: valid,
                               kept_lead=lambda: "kept" if valid else None)

    assert reuse_ab._kept_only_outside_t_round(space(in_t=True)) is None
    assert reuse_ab._kept_only_outside_t_round(space(in_t=False)) == "kept"
    assert reuse_ab._kept_only_outside_t_round(space(in_t=False, valid=False)) is None
    assert reuse_ab.applies("kept", SimpleNamespace(space=space(in_t=True)))
    assert not reuse_ab.applies("kept", SimpleNamespace(space=space(in_t=False)))
    assert not reuse_ab.applies("kept", SimpleNamespace(space=space(in_t=True, valid=False)))


def test_scale_defaults_and_explicit_options():
    ci = set_bench.parse_args(["--scale", "ci"])
    assert (ci.opset, ci.pick, ci.trials, ci.seed_list, ci.control_trials) == ("quickstart", [3, 4], 8, [0, 1], 8)
    own = set_bench.parse_args(["--scale", "ci", "--opset", "bert_base", "--limit", "2", "--seed-list", "5", "7",
                                "--control-trials", "4"])
    assert (own.pick, own.limit, own.plan_budget, own.seed_list, own.control_trials) == (None, 2, None, [5, 7], 4)
    assert set_bench.subset_tag(own) == "_first2" and set_bench.subset_tag(ci) == "_pick3-4"
    assert set_bench.parse_args([]).control_trials == 32  # min(N=64, 32)


def test_a_variants_environment_holds_while_its_measurer_is_made_and_is_restored(monkeypatch):
    from tuner.measure.measurer import MeasureConfig

    monkeypatch.setenv("ETO_SETTLE_PROCESSES", "1")
    monkeypatch.delenv("ETO_CPU_CACHE_BYTES", raising=False)
    with set_bench._environment({**set_bench.VARIANTS["settle2"]["env"], "ETO_CPU_CACHE_BYTES": "0"}):
        assert MeasureConfig().settle_processes == 2 and os.environ["ETO_CPU_CACHE_BYTES"] == "0"
    assert MeasureConfig().settle_processes == 1 and "ETO_CPU_CACHE_BYTES" not in os.environ


def test_estimator_rows_take_the_reuse_tuners_share(monkeypatch):
    class FakeDb:
        def results(self):
            return [{"target": "t", "method": "backend", "op_key": "a", "candidates": 64, "seconds": 9.0},
                    {"target": "t", "method": "reuse+evolve", "op_key": "b", "source": "a", "candidates": 50,
                     "seconds": 12.0, "estimate": 20.0, "estimated_seconds": 4.0,
                     "evolve": {"candidates": 32, "seconds": 8.0}}]

    import eto.target

    monkeypatch.setattr(eto.target, "target_key", lambda t: t)
    rows = set_bench.reuse_rows(FakeDb(), "t")
    assert rows == [{"op": "b", "source": "a", "estimate": 20.0, "candidates": 18, "actual_over_estimate": 0.9,
                     "seconds": 4.0, "estimated_seconds": 4.0, "actual_over_estimated_seconds": 1.0}]
    assert set_bench.estimator_summary(rows)["mean_actual_over_estimate"] == 0.9


def test_reuse_pairs_summary_keeps_old_keys_and_adds_new_ones():
    rows = [{"strategy": "global", "type": "C2D", "candidates": 20, "estimate": 25.0, "seconds": 10.0,
             "throughput": 1.1, "speedup": 2.0, "speedup_vs_total": 3.0, "backend_time_to_best_s": 20.0,
             "estimated_seconds": 8.0},
            {"strategy": "global", "type": "C2D", "error": "boom", "candidates": 0, "estimate": None, "seconds": 0.0}]
    s = reuse_pairs.summarize(rows)
    assert {"pairs", "errors", "median_throughput", "median_speedup", "median_candidates",
            "estimate_over_actual_mean", "estimate_within_0.67_1.5"} <= set(s)
    assert (s["pairs"], s["errors"], s["median_candidates"], s["median_speedup_vs_total"]) == (2, 1, 20, 3.0)
    assert s["actual_over_estimated_seconds_mean"] == 1.25 and s["actual_over_estimate_mean"] == 0.8
    assert reuse_pairs.parse_args([]).strategies == ["global"]


def test_reuse_quality_relates_each_reuse_to_its_flop_ratio():
    """q is MetaSchedule's latency over eto's; backend roots and bridges (not in the set) are left out."""
    op = lambda lat_ms, lat_eto, method, source: {  # noqa: E731
        "op": "BMM[1,128,768,3072]", "frequency": 12, "metaschedule_latency_s": lat_ms, "eto_latency_s": lat_eto,
        "eto_method": method, "eto_source": source}
    result = {"opset": "bert_base", "per_seed": [
        {"seed": 0, "per_operator": [op(2.0, 4.0, "reuse", "BMM(B=1,M=128,N=64,K=128)"),
                                     op(1.0, 1.0, "backend", None)]},
        {"seed": 1, "per_operator": [op(3.0, 3.0, "reuse", "BMM(B=1,M=128,N=768,K=768)")]}]}
    rows = reuse_quality.reuse_rows(result)
    assert [(r["seed"], r["flop_ratio"], r["reduction_ratio"], r["q"]) for r in rows] == [
        (0, 288.0, 24.0, 0.5), (1, 4.0, 4.0, 1.0)]
    assert reuse_quality.by_bin(rows, reuse_quality.REDUCTION_BINS, "reduction_ratio", right=True) == [
        {"reduction_ratio": [0.0, 4.0], "n": 1, "median_q": 1.0, "min_q": 1.0, "share_at_0.95": 1.0},
        {"reduction_ratio": [8.0, math.inf], "n": 1, "median_q": 0.5, "min_q": 0.5, "share_at_0.95": 0.0}]
    assert reuse_quality.by_bin(rows) == [
        {"flop_ratio": [4.0, 32.0], "n": 1, "median_q": 1.0, "min_q": 1.0, "share_at_0.95": 1.0},
        {"flop_ratio": [256.0, math.inf], "n": 1, "median_q": 0.5, "min_q": 0.5, "share_at_0.95": 0.0}]


def test_runs_are_fresh_unless_resumed_with_the_same_settings(tmp_path, monkeypatch):
    base = str(tmp_path / "work")
    first, info = _bench.open_run(base, None, {"scale": "ci", "trials": (16,)})
    assert info["run_id"].startswith("run-") and len(info["sessions"]) == 1
    ids = iter(["run-20000101-000000"])
    monkeypatch.setattr(_bench, "new_run_id", lambda: next(ids))
    second, _ = _bench.open_run(base, None, {"scale": "ci", "trials": (16,)})
    assert second != first  # a new run never sees the first one's stages
    again, info = _bench.open_run(base, os.path.basename(first), {"scale": "ci", "trials": [16]})
    assert again == first and len(info["sessions"]) == 2
    with open(os.path.join(first, "run.json")) as f:
        assert len(json.load(f)["sessions"]) == 2
    with pytest.raises(SystemExit, match="other settings"):
        _bench.open_run(base, os.path.basename(first), {"scale": "small", "trials": [16]})
    with pytest.raises(SystemExit, match="no run to resume"):
        _bench.open_run(str(tmp_path / "empty"), "latest", {})


def test_a_resumed_retune_bench_keeps_finished_sizes_of_the_same_settings_only(tmp_path):
    out = str(tmp_path / "retune.json")
    args = argparse.Namespace(
        db="DB", opset="bert_base", trials=200, seed=0, rounds=4, limit=None, pad_to=None, vary="seq=64,32",
        scale="small", search=None, timing="cold")
    _bench.backend_search(args)
    assert args.search == "evolutionary"  # the default off scale ci
    assert retune_bench.resumable(out, args) == []
    shapes = [{"value": 64, "time_ratio_metaschedule_over_eto": 9.0},
              {"value": 32, "time_ratio_metaschedule_over_eto": 11.0}]
    with open(out, "w") as f:
        json.dump(retune_bench.summary(args, shapes, 0.0), f)
    kept = retune_bench.resumable(out, args)
    assert [s["value"] for s in kept] == [32, 64]  # sorted by size, as measured
    args.search = "light"  # sizes tuned with another search do not compare
    with pytest.raises(SystemExit, match="search: 'evolutionary' there, 'light' now"):
        retune_bench.resumable(out, args)
    old = json.loads(open(out).read())
    del old["search"]  # a file from before --search: its runs were evolutionary
    with open(out, "w") as f:
        json.dump(old, f)
    args.search = "evolutionary"
    assert len(retune_bench.resumable(out, args)) == 2
    del old["timing"]  # a file from before --timing: eto's retune timed its candidates hot
    with open(out, "w") as f:
        json.dump(old, f)
    with pytest.raises(SystemExit, match="timing: 'hot' there, 'cold' now"):
        retune_bench.resumable(out, args)
    args.timing = "hot"
    assert len(retune_bench.resumable(out, args)) == 2
    args.trials = 100
    with pytest.raises(SystemExit, match="trials_N: 200 there, 100 now"):
        retune_bench.resumable(out, args)


def test_a_work_folder_is_bound_to_its_settings(tmp_path):
    _bench.bind_settings(str(tmp_path), {"trials": 8, "operators": [("a", 1)]})
    _bench.bind_settings(str(tmp_path), {"trials": 8, "operators": [["a", 1]]})
    with pytest.raises(SystemExit, match="other settings"):
        _bench.bind_settings(str(tmp_path), {"trials": 16, "operators": [["a", 1]]})


def test_set_trajectory_puts_every_result_on_one_wall_clock():
    """A backend run's tasks share the scheduler's clock; a reuse search's points count from its own
    start: each is placed by its commit time, and the set's curve starts once all have a program."""
    from eto.report import set_trajectory

    results = [  # two operators of one scheduler (both anchored at t = 100), then a reuse at t = 150
        {"target": "t", "op_key": "a", "time": 160.0, "trajectory": [[10.0, 1, 4.0], [60.0, 2, 3.0]]},
        {"target": "t", "op_key": "b", "time": 140.0, "trajectory": [[20.0, 1, 2.0], [40.0, 2, 1.0]]},
        {"target": "t", "op_key": "bridge", "time": 105.0, "trajectory": [[1.0, 1, 9.0], [5.0, 2, 8.0]]},
        {"target": "t", "op_key": "c", "time": 158.0, "trajectory": [[3.0, 1, 5.0], [8.0, 2, 0.5]]},
        {"target": "other", "op_key": "c", "time": 90.0, "trajectory": [[1.0, 1, 0.1]]},
    ]
    freq = {"a": 1, "b": 2, "c": 1}
    # events: a 110 (4), b 120 (2), b 140 (1), c 153 (5) -> all known, a 160 (3), c 158 (0.5)
    assert set_trajectory(results, freq, "t", since=100.0) == [
        (53.0, 4.0 + 2 * 1.0 + 5.0), (58.0, 4.0 + 2 * 1.0 + 0.5), (60.0, 3.0 + 2 * 1.0 + 0.5)]
    # by default the clock starts at the run's first measured point (the bridge's, at t = 101)
    assert set_trajectory(results, freq, "t")[0][0] == pytest.approx(52.0)
    assert set_trajectory(results, {"a": 1, "z": 1}, "t") == []  # z never tuned: no complete set


@pytest.mark.slow
def test_e1_and_e8_at_scale_ci(tmp_path):
    """E1 tunes three small batch matmuls with MetaSchedule and reads the B/T/M windows; E8 times
    that database's programs against PyTorch's (one tuning run serves both)."""
    from experiments import reuse_opportunity, vendor_roofline

    out = tmp_path / "e1.json"
    assert reuse_opportunity.main(["--scale", "ci", "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    pairs = {(p["alpha"], p["beta"]): p for p in result["pairs"]}
    assert len(pairs) == 6  # three batch matmuls whose loop nests dominate one another: every ordered pair
    big, small = "BMM[2,64,64,32]", "BMM[2,32,32,16]"
    assert pairs[(big, small)]["r1"] == pytest.approx(16 / 32) and pairs[(big, small)]["r2"] == pytest.approx(8.0)
    for p in pairs.values():
        assert p["good"] >= 1 and all(0 <= n <= p["good"] for n in p["phi"].values())
    s = result["summary"]
    assert s["pairs"] == 6 and all(0 <= v <= 1 for v in s["share_phi_nonempty"].values())
    assert (tmp_path / "e1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    from eto.operators import Operator
    from eto.operators.opsets import OperatorSet

    out = tmp_path / "e8.json"
    ms = tmp_path / "work" / "metaschedule"
    OperatorSet.from_layers("two", [Operator.create("BMM", B=2, M=32, N=32, K=16),
                                    Operator.create("BMM", B=2, M=64, N=64, K=32)]).save(tmp_path / "set.json")
    assert vendor_roofline.main(["--scale", "ci", "--opset", str(tmp_path / "set.json"), "--db", f"ms={ms}",
                                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["peak_gflops"] > 0 and result["bandwidth_gbs"] > 0
    assert [r["op"] for r in result["rows"]] == ["BMM[2,32,32,16]", "BMM[2,64,64,32]"]
    for r in result["rows"]:
        assert set(r["latency_s"]) == {"ms", "pytorch"}
        for k, lat in r["latency_s"].items():
            assert r["gflops"][k] == pytest.approx(r["flops"] / lat / 1e9)
    assert result["summary"]["throughput_vs_pytorch"]["ms"] > 0
    with pytest.raises(SystemExit):  # a database that is not there: a usage error naming it
        vendor_roofline.main(["--scale", "ci", "--db", f"ms={tmp_path / 'nope'}", "--out", str(out)])
    assert (tmp_path / "e8.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_e6_selector_scale_at_scale_ci(tmp_path):
    from experiments import selector_scale

    out = tmp_path / "e6.json"
    selector_scale.main(["--scale", "ci", "--out", str(out)])
    result = json.loads(out.read_text())
    (run,) = result["runs"]  # ci: 1-hop bridges only
    assert run["operators"] == 167 and run["bridges"] == "1hop" and run["bridge_operators"] > 0
    assert run["lower_bound"] <= run["plan_cost"] <= run["baseline_cost_all_backend"]
    assert (tmp_path / "e6.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_e5_pools_estimates_from_both_benchmarks(tmp_path):
    from experiments import estimate_accuracy

    pairs = {"benchmark": "reuse_pairs", "scale": "ci", "pairs": [
        {"alpha": "a", "beta": "b", "strategy": "global", "estimate": 10.0, "candidates": 12, "estimated_seconds": 5.0,
         "seconds": 5.0},
        {"alpha": "a", "beta": "b", "strategy": "topk", "estimate": None, "candidates": 3}]}  # TopK: no estimate
    sets = {"benchmark": "set_bench", "scale": "ci", "per_seed": [{"estimator": {"eto": {"rows": [
        {"op": "c", "source": "d", "estimate": 20.0, "candidates": 10, "estimated_seconds": 4.0, "seconds": 8.0}]}}}]}
    files = []
    for i, r in enumerate((pairs, sets)):
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps(r))
    out = tmp_path / "e5.json"
    assert estimate_accuracy.main(["--inputs", *map(str, files), "--out", str(out)]) == 0
    s = json.loads(out.read_text())["summary"]["all"]
    assert s["candidates"]["n"] == 2 and s["candidates"]["mean_actual_over_estimate"] == pytest.approx((1.2 + 0.5) / 2)
    assert s["candidates"]["within_0.67_1.5"] == 0.5
    assert s["seconds"]["min"] == 1.0 and s["seconds"]["max"] == 2.0
    assert (tmp_path / "e5.png").exists()


def test_e5_fits_the_time_model_on_pooled_databases_counting_a_copy_once(tmp_path):
    """--fit: the time-model fit that DEFAULTS come from; a result copied into a second database
    (a retune's copy of its source) is one result, and two targets' results are refused."""
    from experiments import estimate_accuracy

    from eto.store.database import Database
    from eto.operators import Operator
    from eto.target import parse_target
    from eto.planning.time_model import fit_time_model
    from eto.planning.time_priors import prior
    from tests.test_database import make_records

    cpu = parse_target("cpu")
    ops = [Operator.create("DENSE", M=16 * i, N=64, K=64) for i in range(1, 4)]
    dbs = [Database(tmp_path / f"db{i}") for i in range(2)]
    for db in dbs:  # the same backend result in both
        db.commit(ops[0], cpu, make_records(ops[0], [[1e-3]], cpu), method="backend", candidates=100, seconds=60.0)
    dbs[1].commit(ops[1], cpu, make_records(ops[1], [[1e-3]], cpu), method="reuse", candidates=10, seconds=8.0)
    fitted = estimate_accuracy.fit([str(db.path) for db in dbs], "cpu", timing="hot")  # (they record no timing)
    assert fitted["results"] == {"backend": 1, "reuse": 1}
    assert fitted["backend"] == vars(fit_time_model(dbs[1].results(), prior(cpu, "cpu", "hot")).backend)
    assert estimate_accuracy.fit([str(db.path) for db in dbs], "cpu")["results"] == {"backend": 0, "reuse": 0}
    other = Database(tmp_path / "db_other")
    skylake = parse_target('{"kind": "llvm", "mcpu": "skylake", "num-cores": 2}')
    other.commit(ops[2], skylake, make_records(ops[2], [[1e-3]], skylake), method="backend", candidates=50,
                 seconds=20.0)
    with pytest.raises(SystemExit, match="2 targets"):
        estimate_accuracy.fit([str(dbs[0].path), str(other.path)], "cpu", timing="hot")


@pytest.mark.slow
def test_e2_single_pairs_at_scale_ci(tmp_path):
    """E2: two convolutions, MetaSchedule on both, the reuse tuner on the pair, both re-measured."""
    out = tmp_path / "e2.json"
    assert reuse_pairs.main(["--scale", "ci", "--repeat", "1", "--work", str(tmp_path / "work"),
                             "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["scale"] == "ci" and len(result["backend_runs"]) == 2
    (row,) = result["pairs"]  # ci: one C2D pair
    assert "error" not in row and row["candidates"] > 0 and row["estimate"] > 0
    # the ratios are what the re-measured latencies and the backend's clock say
    assert row["throughput"] == pytest.approx(row["latency_backend_s"] / row["latency_reuse_s"])
    assert row["speedup"] == pytest.approx((row["backend_time_to_best_s"] or row["backend_seconds"]) / row["seconds"])
    assert result["summary"]["global"]["all"]["pairs"] == 1
    assert result["summary"]["global"]["all"]["median_throughput"] == pytest.approx(row["throughput"])
    assert (tmp_path / "e2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_e3_e4_set_bench_and_the_bridge_ablation_at_scale_ci(tmp_path):
    """E3 (eto against MetaSchedule on one set) and E4 (here: no bridges against 1-hop; "allbridges"
    runs the same code with another bridge setting) in one seed of the set benchmark: every method
    tunes every operator; the ratios are the runs' own. (Selective Tuning, E3's baseline, is
    `--method st` of the pipeline: tests/test_pipeline.py, to keep CI short.)"""
    out = tmp_path / "e3.json"
    assert set_bench.main(["--scale", "ci", "--seed-list", "0", "--no-control", "--rounds", "1",
                           "--variant", "plain", "nobridges",
                           "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    (seed,) = result["per_seed"]
    assert set(seed["variants"]) == {"nobridges"}
    assert len(seed["per_operator"]) == 2  # quickstart's two BMMs at ci
    for row in seed["per_operator"]:
        assert 0 < row["metaschedule_latency_s"] < math.inf and 0 < row["eto_latency_s"] < math.inf, row
    secs = seed["seconds"]
    assert seed["speedup"]["total"] == pytest.approx(secs["metaschedule_total"] / secs["eto_total"])
    assert seed["throughput"] == pytest.approx(seed["weighted_latency_s"]["metaschedule"]
                                               / seed["weighted_latency_s"]["eto"])
    for name, v in seed["variants"].items():  # each against MetaSchedule and plain eto, from its own run
        total = secs[f"eto_{name}_total"]
        assert v["speedup"]["total"] == pytest.approx(secs["metaschedule_total"] / total)
        assert v["vs_plain_eto"]["seconds"] == pytest.approx(total / secs["eto_total"])
        assert v["throughput"] == pytest.approx(seed["weighted_latency_s"]["metaschedule"]
                                                / seed["weighted_latency_s"][f"eto_{name}"])
    assert (tmp_path / "e3.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_searches_are_named_once_for_commands_and_benchmarks():
    from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

    from tuner.measure.backend import search_strategy

    assert search_strategy("evolutionary") == "evolutionary"
    assert isinstance(search_strategy("light"), EvolutionarySearch)
    with pytest.raises(ValueError, match="unknown search 'greedy'"):
        search_strategy("greedy")
    ci, small = argparse.Namespace(scale="ci", search=None), argparse.Namespace(scale="small", search=None)
    assert _bench.search_name(ci) == "light" and _bench.search_name(small) == "evolutionary"
    assert _bench.search_settings(ci) == {"search": "light"} and _bench.search_settings(small) == {}


def test_model_bench_counts_a_root_whose_polish_won_as_a_root():
    """A polished root's row carries the method of its best program ("polish"); the plan summary
    still counts it among the roots, and says how many roots their polish won."""
    def row(method, key, est=None, freq=1):
        return {"status": "tuned", "key": key, "method": method, "frequency": freq, "seconds": 10.0,
                "candidates": 20, "estimated_seconds": est, "estimated_candidates": est and 10}

    report = {"operators": [row("backend", "A"), row("polish", "B"), row("reuse", "C", est=5.0),
                            row("reuse", "D", est=20.0, freq=0), row("backend", "TASK(softmax)")],
              "candidates": 80, "estimated_seconds": 60.0}
    s = model_bench.plan_summary(report)
    assert s["eto_plan"] == {"backend": 2, "reuse": 2} and s["eto_roots_won_by_polish"] == 1
    assert s["eto_bridges"] == 1 and s["eto_functions"]["tasks"] == 1
    assert s["reuse_seconds_over_estimate_mean"] == pytest.approx((2.0 + 0.5) / 2)


def test_code_ab_sums_where_a_runs_seconds_went(tmp_path):
    rows = [
        {"method": "backend", "seconds": 60.0, "candidates": 100, "phases": {"search_s": 10, "build_s": 20.0, "run_s": 30}},
        {"method": "reuse", "seconds": 8.0, "candidates": 20, "failed": 2, "phases": {"build_s": 5.0, "run_s": 2.0}},
        {"method": "reuse", "seconds": 4.0, "candidates": 16, "failed": None},  # an older result: no phases
    ]
    (tmp_path / "eto_meta.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert code_ab.summarize(str(tmp_path)) == {
        "seconds": 72.0, "roots_s": 60.0, "roots_build_s": 20.0, "reuses_s": 12.0, "reuses_build_s": 5.0,
        "reuses_failed": 2, "candidates": 136, "operators": 3}


def test_e7_quality_gives_no_ratio_for_a_program_whose_remeasurement_failed():
    """A re-measurement that failed (the measurer's inf) leaves that ratio None, not a crash that loses the
    size's finished results (a math domain error in the parallel test tier)."""
    import math

    from eto.operators import Operator
    from eto.operators.opsets import OperatorSet
    from experiments import retune_bench

    op = Operator.create("BMM", B=2, M=48, N=32, K=16)
    q = retune_bench.quality({(op, "metaschedule"): 1e-5, (op, "eto"): math.inf, (op, "instant"): 2e-5},
                             OperatorSet.from_layers("x", [op]), {op: 1})
    assert q["geomean_eto_vs_metaschedule"] is None and q["geomean_instant_vs_metaschedule"] == 0.5
