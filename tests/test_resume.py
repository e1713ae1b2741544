"""SIGKILL in the middle of `eto tune`, then the same command again: nothing lost, nothing twice."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from eto.database import META, Database
from eto.operators import Operator
from eto.opsets import OperatorSet
from eto.target import parse_target

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", ["ansor", "eto"])
def test_killed_tuning_resumes_without_retuning(tmp_path, method):
    ops = [Operator.create("DENSE", M=m, N=32, K=32) for m in (8, 16, 24)]
    set_file = tmp_path / "set.json"
    OperatorSet.from_layers("three", ops).save(set_file)
    db_dir = tmp_path / "db"
    cmd = [sys.executable, "-m", "eto", "tune", "--opset", str(set_file), "--trials", "8",
           "--trials-per-iter", "4", "--search", "light", "--db", str(db_dir), "--quiet", "--seed", "0",
           "--method", method, "--bridges", "none", "--plan-budget", "1000"]
    env = {**os.environ, "TVM_NUM_THREADS": "2"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    meta = db_dir / META
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if meta.exists() and meta.read_text().count("\n") >= 1:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "tuning finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the process and its build/run workers
    proc.wait()
    before = Database(db_dir)
    done_before = {r["op_key"]: r for r in before.results()}
    assert 1 <= len(done_before) < 3
    lines_before = {p.op: p.line for p in before.programs()}

    rerun = subprocess.run(cmd + ["--json"], env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    report = json.loads(rerun.stdout)
    statuses = {r["key"]: r["status"] for r in report["operators"]}
    for key in done_before:
        assert statuses[key] == "cached"
    assert sorted(statuses.values()).count("tuned") == 3 - len(done_before)

    after = Database(db_dir)
    keys = [r["op_key"] for r in after.results()]
    assert sorted(keys) == sorted(op.key for op in ops)  # every operator exactly once
    for op, line in lines_before.items():  # records committed before the kill are still there
        assert any(p.line == line for p in after.programs(op=op))
    target = parse_target("cpu")
    assert all(after.best(op, target) is not None for op in ops)
    from tvm.s_tir import meta_schedule as ms

    assert len(ms.database.JSONDatabase(work_dir=str(db_dir)).get_all_tuning_records()) == len(after.programs())
