"""Other processes' CPU time during a run (tuner.measure.contention): counted outside the run's own tree."""

import os
import subprocess
import sys
import time

import pytest

from tuner.measure.contention import Busy, BusyMeter, busy_warning

linux = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc")


def test_others_are_processes_never_in_the_tree_and_a_process_once_ours_stays_ours(monkeypatch):
    """pid -> (ppid, start, cpu): the tree is 10 and its children; 50 is someone else's; 12 leaves the
    tree (its parent 11 ends, it is re-parented to 1) and stays ours; pid 50 reused by a new process counts whole."""
    from tuner.measure import contention

    states = iter([
        {1: (0, 0, 0.0), 10: (1, 5, 1.0), 11: (10, 6, 2.0), 12: (11, 7, 0.5), 50: (1, 8, 3.0)},
        {1: (0, 0, 0.0), 10: (1, 5, 4.0), 12: (1, 7, 9.0), 50: (1, 8, 3.5), 60: (1, 20, 0.25)},
        {1: (0, 0, 0.1), 10: (1, 5, 5.0), 12: (1, 7, 9.5), 50: (1, 30, 1.0), 60: (1, 20, 0.75)},
    ])
    monkeypatch.setattr(contention, "processes", lambda: next(states))
    clock = contention.OthersClock(10)
    clock.tick()
    assert clock.seconds == 0.0  # the first tick is the baseline
    clock.tick()
    assert clock.seconds == pytest.approx(0.5 + 0.25)  # 50's half second and 60 whole, none of 12's
    clock.tick()
    assert clock.seconds == pytest.approx(0.75 + 0.1 + 1.0 + 0.5)  # init, the new 50 whole, 60's


def test_a_warning_names_the_load_and_its_share_and_a_quiet_run_gets_none():
    assert busy_warning(None, 2) is None
    assert busy_warning(Busy(60.0, 0.02, 0.0), 2) is None
    line = busy_warning(Busy(60.0, 0.9, 0.1), 2)
    assert "0.90 of this machine's 2 cores" in line and "0.10 (steal)" in line and "quiet machine" in line
    assert "steal" not in busy_warning(Busy(60.0, 0.9, 0.01), 2)


def _spin(seconds: float) -> str:
    return f"import time\nt = time.perf_counter() + {seconds}\nwhile time.perf_counter() < t: pass\n"


@linux
@pytest.mark.slow
@pytest.mark.serial
def test_a_busy_process_outside_the_tree_is_counted_and_the_trees_own_work_is_not():
    # our own work: a child process spinning, and this one waiting on it
    meter = BusyMeter().start()
    subprocess.run([sys.executable, "-c", _spin(1.0)], check=True)
    ours = meter.stop()
    assert ours is not None and ours.seconds >= 1.0 and ours.others < 0.25, ours
    # someone else's: a process the shell leaves behind (its parent exits: it is no descendant of ours)
    pid = int(subprocess.run(["sh", "-c", f"{sys.executable} -c '{_spin(1.5)}' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout)
    try:
        time.sleep(0.2)  # it has started
        meter = BusyMeter().start()
        time.sleep(1.0)
        theirs = meter.stop()
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    assert theirs is not None and theirs.others >= 0.6, theirs
