"""The fault-injection suite: a small `eto tune` killed with SIGKILL at each kill point, then rerun.

Run by tests/test_faults.py, or by hand for the README's figures::

    python -m tests.kill_suite OUT_DIR [--json] [--ci] [--shard I/N]

(``--ci``: the six cases of :data:`CI_CASES`, as the test suite runs them; without it all 25.
``--shard I/N``: cases I, I+N, ... only; the test suite runs two shards at once, each a
single-threaded process that forks its runs, since a run keeps about one core busy.)

TVM is imported once; each run is a forked child in its own process group (its build and run
workers die with it) that runs the pipeline (`eto tune`'s job, :func:`eto.runs.pipeline.tune`) with a
fast measurement setting, so a case costs a few seconds, not a fresh interpreter. After each kill
the database must load in eto; the rerun must exit 0 without redoing finished work; afterwards
the database must load in eto and in MetaSchedule's ``JSONDatabase``, every result committed
before the kill must still be there, every operator must have exactly one result (the root one
more: its polish, :mod:`eto.runs.polish`, whose kill points are the reuse search's), and no root may
have measured more than one batch beyond its budget.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

TRIALS, BATCH = 4, 2
#: (ETO_KILL_AT, where) -- every point of tuner.measure.faults.POINTS, some at a later visit
CASES = [
    "plan.before", "plan.after", "backend.built", "backend.ran", "backend.measured", "backend.checkpointed",
    "backend.checkpointed:2", "backend.result", "reuse.start", "reuse.measured", "reuse.checkpointed",
    "reuse.checkpointed:3", "reuse.result", "reuse.result:2", "gate.check", "gate.check:2", "db.workload", "db.records", "db.records:2", "db.meta",
    "db.meta:2", "db.progress", "db.progress:3", "db.torn", "db.torn:4", "between.operators", "tune.end",
]
#: The suite's share in CI (a case costs about 25 s on 2 cores): a kill inside each stage (plan,
#: backend, reuse, gate, database files, between operators), later visits where state has piled up.
CI_CASES = ["plan.after", "backend.checkpointed:2", "reuse.measured", "gate.check:2", "db.torn:4",
            "between.operators"]


def tune(db: Path, set_file: Path) -> None:
    """The job every case kills and reruns: a root by the backend, the other operator by reuse."""
    from eto.store.database import Database
    from eto.operators.opsets import OperatorSet
    from eto.options import TuneOptions
    from eto.runs.pipeline import tune as pipeline_tune
    from tuner.measure.backend import light_search
    from tuner.measure.measurer import MeasureConfig, Measurer

    with Measurer.local(MeasureConfig(number=1, repeat=2, min_repeat_ms=1, builder_workers=1)) as m:
        options = TuneOptions.of(trials=TRIALS, plan_budget=1000, bridges="none", cost="analytic",
                                 num_trials_per_iter=BATCH, seed=0, search=light_search(),
                                 polish=True)  # the root's polish, which TRIALS alone would not ask for
        pipeline_tune(OperatorSet.load(set_file), "cpu", Database(db), options, measurer=m)


def _child(db: Path, set_file: Path, kill_at: str | None) -> int:
    """Run :func:`tune` in a forked child; returns the wait status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (child)
        try:
            os.setpgid(0, 0)
            if kill_at:
                os.environ["ETO_KILL_AT"] = kill_at
            else:
                os.environ.pop("ETO_KILL_AT", None)
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            tune(db, set_file)
            code = 0
        except BaseException:
            code = 70
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    try:  # leftover workers of a killed child
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return status


def _snapshot(db_dir: Path) -> dict:
    from eto.store.database import Database

    db = Database(db_dir, readonly=True) if db_dir.exists() else None
    if db is None:
        return {"results": {}, "problems": [], "batches": 0}
    db.check_lines()  # progress lines are parsed when asked for: every one, and every damaged line named
    return {"results": _results(db),
            "problems": [str(p) for p in db.problems], "batches": len(db._progress)}


def _results(db) -> dict:
    """Each result's record latencies by (operator, method): a polished root has two results."""
    return {(r["op_key"], r["method"]): sorted(round(e["latency_s"], 12) for e in r["records"]) for r in db.results()}


def run_case(root: Path, set_file: Path, ops: list, kill_at: str) -> dict:
    """One kill and its rerun; returns what was checked (``failures`` lists what did not hold)."""
    from tvm.s_tir import meta_schedule as ms

    from eto.store.database import Database
    from eto.target import parse_target

    db_dir = root / kill_at.replace(":", "_")
    failures: list[str] = []
    status = _child(db_dir, set_file, kill_at)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if not killed:
        failures.append(f"not killed at {kill_at} (status {status})")
    try:
        before = _snapshot(db_dir)
    except Exception as exc:  # noqa: BLE001
        failures.append(f"database unreadable after the kill: {exc!r}")
        before = {"results": {}, "problems": [], "batches": 0}
    bad = [p for p in before["problems"] if "incomplete last line" not in p]
    if bad:
        failures.append(f"problems after the kill: {bad}")
    durable = {}
    db_k = Database(db_dir, readonly=True) if db_dir.exists() else None
    target = parse_target("cpu")
    for op in ops:
        if db_k is not None:
            durable[op.key] = {m: len(db_k.progress(op, target, m).latencies) for m in ("reuse", "polish")}
    status = _child(db_dir, set_file, None)
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        failures.append(f"rerun failed (status {status})")
    after = Database(db_dir)
    keys = Counter(r["op_key"] for r in after.results() if r["method"] != "polish")
    polished = Counter(r["op_key"] for r in after.results() if r["method"] == "polish")
    roots = {r["op_key"] for r in after.results() if r["method"] == "backend"}
    if sorted(keys) != sorted(op.key for op in ops) or any(n != 1 for n in keys.values()) or polished != Counter(roots):
        failures.append(f"results per operator: {dict(keys)}, polish results {dict(polished)}")
    lost = 0
    now = _results(after)
    for key, lats in before["results"].items():
        if now.get(key) != lats:
            lost += len(lats)
            failures.append(f"result of {key} changed by the rerun")
    redone = 0
    for r in after.results():
        if r["method"] == "backend":
            over = r["candidates"] - TRIALS
            redone = max(redone, over)
            if not 0 <= over < BATCH:
                failures.append(f"{r['op_key']}: {r['candidates']} backend trials for a budget of {TRIALS}")
        resumed = durable.get(r["op_key"], {}).get(r["method"], 0)
        if (r["method"] in ("reuse", "polish") and (r["op_key"], r["method"]) not in before["results"]
                and r.get("resumed_after", 0) != resumed):
            failures.append(f"{r['op_key']}: {r['method']} resumed after {r.get('resumed_after', 0)}, "
                            f"{resumed} were durable")
    ms_records = len(ms.database.JSONDatabase(work_dir=str(db_dir)).get_all_tuning_records())
    if ms_records != len(after.programs()) + len(after.orphans):
        failures.append(f"MetaSchedule reads {ms_records} records, eto {len(after.programs())} + orphans")
    return {"kill_at": kill_at, "killed": killed, "committed_before": len(before["results"]),
            "durable_batches": before["batches"], "records_lost": lost,
            "trials_redone_max": redone, "failures": failures}


def run_suite(root: Path, cases: list[str] = CASES) -> dict:
    """Every case in ``cases``; a summary with the per-case checks."""
    from tuner.analysis.intrinsics import register_tensor_intrinsics

    register_tensor_intrinsics()  # once, before forking

    from eto.operators import Operator
    from eto.operators.opsets import OperatorSet

    root.mkdir(parents=True, exist_ok=True)
    ops = [Operator.create("DENSE", M=m, N=32, K=32) for m in (16, 32)]
    set_file = root / "set.json"
    OperatorSet.from_layers("two", ops).save(set_file)
    rows = [run_case(root, set_file, ops, c) for c in cases]
    return {"kill_points": len(rows), "killed": sum(r["killed"] for r in rows),
            "records_lost": sum(r["records_lost"] for r in rows),
            "trials_redone_max": max((r["trials_redone_max"] for r in rows), default=0), "batch": BATCH,
            "failed_cases": [r for r in rows if r["failures"]], "cases": rows}


def _shard(cases: list[str], argv: list[str]) -> list[str]:
    if "--shard" not in argv:
        return cases
    i, n = (int(x) for x in argv[argv.index("--shard") + 1].split("/"))
    return cases[i::n]


if __name__ == "__main__":
    out = run_suite(Path(sys.argv[1]), _shard(CI_CASES if "--ci" in sys.argv else CASES, sys.argv))
    print(json.dumps(out, indent=1) if "--json" in sys.argv else
          f"{out['kill_points']} kill points, {out['killed']} killed, {out['records_lost']} records lost, "
          f"at most {out['trials_redone_max']} trials redone (batch {out['batch']}), "
          f"{len(out['failed_cases'])} failed cases")
