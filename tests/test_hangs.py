"""A build that never returns and a run that never returns: each costs one timeout, is recorded as a
failed candidate, and the tuning goes on (issue 70; docs/reliability.md).

The hanging build is :mod:`tuner.measure.faults`'s hang point ``build`` (``ETO_HANG_AT=build:2@FILE``:
the second build of one worker process sleeps for ever, once in all processes), in the build workers
themselves (MetaSchedule's builds, killed and restarted past ``build_timeout_s``) and in their build
servers (eto's cut builds, past the search's short timeout). The hanging run is a candidate whose
program calls ``sleep(1000)``.
"""

from __future__ import annotations

import math
import time

import pytest

from eto.operators import Operator
from tuner.measure.options import BackendOptions

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # timeouts: a second test on the cores would skew them

OP = Operator.create("DENSE", M=16, N=16, K=16)
TRIALS, BATCH = 8, 4


@pytest.fixture(scope="module")
def target():
    from eto.target import parse_target

    return parse_target("cpu")


def _config(**kw):
    from tuner.measure.measurer import MeasureConfig

    return MeasureConfig(number=1, repeat=2, min_repeat_ms=1, builder_workers=2, **kw)


def _tune(measurer, target, *, short_builds: bool):
    """The backend on OP, each candidate's report kept: (result, reports, seconds)."""
    from tuner.measure.backend import BackendTask, light_search, tune_backend

    reports = []
    t0 = time.perf_counter()
    (res,) = tune_backend([BackendTask(OP.name, OP.prim_func())], target,
                          BackendOptions(trials=TRIALS, num_trials_per_iter=BATCH, seed=0, search=light_search()),
                          measurer=measurer, short_builds=short_builds,
                          on_measured=lambda name, records, trials, secs: reports.append((len(records), trials)))
    return res, reports, time.perf_counter() - t0


@pytest.mark.parametrize("short_builds", [False, True], ids=["metaschedule-builds", "eto-cut-builds"])
def test_a_hanging_build_times_out_once_and_the_tuning_goes_on(target, tmp_path, monkeypatch, short_builds):
    from tuner.measure.measurer import Measurer

    monkeypatch.setenv("ETO_HANG_AT", f"build:2@{tmp_path / 'hung'}")  # the workers start with it
    timeout = 2.0 if short_builds else 4.0
    with Measurer.local(_config(build_timeout_s=4.0, search_build_timeout_s=2.0 if short_builds else None)) as m:
        res, reports, seconds = _tune(m, target, short_builds=short_builds)
    assert (tmp_path / "hung").exists()  # it did hang, once
    assert res.candidates == TRIALS and res.failed == 1, res.errors
    assert res.errors == (f"build timed out after {timeout:g} s",)
    assert res.records and math.isfinite(res.best_latency)  # the tuning went on
    # every candidate reported as measured, the hung one as a failed trial without a program
    assert sum(t for _, t in reports) == TRIALS and (0, 1) in reports and sum(n for n, _ in reports) == TRIALS - 1
    assert seconds < 60


def test_a_hanging_build_in_a_reuse_search_times_out_once(target, tmp_path, monkeypatch):
    """A reuse search's builds (cut, in build servers): the hung one fails at the cut, reported first,
    the others build and run."""
    from tvm.ir import IRModule

    from tuner.measure.measurer import Measurer

    monkeypatch.setenv("ETO_HANG_AT", f"build:1@{tmp_path / 'hung'}")
    mods = [IRModule({"main": Operator.create("DENSE", M=m, N=16, K=16).prim_func()}) for m in (8, 16, 24, 32)]
    reported = []
    with Measurer.local(_config(search_build_timeout_s=2.0)) as m:
        t0 = time.perf_counter()
        results = m.measure(mods, target, search=True, on_result=lambda i, r: reported.append((i, r.ok)))
        seconds = time.perf_counter() - t0
    assert [r.error for r in results if not r.ok] == ["build timed out after 2 s"]
    assert sum(r.ok for r in results) == 3 and seconds < 30
    assert sorted(reported) == sorted((i, r.ok) for i, r in enumerate(results))
    assert reported[0][1] is False  # the failed build first, as soon as the builds ended


def _sleeps(mod):
    """``mod`` with a body that sleeps 1000 s: a run that never returns."""
    from tvm import tirx
    from tvm.ir import IRModule

    return IRModule({"main": mod["main"].with_body(tirx.Evaluate(tirx.call_extern("int32", "sleep", 1000)))})


def test_a_hanging_run_times_out_once_and_the_tuning_goes_on(target):
    """The second candidate of the first batch hangs in its run: one run timeout, a failed trial, and
    the other seven measured."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderInput, PyBuilder

    from tuner.measure.measurer import Measurer

    @derived_object
    class OneHangs(PyBuilder):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.done = inner, False

        def build(self, inputs):
            if not self.done and len(inputs) >= 2:
                self.done = True
                inputs = [inputs[0], BuilderInput(_sleeps(inputs[1].mod), inputs[1].target), *inputs[2:]]
            return self.inner.build(inputs)

    with Measurer.local(_config(run_timeout_s=2.0)) as m:
        res, reports, seconds = _tune(Measurer(OneHangs(m.builder), m.runner, m.config), target, short_builds=False)
    assert res.candidates == TRIALS and res.failed == 1, res.errors
    assert len(res.errors) == 1 and "timeout" in res.errors[0].lower()
    assert res.records and math.isfinite(res.best_latency)
    assert sum(t for _, t in reports) == TRIALS and reports.count((0, 1)) == 1
    assert seconds < 60
