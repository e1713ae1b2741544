"""Hot or cold: how a candidate is timed on a CPU, and why eto times cold by default.

MetaSchedule times a candidate *hot*: each sample is several runs in a row (``number``, raised until a
sample lasts ``min_repeat_ms``), so every run but the first finds its weights, inputs and outputs where
the last run left them, in the caches. Inside a model a layer meets its weights in memory (ResNet-50's
are about 100 MB, a core's L2 here 1 MB) and writes its output to lines no cache holds, and programs
differ in how well they stream them. On ResNet-50 in NHWC (2 cores of an AMD EPYC), tuned hot, the 1x1
convolutions ran 1.27-1.44x their hot times in the model; the one from 256 to 1024 channels at 14x14 ran
480 us hot, 591 us in the model and 914 us cold, where the program its search ranked fifth (494 us hot)
ran 554 us cold (experiments/results/diag_resnet50_cold_timing_znver4.txt). A hot search crowns
programs the model then runs slowly.

Timed *cold* (AutoTVM's convention for x86: one run per sample, every argument but the first flushed
from the CPU caches before it), a candidate meets memory as a layer of a model does; its first argument,
the layer's input, stays where the layer before it has just written it. A cold sample is one run, so a
cold measurement takes more samples (:data:`COLD_REPEAT`), and still less time than a hot one (5
samples of at least 40 ms) for every candidate under about 10 ms.

Cold timing applies to CPU (LLVM) targets: a GPU's arguments live in its own memory, which the CPU's
cache flush does not reach, and GPU candidates are timed hot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tuner.analysis.kinds import is_cpu

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from tuner.measure.measurer import MeasureConfig

#: ``"cold"``: one run per sample, its arguments but the first flushed from the caches first;
#: ``"hot"``: MetaSchedule's way, runs in a row with the data left in the caches.
Timing = Literal["hot", "cold"]
#: eto's default: cold on CPU targets (module docstring).
DEFAULT_TIMING: Timing = "cold"
#: Samples (single cold runs) per full cold measurement; their median is the candidate's latency.
COLD_REPEAT = 20
#: Samples per screening cold measurement (:mod:`tuner.measure.finalists`).
COLD_SCREEN_REPEAT = 7


def measure_config(timing: Timing, target: "Target") -> "MeasureConfig":
    """The measurement configuration that times candidates on ``target`` as ``timing`` says (cold on CPU
    targets only: see the module docstring)."""
    from tuner.measure.measurer import MeasureConfig
    from tuner.measure.options import check_choice

    check_choice("timing", timing, Timing)
    if timing == "hot" or not is_cpu(target):
        return MeasureConfig()
    return MeasureConfig(number=1, repeat=COLD_REPEAT, min_repeat_ms=0, enable_cpu_cache_flush=True,
                         screen_repeat=COLD_SCREEN_REPEAT, screen_min_repeat_ms=0)


def timing_of(config: "MeasureConfig") -> Timing:
    """How ``config`` times a candidate: cold where it flushes the caches before a sample of one run."""
    return "cold" if config.enable_cpu_cache_flush and config.number == 1 else "hot"


__all__ = ["COLD_REPEAT", "COLD_SCREEN_REPEAT", "DEFAULT_TIMING", "Timing", "measure_config", "timing_of"]
