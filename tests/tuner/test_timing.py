"""Hot and cold timing (tuner.measure.timing): what each configures, where cold applies, and that a cold
measurement really meets its data in memory."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from eto.options import OptionError, TuneOptions
from tuner.measure.timing import COLD_REPEAT, COLD_SCREEN_REPEAT, DEFAULT_TIMING, measure_config, timing_of


def _target(kind: str) -> SimpleNamespace:
    return SimpleNamespace(kind=SimpleNamespace(name=kind))


def test_cold_timing_flushes_the_caches_before_each_single_run_on_cpu_targets():
    config = measure_config("cold", _target("llvm"))
    full, screen = config.evaluator(), config.evaluator(screen=True)
    assert (full.number, full.repeat, full.min_repeat_ms, full.enable_cpu_cache_flush) == (1, COLD_REPEAT, 0, True)
    assert (screen.number, screen.repeat, screen.min_repeat_ms, screen.enable_cpu_cache_flush) == (
        1, COLD_SCREEN_REPEAT, 0, True)
    assert timing_of(config) == "cold"
    assert DEFAULT_TIMING == "cold" and TuneOptions().timing == "cold"


def test_hot_timing_and_gpu_targets_are_timed_as_metaschedule_times():
    from tuner.measure.measurer import MeasureConfig

    assert measure_config("hot", _target("llvm")) == MeasureConfig()
    assert measure_config("cold", _target("cuda")) == MeasureConfig()  # the CPU's flush does not reach a GPU
    assert timing_of(MeasureConfig()) == "hot"
    assert not MeasureConfig().evaluator().enable_cpu_cache_flush


def test_an_unknown_timing_is_refused_naming_the_option():
    with pytest.raises(OptionError, match="timing must be one of hot, cold, got 'warm'"):
        measure_config("warm", _target("llvm"))  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="timing"):
        TuneOptions.of(timing="warm")
    assert TuneOptions.of(timing="hot").timing == "hot"
    cli = subprocess.run([sys.executable, "-m", "eto", "tune", "--timing", "warm", "--db", "unused"],
                         capture_output=True, text=True)
    assert cli.returncode == 2 and "--timing" in cli.stderr and "'warm'" in cli.stderr


def test_the_command_line_passes_its_timing_to_the_run():
    from eto.cli import build_parser
    from eto.cli.flags import tune_options_of

    for argv, want in ((["tune"], "cold"), (["tune", "--timing", "hot"], "hot"),
                       (["retune", "--vary", "batch=1,2", "--timing", "hot"], "hot")):
        assert tune_options_of(build_parser().parse_args(argv)).timing == want


def _stream_func(n: int):
    """``C[i] = A[0] + B[i]``: its first argument tiny (a cold run keeps it), ``B`` and ``C`` ``n`` floats each."""
    from tvm import te

    a, b = te.placeholder((1,), name="A"), te.placeholder((n,), name="B")
    c = te.compute((n,), lambda i: a[0] + b[i], name="C")
    return te.create_prim_func([a, b, c])


@pytest.mark.slow
@pytest.mark.serial  # a timing ratio: alone on the cores (other workers' traffic evicts the caches a hot run relies on)
def test_a_cold_measurement_meets_its_weights_and_output_in_memory():
    """4 MB that every last-level cache holds: hot, each run finds them there; cold, they come from memory."""
    import tvm

    from eto.runs.pipeline import _measurers
    from eto.target import parse_target
    from tuner.measure.measurer import Measurer

    target = parse_target("cpu")
    mod = tvm.IRModule({"main": _stream_func(1 << 19).with_attr("global_symbol", "main")})
    times = {"hot": float("inf"), "cold": float("inf")}
    with Measurer.local(measure_config("hot", target)) as hot, Measurer.local(measure_config("cold", target)) as cold:
        for _ in range(3):  # interleaved, each the fastest of its tries: a drift of the machine's speed hits both
            for timing, m in (("hot", hot), ("cold", cold)):
                times[timing] = min(times[timing], m.remeasure([mod], target, rounds=2)[0])
    assert times["cold"] > 1.15 * times["hot"], times
    # an instant program is timed in this process the same way (eto.runs.instant)
    import numpy as np

    from eto.runs.instant import _time_all
    from tuner.measure.apply import build

    lib = build(mod, target)
    args = [np.ones(1, "float32"), np.ones(1 << 19, "float32"), np.zeros(1 << 19, "float32")]
    here = {t: min(_time_all([lib], [args], t)[0] for _ in range(3)) for t in ("hot", "cold")}
    assert here["cold"] > 1.15 * here["hot"], here
    own = _measurers(None, target, "cold")[0]  # a run's own measurer times as its options say
    try:
        assert timing_of(own.config) == "cold" and own.runner.evaluator_config.enable_cpu_cache_flush
    finally:
        own.close()
