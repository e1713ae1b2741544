"""Measurement through TVM's RPC tracker: a tracker and two servers on 127.0.0.1."""

import pytest

from eto.store.database import Database
from eto.operators import Operator
from eto.target import parse_target

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # RPC servers and their runners


@pytest.fixture
def tracker():
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    tr = Tracker(host="127.0.0.1", port=19190, port_end=19290, silent=True)
    servers = [Server(host="127.0.0.1", port=19300, port_end=19400, key="eto-test",
                      tracker_addr=("127.0.0.1", tr.port), silent=True) for _ in range(2)]
    yield tr
    for s in servers:
        s.terminate()
    tr.terminate()


def test_tuning_through_rpc_devices(tmp_path, tracker):
    import time

    from tvm import rpc

    from eto.runs.tuning import tune_with_backend

    from tuner.measure.options import BackendOptions
    from eto.runs.verify import check_record
    from tuner.measure.backend import light_search
    from tuner.measure.measurer import MeasureConfig, Measurer

    client = rpc.connect_tracker("127.0.0.1", tracker.port)
    for _ in range(50):  # servers register asynchronously
        if "eto-test   2" in client.text_summary():
            break
        time.sleep(0.1)
    assert "eto-test   2" in client.text_summary()
    target = parse_target("cpu")
    ops = [Operator.create("DENSE", M=16, N=32, K=32), Operator.create("BMM", B=2, M=8, N=8, K=16)]
    db = Database(tmp_path / "db")
    measurer = Measurer.rpc("127.0.0.1", tracker.port, "eto-test",
                            MeasureConfig(number=2, repeat=3, min_repeat_ms=5), max_workers=2)
    try:
        report = tune_with_backend(ops, target, db, BackendOptions(trials=8, num_trials_per_iter=8, search=light_search(), seed=0), measurer=measurer)
    finally:
        measurer.close()
    assert not report.failed
    for op in ops:
        best = db.best(op, target)
        assert best is not None and best.candidates == 8 and best.latency_s > 0
        assert check_record(op, best.tuning_record, target).ok


def test_scale_out_tunes_independent_subtrees_on_two_devices(tmp_path, tracker, capsys):
    """eto tune --rpc --devices 2: the plan's two subtrees (one per kind) run concurrently; every
    operator is tuned once, by the method the plan chose, and every program matches numpy."""
    import json
    import time

    from tvm import rpc

    from eto.cli import main
    from eto.operators.opsets import OperatorSet
    from eto.runs.verify import check_record

    client = rpc.connect_tracker("127.0.0.1", tracker.port)
    for _ in range(50):
        if "eto-test   2" in client.text_summary():
            break
        time.sleep(0.1)
    ops = [Operator.create("BMM", B=2, M=16, N=16, K=32), Operator.create("BMM", B=2, M=16, N=16, K=16),
           Operator.create("DENSE", M=16, N=32, K=32), Operator.create("DENSE", M=16, N=32, K=16)]
    set_file = tmp_path / "s.json"
    OperatorSet.from_layers("s", ops).save(set_file)
    code = main([str(a) for a in ("tune", "--opset", set_file, "--db", tmp_path / "db", "--trials", 8,
                                  "--trials-per-iter", 8, "--plan-budget", 1000, "--search", "light", "--seed", 0,
                                  "--bridges", "none", "--json", "--rpc", f"127.0.0.1:{tracker.port}",
                                  "--rpc-key", "eto-test", "--devices", 2)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "in 2 subtrees on 2 devices" in err
    rows = json.loads(out)["operators"]
    assert sorted("root" if r["method"] in ("backend", "polish") else r["method"] for r in rows) == [
        "reuse", "reuse", "root", "root"]  # a root's best is the backend's program or its polish's
    db = Database(tmp_path / "db")
    assert sorted(r["op_key"] for r in db.results() if r["method"] != "polish") == sorted(op.key for op in ops)
    polished = [r["op_key"] for r in db.results() if r["method"] == "polish"]  # each tuned once, a root polished
    assert len(set(polished)) == len(polished) and set(polished) <= {  # at most once (not with 8 trials, by default)
        r["op_key"] for r in db.results() if r["method"] == "backend"}
    # concurrency, from the stored results: each result ran in [commit time - seconds, commit time];
    # a subtree spans its results, and the two subtrees' spans overlap (run one after the other, the
    # second would start after the first's last commit)
    root_of = {r["key"]: r["source"] or r["key"] for r in rows}
    while any(root_of[k] != root_of[root_of[k]] for k in root_of):
        root_of = {k: root_of[v] for k, v in root_of.items()}
    spans: dict[str, tuple[float, float]] = {}
    for meta in db.results():
        root = root_of[meta["op_key"]]
        start, end = meta["time"] - meta["seconds"], meta["time"]
        old = spans.get(root, (start, end))
        spans[root] = (min(old[0], start), max(old[1], end))
    (a_start, a_end), (b_start, b_end) = spans.values()
    assert a_start < b_end and b_start < a_end, f"subtrees ran one after the other: {spans}"
    target = parse_target("cpu")
    for op in ops:
        assert check_record(op, db.best(op, target).tuning_record, target).ok


def test_rpc_flags_are_checked_before_any_database_is_made(capsys, tmp_path):
    from eto.cli import main

    db = tmp_path / "db"
    assert main(["tune", "--db", str(db), "--devices", "2"]) == 2
    assert "--devices needs --rpc" in capsys.readouterr().err
    assert main(["tune", "--db", str(db), "--rpc", "nohost", "--rpc-key", "k"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    assert main(["tune", "--db", str(db), "--finalists", "-1"]) == 2
    assert "--finalists must be >= 0" in capsys.readouterr().err
    assert main(["tune", "--db", str(db), "--function-trials", "0"]) == 2
    assert "--function-trials must be positive" in capsys.readouterr().err
    assert not db.exists()  # bad flags leave no empty database behind
