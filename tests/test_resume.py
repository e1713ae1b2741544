"""SIGKILL in the middle of `eto tune`, then the same command again: nothing lost, nothing twice.

Kills at every kill point of the pipeline are tests/test_faults.py's; these are the command-line
cases: a backend run killed between batches, two writers on one database, an interrupted reuse."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from eto.store.database import PROGRESS, Database
from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.target import parse_target
from tests.stand_ins import StandInMeasurer

pytestmark = pytest.mark.slow


def test_killed_backend_continues_where_it_stopped(tmp_path):
    """SIGKILL half-way through one operator's backend run: its measured batches survive, and the
    rerun measures only the rest of the budget, seeded with them (issue: nothing lost on a crash)."""
    op = Operator.create("DENSE", M=32, N=32, K=32)
    set_file = tmp_path / "set.json"
    OperatorSet.from_layers("one", [op]).save(set_file)
    db_dir = tmp_path / "db"
    budget, batch = 16, 4
    cmd = [sys.executable, "-m", "eto", "tune", "--opset", str(set_file), "--trials", str(budget),
           "--trials-per-iter", str(batch), "--search", "light", "--db", str(db_dir), "--quiet", "--seed", "0",
           "--method", "ansor"]
    env = {**os.environ, "TVM_NUM_THREADS": "2"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    batches = db_dir / PROGRESS
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if batches.exists() and batches.read_text().count("\n") >= 2 * batch:  # a line per candidate
            break
        time.sleep(0.1)
    assert proc.poll() is None, "tuning finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = Database(db_dir)
    target = parse_target("cpu")
    progress = killed.progress(op, target)
    assert not killed.results() and batch * 2 <= progress.trials < budget
    assert progress.latencies and len(killed.programs()) == 0  # durable, but not yet a stored program

    rerun = subprocess.run(cmd + ["--json"], env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    after = Database(db_dir)
    (result,) = after.results()
    assert result["resumed_after"] == progress.trials
    assert budget <= result["candidates"] <= budget + batch  # within one batch of the budget
    assert result["seconds"] >= progress.seconds
    # the killed run's programs seeded the search: they are among the result's
    stored = {round(p.latency_s, 12) for p in after.programs(op=op)}
    assert {round(x, 12) for x in progress.latencies} <= stored
    assert after.best(op, target).latency_s <= min(progress.latencies)
    assert after.progress(op, target).trials == 0  # a result exists: nothing left to continue
    from tvm.s_tir import meta_schedule as ms

    # MetaSchedule sees exactly the stored (checked) programs
    assert len(ms.database.JSONDatabase(work_dir=str(db_dir)).get_all_tuning_records()) == len(after.programs())


def test_a_kill_inside_a_batch_keeps_its_measured_chunks(tmp_path):
    """A root whose one batch is its whole budget (eto's default: 64 trials, 64 per batch), killed as
    its second chunk finished building: the first chunk was built *and run* before it (issue: a kill
    during a batch's builds lost the whole batch), and the rerun continues from it."""
    from tuner.measure.timed import MEASURE_CHUNK

    op = Operator.create("DENSE", M=32, N=32, K=32)
    set_file = tmp_path / "set.json"
    OperatorSet.from_layers("one", [op]).save(set_file)
    db_dir = tmp_path / "db"
    budget = 3 * MEASURE_CHUNK
    cmd = [sys.executable, "-m", "eto", "tune", "--opset", str(set_file), "--trials", str(budget),
           "--trials-per-iter", str(budget), "--search", "light", "--db", str(db_dir), "--quiet", "--seed", "0",
           "--method", "metaschedule"]
    env = {**os.environ, "TVM_NUM_THREADS": "2"}
    killed = subprocess.run(cmd, env={**env, "ETO_KILL_AT": "backend.built:2"}, capture_output=True, text=True,
                            timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    progress = Database(db_dir).progress(op, parse_target("cpu"))
    assert MEASURE_CHUNK - 1 <= progress.trials <= MEASURE_CHUNK  # the first chunk (a failed build counts too)
    assert progress.latencies
    rerun = subprocess.run(cmd + ["--json"], env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    (result,) = Database(db_dir).results()
    assert result["resumed_after"] == progress.trials and result["candidates"] <= budget + MEASURE_CHUNK


def test_two_writers_on_one_database_tune_each_operator_once(tmp_path):
    """Two `eto tune` processes started together on one database: every operator is tuned by exactly
    one of them, both finish, and the files stay readable by eto and by MetaSchedule."""
    ops = [Operator.create("DENSE", M=m, N=32, K=32) for m in (8, 16, 24, 40)]
    set_file = tmp_path / "set.json"
    OperatorSet.from_layers("four", ops).save(set_file)
    db_dir = tmp_path / "db"
    cmd = [sys.executable, "-m", "eto", "tune", "--opset", str(set_file), "--trials", "8",
           "--trials-per-iter", "4", "--search", "light", "--db", str(db_dir), "--quiet", "--seed", "0",
           "--bridges", "none", "--plan-budget", "1000", "--json"]
    env = {**os.environ, "TVM_NUM_THREADS": "1"}
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    db = Database(db_dir)
    assert db.problems == [] and db.orphans == []
    keys = [r["op_key"] for r in db.results() if r["method"] != "polish"]
    assert sorted(keys) == sorted(op.key for op in ops)  # each operator exactly once
    roots = sorted(r["op_key"] for r in db.results() if r["method"] == "backend")
    polished = [r["op_key"] for r in db.results() if r["method"] == "polish"]  # none with 8 trials, by default
    assert roots and len(set(polished)) == len(polished) and set(polished) <= set(roots)
    statuses = [{r["key"]: r["status"] for r in json.loads(out)["operators"]} for out, _ in outs]
    for op in ops:  # each process's report: tuned where it committed a result (a root's polish may be the
        # other's), else cached (found done)
        by = {r["pid"] for r in db.results() if r["op_key"] == op.key}
        assert [s[op.key] for s in statuses] == ["tuned" if p.pid in by else "cached" for p in procs]
        assert "tuned" in [s[op.key] for s in statuses]
    from tvm.s_tir import meta_schedule as ms

    assert len(ms.database.JSONDatabase(work_dir=str(db_dir)).get_all_tuning_records()) == len(db.programs())


def test_a_claim_dies_with_its_process(tmp_path):
    from eto.store.claims import claim

    db = Database(tmp_path / "db")
    op = Operator.create("DENSE", M=8, N=32, K=32)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from eto.store.claims import claim; from eto.store.database import Database; "
        "from eto.operators import Operator; "
        f"c = claim(Database({str(db.path)!r}), Operator.create('DENSE', M=8, N=32, K=32), 'llvm'); "
        "c.__enter__(); print('held', flush=True); time.sleep(600)")], stdout=subprocess.PIPE, text=True,
        start_new_session=True)
    assert holder.stdout.readline().strip() == "held"
    with claim(db, op, "llvm", wait=False) as got:
        assert got is False
    with claim(db, Operator.create("DENSE", M=16, N=32, K=32), "llvm", wait=False) as other:
        assert other is True  # another operator is free meanwhile
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    with claim(db, op, "llvm", wait=False) as got:
        assert got is True
        with claim(db, op, "llvm", wait=False) as again:  # the holder asking again: no self-deadlock
            assert again is True


class _DryMeasurer(StandInMeasurer):
    """Times a module by a hash of its text (the same in every run), counting what it measures."""

    def __init__(self):
        super().__init__()
        self.measured = self.remeasured = 0

    def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
        import zlib

        from tuner.measure.measurer import MeasureResult

        if screen:
            self.measured += len(mods)
        else:  # a screened search's finalists, timed again in full
            self.remeasured += len(mods)
        return [MeasureResult((1e-6 * (1 + zlib.crc32(m.script().encode()) % 1000),)) for m in mods]


def test_an_interrupted_reuse_search_is_not_measured_again(tmp_path):
    """A reuse search checkpoints each batch; a rerun given them measures only what they lack and
    ends where an uninterrupted run ends."""
    from eto.target import cpu_target
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import reuse_tune, trace_key
    from tuner.reuse.options import ReuseOptions

    target = cpu_target()
    alpha, beta = Operator.create("BMM", B=2, M=64, N=32, K=64), Operator.create("BMM", B=4, M=64, N=64, K=64)
    source = sampled_record(beta, target)
    db = Database(tmp_path / "db")
    batches: list = []

    def checkpoint(records, measured, seconds):
        batches.append(measured)
        db.checkpoint(alpha, target, records, method="reuse", trials=measured, seconds=seconds)

    whole = _DryMeasurer()
    full = reuse_tune(alpha.prim_func(), source, target, whole, ReuseOptions(strategy="global", ranges="paper"), on_measured=checkpoint)
    assert len(batches) >= 2 and sum(batches) == whole.measured == full.candidates
    # the kill: only the first batches made it to the database
    kept = batches[: len(batches) // 2]
    lines = (tmp_path / "db" / PROGRESS).read_text().splitlines(keepends=True)
    (tmp_path / "db" / PROGRESS).write_text("".join(lines[: len(kept)]))
    prior = Database(tmp_path / "db").progress(alpha, target, "reuse")
    assert prior.trials == sum(kept)
    known = {trace_key(r.trace): s for r, s in prior.programs()}
    rest = _DryMeasurer()
    again = reuse_tune(alpha.prim_func(), source, target, rest, ReuseOptions(strategy="global", ranges="paper"), known=known)
    assert rest.measured == full.candidates - len(known)  # nothing screened twice
    assert rest.remeasured == whole.remeasured == full.remeasured == 3  # the finalists, in full, once per run
    assert again.candidates == full.candidates and again.latency_s == full.latency_s
