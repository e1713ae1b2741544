"""What a run is told, defaulted and validated in one place.

The CLI and the Python API both build these; :mod:`eto.planning` and :mod:`eto.runs` only read them.
"""

from __future__ import annotations


def default_polish(trials: int) -> bool:
    """Whether roots are polished when the caller does not say: where the backend budget ``trials``
    trains the reuse tuner's ranker (``LearnedRanker.MIN_SAMPLES``); with fewer, a polish measures every
    candidate of its rounds, more than the root's own search. The pipeline and the plan both ask here."""
    from tuner.reuse.cost_model import LearnedRanker

    return trials >= LearnedRanker.MIN_SAMPLES
