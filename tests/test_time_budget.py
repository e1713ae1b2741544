"""``eto tune --time-budget`` at scale ci: the run stops on time, its spare time improves the model, a
budget too small for the plan leaves the rest pending, and a rerun with more budget goes on from there."""

from __future__ import annotations

import json
import math

import pytest

import eto
from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.store.database import IMPROVE
from eto.target import parse_target, target_key

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # wall-clock budgets: alone on the cores

SPECS = ["BMM(B=1,M=64,N=64,K=32)", "BMM(B=2,M=64,N=64,K=64)", "BMM(B=1,M=128,N=64,K=64)"]
OPS = [Operator.parse(s) for s in SPECS]
#: the stop's allowed overrun: a chunk of candidates in flight, then storing what they measured
OVERRUN = 1.05


def results(db_path, method: str) -> list[dict]:
    tk = target_key(parse_target("cpu"))
    return [r for r in eto.Database(str(db_path), readonly=True).results()
            if r.get("method") == method and r.get("target") == tk]


def test_a_budget_is_kept_and_a_rerun_with_more_improves_the_model(tmp_path):
    opset = OperatorSet.from_layers("three", OPS)
    first = eto.tune(opset, database=tmp_path / "db", time_budget=75, seed=0)
    assert first.seconds <= 75 * OVERRUN, first.seconds
    assert first.time_budget == 75
    assert {r.status for r in first.rows if r.frequency} == {"tuned"}
    assert first.estimated_seconds is not None and first.estimated_seconds <= 75
    steps = results(tmp_path / "db", IMPROVE)
    assert steps, "the time left after the plan went to no operator"
    # the spare time went first where the latency is: not to the lightest operator (a sixth of the others)
    lightest = min((r for r in first.rows if r.latency_s), key=lambda r: r.frequency * r.latency_s)
    assert steps[0]["op_key"] != lightest.key
    before = len(eto.Database(str(tmp_path / "db"), readonly=True).results())

    again = eto.tune(opset, database=tmp_path / "db", time_budget=45, seed=1)
    assert again.seconds <= 45 * OVERRUN, again.seconds
    new = eto.Database(str(tmp_path / "db"), readonly=True).results()[before:]
    assert new and {r["method"] for r in new} == {IMPROVE}  # nothing planned again: all the time is spare
    assert again.weighted_latency_s <= first.weighted_latency_s  # a step never stores a slower best


def test_a_budget_smaller_than_the_plan_leaves_the_rest_pending_for_the_next_run(tmp_path, capsys):
    from eto.cli import main

    ops = [f"--op={spec}" for spec in SPECS]
    code = main(["tune", *ops, "--db", str(tmp_path / "db"), "--time-budget", "12s", "--seed", "0", "--json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["stopped"] == "time budget" and report["seconds"] <= 12 * OVERRUN + 3  # the gate of a cut chunk
    pending = [r for r in report["operators"] if r["status"] == "pending"]
    assert pending and all(r["latency_s"] is None for r in pending)
    db = eto.Database(str(tmp_path / "db"), readonly=True)
    measured = sum(db.progress(_op(r["key"]), parse_target("cpu")).trials for r in pending)
    assert measured > 0, "the cut root's measured candidates were not kept"

    code = main(["tune", *ops, "--db", str(tmp_path / "db"), "--time-budget", "2m", "--seed", "0", "--json", "-q"])
    done = json.loads(capsys.readouterr().out)
    assert code == 0 and not [r for r in done["operators"] if r["status"] in ("pending", "failed")]
    resumed = [r for r in eto.Database(str(tmp_path / "db"), readonly=True).results() if r.get("resumed_after")]
    assert resumed, "the rerun started the cut root again from nothing"
    assert all(r["latency_s"] and math.isfinite(r["latency_s"]) for r in done["operators"])


def _op(key: str) -> Operator:
    return next(op for op in OPS if op.key == key)
