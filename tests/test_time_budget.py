"""``eto tune --time-budget`` at scale ci: a budget too small for the plan leaves the rest pending with
what it measured kept; a rerun with more budget finishes the plan on time and spends the rest on the
operators with the most latency; one more rerun only improves them, never making the model slower."""

from __future__ import annotations

import json
import math

import pytest

import eto
from eto.operators import Operator
from eto.store.database import IMPROVE, POLISH
from eto.target import parse_target

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # wall-clock budgets: alone on the cores

SPECS = ["BMM(B=1,M=64,N=64,K=32)", "BMM(B=2,M=64,N=64,K=64)", "BMM(B=1,M=128,N=64,K=64)"]
OPS = {op.key: op for op in map(Operator.parse, SPECS)}
#: the stop's allowed overrun: a chunk of candidates in flight, then storing what they measured
OVERRUN = 1.05
#: what a budget smaller than one root's search may overrun by: that search's first batch
SEARCH_IN_FLIGHT = 8.0


def tune(capsys, db, budget: str) -> dict:
    from eto.cli import main

    code = main(["tune", *(f"--op={s}" for s in SPECS), "--db", str(db), "--time-budget", budget, "--seed", "0",
                 "--json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    return report


def test_a_budget_stops_on_time_and_a_rerun_with_more_goes_on_and_improves(tmp_path, capsys):
    db = tmp_path / "db"
    cut = tune(capsys, db, "12s")  # less than the smallest plan: stopped inside it
    # past the deadline at most a MetaSchedule search in flight (it runs in C++ before anything is built)
    assert cut["stopped"] == "time budget" and cut["seconds"] <= 12 + SEARCH_IN_FLIGHT
    pending = [r for r in cut["operators"] if r["status"] == "pending"]
    assert pending and all(r["latency_s"] is None or r["method"] == "instant" for r in pending)
    store, cpu = eto.Database(str(db), readonly=True), parse_target("cpu")
    for r in store.results():  # a root the deadline cut is committed from what it measured
        if r.get("cut") and r["method"] == "backend":
            assert r["records"] and r["resumed_after"] == r["candidates"] > 0
    for r in pending:  # nothing measured is lost: a pending operator's candidates wait in its checkpoints
        assert not store.attempted(OPS[r["key"]], cpu)

    # the rest of the plan, then steps where the latency is. The plan is fitted to 70% of the budget by the
    # time model; on a machine kind it has not learned (a MetaSchedule set-up of 18.75 s a root on znver5)
    # the plan runs up to twice its estimate, the deadline leaves what it did not reach pending, and the
    # same command goes on from there: every rerun reaches more of the plan until it is done
    left = len(pending)
    for _ in range(3):
        done = tune(capsys, db, "60s")
        assert done["seconds"] <= 60 * OVERRUN, done["seconds"]
        assert not [r for r in done["operators"] if r["status"] == "failed"]
        still = [r for r in done["operators"] if r["status"] == "pending"]
        if not still:
            break
        assert done["stopped"] == "time budget" and len(still) < left, (done["seconds"], still)
        left = len(still)
    assert not still, (done["stopped"], done["seconds"], done["estimated_seconds"], still)
    assert all(r["latency_s"] and math.isfinite(r["latency_s"]) for r in done["operators"])
    results = eto.Database(str(db), readonly=True).results()
    steps = [r for r in results if r["method"] == IMPROVE]
    # the spare time went to the set's operators, ranked by latency share x headroom under the roofline
    # (tests/test_budget.py): at this scale the lightest operator has the most headroom and may come first
    assert {r["op_key"] for r in steps} <= set(OPS)

    before = len(results)
    more = tune(capsys, db, "40s")  # everything tuned: all of it is spare time (a MetaSchedule step: 18.75 s set-up, then trials)
    assert more["seconds"] <= 40 * OVERRUN, more["seconds"]
    new = eto.Database(str(db), readonly=True).results()[before:]
    # only improvements: steps, or the polish of a root the last run's deadline cut short
    assert new and {r["method"] for r in new} <= {IMPROVE, POLISH}
    assert more["weighted_latency_s"] <= done["weighted_latency_s"]  # a step never stores a slower best


def test_operators_not_reached_get_instant_programs_served_until_tuned(tmp_path, capsys):
    from tuner.measure import deadline
    from tuner.measure.measurer import MeasureConfig, Measurer

    from eto.operators.opsets import OperatorSet
    from eto.options import TuneOptions
    from eto.runs.derive import RunContext
    from eto.runs.finish import SEARCH_IN_FLIGHT_S, INSTANT_S, finish, finishable, reserve
    from eto.runs.tuning import report_row
    from eto.store.database import PREDICTED

    from eto.cli import main

    db, cpu = tmp_path / "db", parse_target("cpu")
    # one operator tuned, the rest what a cut run leaves (a 12 s budget tuned none on a slow machine kind)
    assert main(["tune", f"--op={SPECS[0]}", "--db", str(db), "--trials", "8", "--seed", "0", "-q"]) == 0
    capsys.readouterr()
    store = eto.Database(str(db))
    opset = OperatorSet.from_layers("set", [*OPS.values(), Operator.parse("BMM(B=1,M=96,N=80,K=48)")])
    run = RunContext(cpu, store, TuneOptions(), frozenset(), say=lambda _m: None)
    with Measurer.local(MeasureConfig()) as measurer:
        todo = finishable(opset, run)
        assert todo and all(store.best(op, cpu) is None for op in todo)
        assert reserve(opset, run, measurer, 1000) == SEARCH_IN_FLIGHT_S + INSTANT_S * len(todo)
        assert reserve(opset, run, measurer, 20) == 5.0  # at most a quarter of the budget
        with deadline.until(60):
            assert finish(opset, run, measurer) == len(todo)
        assert finishable(opset, run) == [] and reserve(opset, run, measurer, 1000) == 0.0
    for op in todo:  # served (the database's best), checked against numpy, yet not tuned: the next run tunes it
        best = store.best(op, cpu)
        assert best.method == PREDICTED and not store.attempted(op, cpu)
        row = report_row(next(e for e in opset if e.op == op), store, cpu, "tuned")
        assert row.status == "pending" and row.method == PREDICTED and row.latency_s == best.latency_s
        assert math.isfinite(row.latency_s) and row.latency_s > 0


def test_operators_a_cut_left_without_a_program_get_instant_programs_before_the_improvement_steps(
        tmp_path, capsys, monkeypatch):
    """A root whose share of the budget was spent before it measured anything (ResNet-50's 24-root batch
    at 386 s left two so) has no program and nothing derives it: built as it is it would run TVM's
    default schedule. The run gives it an instant program before spending the rest on improvements,
    and the report says why it was not reached."""
    from eto.cli import main
    from eto.runs import pipeline
    from eto.store.database import PREDICTED

    db, cpu = tmp_path / "db", parse_target("cpu")
    assert main(["tune", f"--op={SPECS[0]}", "--db", str(db), "--trials", "8", "--seed", "0", "-q"]) == 0
    capsys.readouterr()
    # every root and reuse of this run cut before a candidate ran; no improvement steps after
    monkeypatch.setattr(pipeline, "_tune_roots", lambda *a, **k: None)
    monkeypatch.setattr(pipeline, "_derive_one", lambda *a, **k: None)
    monkeypatch.setattr(pipeline, "improve", lambda *a, **k: 0)
    assert main(["tune", *(f"--op={s}" for s in SPECS), "--db", str(db), "--time-budget", "60", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "cut by the roots' share of the time budget: 2 operators not reached (2 of them run instant programs" in out
    store = eto.Database(str(db))
    for spec in SPECS[1:]:
        best = store.best(OPS[Operator.parse(spec).key], cpu)
        assert best is not None and best.method == PREDICTED and math.isfinite(best.latency_s)
