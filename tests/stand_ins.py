"""A stand-in for :class:`tuner.measure.measurer.Measurer` that times nothing, for tests of the searches'
logic: subclasses define ``measure`` (with the real one's keywords)."""

from __future__ import annotations


class StandInMeasurer:
    """What a search reads from its measurer besides ``measure``: the build and run clock, and
    whether its builds are cut short (None here: no cap, no probe; see tuner.reuse.search.reuse_tune)."""

    def __init__(self) -> None:
        self.clock = {"build_s": 0.0, "run_s": 0.0}

    def search_build_timeout(self, target) -> float | None:
        return None
