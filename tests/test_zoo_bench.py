"""E13's bookkeeping (experiments/zoo_bench.py): which tasks a prior covered, the table and the results
page, on reports written by hand (the tuning itself is eto tune's, tested elsewhere)."""

from __future__ import annotations

import pytest

from experiments import zoo_bench
from experiments.tools import results_md


def _row(key: str, method: str = "reuse", source: str | None = None, status: str = "tuned", candidates: int = 10):
    return {"name": key, "key": key, "status": status, "method": method, "source": source, "candidates": candidates,
            "frequency": 1, "latency_s": None if status == "pending" else 1e-4}


def test_covered_counts_tasks_in_a_prior_and_reuses_of_its_programs():
    report = {"operators": [
        _row("A", "backend", status="cached"),   # the same task is in the prior (copied into the database)
        _row("B", "reuse", source="A"),          # reused from the prior's A
        _row("C", "reuse", source="B"),          # reused from this model's own B: not the prior's
        _row("D", "backend"),                    # a root of its own
        _row("E", "reuse+improve", source="P"),  # a reuse of a prior-only program, improved after
    ]}
    assert zoo_bench.covered(report, {"A", "P"}) == {"tasks": 5, "same_in_prior": 1, "reused_from_prior": 2}
    assert zoo_bench.covered(report, set()) == {"tasks": 5, "same_in_prior": 0, "reused_from_prior": 0}


def _result() -> dict:
    first = {"family": "resnet", "model": "resnet18", "priors": [], "trials": 8, "alone_s": 100.0,
             "alone_candidates": 50, "zoo_s": 100.0, "zoo_candidates": 50}
    second = {"family": "resnet", "model": "resnet34", "priors": ["resnet18"], "trials": 8, "alone_s": 120.0,
              "zoo_s": 20.0, "time_ratio": 20.0 / 120.0, "tasks": 12, "same_in_prior": 9, "reused_from_prior": 2,
              "alone_ms": 10.0, "zoo_ms": 10.5, "zoo_speed": 10.0 / 10.5, "zoo_speed_rounds": [0.9, 1.0]}
    return {"experiment": "zoo_bench", "trials": 8, "rounds": 3, "rows": [first, second],
            "summary": {"cumulative": {"resnet": {"alone_s": 220.0, "zoo_s": 120.0}}}}


def test_table_and_results_page_give_each_models_numbers():
    d = _result()
    text = zoo_bench.table(d["rows"])
    assert "| resnet | resnet34 | 1 | 120 | 20 (0.17) | 9 same + 2 reused of 12 | 10.00 | 10.50 | 0.95x (0.90-1.00) |" in text
    assert "resnet: cumulative tuning 220 s alone, 120 s with priors (0.55)" in text
    page = "\n".join(results_md.zoo_bench(d))
    assert "`resnet34`" in page and "9 + 2 of 12" in page and "resnet: 220 s alone, 120 s with priors" in page


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "zoo.png"
    zoo_bench.plot(_result()["rows"], str(path))
    assert path.stat().st_size > 1000


def test_family_flag_must_name_models():
    with pytest.raises(SystemExit):
        zoo_bench.main(["--family", "resnet"])


def test_a_budget_run_is_tuned_within_its_share_of_the_alone_time_and_timed_beside_the_others(tmp_path, monkeypatch):
    """``--budget-share``: the third run gets ``--time-budget`` share x alone seconds and the earlier models'
    databases as priors, and all three builds are timed together (each speed relative to the alone build)."""
    import argparse

    calls: dict = {}

    def tune(onnx_path, db, priors, trials, log, budget=None):
        calls["tune"] = (db, priors, budget)
        return 25.0, {"operators": [_row("A", status="cached", candidates=0), _row("B", candidates=12),
                                    {**_row("C", status="pending", candidates=0), "latency_s": 1e-4},
                                    _row("D", status="pending", candidates=0),  # no program: a default schedule
                                    {**_row("E", status="pending", candidates=0), "frequency": 0}],  # a bridge
                      "busy": {"seconds": 25.0, "others": 0.02, "steal": 0.0}}

    monkeypatch.setattr(zoo_bench, "tune", tune)
    monkeypatch.setattr(zoo_bench, "build", lambda onnx_path, db, lib, log: calls.setdefault("built", []).append(lib))
    def round_medians(name, runs, rounds, repeat, threads):
        calls["timed"] = runs
        return {"alone": [0.010, 0.011, 0.010], "zoo": [0.010, 0.011, 0.010], "budget": [0.0125, 0.011, 0.0125],
                "control": [0.011, 0.010, 0.010]}

    monkeypatch.setattr(zoo_bench, "round_medians", round_medians)
    monkeypatch.setattr(zoo_bench, "interleaved_medians", lambda name, libs, rounds, repeat, threads: {
        "alone": [0.010, 0.010], "zoo": [0.010, 0.010], "budget": [0.0105, 0.0102], "control": [0.010, 0.0101]})
    args = argparse.Namespace(work=str(tmp_path), budget_share=0.2, trials=8, rounds=3, repeat=5, threads=2)
    row = zoo_bench.add_budget_run(_result()["rows"][1], args)
    db, priors, budget = calls["tune"]
    assert budget == pytest.approx(24.0) and db.endswith("resnet34-budget-db")
    assert priors == [str(tmp_path / "resnet" / "resnet18-alone-db")]
    assert calls["built"] == [str(tmp_path / "resnet" / "resnet34-budget.so")]
    assert row["budget_s"] == 25.0 and row["budget_candidates"] == 12 and row["budget_instant"] == 1
    assert row["budget_default"] == 1 and row["budget_busy"]["others"] == 0.02
    assert row["budget_speed"] == pytest.approx(0.010 / 0.0125) and row["budget_speed_rounds"] == pytest.approx([0.8, 1.0])
    assert row["zoo_speed"] == pytest.approx(1.0)
    # the noise floor: the alone build timed as a fourth build, its speed against itself
    assert calls["timed"]["control"] == calls["timed"]["alone"]
    # and all of them once more, interleaved in one process a round: the ratios from those rounds
    assert row["interleaved"]["budget_speed"] == pytest.approx(0.010 / 0.01035)
    assert row["interleaved"]["budget_speed_rounds"] == pytest.approx([0.010 / 0.0105, 0.010 / 0.0102])
    assert row["control_speed"] == pytest.approx(1.0) and row["control_speed_rounds"] == pytest.approx([10 / 11, 1.1])
    d = {**_result(), "rows": [_result()["rows"][0], row]}
    assert "resnet/resnet34 with priors within 24 s (0.20 of alone): 25 s, 12.50 ms, 0.80x" in zoo_bench.table(d["rows"])
    page = "\n".join(results_md.zoo_bench(d))
    assert "| resnet | `resnet34` | 24 s (0.20) | 25 s (0.21) | 12 | 1 | 1 | 12.50 | 0.80x (0.80x-1.00x) |" in page
    assert "`resnet34` 1.00x (0.91x-1.10x)" in page
    assert "`resnet34`: zoo 1.00x (1.00x-1.00x), budget 0.97x (0.95x-0.98x), control 1.00x (0.99x-1.00x)" in page


def test_retime_times_every_build_of_a_row_again_and_keeps_the_earlier_timing(tmp_path, monkeypatch):
    """``--retime``: the row's alone, zoo and budget builds timed again (nothing tuned or built), the
    speeds from the new rounds, the earlier timing under ``timed_before``."""
    import argparse

    monkeypatch.setattr(zoo_bench, "tune", lambda *a, **k: pytest.fail("retime tunes nothing"))
    monkeypatch.setattr(zoo_bench, "build", lambda *a, **k: pytest.fail("retime builds nothing"))
    timed = {}

    def round_medians(name, runs, rounds, repeat, threads):
        timed.update(runs=runs, rounds=rounds)
        return {"alone": [0.010, 0.010, 0.011], "zoo": [0.010, 0.0125, 0.011], "budget": [0.0125, 0.010, 0.011],
                "control": [0.010, 0.010, 0.011]}

    monkeypatch.setattr(zoo_bench, "round_medians", round_medians)
    monkeypatch.setattr(zoo_bench, "interleaved_medians", lambda name, libs, rounds, repeat, threads: {
        label: [0.010] * rounds for label in libs})
    row = {**_result()["rows"][1], "budget_s": 25.0, "budget_ms": 20.0, "budget_speed": 0.5, "budget_rounds_ms": [20.0],
           "budget_speed_rounds": [0.5, 0.5]}
    args = argparse.Namespace(work=str(tmp_path), rounds=3, repeat=50, threads=2)
    new = zoo_bench.retime(row, args)
    assert {k: v[1] for k, v in timed["runs"].items()} == {
        k: str(tmp_path / "resnet" / f"resnet34-{k}.so") for k in ("alone", "zoo", "budget")} | {
        "control": str(tmp_path / "resnet" / "resnet34-alone.so")} and timed["rounds"] == 3
    assert new["budget_speed"] == pytest.approx(10 / 11) and new["budget_speed_rounds"] == pytest.approx([0.8, 1.0])
    assert new["zoo_speed"] == pytest.approx(10 / 11) and new["budget_ms"] == pytest.approx(11.0)
    (before,) = new["timed_before"]
    assert before["budget_speed"] == 0.5 and before["budget_ms"] == 20.0 and before["zoo_speed"] == row["zoo_speed"]
    assert new["timed_with"]["repeat"] == 50 and new["budget_s"] == 25.0  # the tuning kept
    assert len(zoo_bench.retime(new, args)["timed_before"]) == 2


def test_each_timing_process_times_at_least_a_second_of_runs_whatever_repeat(monkeypatch):
    """A round's median from 20 runs of a 2 ms model (40 ms) took a slow stretch of the machine into it:
    each process times --repeat runs and at least MIN_TIMED_S of them."""
    import time

    from experiments import corpus_bench

    class Tiny:  # a model that takes 2 ms a run
        def __call__(self):
            time.sleep(0.002)

    monkeypatch.setattr(corpus_bench, "_inputs", lambda name: (Tiny(), []))
    monkeypatch.setattr(corpus_bench, "MIN_TIMED_S", 0.1)
    times = corpus_bench.time_runtime("pytorch", "tiny", "", threads=1, repeat=5)
    assert len(times) > 5 and sum(times) >= 0.1 and sum(times[:-1]) < 0.1  # stopped as soon as 0.1 s was timed
    monkeypatch.setattr(corpus_bench, "MIN_TIMED_S", 0.0)
    assert len(corpus_bench.time_runtime("pytorch", "tiny", "", threads=1, repeat=5)) == 5  # --repeat, at least


def test_interleaved_timing_runs_each_build_in_turn_in_one_process(monkeypatch):
    """Every build loaded once, then one run of each in turn: a slow stretch of the machine falls on all of
    them alike. Each gets --repeat runs and at least MIN_TIMED_S of them."""
    import time

    import eto
    from experiments import corpus_bench

    order: list[str] = []

    def load(path):
        def run(*arrays):
            order.append(path)
            time.sleep(0.002 if path == "slow.so" else 0.001)
        return run

    monkeypatch.setattr(eto, "load", load)
    monkeypatch.setattr(corpus_bench, "_inputs", lambda name: (None, []))
    monkeypatch.setattr(zoo_bench, "MIN_TIMED_S", 0.02)
    times = zoo_bench.time_interleaved("m", {"alone": "fast.so", "budget": "slow.so"}, repeat=5)
    timed = order[6:]  # after 3 warm-up runs of each
    assert timed[:4] == ["fast.so", "slow.so", "fast.so", "slow.so"]
    assert len(times["alone"]) == len(times["budget"]) >= 5 and sum(times["alone"]) >= 0.02
    assert min(times["budget"]) > min(times["alone"])
