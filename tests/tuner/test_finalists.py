"""Screened measurement and finalists (tuner.measure.finalists): the search ranks by short timings, the
result is decided and recorded by full ones."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import pytest

from eto.operators import Operator
from eto.target import cpu_target
from tests.stand_ins import StandInMeasurer
from tuner.measure.finalists import settle
from tuner.reuse.options import ReuseOptions

pytestmark = pytest.mark.serial  # runner processes, build cuts timed


@dataclass
class C:
    sch: Any
    latency: float


def test_settle_retimes_the_best_few_and_puts_the_rest_on_their_scale():
    cands = [C("a", 1.0), C("b", 2.0), C("c", 3.0), C("d", 4.0), C("e", math.inf), C("f", 10.0)]
    asked = []

    def remeasure(scheds):
        asked.extend(scheds)
        return [{"a": 3.0, "b": 2.2, "c": 3.3}[s] for s in scheds]

    winner, f = settle(cands, remeasure, 3)
    assert asked == ["a", "b", "c"]  # the three fastest screened, not the failed one
    assert winner.sch == "b" and winner.latency == 2.2  # the full timings decide
    assert f == 2.2 / 1.0  # the winner's full time over the screened best
    by = {c.sch: c.latency for c in cands}
    assert by["a"] == 3.0 and by["c"] == 3.3
    assert math.isclose(by["d"], 4.0 * 1.1) and math.isclose(by["f"], 10.0 * 1.1)  # median ratio 1.1
    assert math.isinf(by["e"])


def test_settle_drops_finalists_that_fail_in_full():
    cands = [C("a", 1.0), C("b", 1.1), C("c", 1.2)]
    winner, _ = settle(cands, lambda s: [math.inf, 5.5][: len(s)], 2)
    assert winner.sch == "b" and winner.latency == 5.5
    assert math.isinf(cands[0].latency) and math.isclose(cands[2].latency, 6.0)  # 1.2 x (5.5 / 1.1)
    # no finalist ran again: nothing changes
    cands = [C("a", 1.0)]
    assert settle(cands, lambda s: [math.inf], 3) == (None, 1.0) and cands[0].latency == 1.0
    assert settle([C("a", math.inf)], lambda s: [], 3) == (None, 1.0)


@pytest.mark.slow  # runner processes
def test_a_screened_measurement_runs_the_short_configuration_and_restores_the_full_one():
    from tuner.measure.measurer import MeasureConfig, Measurer
    from tvm.ir import IRModule

    target = cpu_target()
    mod = IRModule({"main": Operator.create("BMM", B=1, M=16, N=16, K=16).prim_func()})
    config = MeasureConfig(repeat=4, min_repeat_ms=5, screen_repeat=2, screen_min_repeat_ms=1)
    with Measurer.local(config) as m:
        screened = m.measure([mod], target, screen=True)[0]
        assert m.runner.evaluator_config.repeat == 4
        full = m.measure([mod], target)[0]
    assert screened.ok and len(screened.run_secs) == 2
    assert full.ok and len(full.run_secs) == 4


class Hashed(StandInMeasurer):
    """Times a module by a hash of its text; in full, the screened best takes 1000 times as long
    (so that the finalists' full timings, not the screening, must decide)."""

    def __init__(self):
        super().__init__()
        self.screened, self.full = [], []

    @staticmethod
    def secs(text: str) -> float:
        return 1e-6 * (1 + zlib.crc32(text.encode()) % 1_000_000)

    def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
        from tuner.measure.measurer import MeasureResult

        texts = [m.script() for m in mods]
        (self.screened if screen else self.full).extend(texts)
        if screen:
            return [MeasureResult((self.secs(t),)) for t in texts]
        best = min(self.screened, key=self.secs)
        return [MeasureResult((self.secs(t) * (1000 if t == best else 1),)) for t in texts]


def test_a_reuse_search_screens_every_candidate_and_returns_the_finalist_that_won_in_full():
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import reuse_tune
    from tuner.reuse.options import ReuseOptions

    target = cpu_target()
    alpha, beta = Operator.create("BMM", B=2, M=64, N=32, K=64), Operator.create("BMM", B=4, M=64, N=64, K=64)
    m = Hashed()
    res = reuse_tune(alpha.prim_func(), sampled_record(beta, target), target, m, ReuseOptions(strategy="global", finalists=3))
    assert len(m.screened) == res.candidates and len(m.full) == res.remeasured == 3
    ranked = sorted(set(m.screened), key=Hashed.secs)
    assert m.full == ranked[:3]  # the screened best three, timed again in full
    assert res.latency_s == Hashed.secs(ranked[1])  # decided in full, where the screened best lost
    lats = [float(r.run_secs[0]) for r in res.records]
    assert lats[0] == res.latency_s and all(x >= res.latency_s for x in lats)
    assert res.trajectory[-1].best_s == res.latency_s
    assert all(a.best_s >= b.best_s for a, b in zip(res.trajectory, res.trajectory[1:]))


class CutBuilds(Hashed):
    """Cuts builds (like a local LLVM measurer): each candidate "built" in 0.1-1.6 s by its hash,
    every seventh timed out at the cap it was given; keeps each call's candidates, cap and builds."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def search_build_timeout(self, target):
        return 10.0

    def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
        from dataclasses import replace

        from tuner.measure.measurer import MeasureResult

        out = []
        for r, m in zip(super().measure(mods, target, screen, search, spread), mods):
            h = zlib.crc32(m.script().encode())
            cut = build_cap or 10.0
            out.append(MeasureResult(None, f"build timed out after {cut:g} s", "build", cut) if h % 7 == 0
                       else replace(r, build_s=0.1 * (1 + h % 16)))
        self.calls.append((len(mods), build_cap, spread, [r.build_s for r in out if r.ok]))
        return out


def test_search_build_cap_is_a_multiple_of_the_median_build_with_a_floor():
    from tuner.measure.measurer import SEARCH_BUILD_FACTOR, SEARCH_BUILD_FLOOR_S, search_build_cap

    assert search_build_cap([]) is None
    assert search_build_cap([0.1, 0.2]) == SEARCH_BUILD_FLOOR_S == 2.0
    assert search_build_cap([1.0, 3.0, 9.0]) == SEARCH_BUILD_FACTOR * 3.0 == 12.0


def test_a_build_cut_probes_until_a_build_succeeded_then_cuts_at_the_cap_of_those_that_did():
    from tuner.measure.measurer import BuildCut

    cut = BuildCut(probe=2)
    assert cut.parts([]) == [] and cut.parts([1]) == [[1]]  # a lone candidate is its own probe
    assert cut.parts([1, 2, 3, 4, 5]) == [[1, 2], [3, 4, 5]] and cut.cap is None
    cut.record([None, None])  # both probes cut or failed: no sample, the next batch probes again
    assert cut.parts([6, 7, 8]) == [[6, 7], [8]] and cut.cap is None
    cut.record([0.5, None, 1.0])
    assert cut.parts([9, 10, 11]) == [[9, 10, 11]] and cut.cap == 3.0  # 4 x median(0.5, 1.0)
    assert BuildCut(probe=0).parts([1, 2]) == [[1, 2]]  # builds not cut: nothing to probe
    capped = BuildCut(ceiling=2.5)  # never above the search's own timeout
    assert capped.cap == 2.5
    capped.record([0.1])
    assert capped.cap == 2.0  # the floor
    capped.record([1.0, 1.0])
    assert capped.cap == 2.5  # 4 x median(0.1, 1, 1) = 4 s, held at the ceiling


def test_a_reuse_search_builds_one_candidate_first_then_cuts_builds_at_4x_the_median():
    """A lead LLVM cannot compile costs the cap, not the 10 s timeout: the first candidate is built
    alone, then every batch's builds are cut at 4x the median of the builds that ran before it (2 s
    at least); the finalists, all built before, are not cut; a timed-out build is not a sample."""
    import statistics

    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import reuse_tune

    target = cpu_target()
    alpha, beta = Operator.create("BMM", B=2, M=64, N=32, K=64), Operator.create("BMM", B=4, M=64, N=64, K=64)
    m = CutBuilds()
    res = reuse_tune(alpha.prim_func(), sampled_record(beta, target), target, m, ReuseOptions(strategy="global", finalists=3))
    searched = [c for c in m.calls if not c[2]]
    assert searched[0][:2] == (1, None) and len(searched) > 3
    built: list[float] = []
    for n, cap, _, builds in searched:
        if built:
            assert cap == max(2.0, 4 * statistics.median(built))
        built += builds
    assert [c[1] for c in m.calls if c[2]] == [None]  # the finalists
    assert any("timed out" in f for f in res.failures) and res.record is not None
    assert res.candidates == sum(c[0] for c in searched)



class RoundsDown(Hashed):
    """Screens the first candidate at 2 us and every other one slower (by its hash); in full the
    screened best runs 1000x as long and each other finalist about 1.5x its screened time, at a
    value where (full / 2 us) x 2 us rounds below it in floating point."""

    BEST = 2e-6

    def screened_secs(self, t: str) -> float:
        return self.BEST if t == self.screened[0] else self.BEST * (2 + zlib.crc32(t.encode()) % 1000)

    def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
        from tuner.measure.measurer import MeasureResult

        texts = [m.script() for m in mods]
        (self.screened if screen else self.full).extend(texts)
        if screen:
            return [MeasureResult((self.screened_secs(t),)) for t in texts]
        s = self.BEST

        def full(t: str) -> float:
            return next(w for w in (1.5 * self.screened_secs(t) * (1 + k * 1e-9) for k in range(100_000))
                        if (w / s) * s < w)

        return [MeasureResult((s * 1000 if t == self.screened[0] else full(t),)) for t in texts]


def test_the_best_so_far_curve_on_the_full_scale_never_rises():
    """The screened curve is scaled by winner / screened best and ends at the winner; in floating
    point the scaled screened best can land one ulp below the winner (6% of random pairs), which
    made the curve rise at its last point."""
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import reuse_tune

    target = cpu_target()
    alpha, beta = Operator.create("BMM", B=2, M=64, N=32, K=64), Operator.create("BMM", B=4, M=64, N=64, K=64)
    res = reuse_tune(alpha.prim_func(), sampled_record(beta, target), target, RoundsDown(), ReuseOptions(strategy="global", finalists=3))
    assert len(res.trajectory) > 2 and res.remeasured == 3
    assert res.trajectory[-1].best_s == res.latency_s
    assert all(a.best_s >= b.best_s for a, b in zip(res.trajectory, res.trajectory[1:]))

class FailsInFull(Hashed):
    """Screens like :class:`Hashed`, except that the slowest candidate of the first screened batch
    times out; in full, the screened best crashes."""

    def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
        from tuner.measure.measurer import MeasureResult

        texts = [m.script() for m in mods]
        (self.screened if screen else self.full).extend(texts)
        if screen:
            worst = max(texts, key=self.secs) if len(self.screened) == len(texts) else None
            return [MeasureResult(None, "build timed out after 10 s", "build") if t == worst
                    else MeasureResult((self.secs(t),)) for t in texts]
        best = min(self.screened, key=self.secs)
        return [MeasureResult(None, "run failed: segfault", "run") if t == best else MeasureResult((self.secs(t),))
                for t in texts]


def test_a_reuse_search_records_why_candidates_failed_in_the_screening_and_among_the_finalists():
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import reuse_tune

    target = cpu_target()
    alpha, beta = Operator.create("BMM", B=2, M=64, N=32, K=64), Operator.create("BMM", B=4, M=64, N=64, K=64)
    m = FailsInFull()
    res = reuse_tune(alpha.prim_func(), sampled_record(beta, target), target, m, ReuseOptions(strategy="global", finalists=3))
    assert sorted(res.failures) == ["build timed out after 10 s", "run failed: segfault"]
    assert res.failed == 2  # the finalist counts as failed beside the screened one
    ranked = sorted(set(m.screened), key=Hashed.secs)
    assert res.latency_s == Hashed.secs(ranked[1])  # the crashed finalist never wins


def _worker_pids(runner) -> set[int]:
    return {w._proc.pid for w in runner.pool._worker_map.values() if w._proc is not None}


@pytest.mark.slow  # runner processes
def test_a_spread_measurement_times_each_program_in_every_runner_process():
    """Finalists are timed in ``settle_processes`` processes, one after the other (the process lottery)."""
    from tuner.measure.measurer import MeasureConfig, Measurer
    from tvm.ir import IRModule

    target = cpu_target()
    mod = IRModule({"main": Operator.create("BMM", B=1, M=16, N=16, K=16).prim_func()})
    broken = IRModule({"main": Operator.create("BMM", B=1, M=16, N=16, K=16).prim_func().with_attr("target", 1)})
    with Measurer.local(MeasureConfig(repeat=3, min_repeat_ms=1, settle_processes=2)) as m:
        plain = m.measure([mod], target)[0]
        assert m.spares == []  # a spare starts at the first spread measurement
        spread, failed = m.measure([mod, broken], target, spread=True)
        assert len(m.spares) == 1
        main, spare = _worker_pids(m.runner), _worker_pids(m.spares[0])
    assert plain.ok and len(plain.run_secs) == 3
    assert spread.ok and len(spread.run_secs) == 6
    assert main and spare and not main & spare
    assert not failed.ok and failed.stage == "build"
    with Measurer.local(MeasureConfig(repeat=3, min_repeat_ms=1, settle_processes=1)) as m:
        assert len(m.measure([mod], target, spread=True)[0].run_secs) == 3 and m.spares == []


def test_the_settling_processes_default_to_one_or_the_environment(monkeypatch):
    from tuner.measure.measurer import MeasureConfig

    monkeypatch.delenv("ETO_SETTLE_PROCESSES", raising=False)
    assert MeasureConfig().settle_processes == 1
    monkeypatch.setenv("ETO_SETTLE_PROCESSES", "3")
    assert MeasureConfig().settle_processes == 3
    monkeypatch.setenv("ETO_SETTLE_PROCESSES", "none")
    with pytest.raises(ValueError, match="ETO_SETTLE_PROCESSES must be a positive integer, got 'none'"):
        MeasureConfig()


class _Queued:
    """A measurer whose spread measurements return queued times, and that has a spare process."""

    spare = object()

    def __init__(self, times, processes: int = 2):
        from tuner.measure.measurer import MeasureConfig

        self.config = MeasureConfig(settle_processes=processes)
        self.times, self.calls = list(times), []

    def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
        from tuner.measure.measurer import MeasureResult

        self.calls.append((len(mods), spread))
        return [MeasureResult((t,)) if math.isfinite(t) else MeasureResult(None, "crashed", "run")
                for t in self.times[:len(mods)]]


def _records(latencies):
    """Distinct TuningRecords of one small matmul (each trace annotated with its index)."""
    from tvm.ir import IRModule
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    func = Operator.create("BMM", B=1, M=8, N=8, K=8).prim_func()
    mod = IRModule({"main": func})
    out = []
    for i, t in enumerate(latencies):
        sch = Schedule(mod)
        sch.annotate(sch.get_sblock("bmm"), "which", i)
        out.append(TuningRecord(sch.trace, Workload(mod), [t], cpu_target(), ArgInfo.from_prim_func(func)))
    return out


def _which(record) -> int:
    return next(int(inst.inputs[1]) for inst in record.trace.insts if inst.kind.name == "Annotate")


def test_the_backends_best_few_are_settled_in_every_process_and_the_rest_keep_their_place():
    from tuner.measure.finalists import settle_records
    from tuner.measure.trajectory import median_secs

    ms = 1e-3
    records = _records([1 * ms, 2 * ms, 3 * ms, 4 * ms, 5 * ms])
    measurer = _Queued([3.0 * ms, 1.5 * ms, 4.0 * ms])  # the first was fast only where the search ran
    out = settle_records(records, measurer, cpu_target(), 3)
    assert measurer.calls == [(3, True)]
    assert [_which(r) for r in out] == [1, 0, 2, 3, 4]
    scale = 4.0 / 3.0  # the finalists' median settled/recorded ratio
    assert [median_secs(r.run_secs) for r in out] == pytest.approx([1.5 * ms, 3.0 * ms, 4.0 * ms, 4 * ms * scale, 5 * ms * scale])
    # a finalist that fails in full is dropped; no spare process (RPC) or no finalists: unchanged
    out = settle_records(records, _Queued([math.inf, 2.5 * ms, 3.0 * ms]), cpu_target(), 3)
    assert [_which(r) for r in out] == [1, 2, 3, 4]
    rpc = _Queued([1 * ms])
    rpc.spare = None
    assert [_which(r) for r in settle_records(records, rpc, cpu_target(), 3)] == [0, 1, 2, 3, 4] and not rpc.calls
    one = _Queued([1 * ms], processes=1)
    assert [_which(r) for r in settle_records(records, one, cpu_target(), 3)] == [0, 1, 2, 3, 4] and not one.calls
    assert settle_records(records, _Queued([]), cpu_target(), 0) == records
