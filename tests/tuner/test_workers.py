"""A local measurer's worker processes: started at once when asked to warm up, all stopped when it is
closed, even while they are still starting (tuner.measure.workers.stop_pool)."""

from __future__ import annotations

import time

import pytest

psutil = pytest.importorskip("psutil")


def _children() -> list:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]


def _new_since(before: set[int], wait_s: float = 5.0) -> set[int]:
    """Child processes not in ``before``, once they are gone or ``wait_s`` has passed (a kill takes a moment)."""
    give_up = time.monotonic() + wait_s
    while (new := {p.pid for p in _children()} - before) and time.monotonic() < give_up:
        time.sleep(0.05)
    return new


def _measurer():
    from eto.target import parse_target
    from tuner.measure.measurer import MeasureConfig, Measurer

    return Measurer.local(MeasureConfig(builder_workers=2), warm=parse_target("cpu"))


def test_warm_starts_every_build_worker_before_any_build():
    before = {p.pid for p in _children()}
    with _measurer() as m:
        # the runner's worker (started by MetaSchedule's constructor) and both build workers
        assert len({p.pid for p in _children()} - before) >= 3
        assert len(m.builder.pool._worker_map) == 2
    assert _new_since(before) == set()


@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_a_measurer_closed_while_its_workers_start_leaves_no_process(delay):
    before = {p.pid for p in _children()}
    m = _measurer()
    time.sleep(delay)
    m.close()
    assert _new_since(before) == set()
