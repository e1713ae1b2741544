"""TopK (Selective Tuning's baseline): β's best programs applied to α, the fastest that runs kept."""

from types import SimpleNamespace

import pytest

from eto.operators import Operator
from eto.target import cpu_target

tvm = pytest.importorskip("tvm")

from tuner.reuse.topk import topk_tune  # noqa: E402


def beta_records(op: Operator, target, n: int):
    """``n`` programs of ``op`` sampled from its design space, run times 1, 2, ... ms (best first)."""
    from tvm.ir import IRModule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    mod = IRModule({"main": op.prim_func()})
    out = []
    for seed in range(n):
        ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             search_strategy="replay-trace", task_name="beta", num_threads=1, rand_state=seed + 1)
        sch = ctx.generate_design_space()[0]
        out.append(TuningRecord(sch.trace, Workload(mod), [1e-3 * (seed + 1)], target,
                                ArgInfo.from_prim_func(mod["main"])))
    return out


class Scripted:
    """A measurer that returns scripted medians (None: the program failed) and keeps the modules."""

    def __init__(self, medians):
        self.medians, self.mods = list(medians), []

    def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
        self.mods += mods
        return [SimpleNamespace(ok=m is not None, median=m if m is not None else float("inf"))
                for m in (self.medians.pop(0) for _ in mods)]


@pytest.mark.slow  # builds the programs
def test_topk_walks_down_past_failures_and_keeps_the_fastest_that_ran():
    from eto.runs.verify import check_record

    target = cpu_target()
    alpha = Operator.create("C2D", N=1, CI=16, H=14, W=14, CO=32, KH=3, KW=3, padding=1)
    beta = Operator.create("C2D", N=1, CI=8, H=7, W=7, CO=16, KH=3, KW=3, padding=1)
    records = beta_records(beta, target, 5)
    m = Scripted([3e-3, None, 1e-3, 2e-3])
    res = topk_tune(alpha.prim_func(), list(reversed(records)), target, m, k=3)
    assert (res.candidates, res.failed, res.invalid) == (4, 1, 0)  # the fifth record is never tried
    assert res.latency_s == 1e-3
    assert [float(r.run_secs[0]) for r in res.records] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert res.record is res.records[0] and len(m.mods) == 4
    check = check_record(alpha, res.record, target)
    assert check.ok, check
    assert [p.best_s for p in res.trajectory] == [3e-3, 3e-3, 1e-3, 1e-3]


def test_topk_with_nothing_that_runs_returns_no_program():
    target = cpu_target()
    alpha = Operator.create("DENSE", M=8, N=16, K=16)
    records = beta_records(Operator.create("DENSE", M=4, N=16, K=16), target, 2)
    res = topk_tune(alpha.prim_func(), records, target, Scripted([None, None]), k=3)
    assert res.record is None and res.failed == res.candidates == 2
    with pytest.raises(ValueError, match="k must be positive"):
        topk_tune(alpha.prim_func(), records, target, Scripted([]), k=0)
