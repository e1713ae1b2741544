"""SIGKILL at every kill point of a small `eto tune`, then the same command again (tests/kill_suite.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.measure import faults


def test_kill_points_are_inert_unless_named(monkeypatch):
    monkeypatch.delenv("ETO_KILL_AT", raising=False)
    faults._count.clear()
    assert not faults.reached("db.meta")
    monkeypatch.setenv("ETO_KILL_AT", "db.meta:3")
    assert [faults.reached("db.meta") for _ in range(4)] == [False, False, True, False]
    assert not faults.reached("db.records")


@pytest.mark.slow
@pytest.mark.serial  # two shards of its own
def test_sigkill_at_every_kill_point_loses_nothing(tmp_path):
    from tests.kill_suite import CASES, CI_CASES

    # the whole suite (python -m tests.kill_suite DIR) kills at every point; CI runs one case per stage
    assert {c.partition(":")[0] for c in CASES} == set(faults.POINTS) and len(CASES) >= 20
    assert set(CI_CASES) <= set(CASES) and {c.split(".")[0] for c in CI_CASES} == {c.split(".")[0] for c in CASES
                                                                                   if c != "tune.end"}
    root = Path(__file__).resolve().parent.parent
    procs = [subprocess.Popen([sys.executable, "-m", "tests.kill_suite", str(tmp_path / f"shard{i}"), "--json", "--ci",
                               "--shard", f"{i}/2"], cwd=root, env={**os.environ, "TVM_NUM_THREADS": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=1500)
            assert proc.returncode == 0, stderr[-3000:]
            outs.append(json.loads(stdout))
    finally:  # a failed shard leaves no other running
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    cases = [c for out in outs for c in out["cases"]]
    failed = [c for out in outs for c in out["failed_cases"]]
    assert failed == [], json.dumps(failed, indent=1)
    assert sorted(c["kill_at"] for c in cases) == sorted(CI_CASES) and all(c["killed"] for c in cases)
    assert sum(c["records_lost"] for c in cases) == 0 and max(c["trials_redone_max"] for c in cases) < outs[0]["batch"]
    # the kills landed at different stages: some before anything was committed, some after
    assert {c["committed_before"] for c in cases} >= {0, 1}
    assert any(c["durable_batches"] for c in cases if c["committed_before"] == 0)
