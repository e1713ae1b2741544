"""SIGKILL at every kill point of a small `eto tune`, then the same command again (tests/kill_suite.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner import faults


def test_kill_points_are_inert_unless_named(monkeypatch):
    monkeypatch.delenv("ETO_KILL_AT", raising=False)
    faults._count.clear()
    assert not faults.reached("db.meta")
    monkeypatch.setenv("ETO_KILL_AT", "db.meta:3")
    assert [faults.reached("db.meta") for _ in range(4)] == [False, False, True, False]
    assert not faults.reached("db.records")


@pytest.mark.slow
def test_sigkill_at_every_kill_point_loses_nothing(tmp_path):
    from tests.kill_suite import CASES, CI_CASES

    # the whole suite (python -m tests.kill_suite DIR) kills at every point; CI runs one case per stage
    assert {c.partition(":")[0] for c in CASES} == set(faults.POINTS) and len(CASES) >= 20
    assert set(CI_CASES) <= set(CASES) and {c.split(".")[0] for c in CI_CASES} == {c.split(".")[0] for c in CASES
                                                                                   if c != "tune.end"}
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "tests.kill_suite", str(tmp_path), "--json", "--ci"], cwd=root,
                          env={**os.environ, "TVM_NUM_THREADS": "2"}, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["failed_cases"] == [], json.dumps(out["failed_cases"], indent=1)
    assert out["killed"] == out["kill_points"] == len(CI_CASES)
    assert out["records_lost"] == 0 and out["trials_redone_max"] < out["batch"]
    # the kills landed at different stages: some before anything was committed, some after
    assert {c["committed_before"] for c in out["cases"]} >= {0, 1}
    assert any(c["durable_batches"] for c in out["cases"] if c["committed_before"] == 0)
