"""The Python API (:mod:`eto.api`): each entry point used as a user would, results checked."""

import os
import subprocess
import sys

import numpy as np
import pytest

import eto
from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.options import OptionError, TuneOptions


def test_import_eto_stays_light_and_help_shows_the_api():
    """``import eto`` imports no TVM; ``help(eto.tune)`` documents what it takes."""
    code = "import sys, eto; assert 'tvm' not in sys.modules; help(eto.tune); help(eto.build)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PAGER": "cat"})
    assert "ONNX" in r.stdout and "TuneOptions" in r.stdout and "DLPack" in r.stdout
    assert sorted(eto.__all__) == sorted(set(eto.__all__)) and all(hasattr(eto, n) for n in eto.__all__)


def test_options_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(TypeError, match="not both"):
        eto.tune("quickstart", database=tmp_path / "db", options=TuneOptions(), trials=8)
    with pytest.raises(OptionError, match="trials must be positive"):
        eto.tune("quickstart", database=tmp_path / "db", trials=0)
    with pytest.raises(TypeError, match="unknown tuning option 'trails'"):
        eto.tune("quickstart", database=tmp_path / "db", trails=8)
    with pytest.raises(FileNotFoundError, match="no such prior database directory"):
        eto.tune("quickstart", database=tmp_path / "db", priors=[tmp_path / "nowhere"])
    assert not (tmp_path / "db").exists()  # nothing was created


def test_operator_set_reads_names_files_and_sets(tmp_path):
    quick = eto.operator_set("quickstart")
    assert quick.name == "quickstart" and len(quick) == 5
    path = tmp_path / "s.json"
    quick.save(str(path))
    assert eto.operator_set(path) == eto.operator_set(str(path))
    assert [e.op for e in eto.operator_set(path)] == [e.op for e in quick]
    assert eto.operator_set(quick) is quick


@pytest.mark.slow
def test_tune_then_rerun_resumes_and_programs_are_correct(tmp_path):
    """eto.tune on a two-operator set: one root, one reuse; the rerun tunes nothing; programs match numpy."""
    from eto.runs.verify import check_record
    from eto.target import parse_target
    from tuner.measure.backend import light_search

    small, big = Operator.create("BMM", B=1, M=16, N=16, K=16), Operator.create("BMM", B=1, M=32, N=32, K=16)
    opset = OperatorSet.from_layers("two", [small, big])
    kw = dict(trials=8, num_trials_per_iter=8, seed=0, search=light_search(), bridges="none", plan_budget=1000)
    report = eto.tune(opset, database=tmp_path / "db", **kw)
    assert {r.status for r in report.rows} == {"tuned"} and {r.method for r in report.rows} >= {"reuse"}
    again = eto.tune(opset, database=eto.Database(str(tmp_path / "db")), options=TuneOptions.of(**kw))
    assert {r.status for r in again.rows} == {"cached"}
    db, target = eto.Database(str(tmp_path / "db"), readonly=True), parse_target("cpu")
    for op in (small, big):
        assert check_record(op, db.best(op, target).tuning_record, target).ok
    # MetaSchedule alone, through the same entry point
    alone = eto.tune(OperatorSet.from_layers("one", [small]), database=tmp_path / "ms", method="metaschedule",
                     trials=4, num_trials_per_iter=4, search=light_search(), seed=0)
    assert [r.method for r in alone.rows] == ["backend"]


@pytest.mark.slow
def test_build_calls_with_numpy_and_dlpack_saves_and_loads(tmp_path):
    """eto.build on a model file (TVM's defaults: no database): outputs match PyTorch's, from numpy and
    from a torch tensor (DLPack); the saved library, loaded by eto.load, gives the same outputs."""
    torch = pytest.importorskip("torch")
    from eto.models.examples import example, export

    path = export("tiny_cnn", str(tmp_path / "tiny_cnn.pt2"))
    model = eto.build(path, database=None)
    module, x = example("tiny_cnn")
    with torch.no_grad():
        want = module(x).numpy()
    (got,) = model(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    (from_dlpack,) = model(x)
    np.testing.assert_allclose(from_dlpack, got, rtol=0, atol=0)
    assert model.applied_flops_share == 0.0 and model.missing  # nothing tuned: every task on TVM's defaults
    model.save(tmp_path / "tiny.so")
    (loaded,) = eto.load(tmp_path / "tiny.so")(x.numpy())
    np.testing.assert_allclose(loaded, got, rtol=0, atol=0)


@pytest.mark.slow
def test_retune_serves_new_sizes_from_the_database(tmp_path):
    """eto.retune at new sizes of an operator set's parameter: instant programs, checked, from the database."""
    from tuner.measure.backend import light_search

    op = Operator.create("BMM", B=1, M=32, N=32, K=16)
    opset = OperatorSet.from_layers("one", [op])
    eto.tune(opset, database=tmp_path / "db", trials=8, num_trials_per_iter=8, seed=0, search=light_search())
    report = eto.retune(opset, dim="M", sizes=[48, 64], database=tmp_path / "db", instant_only=True)
    assert [r.value for r in report.rows] == [48, 64]
    assert all(r.instant_latency_s is not None and r.instant_latency_s > 0 for r in report.rows)
