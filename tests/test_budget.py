"""A time budget: the trials it affords, its deadline, where its spare time goes (no tuning here)."""

from __future__ import annotations

import argparse
import itertools
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from types import SimpleNamespace

from eto.cli.flags import parse_duration
from eto.operators import Operator
from eto.options import OptionError, TuneOptions
from eto.planning.budget import TRIALS_LADDER, fit_trials, functions_seconds
from eto.planning.time_model import Line, TimeModel
from eto.models.roofline import reached_peak
from eto.runs.improve import DATA_MOVEMENT_HEADROOM, attainable_flops, headroom, priority
from tuner.measure import deadline


@pytest.mark.parametrize("seconds", [0.0, 5.0, 99.0, 100.0, 250.0, 1e9])
@pytest.mark.parametrize("slope", [0.5, 3.0])
def test_fit_trials_is_the_largest_rung_that_fits(seconds, slope):
    asked: list[int] = []

    def estimate(trials: int) -> float:
        asked.append(trials)
        return 20 + slope * trials

    fits = [t for t in TRIALS_LADDER if 20 + slope * t <= seconds]
    assert fit_trials(estimate, seconds) == (max(fits) if fits else min(TRIALS_LADDER))
    assert len(asked) <= math.ceil(math.log2(len(TRIALS_LADDER))) + 1  # a binary search, not a scan


def test_fit_trials_against_every_monotone_step_function():
    ladder = (8, 16, 32, 64)
    for costs in itertools.combinations_with_replacement(range(6), len(ladder)):  # non-decreasing
        table = dict(zip(ladder, costs))
        for seconds in range(6):
            want = max([t for t in ladder if table[t] <= seconds], default=8)
            assert fit_trials(table.__getitem__, seconds, ladder) == want, (costs, seconds)


def test_functions_are_counted_as_the_pipeline_tunes_them():
    """By the function line (not a root's: no root set-up for a space of one program), one trial for a
    space of one program, a reuse for a function tuned at another size."""
    tm = TimeModel(Line(20.0, 0.5), Line(3.0, 0.1), function=Line(0.5, 0.6))
    a, b, c = (Operator.create("BMM", B=1, M=m, N=8, K=8) for m in (8, 16, 32))
    assert functions_seconds([a], tm, 32) == pytest.approx(0.5 + 32 * 0.6)
    assert functions_seconds([a], tm, 32, single=[a]) == pytest.approx(0.5 + 0.6)
    assert functions_seconds([a, b, c], tm, 16, reused=[c]) == pytest.approx(
        2 * (0.5 + 16 * 0.6) + tm.reuse_seconds(16, c.flops / 1e9))


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("20m", 1200), ("1h30m", 5400), ("1.5h", 5400),
                                          ("2m30s", 150), (" 45S ", 45)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "x", "0", "0s", "-5", "1d", "5 min", "nan", "inf"])
def test_a_bad_duration_is_named(text):
    with pytest.raises(argparse.ArgumentTypeError, match=repr(text)):
        parse_duration(text)


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf])
def test_a_time_budget_must_be_positive_seconds(value):
    with pytest.raises(OptionError, match="time_budget"):
        TuneOptions.of(time_budget=value)


def test_a_time_budget_is_for_method_eto():
    with pytest.raises(OptionError, match="method 'eto' only"):
        TuneOptions.of(time_budget=60, method="topk")
    assert TuneOptions.of(time_budget=60).time_budget == 60


def test_the_deadline_stops_new_work_and_an_outer_one_stays():
    assert not deadline.active() and deadline.left() == math.inf
    deadline.check()  # none: never raises
    with deadline.until(0.05):
        assert deadline.active() and 0 < deadline.left() <= 0.05
        deadline.check()
        with deadline.until(100):  # an inner, later deadline does not extend the outer one
            assert deadline.left() <= 0.05
        time.sleep(0.06)
        with pytest.raises(deadline.DeadlineReached):
            deadline.check()
    assert not deadline.active()
    deadline.check()


def test_nested_deadlines_in_threads_that_end_out_of_order_stay_each_its_own():
    """Subtrees tuned side by side (scale-out) each nest a root's share in the run's deadline. With one
    deadline for the process, A's share set first and ended first, B's end restored A's share as the run's."""
    a_in, both_in, a_out = threading.Event(), threading.Barrier(2), threading.Event()
    seen: dict[str, list[float]] = {"a": [], "b": []}

    def root(name: str, share: float) -> None:
        if name == "b":
            assert a_in.wait(10)  # B's share is set inside A's
        with deadline.until(share):
            a_in.set()
            both_in.wait(10)
            seen[name].append(deadline.left())
            if name == "b":
                assert a_out.wait(10)  # A's block ends first, B's after
                seen[name].append(deadline.left())
        a_out.set()
        seen[name].append(deadline.left())  # the run's again

    with deadline.until(100.0):
        threads = [threading.Thread(target=deadline.carried(root), args=a) for a in (("a", 10.0), ("b", 20.0))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert 95 < deadline.left() <= 100, "the run's deadline is another thread's share"
    assert [len(seen["a"]), len(seen["b"])] == [2, 3]
    assert 5 < seen["a"][0] <= 10 and 95 < seen["a"][1] <= 100
    assert 15 < seen["b"][0] <= 20 and 15 < seen["b"][1] <= 20, "B's own share is not its deadline"
    assert 95 < seen["b"][2] <= 100
    assert not deadline.active()


def test_work_handed_to_a_thread_carries_the_deadline_and_leaves_none_behind():
    with ThreadPoolExecutor(1) as pool:
        with deadline.until(50.0):
            assert pool.submit(deadline.left).result() == math.inf  # a thread starts without the run's
            assert 45 < pool.submit(deadline.carried(deadline.left)).result() <= 50
        assert pool.submit(deadline.left).result() == math.inf  # nor keeps it for its next work


def test_scaled_out_subtrees_run_under_the_run_deadline(monkeypatch):
    """Each device's worker tunes its roots and derives their subtrees within the run's deadline."""
    from eto.operators.opsets import load_opset
    from eto.planning.planner import plan_operator_set
    from eto.runs import pipeline

    planned = plan_operator_set(load_opset("resnet50"), TuneOptions.of(trials=1000, bridges="none", cost="analytic",
                                                                       top_k=None))
    seen: list[tuple[str, float]] = []
    monkeypatch.setattr(pipeline, "_derive_one", lambda *_a, **_k: seen.append(("derive", deadline.left())))
    run = SimpleNamespace(target=None, say=lambda _m: None, polish_roots=lambda *_a: None,
                          database=SimpleNamespace(attempted=lambda *_a: False),
                          options=SimpleNamespace(time_budget=60.0),
                          backend=lambda *_a: seen.append(("root", deadline.left())))
    with deadline.until(60.0):
        pipeline._tune_plan(planned, run, None, ["device 0", "device 1"])
        assert 50 < deadline.left() <= 60
    assert {kind for kind, _ in seen} == {"root", "derive"}
    assert all(50 < s <= 60 for _, s in seen), seen


@pytest.mark.parametrize("error", [RuntimeError("boom"), ValueError("bad value"), KeyError("key")])
def test_an_error_past_the_deadline_comes_out_of_passed_on_as_itself(error):
    """A real failure late in a run is reported as what it is, not as the end of the time budget."""
    with deadline.until(0.05), pytest.raises(type(error)) as caught:
        with deadline.passed_on():
            time.sleep(0.06)
            assert deadline.left() < 0
            raise error
    assert caught.value is error


def test_passed_on_turns_the_error_cpp_made_of_the_deadline_back():
    carried = RuntimeError(f"Traceback (most recent call last):\n  ...\nRuntimeError: {deadline.DeadlineReached()}")
    with deadline.until(0.05), pytest.raises(deadline.DeadlineReached) as caught:
        with deadline.passed_on():
            time.sleep(0.06)
            raise carried
    assert caught.value.__cause__ is carried
    with deadline.until(0.0), pytest.raises(deadline.DeadlineReached), deadline.passed_on():
        raise AssertionError("not entered past the deadline")
    with pytest.raises(RuntimeError, match="other"), deadline.passed_on():  # no deadline: the error as it is
        raise RuntimeError("other")


def test_the_deadline_raised_in_a_callback_through_tvms_ffi_comes_back_and_other_errors_as_they_are():
    """TVM's FFI keeps a Python exception's message, not its type: DeadlineReached comes back a RuntimeError."""
    import tvm_ffi

    checks, fails = tvm_ffi.convert(deadline.check), tvm_ffi.convert(lambda: int("x"))  # C++ calling Python
    with deadline.until(0.05), pytest.raises(deadline.DeadlineReached) as caught, deadline.passed_on():
        time.sleep(0.06)
        checks()
    assert type(caught.value.__cause__) is RuntimeError
    with deadline.until(0.05), pytest.raises(ValueError, match="invalid literal"), deadline.passed_on():
        time.sleep(0.06)
        fails()


def flat(bytes_per_s: float):
    """A bandwidth that does not depend on the working set."""
    return lambda _nbytes: bytes_per_s


def test_priority_is_share_times_headroom_halved_per_step():
    assert priority(0.5, 0.8, 0) == pytest.approx(0.4)
    assert priority(0.5, 0.8, 2) == pytest.approx(0.1)
    assert priority(0.5, -0.2, 0) == 0  # faster than the roofline measured: nothing to gain
    # a hot operator near the roofline can lose to a cooler one far from it
    assert priority(0.3, 0.1, 0) < priority(0.1, 0.9, 0)


def test_the_roofline_bounds_an_operator_with_few_flops_per_byte():
    matmul = Operator.create("BMM", B=1, M=512, N=512, K=512)
    thin = Operator.create("BMM", B=1, M=512, N=1, K=512)  # a matrix-vector product: 0.5 FLOP per byte
    peak = 1e11
    assert attainable_flops(matmul, peak, flat(2e10)) == peak
    elements = 512 * 512 + 512 + 512
    assert attainable_flops(thin, peak, flat(2e10)) == pytest.approx(2e10 * thin.flops / (4 * elements))
    assert attainable_flops(thin, peak, None) == peak


def test_the_roofline_reads_the_bandwidth_at_the_operators_working_set():
    """A depthwise convolution's activations (here 3.6 MB) stream from the caches: against the bandwidth
    of a copy much larger than them it had no headroom where MetaSchedule's programs run 2x faster."""
    dw = Operator.create("DEPNHWC", N=1, H=58, W=58, C=144, KH=3, KW=3)
    nbytes = 4 * (58 * 58 * 144 + 144 * 9 + 56 * 56 * 144)
    asked = []

    def caches(n: int) -> float:  # 2e11 B/s up to 4 MiB, 4e10 beyond
        asked.append(n)
        return 2e11 if n <= 4 << 20 else 4e10

    assert attainable_flops(dw, 5e11, caches) == pytest.approx(2e11 * dw.flops / nbytes) and asked == [nbytes]
    assert headroom(dw, 7.9e10, 5e11, flat(4e10)) < 0.11  # against 64 MiB's 40 GB/s: nearly nothing to gain
    assert headroom(dw, 7.9e10, 5e11, caches) == pytest.approx(1 - 7.9e10 * nbytes / (2e11 * dw.flops))
    assert headroom(dw, 7.9e10, 5e11, caches) > 0.5


def test_headroom_is_what_the_roofline_leaves_and_an_operator_without_flops_gets_a_little():
    from types import SimpleNamespace

    matmul = Operator.create("BMM", B=1, M=512, N=512, K=512)
    assert headroom(matmul, 2.5e10, 1e11, flat(2e10)) == pytest.approx(0.75)
    assert headroom(matmul, 2.5e10, None, None) == 1.0  # no roofline (a GPU): every operator alike
    mean = SimpleNamespace(flops=0, input_shapes=[(1, 16, 16, 16)], output_shape=(1, 16))  # a reduction TVM counts 0
    assert headroom(mean, 0.0, 1e11, flat(2e10)) == DATA_MOVEMENT_HEADROOM


def test_a_peak_measured_below_what_programs_reach_is_raised_to_the_fastest():
    """A busy VM's short peak measurement (183-213 GFLOP/s) below what the BERT layer's matmuls reached
    (188-214) made every matmul's headroom 0, so a time budget went to a 4% softmax; against the
    fastest program's FLOP/s the matmuls behind it keep their headroom."""
    fast = Operator.create("BMM", B=1, M=128, N=768, K=3072)
    slow = Operator.create("BMM", B=1, M=128, N=3072, K=768)
    softmax = SimpleNamespace(flops=0, input_shapes=[(12, 128, 128)], output_shape=(12, 128, 128))
    peak = reached_peak(1.9e11, [2.14e11, 1.875e11, 0.0])
    assert peak == 2.14e11 and reached_peak(1.9e11, []) == 1.9e11 and reached_peak(None, [2e11]) is None
    assert headroom(fast, 2.14e11, peak, flat(2e10)) == pytest.approx(0.0)
    assert headroom(slow, 1.875e11, peak, flat(2e10)) == pytest.approx(1 - 1.875 / 2.14)
    assert headroom(slow, 1.875e11, 1.9e11, flat(2e10)) < 0.02  # against the measured peak alone: nothing to gain
    # the matmul with 31% of the latency now outranks the softmax with 4%
    bw = flat(2e10)
    assert priority(0.31, headroom(slow, 1.875e11, peak, bw), 0) > priority(0.04, headroom(softmax, 0, peak, bw), 0)


def test_the_time_instant_programs_left_goes_back_to_the_plan_up_to_a_search_in_flight(monkeypatch):
    """A budget's held-back seconds that :func:`finish` did not use (no operator had a source) are not
    dropped: the plan's work goes on, stopping a search in flight before the run's deadline."""
    from eto.runs import pipeline
    from eto.runs.finish import SEARCH_IN_FLIGHT_S

    seen: list[float] = []
    run = SimpleNamespace(say=lambda _msg: None)

    def work(*_args, cut: bool) -> None:
        seen.append(deadline.left())
        if cut:
            raise deadline.DeadlineReached()

    monkeypatch.setattr(pipeline, "_plan_work", lambda *a: work(*a, cut=False))
    with deadline.until(30.0):
        assert pipeline._go_on(None, None, run, None, []) is None  # the plan finished: improvement may follow
    assert len(seen) == 1 and 30.0 - SEARCH_IN_FLIGHT_S - 1 < seen[0] <= 30.0 - SEARCH_IN_FLIGHT_S
    monkeypatch.setattr(pipeline, "_plan_work", lambda *a: work(*a, cut=True))
    with deadline.until(30.0):
        assert pipeline._go_on(None, None, run, None, []) == "time budget"
    with deadline.until(pipeline.GO_ON_MIN_S + SEARCH_IN_FLIGHT_S - 1):  # too little to start anything
        assert pipeline._go_on(None, None, run, None, []) == "time budget"
    assert len(seen) == 2


def test_an_operator_whose_search_settles_gets_no_more_steps_and_the_run_ends_when_all_have(monkeypatch):
    """Spare time goes to the operators whose steps still gain: a search step that shortens an operator's
    best by less than MIN_STEP_GAIN ends its steps (a self-reuse that gains nothing does not), and when no
    operator is left the improvement ends before the budget does."""
    from dataclasses import dataclass

    from eto.runs import improve as imp
    from tuner.measure import backend

    @dataclass(frozen=True)
    class Op:
        name: str
        flops: int = 10**9
        input_shapes: tuple = ((256, 256),)
        output_shape: tuple = (256, 256)

        def prim_func(self):
            return None

    a, b = Op("a"), Op("b")
    latency = {a: 4e-3, b: 1e-3}
    # each operator's steps in order: the fraction of its best each one takes off (a: its self-reuse gains
    # nothing, its first search 1%: settled; b: 10%, 10%, then 0.5%: settled; neither gets its last)
    gains = {a: [0.0, 0.01, 0.5], b: [0.1, 0.1, 0.005, 0.5]}
    taken: list[tuple[str, str]] = []

    def tuned(_target):
        return {op: SimpleNamespace(latency_s=s, gflops=op.flops / s / 1e9 / 100) for op, s in latency.items()}

    said: list[str] = []
    run = SimpleNamespace(database=SimpleNamespace(tuned=tuned, best_programs=lambda _target: []), target=None,
                          say=said.append)

    def step(op, _run, _measurer, _share, polished):
        kind = "search" if op in polished else "self-reuse"
        polished[op] = 0
        latency[op] /= 1 + gains[op].pop(0)
        taken.append((op.name, kind))
        return kind

    monkeypatch.setattr(imp, "_roofline", lambda _run: (1e11, None))
    monkeypatch.setattr(imp, "_step", step)
    monkeypatch.setattr(backend, "single_program", lambda *_a: False)
    opset = [SimpleNamespace(op=a, frequency=1), SimpleNamespace(op=b, frequency=1)]
    with deadline.until(3600.0):
        assert imp.improve(opset, run, None) == 5
    assert [t for t in taken if t[0] == "a"] == [("a", "self-reuse"), ("a", "search")]
    assert [t for t in taken if t[0] == "b"] == [("b", "self-reuse"), ("b", "search"), ("b", "search")]
    assert gains == {a: [0.5], b: [0.5]}
    assert sum(m.endswith("no more steps") for m in said) == 2 and "ends before its budget" in said[-1]


def test_a_self_reuse_is_due_on_a_best_program_no_self_reuse_has_searched_around():
    """A time budget's step is a self-reuse where the operator's best program is one no self-reuse started
    from: a backend's program before its polish, a search step's new best; not a polished program, nor one
    whose self-reuse this run started (whether or not it stored anything)."""
    from eto.runs.improve import self_reuse_due
    from eto.operators import Operator

    op, other = Operator.parse("BMM(B=1,M=64,N=64,K=64)"), Operator.parse("BMM(B=1,M=32,N=64,K=64)")

    def result(o, method, t, **extra):
        return {"op_key": o.key, "target": "llvm", "method": method, "time": t, **extra}

    def best(created, line=7):
        return SimpleNamespace(op=op, target="llvm", line=line, created=created)

    backend = [result(op, "backend", 1.0)]
    polish = backend + [result(op, "polish", 2.0, polish={"improved": False})]
    assert self_reuse_due(best(1.0), backend, {})  # a root's program not yet polished
    assert not self_reuse_due(best(1.0), polish, {})  # its polish searched around it (and found nothing faster)
    assert not self_reuse_due(best(2.0), polish, {})  # the polish's own best
    searched = polish + [result(op, "improve", 3.0, evolve={"before_s": 1.0, "after_s": 0.8})]
    assert self_reuse_due(best(3.0), searched, {})  # a search step found a faster program: due again
    assert not self_reuse_due(best(3.0), searched, {op: 7})  # this run's self-reuse started from it
    assert self_reuse_due(best(3.0), searched, {op: 5})  # ... from an earlier best
    elsewhere = searched + [result(other, "improve", 4.0, polish={}), result(op, "polish", 4.0)]
    assert self_reuse_due(best(3.0), elsewhere, {})  # another operator's self-reuse; a failed one holds no "polish"
    assert not self_reuse_due(best(3.0), searched + [result(op, "improve", 4.0, polish={"improved": False})], {})


def test_a_roots_self_reuse_step_counts_as_its_polish():
    """A root a time budget's improvement has self-reused (method improve, with the polish's record) is
    not polished again by a later run; a search step (evolve) is no polish."""
    from eto.runs.polish import needs_polish
    from eto.target import target_key

    op, tk = Operator.parse("BMM(B=1,M=64,N=64,K=64)"), target_key("llvm")
    root = {"op_key": op.key, "target": tk, "method": "backend", "root": True, "records": [{}]}
    step = {"op_key": op.key, "target": tk, "method": "improve"}
    for results, due in (([root], True), ([root, {**step, "evolve": {}}], True), ([root, {**step, "polish": {}}], False),
                         ([root, {**step, "method": "polish", "polish": {}}], False)):
        assert needs_polish(SimpleNamespace(results=lambda r=results: r), op, "llvm") == due, results


def test_a_budget_prices_the_polish_of_roots_an_earlier_run_left_unpolished():
    """A root an earlier run cut before its polish is polished before the plan's own work: a time budget
    counts it (the same budget affords fewer trials), a polished root costs nothing, and the estimate is
    one self-reuse of POLISH_CANDIDATES per such root on the plan's time model."""
    from eto.operators.opsets import OperatorSet
    from eto.planning.budget import POLISH_CANDIDATES, plan_within, prior_polish_seconds, unpolished_roots
    from eto.target import target_key

    tk = target_key("llvm")
    cut = Operator.parse("BMM(B=1,M=256,N=256,K=256)")
    todo = [Operator.parse("BMM(B=1,M=128,N=64,K=256)"), Operator.parse("BMM(B=1,M=64,N=256,K=256)")]
    root = {"op_key": cut.key, "target": tk, "method": "backend", "root": True, "records": []}

    def database(*results: dict) -> SimpleNamespace:  # a database holding ``cut`` as a prior program
        return SimpleNamespace(results=lambda: list(results), tuned=lambda _t: {cut: None})

    cut_db, polished_db = (database({**root, "records": [{}]}),
                           database({**root, "records": [{}]}, {"op_key": cut.key, "target": tk, "method": "polish"}))
    assert unpolished_roots(cut_db, "llvm") == {cut.key} and not unpolished_roots(polished_db, "llvm")
    opset = OperatorSet.from_layers("two", todo)
    options = TuneOptions().replace(cost="analytic", polish=True)
    roomy, top = (plan_within(opset, options, 1e6, database=db, target="llvm", unpolished=unpolished_roots(db, "llvm"))
                  for db in (cut_db, polished_db))
    assert [roomy.planned.operators[n] for n in roomy.planned.plan.prior] == [cut] and top.polish_seconds == 0.0
    tm = roomy.planned.time_model
    expected = tm.polish_seconds(tm.reuse_candidates(POLISH_CANDIDATES), cut.flops / 1e9, cut.type)
    assert expected > 0 and roomy.polish_seconds == pytest.approx(expected)
    assert prior_polish_seconds(roomy.planned, {cut.key}) == pytest.approx(expected)
    assert roomy.seconds == pytest.approx(roomy.plan_seconds + roomy.functions_seconds + expected)
    # between the two plans' estimates: the budget that fits the polished database's largest rung does
    # not fit the cut one's, whose polish it must also pay for
    assert top.options.backend.trials == TRIALS_LADDER[-1]
    squeezed = plan_within(opset, options, top.seconds + expected / 2, database=cut_db, target="llvm",
                           unpolished={cut.key})
    assert squeezed.options.backend.trials < top.options.backend.trials and squeezed.seconds <= top.seconds + expected / 2


def test_a_step_stores_its_programs_on_the_records_scale_unless_the_record_was_timed_in_a_disturbed_moment():
    """An improvement's programs move onto its base's recorded scale (the machine drifts), but a base
    recorded 8.5x slower than it runs now does not drag them there (and the step's share with them)."""
    from eto.runs.polish import MAX_DRIFT, record_scale

    assert record_scale(500e-6, 400e-6) == pytest.approx(1.25)  # drift: onto the record's scale
    assert record_scale(400e-6, 500e-6) == pytest.approx(0.8)
    assert record_scale(MAX_DRIFT * 1e-3, 1e-3) == pytest.approx(MAX_DRIFT)
    assert record_scale(3971e-6, 471e-6) == 1.0  # a disturbed record: stored as timed now
    assert record_scale(100e-6, 471e-6) == 1.0
    assert record_scale(1e-3, math.inf) == 1.0 and record_scale(1e-3, 0.0) == 1.0


def test_under_a_time_budget_the_functions_outside_the_catalogue_go_before_the_plan(monkeypatch):
    """A function outside the catalogue has no instant program: one a budget does not reach runs TVM's
    default schedule (MobileNetV3's seven means, with a fifth of its alone time), so under a budget
    the functions are tuned first; without one, after the plan as before."""
    from eto.runs import pipeline

    order: list[str] = []
    monkeypatch.setattr(pipeline, "_tune_plan", lambda *a: order.append("plan"))
    monkeypatch.setattr(pipeline, "_tune_functions", lambda *a: order.append("functions"))
    monkeypatch.setattr(pipeline, "function_trials", lambda options: 1)
    for budget, want in ((None, ["plan", "functions"]), (60.0, ["functions", "plan"])):
        order.clear()
        run = SimpleNamespace(options=SimpleNamespace(time_budget=budget))
        pipeline._plan_work(None, None, run, None, [None])
        assert order == want
