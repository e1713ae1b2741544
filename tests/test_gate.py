"""The correctness gate: a program whose output differs from numpy never becomes a stored best."""

import pytest

from eto.store.database import Database
from eto.operators import Operator
from eto.target import parse_target
from eto.runs.tuning import gated
from tests.test_database import make_records


def wrong_records(op, secs, target):
    """Records of a program with ``op``'s arguments that computes something else (twice the answer)."""
    from tvm import te
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
    from tvm.s_tir.schedule import Trace

    right = op.prim_func()
    x, w = (te.placeholder(s, "float32", n) for s, n in zip(op.input_shapes, ("x", "w")))
    k = te.reduce_axis((0, op.input_shapes[0][1]), "k")
    ref = op.reference(*op.random_inputs(0))
    # DENSE's layout: out[i, j] = sum_k x[i, k] * w[j, k]  (checked against numpy below)
    out = te.compute(op.output_shape, lambda i, j: te.sum(x[i, k] * w[j, k] * 2.0, axis=k), name="out")
    func = te.create_prim_func([x, w, out])
    wl = Workload(IRModule({"main": func}))
    assert ref.shape == tuple(op.output_shape) and len(right.params) == len(func.params)
    return [TuningRecord(Trace([], {}), wl, [s], target, ArgInfo.from_prim_func(func)) for s in secs]


@pytest.mark.slow  # the gate builds and runs each program
def test_a_wrong_program_is_rejected_and_the_next_right_one_stored(tmp_path):
    cpu = parse_target("cpu")
    op = Operator.create("DENSE", M=8, N=16, K=32)
    wrong = wrong_records(op, [1e-6], cpu)  # the fastest, and wrong
    right = make_records(op, [[5e-6], [9e-6]], cpu)
    kept, checked, error = gated(op, wrong + right, cpu)
    assert error is None and checked["checked"] == "numpy"
    assert [r["error"][:30] for r in checked["rejected"]] == ["output differs from numpy (max"]
    assert [float(r.run_secs[0]) for r in kept] == [5e-6, 9e-6]

    db = Database(tmp_path / "db")
    db.commit(op, cpu, kept, method="backend", candidates=3, seconds=1.0, extra=checked)
    assert db.best(op, cpu).latency_s == pytest.approx(5e-6)
    assert db.results()[0]["rejected"][0]["latency_s"] == pytest.approx(1e-6)


@pytest.mark.slow  # builds and runs the programs
def test_a_result_whose_programs_are_all_wrong_stores_none():
    cpu = parse_target("cpu")
    op = Operator.create("DENSE", M=8, N=16, K=32)
    kept, checked, error = gated(op, wrong_records(op, [1e-6, 2e-6], cpu), cpu)
    assert kept == [] and len(checked["rejected"]) == 2
    assert error.startswith("no program matched the reference (2 checked): output differs from numpy")


def test_programs_for_a_device_not_here_are_stored_unchecked():
    cuda = parse_target("cuda")
    op = Operator.create("DENSE", M=8, N=16, K=32)
    kept, checked, error = gated(op, make_records(op, [[2e-6], [1e-6]], cuda), cuda)
    assert [float(r.run_secs[0]) for r in kept] == [1e-6, 2e-6] and checked == {"checked": None} and error is None


@pytest.mark.slow  # builds and runs the programs
def test_a_program_faster_by_mean_is_checked_too():
    """MetaSchedule picks by mean run time, eto by median: the best by either must have passed."""
    cpu = parse_target("cpu")
    op = Operator.create("DENSE", M=8, N=16, K=32)
    (checked,) = make_records(op, [[1e-6, 1e-6, 9e-6]], cpu)  # median 1e-6, mean 3.7e-6
    wrong = wrong_records(op, [2e-6], cpu)  # slower by median, faster by mean: MetaSchedule's pick
    kept, meta, error = gated(op, [wrong[0], checked], cpu)
    assert error is None and [float(r.run_secs[0]) for r in kept] == [1e-6]
    assert meta["rejected"][0]["latency_s"] == pytest.approx(2e-6)


def test_programs_measured_elsewhere_are_stored_unchecked():
    """An RPC device's programs cannot run here: stored with checked None, never rejected for it."""
    cpu = parse_target("cpu")
    op = Operator.create("DENSE", M=8, N=16, K=32)
    kept, checked, error = gated(op, wrong_records(op, [1e-6], cpu), cpu, local=False)
    assert len(kept) == 1 and checked == {"checked": None} and error is None


@pytest.mark.slow  # builds and runs the program and its reference
def test_a_model_function_with_a_scalar_argument_passes_the_gate():
    """A fused function may take a 0-d argument (GPT-2's masked softmax: ``where(isnan(p), c, p)`` with
    ``c`` a scalar constant). numpy's ``ascontiguousarray`` turns a 0-d input into shape (1,), which TVM
    refused: every such function was rejected and left on TVM's default schedule."""
    import numpy as np
    from tvm import te
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload
    from tvm.s_tir.schedule import Trace

    from eto.operators.task import model_function

    x, c = te.placeholder((4, 8), "float32", "x"), te.placeholder((), "float32", "c")
    out = te.compute((4, 8), lambda i, j: te.if_then_else(x[i, j] > 0, c[()], x[i, j] * c[()]), name="out")
    func = te.create_prim_func([x, c, out])
    op = model_function(func, "multiply_where")
    xs, cs = op.random_inputs(0)
    assert cs.shape == () and isinstance(cs, np.ndarray)
    np.testing.assert_allclose(op.reference(xs, cs), np.where(xs > 0, cs, xs * cs), rtol=1e-6)
    cpu = parse_target("cpu")
    record = TuningRecord(Trace([], {}), Workload(IRModule({"main": func})), [1e-6], cpu, ArgInfo.from_prim_func(func))
    kept, checked, error = gated(op, [record], cpu)
    assert error is None and checked == {"checked": "numpy", "rejected": []} and len(kept) == 1
