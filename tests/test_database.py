"""The program database: MetaSchedule-readable files, metadata, corrupt lines, crashes, merging."""

import json
import re
import warnings

import pytest

from eto.store.database import CORRUPT, META, RECORDS, WORKLOADS, Database, DatabaseError
from eto.operators import Operator
from eto.target import parse_target


@pytest.fixture(scope="module")
def target():
    return parse_target("cpu")


def make_records(op, secs_list, target):
    """Real TuningRecords with an empty trace (the unscheduled program), as MetaSchedule writes them."""
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
    from tvm.s_tir.schedule import Trace

    mod = IRModule({"main": op.prim_func()})
    wl = Workload(mod)
    args = ArgInfo.from_prim_func(op.prim_func())
    return [TuningRecord(Trace([], {}), wl, [float(s) for s in secs], target, args) for secs in secs_list]


def test_commit_and_query(tmp_path, target):
    a = Operator.create("DENSE", M=4, N=8, K=16)
    b = Operator.create("DENSE", M=8, N=8, K=16)
    db = Database(tmp_path / "db")
    progs = db.commit(a, target, make_records(a, [[3e-6, 3e-6], [1e-6, 2e-6, 1e-6], [1e10]], target),
                      method="backend", candidates=64, seconds=12.5)
    assert [p.rank for p in progs] == [0, 1]  # the failed (1e10) record is not stored
    assert progs[0].latency_s == pytest.approx(1e-6)
    db.commit(b, target, make_records(b, [[5e-6]], target), method="reuse", source=a, candidates=9, seconds=2.0)
    again = Database(tmp_path / "db")
    assert len(again) == 3 and not again.problems
    assert again.best(a, target).latency_s == pytest.approx(1e-6)
    assert again.best(b, target).source == a.key and again.best(b, target).method == "reuse"
    assert again.attempted(a, target) and not again.attempted(Operator.create("DENSE", M=1, N=1, K=1), target)
    assert {p.op for p in again.sources(op_type="DENSE", target=target)} == {a, b}
    other = '{"kind":"llvm","mcpu":"skylake-avx512","num-cores":4}'
    assert again.best(a, other) is None and again.tuned(other) == {}
    # The same files are a MetaSchedule JSONDatabase.
    from tvm.s_tir import meta_schedule as ms

    jdb = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    assert len(jdb.get_all_tuning_records()) == 3
    assert again.best(a, target).tuning_record.run_secs is not None


def test_failed_result_is_remembered(tmp_path, target):
    op = Operator.create("DENSE", M=4, N=8, K=16)
    db = Database(tmp_path / "db")
    db.commit(op, target, [], method="backend", candidates=8, seconds=1.0, error="every candidate failed")
    assert db.best(op, target) is None and db.attempted(op, target)
    assert db.results()[0]["error"] == "every candidate failed"


def test_corrupt_lines_are_reported_and_skipped(tmp_path, target):
    op = Operator.create("DENSE", M=4, N=8, K=16)
    path = tmp_path / "db"
    db = Database(path)
    db.commit(op, target, make_records(op, [[1e-6]], target), method="backend", candidates=1, seconds=1)
    db.commit(op.replace(M=5), target, make_records(op.replace(M=5), [[2e-6]], target), method="backend",
              candidates=1, seconds=1)
    with open(path / RECORDS, "a") as f:
        f.write("[0, this is not json]\n")
    lines = (path / META).read_text().splitlines()
    lines.insert(1, '{"op": {"type": "NOPE"}, "records": []}')
    (path / META).write_text("\n".join(lines) + "\n")
    again = Database(path)
    reasons = [str(p) for p in again.problems]
    assert any(r.startswith(f"{RECORDS}:3: ") for r in reasons), reasons
    assert any(r.startswith(f"{META}:2: ") and "unknown operator type 'NOPE'" in r for r in reasons), reasons
    assert len(again) == 2  # both good programs survive


def test_a_load_says_how_many_lines_it_skipped_and_why(tmp_path, target):
    """Opening a database with lines it cannot read warns once, with their count per file and the first one's
    reason (a library caller is told too, not only a command that lists ``problems``); the good records load."""
    op = Operator.create("DENSE", M=4, N=8, K=16)
    path = tmp_path / "db"
    for m in (4, 5):
        Database(path).commit(op.replace(M=m), target, make_records(op.replace(M=m), [[m * 1e-6]], target),
                              method="backend", candidates=1, seconds=1)
    with open(path / RECORDS, "a") as f:
        f.write("[0, this is not json]\n[7]\n")
    with open(path / META, "a") as f:
        f.write("not json\n")
    with pytest.warns(RuntimeWarning) as caught:
        again = Database(path)
    assert [str(w.message) for w in caught] == [
        f"{path}: 3 lines it cannot read skipped: 2 in {RECORDS} (line 3: not a [workload, record] tuning record, "
        f"...); 1 in {META} (line 3: unreadable metadata (not a JSON object))"]
    assert len(again) == 2 and again.best(op, target).latency_s == pytest.approx(4e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(Database(path, warn=False).problems) == 3  # a caller that lists them itself (eto db show)


def test_a_record_tvm_cannot_read_is_named_with_its_line(tmp_path, target):
    """A record line of the right JSON shape that TVM cannot read (another TVM version's, or damaged) loads, but
    asking for its TuningRecord raises UnreadableRecord (bad input, exit 2) naming the file and line."""
    from eto.store.errors import UnreadableRecord

    op = Operator.create("DENSE", M=4, N=8, K=16)
    path = tmp_path / "db"
    Database(path).commit(op, target, make_records(op, [[1e-6]], target), method="backend", candidates=1, seconds=1)
    wl, rec = json.loads((path / RECORDS).read_text())
    (path / RECORDS).write_text(json.dumps([wl, ["not a trace", *rec[1:]]]) + "\n")
    best = Database(path).best(op, target)
    with pytest.raises(UnreadableRecord, match=rf"^{path / RECORDS}:1: TVM \S+ cannot read this program \(.+\): "
                       "another TVM version wrote it, or the line is damaged; tune its operator again$"):
        best.tuning_record


def test_a_checkpointed_program_tvm_cannot_read_is_counted(tmp_path, target):
    """A rerun reads an interrupted run's programs back; one TVM cannot read costs that seed, and a warning
    counts them and gives the first one's error (it was dropped without a word)."""
    from eto.store.database import PROGRESS

    op = Operator.create("DENSE", M=4, N=8, K=16)
    path = tmp_path / "db"
    Database(path).checkpoint(op, target, make_records(op, [[3e-6], [2e-6]], target), method="backend", trials=2,
                              seconds=1.0)
    batch = json.loads((path / PROGRESS).read_text())
    batch["records"][0][1][0] = "not a trace"
    (path / PROGRESS).write_text(json.dumps(batch) + "\n")
    progress = Database(path).progress(op, target)
    assert progress.trials == 2
    with pytest.warns(RuntimeWarning, match=rf"^1 of 2 checkpointed programs of {re.escape(op.key)} skipped: "
                      rf"{path / PROGRESS}: TVM \S+ cannot read this program \(.+\)"):
        programs = progress.programs()
    assert [secs for _, secs in programs] == [2e-6]


def test_interrupted_write_is_repaired_without_losing_it(tmp_path, target):
    op = Operator.create("DENSE", M=4, N=8, K=16)
    path = tmp_path / "db"
    db = Database(path)
    db.commit(op, target, make_records(op, [[1e-6]], target), method="backend", candidates=1, seconds=1)
    with open(path / RECORDS, "a") as f:
        f.write('[0,[[[["GetSBlock"')  # a write cut off by a kill
    opened = Database(path)
    assert any("incomplete last line" in str(p) for p in opened.problems)
    assert len(opened) == 1
    op2 = op.replace(M=6)
    opened.commit(op2, target, make_records(op2, [[3e-6]], target), method="backend", candidates=1, seconds=1)
    assert '[0,[[[["GetSBlock"' in (path / CORRUPT).read_text()  # kept, not dropped
    final = Database(path)
    assert not final.problems and len(final) == 2
    from tvm.s_tir import meta_schedule as ms

    assert len(ms.database.JSONDatabase(work_dir=str(path)).get_all_tuning_records()) == 2


def test_merge_keeps_everything(tmp_path, target):
    a, b = Operator.create("BMM", B=1, M=4, N=4, K=4), Operator.create("BMM", B=2, M=4, N=4, K=4)
    d1, d2 = Database(tmp_path / "d1"), Database(tmp_path / "d2")
    d1.commit(a, target, make_records(a, [[1e-6], [2e-6]], target), method="backend", candidates=2, seconds=1)
    d2.commit(b, target, make_records(b, [[4e-6]], target), method="reuse", source=a, candidates=3, seconds=1)
    d2.commit(a, target, make_records(a, [[0.5e-6]], target), method="backend", candidates=2, seconds=1)
    with open(tmp_path / "d2" / META, "a") as f:
        f.write("garbage line\n")
    dest = Database(tmp_path / "merged")
    counts = [dest.merge_from(Database(tmp_path / p, readonly=True)) for p in ("d1", "d2")]
    assert counts[1]["problems"] == 1
    merged = Database(tmp_path / "merged")
    assert len(merged) == 4
    assert merged.best(a, target).latency_s == pytest.approx(0.5e-6)
    assert merged.best(b, target).source == a.key
    assert "garbage line" in (tmp_path / "merged" / CORRUPT).read_text()
    assert len((tmp_path / "merged" / WORKLOADS).read_text().splitlines()) == 2  # workloads deduplicated


def test_not_a_database(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DatabaseError, match="not a database directory"):
        Database(f)
    with pytest.raises(DatabaseError, match="no such database"):
        Database(tmp_path / "missing", readonly=True)


def test_db_show_and_merge_commands(tmp_path, target, capsys):
    from eto.cli import main

    op = Operator.create("DENSE", M=4, N=8, K=16)
    cold = Operator.create("DENSE", M=8, N=8, K=16)
    Database(tmp_path / "a").commit(op, target, make_records(op, [[2e-6]], target), method="backend",
                                    candidates=5, seconds=1.5)
    Database(tmp_path / "a").commit(cold, target, make_records(cold, [[3e-6]], target), method="backend",
                                    candidates=4, seconds=1.0, extra={"timing": "cold"})
    with open(tmp_path / "a" / RECORDS, "a") as f:
        f.write("oops\n")
    assert main(["db", "show", str(tmp_path / "a"), "--json"]) == 0
    out, err = capsys.readouterr()
    shown = {p["key"]: p for p in json.loads(out)["programs"]}
    assert shown[op.key]["candidates"] == 5
    # how each program's run timed its candidates (a result from before timings were recorded: hot)
    assert (shown[op.key]["timing"], shown[cold.key]["timing"]) == ("hot", "cold")
    assert json.loads(out)["problems"] == [f"{RECORDS}:3: not a [workload, record] tuning record"]
    assert f"{RECORDS}:3" in err
    assert main(["db", "merge", str(tmp_path / "m"), str(tmp_path / "a")]) == 0
    assert main(["db", "show", str(tmp_path / "nope")]) == 2


def test_progress_batches_are_durable_and_invisible_to_metaschedule(tmp_path, target):
    """A run in flight checkpoints each batch; a rerun reads them back; TVM never sees them."""
    from tvm.s_tir import meta_schedule as ms

    from eto.store.database import PROGRESS

    op = Operator.create("DENSE", M=4, N=8, K=16)
    db = Database(tmp_path / "db")
    db.checkpoint(op, target, make_records(op, [[3e-6], [1e10]], target), method="backend", trials=2, seconds=1.5,
                  trajectory=[[1.5, 2, 3e-6]])
    db.checkpoint(op, target, make_records(op, [[2e-6]], target), method="backend", trials=4, seconds=2.0)
    with open(tmp_path / "db" / PROGRESS, "a") as f:
        f.write('{"v":1,"op_key":')  # a write cut off by a kill
    again = Database(tmp_path / "db")
    p = again.progress(op, target)
    assert (p.trials, p.seconds, sorted(p.latencies)) == (6, 3.5, [2e-6, 3e-6])  # the failed run is not kept
    assert sorted((float(r.run_secs[0]), s) for r, s in p.programs()) == [(2e-6, 2e-6), (3e-6, 3e-6)]
    assert p.trajectory == ([1.5, 2, 3e-6],)
    assert again.progress(op, target, "reuse").trials == 0
    assert [str(x) for x in again.problems] == [f"{PROGRESS}:3: incomplete last line (interrupted write)"]
    assert len(again) == 0 and ms.database.JSONDatabase(work_dir=str(tmp_path / "db")).get_all_tuning_records() == []
    again.commit(op, target, [r for r, _ in p.programs()], method="backend", candidates=6, seconds=3.5)
    assert again.progress(op, target).trials == 0  # a result exists: nothing to continue
    assert len(ms.database.JSONDatabase(work_dir=str(tmp_path / "db")).get_all_tuning_records()) == 2


def test_a_reload_reads_each_line_once_and_sees_other_writers(tmp_path, target, monkeypatch):
    """Every write reloads first (other processes may have appended): that must cost the new lines,
    not the whole database, or checkpointing a run slows down as the database grows."""
    import eto.store.database as database

    a, b, c = (Operator.create("DENSE", M=m, N=8, K=16) for m in (4, 5, 6))
    db = Database(tmp_path / "db")
    db.commit(a, target, make_records(a, [[1e-6], [2e-6]], target), method="backend", candidates=2, seconds=1)
    read = {n: (tmp_path / "db" / n).read_text().splitlines() for n in (WORKLOADS, RECORDS, META)}
    other = Database(tmp_path / "db")  # another process's view of the same files
    other.commit(b, target, make_records(b, [[3e-6]], target), method="backend", candidates=1, seconds=1)
    parsed = []
    real_parse = database.parse
    monkeypatch.setattr(database, "parse", lambda text: parsed.append(text) or real_parse(text))
    db.checkpoint(c, target, make_records(c, [[4e-6]], target), method="reuse", trials=1, seconds=1.0)
    assert not {line for lines in read.values() for line in lines} & set(parsed)  # nothing read before
    assert (tmp_path / "db" / META).read_text().splitlines()[1] in parsed  # other's commit
    assert {p.op for p in db.programs()} == {a, b} and db.progress(c, target, "reuse").trials == 1
    parsed.clear()
    db.reload()
    assert parsed == [] and len(db) == 3
    # a file rewritten shorter (not an append) is read again whole, not from a stale offset
    lines = (tmp_path / "db" / META).read_text().splitlines()
    (tmp_path / "db" / META).write_text(lines[1] + "\n")
    db.reload()
    assert {p.op for p in db.programs()} == {b} and sorted(db.orphans) == [0, 1]


def test_a_record_damaged_inside_its_brackets_is_named_when_used_and_by_a_full_check(tmp_path, target, capsys):
    """A load checks a record line's shape, not its program (tens of megabytes a plan never reads): a line
    damaged inside ``[workload, [...]]`` is named with its line when its program is asked for, and by
    ``check_lines`` (``eto db show``), which drops its program; the intact programs stay."""
    import eto.store.database as database
    from eto.cli import main
    from eto.store.errors import UnreadableRecord

    a, b = (Operator.create("DENSE", M=m, N=8, K=16) for m in (4, 5))
    path = tmp_path / "db"
    for op, secs in ((a, 1e-6), (b, 2e-6)):
        Database(path).commit(op, target, make_records(op, [[secs]], target), method="backend", candidates=1,
                              seconds=1)
    lines = (path / RECORDS).read_text().splitlines()
    (path / RECORDS).write_text(lines[0] + "\n" + lines[1].replace('"', "", 3) + "\n")  # still [1, [...]]
    assert re.fullmatch(r"\[1,\[.*\]\]", (path / RECORDS).read_text().splitlines()[1])
    parsed = []
    real_parse = database.parse
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(database, "parse", lambda text: parsed.append(text) or real_parse(text))
        db = Database(path)
    assert db.problems == [] and len(db) == 2 and not set(lines) & set(parsed)  # no record parsed at load
    db.best(a, target).tuning_record  # an intact one reads
    with pytest.raises(UnreadableRecord, match=rf"^{path / RECORDS}:2: not a tuning record \(the line is damaged"):
        db.best(b, target).tuning_record
    assert [str(p) for p in db.check_lines()] == [f"{RECORDS}:2: not a [workload, record] tuning record"]
    assert [p.op for p in db.programs()] == [a]
    assert main(["db", "show", str(path)]) == 0
    assert f"{path / RECORDS}:2: not a [workload, record] tuning record (skipped)" in capsys.readouterr().err


def test_a_union_of_databases_answers_as_their_merge_and_writes_nothing(tmp_path, target):
    """``eto plan --prior A --prior B`` reads the databases as one (DatabaseUnion): every query answers as
    the merged database would, each program reads its TuningRecord from its own database, nothing is written."""
    from eto.store.programs import DatabaseUnion

    a, b, c = (Operator.create("DENSE", M=m, N=8, K=16) for m in (4, 5, 6))
    Database(tmp_path / "x").commit(a, target, make_records(a, [[3e-6], [4e-6]], target), method="backend",
                                    candidates=2, seconds=1)
    Database(tmp_path / "x").commit(c, target, make_records(c, [[9e-6]], target), method="instant", candidates=1,
                                    seconds=1)
    Database(tmp_path / "y").commit(a, target, make_records(a, [[2e-6]], target), method="reuse", source=b,
                                    candidates=3, seconds=1)
    Database(tmp_path / "y").commit(b, target, make_records(b, [[5e-6]], target), method="backend", candidates=1,
                                    seconds=1)
    before = {p: p.stat().st_mtime_ns for d in ("x", "y") for p in (tmp_path / d).iterdir()}
    union = DatabaseUnion([Database(tmp_path / d, readonly=True) for d in ("x", "y")])
    merged = Database(tmp_path / "m")
    for d in ("x", "y"):
        merged.merge_from(Database(tmp_path / d, readonly=True))
    assert len(union) == len(merged) == 5 and len(union.results()) == len(merged.results()) == 4
    for op in (a, b, c):
        for predicted in (True, False):
            u, m = union.best(op, target, predicted=predicted), merged.best(op, target, predicted=predicted)
            assert (u and (u.latency_s, u.method)) == (m and (m.latency_s, m.method))
        assert union.attempted(op, target) == merged.attempted(op, target)
    assert {o: p.latency_s for o, p in union.tuned(target).items()} == {a: 2e-6, b: 5e-6}
    assert [p.op for p in union.sources(op_type="dense", target=target)] == [p.op for p in
                                                                             merged.sources(op_type="dense", target=target)]
    assert union.best(a, target).tuning_record.run_secs[0].value == pytest.approx(2e-6)  # read from y
    assert {p: p.stat().st_mtime_ns for d in ("x", "y") for p in (tmp_path / d).iterdir()} == before


def test_a_database_with_priors_reads_them_writes_itself_and_keeps_only_what_it_tunes(tmp_path, target):
    """``eto tune --prior``: the priors' programs answer every query in place; commits go to the written
    database; :meth:`keep` copies the priors' results of the operators tuned (so the written database
    alone builds them), not the rest, and a rerun copies nothing again."""
    from eto.api import open_database
    from eto.store.programs import DatabaseWithPriors

    a, b, c = (Operator.create("DENSE", M=m, N=8, K=16) for m in (4, 5, 6))
    prior = Database(tmp_path / "prior")
    prior.commit(a, target, make_records(a, [[3e-6], [4e-6]], target), method="backend", candidates=2, seconds=1)
    prior.commit(c, target, make_records(c, [[9e-6]], target), method="backend", candidates=1, seconds=1)
    before = {p.name: p.read_bytes() for p in (tmp_path / "prior").iterdir() if p.is_file()}
    db = open_database(tmp_path / "new", [tmp_path / "prior"])
    assert isinstance(db, DatabaseWithPriors) and db.path == str(tmp_path / "new")
    assert db.attempted(a, target) and db.best(a, target).latency_s == pytest.approx(3e-6)
    assert db.best(a, target).tuning_record.run_secs[0].value == pytest.approx(3e-6)  # read from the prior
    assert [p.op for p in db.sources(op_type="dense", target=target)] == [a, c]
    assert Database(tmp_path / "new").results() == []  # nothing copied on opening
    db.commit(b, target, make_records(b, [[5e-6]], target), method="reuse", source=a, candidates=3, seconds=1)
    assert db.best(b, target).latency_s == pytest.approx(5e-6) and len(db) == 4  # the commit seen at once
    assert db.keep([a, b], target) == {"results": 1, "records": 2}  # a's: b is the new database's own
    alone = Database(tmp_path / "new")
    assert {r["op_key"] for r in alone.results()} == {a.key, b.key}  # not c: no operator of this run
    assert alone.best(a, target).latency_s == pytest.approx(3e-6)
    assert alone.best(a, target).tuning_record.run_secs[0].value == pytest.approx(3e-6)
    again = open_database(tmp_path / "new", [tmp_path / "prior"])
    assert again.keep([a, b], target) == {"results": 0, "records": 0}  # a rerun: attempted, nothing copied
    assert len(Database(tmp_path / "new").results()) == 2
    assert {p.name: p.read_bytes() for p in (tmp_path / "prior").iterdir() if p.is_file()} == before
    assert open_database(tmp_path / "new", [tmp_path / "new"]).__class__ is Database  # itself: no prior
