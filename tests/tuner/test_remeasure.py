"""Side-by-side re-measurement (Measurer.remeasure): a module that fails once in a round is measured again
in it; one that fails twice counts as failed."""

from __future__ import annotations

import math

from tuner.measure.measurer import Measurer, MeasureResult


class Scripted(Measurer):
    """A measurer whose modules are names and whose outcomes are scripted: ``fails[name]`` failures in a row,
    then ``secs[name]`` seconds."""

    def __init__(self, secs: dict[str, float], fails: dict[str, int]) -> None:  # no builder, no runner
        self.secs, self.fails, self.calls = secs, dict(fails), []

    def measure(self, mods, target, **_kw):
        self.calls.append(list(mods))
        out = []
        for m in mods:
            if self.fails.get(m, 0) > 0:
                self.fails[m] -= 1
                out.append(MeasureResult(None, "run timed out", "run"))
            else:
                out.append(MeasureResult((self.secs[m],) * 3))
        return out


def test_a_module_that_fails_once_in_a_round_is_measured_again_and_keeps_its_time():
    m = Scripted({"a": 1e-3, "b": 2e-3}, {"b": 1})
    assert m.remeasure(["a", "b"], None, rounds=2) == [1e-3, 2e-3]
    assert m.calls == [["a", "b"], ["b"], ["a", "b"]]  # the retry is the failed module's alone, in its round


def test_a_module_that_fails_twice_in_a_round_is_failed():
    m = Scripted({"a": 1e-3, "b": 2e-3}, {"b": 2})
    got = m.remeasure(["a", "b"], None, rounds=3)
    assert got[0] == 1e-3 and math.isinf(got[1])
    assert m.calls[:2] == [["a", "b"], ["b"]]
