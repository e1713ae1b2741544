"""eto's CUDA path on a machine without a GPU: planning, the backend, reuse and the database with
real CUDA builds (TVM's codegen and nvcc) and only the runner replaced by a stand-in.

A lent GPU session has minutes, not hours: this keeps a Python error on the CUDA path from costing
one (it is how the H100 run of experiments/set_bench.py was checked beforehand). Latencies are made
up, so nothing here is about speed.
"""

import random
import shutil

import pytest

from eto.options import TuneOptions
from eto.store.database import Database
from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.target import parse_target

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("nvcc") is None, reason="CUDA builds need nvcc")]


def test_cuda_set_plans_tunes_and_reuses_with_real_builds(tmp_path, monkeypatch):
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture

    import tvm

    from eto.runs.pipeline import tune
    from tuner.measure.apply import scheduled_module

    ran = []

    class StandInRunner(PyRunner):
        """Every built candidate 'runs' in a made-up 10-100 us; what it was given is kept."""

        def __init__(self, *args, **kwargs):
            super().__init__()
            self.rng = random.Random(0)

        def run(self, inputs):
            ran.extend(inputs)
            return [LocalRunnerFuture(res=[self.rng.uniform(1e-5, 1e-4)] * 3, error_message=None) for _ in inputs]

    monkeypatch.setattr(ms.runner, "LocalRunner", StandInRunner)
    target = parse_target("nvidia/nvidia-a100")
    small, large = Operator.create("BMM", B=2, M=64, N=64, K=32), Operator.create("BMM", B=2, M=128, N=64, K=64)
    db = Database(tmp_path / "db")
    # plan as if the backend had 64 trials (a reuse is then the cheaper edge), give it 8
    report = tune(OperatorSet.from_layers("cuda", [small, large]), target, db, TuneOptions.of(trials=8, plan_budget=64, bridges="none", seed=0))
    methods = {row.op: (row.status, row.method) for row in report.rows}
    # the root's best: the backend's program or its polish's (eto.runs.polish: a reuse search on CUDA too)
    assert sorted((s, "root" if m in ("backend", "polish") else m) for s, m in methods.values()) == [
        ("tuned", "reuse"), ("tuned", "root")], methods
    assert ran and all(inp.device_type == "cuda" for inp in ran)  # real artifacts were handed to the runner
    for op in (small, large):
        best = db.best(op, target)
        assert best is not None
        # the stored program compiles for CUDA again, to a kernel over threads (and blocks, unless the
        # stand-in runner's random timings made a one-block program the best: TVM then drops blockIdx)
        lib = tvm.compile(scheduled_module(best.tuning_record), target=target)
        source = "".join(m.inspect_source() for m in lib.mod.imports)
        assert "__global__" in source and "threadIdx" in source
