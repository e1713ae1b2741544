"""``eto build``'s choice of a program per task (eto/models/build.py), without compiling the model: a stored
program that fails leaves its task on TVM's default schedule, named with TVM's error, and the build goes on."""

from __future__ import annotations

import json

import pytest

from eto.operators import Operator


def test_a_build_names_each_task_whose_stored_program_fails_and_why(tmp_path, monkeypatch):
    """Two tasks with stored programs: one whose trace does not replay on the model's function (a split fit for
    another extent), one whose record TVM cannot read. Each keeps TVM's default schedule with a warning naming
    the task and TVM's error; the summary and ``eto build --json`` tell them from tasks without a program."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
    from tvm.s_tir.schedule import Trace

    from eto.cli.model import build_json
    from eto.models import build
    from eto.models.tasks import ModelTask, ModelTasks
    from eto.store.database import RECORDS, Database
    from eto.target import parse_target

    target = parse_target("cpu")
    stale, damaged, untuned = (Operator.create("DENSE", M=m, N=8, K=16) for m in (6, 8, 10))

    def module(op: Operator) -> "tvm.IRModule":
        return tvm.IRModule({"main": op.prim_func()})

    tuned = module(Operator.create("DENSE", M=4, N=8, K=16))  # the function the stale program was tuned on
    sch = Schedule(tuned)
    sch.split(sch.get_loops(sch.get_sblock("dense"))[0], [2, 2])  # fits M=4, not the stale task's M=6
    db = Database(tmp_path / "db")
    for op, trace, mod in ((stale, sch.trace, tuned), (damaged, Trace([], {}), module(damaged))):
        rec = TuningRecord(trace, Workload(mod), [1e-6], target, ArgInfo.from_prim_func(mod["main"]))
        db.commit(op, target, [rec], method="backend", candidates=1, seconds=1.0)
    lines = (tmp_path / "db" / RECORDS).read_text().splitlines()
    wl, rec = json.loads(lines[1])
    lines[1] = json.dumps([wl, ["not a trace", *rec[1:]]])  # still JSON of a record's shape: the load keeps it
    (tmp_path / "db" / RECORDS).write_text("\n".join(lines) + "\n")

    tasks = ModelTasks("m", tuple(ModelTask(f"fused_{op.key}", 1, module(op), op) for op in (stale, damaged, untuned)),
                       None, None, 0)
    monkeypatch.setattr(build, "compile_fused", lambda ms_db, fused, target: "executable")
    with pytest.warns(RuntimeWarning) as caught:
        built = build.build_model(None, Database(tmp_path / "db", readonly=True), target, tasks=tasks)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2, messages
    instead = "TVM's default schedule instead of the stored program for"
    assert messages[0].startswith(f"fused_{stale.key}: {instead} {stale.name}: its trace does not replay: ")
    assert "product of factors" in messages[0]  # TVM's own words
    assert messages[1].startswith(f"fused_{damaged.key}: {instead} {damaged.name}: {tmp_path / 'db' / RECORDS}:2: TVM ")
    assert "cannot read this program" in messages[1]
    assert not built.applied and [t.op for t in built.missing] == [stale, damaged, untuned]
    assert [t.op for t, _ in built.fallbacks] == [stale, damaged] and [t.op for t in built.unprogrammed] == [untuned]
    shown = {t["key"]: t.get("error") for t in build_json("m", built, "m.so")["missing"]}
    assert shown[stale.key].startswith("its trace does not replay: ") and shown[untuned.key] is None
    assert "cannot read this program" in shown[damaged.key]
