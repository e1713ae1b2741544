"""Ctrl-C and SIGTERM stop `eto tune` cleanly, a second signal at once; workers die with their run;
every measured candidate is durable as it is measured (issue 70; docs/reliability.md).

The signal tests start `eto tune` on two small operators (a backend root and a reuse) in a process
group of its own, hold it at a point with ``ETO_HANG_AT`` (:mod:`tuner.measure.faults`), send the
signal as a user would (``kill PID`` for SIGTERM, a terminal's Ctrl-C to the whole group for SIGINT)
and check that the command exits with 128 + the signal, that no process of its group is alive 5 s
after the signal, and that eto's :class:`~eto.store.database.Database` and MetaSchedule's
``JSONDatabase`` read the database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tuner.measure import faults, stop

ROOT = Path(__file__).resolve().parent.parent
LINUX = sys.platform.startswith("linux")
OPS = ["DENSE(M=16,N=32,K=32)", "DENSE(M=32,N=32,K=32)"]  # the first a backend root, the second its reuse
TUNE = ["--trials", "8", "--trials-per-iter", "4", "--search", "light", "--bridges", "none", "--cost", "analytic",
        "--plan-budget", "1000", "--seed", "0"]


@pytest.fixture(autouse=True)
def _signals_as_in_a_terminal():
    """The commands these tests start get SIGINT and SIGTERM as a terminal's job does: a test run started
    in the background by a non-interactive shell (``cmd &``, nohup) ignores SIGINT, its children inherit
    that, and eto rightly leaves an ignored signal ignored. A handler (unlike an ignored disposition) is
    reset to the default in the started command."""
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig, handler in old.items():
        if handler == signal.SIG_IGN:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    yield
    for sig, handler in old.items():
        signal.signal(sig, handler)


# -- the parts, without TVM -----------------------------------------------------------------------
def test_a_stop_request_raises_at_once_or_at_the_end_of_a_deferred_section():
    stop.reset()
    try:
        stop.check()  # nothing requested
        written = False
        with pytest.raises(stop.Stopped) as info:
            with stop.deferred():  # a database write
                assert stop.request(signal.SIGTERM) is False  # not now: the write goes on
                written = True
        assert written and info.value.signum == signal.SIGTERM and isinstance(info.value, KeyboardInterrupt)
        assert stop.request(signal.SIGINT) is True and stop.requested() == signal.SIGTERM  # the first one counts
        with pytest.raises(stop.Stopped):
            stop.check()
    finally:
        stop.reset()
    assert stop.requested() is None


def test_in_a_deferred_loop_a_stop_is_raised_at_its_next_check_point_and_only_once():
    stop.reset()
    reached = []
    try:
        with pytest.raises(stop.Stopped):
            with stop.deferred():  # MetaSchedule's search loop (tuner.measure.backend)
                assert stop.request(signal.SIGTERM) is False  # landed in the search: not raised there
                with stop.deferred():  # a database write in the loop's callback ends without raising
                    reached.append("written")
                stop.check()  # the loop's next check point (its builder) raises it
                reached.append("built")
        assert reached == ["written"]
        with stop.deferred():  # a later write (the stopped run's report) is not stopped again
            reached.append("reported")
        assert reached == ["written", "reported"]
    finally:
        stop.reset()


def test_a_hang_point_hangs_once_across_processes_with_a_file(monkeypatch, tmp_path):
    faults._count.clear()
    once = tmp_path / "once"
    monkeypatch.setenv("ETO_HANG_AT", f"build:2@{once}")
    assert [faults.reached("build", "ETO_HANG_AT") for _ in range(3)] == [False, True, False]
    faults._count.clear()  # another process: its own count, but the file says it hung already
    assert [faults.reached("build", "ETO_HANG_AT") for _ in range(3)] == [False, False, False]
    assert not faults.reached("build")  # ETO_KILL_AT is not set


def _live_in_group(pgid: int) -> list[str]:
    """The processes of group ``pgid`` that are not zombies (pid and command)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(f"{pid} {cmd}")
    return out


def _gone_within(pgid: int, seconds: float) -> list[str]:
    """Wait up to ``seconds`` for group ``pgid`` to empty; what is still alive then."""
    deadline = time.time() + seconds
    while (alive := _live_in_group(pgid)) and time.time() < deadline:
        time.sleep(0.1)
    return alive


class _Started:
    """A process started in a group of its own, its stderr read as it comes."""

    def __init__(self, cmd: list[str], env: dict) -> None:
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.lines: list[str] = []
        self.seen = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.lines.append(line.rstrip())
            if line.startswith("eto: fault: hanging at") or line.strip() == "ready":
                self.seen.set()

    def wait_for_hang(self, timeout: float = 300) -> None:
        assert self.seen.wait(timeout), "never reached its hang point:\n" + "\n".join(self.lines[-20:])
        time.sleep(0.2)  # the main thread in its sleep, the workers as they are

    def signal(self, signum: int, group: bool) -> None:
        (os.killpg if group else os.kill)(self.proc.pid, signum)

    def exit_code(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.thread.join(5)

    def stderr(self) -> str:
        return "\n".join(self.lines)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for line in _live_in_group(self.proc.pid):  # a failed test leaves nothing running
            os.kill(int(line.split()[0]), signal.SIGKILL)


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ETO_KILL_AT", "ETO_HANG_AT", "ETO_STOP_GRACE_S")}
    return {**env, "TVM_NUM_THREADS": "2", **extra}


@pytest.mark.slow  # seconds: processes started and signalled
@pytest.mark.serial  # a few seconds' limits
@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_worker_dies_with_its_parent_whatever_kills_it_and_ignores_ctrl_c():
    """tuner.measure.workers.bind_to_parent: PR_SET_PDEATHSIG, and SIGINT/SIGTERM ignored (the parent stops it)."""
    worker = ("import sys, time; from tuner.measure.workers import bind_to_parent; bind_to_parent(int(sys.argv[1])); "
              "print('bound', flush=True); time.sleep(60)")
    parent = textwrap.dedent(f"""
        import os, subprocess, sys, time
        w = subprocess.Popen([sys.executable, "-c", {worker!r}, str(os.getpid())], stdout=subprocess.PIPE, text=True)
        assert w.stdout.readline().strip() == "bound"
        print(w.pid, flush=True)
        sys.stderr.write("ready\\n"); sys.stderr.flush()
        time.sleep(60)
    """)
    started = _Started([sys.executable, "-c", parent], _env())
    try:
        started.wait_for_hang(60)
        worker_pid = int(started.proc.stdout.readline())  # type: ignore[union-attr]
        os.kill(worker_pid, signal.SIGINT)
        os.kill(worker_pid, signal.SIGTERM)
        time.sleep(0.5)
        assert any(line.startswith(f"{worker_pid} ") for line in _live_in_group(started.proc.pid))  # ignored
        os.kill(started.proc.pid, signal.SIGKILL)  # the parent, without any cleanup
        assert started.exit_code(10) == -signal.SIGKILL
        assert _gone_within(started.proc.pid, 5) == []
    finally:
        started.cleanup()


_HANDLED = textwrap.dedent("""
    import sys, time
    from eto.cli.interrupt import handled
    from tuner.measure import stop
    with handled():
        with stop.deferred():  # a database write that does not end: the first signal waits for it
            sys.stderr.write("ready\\n"); sys.stderr.flush()
            time.sleep(60)
""")


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.skipif(not LINUX, reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_exits_at_once(signum):
    started = _Started([sys.executable, "-c", _HANDLED], _env())
    try:
        started.wait_for_hang(60)
        started.signal(signum, group=True)
        time.sleep(1.0)
        assert started.proc.poll() is None  # the first one waits for the write
        started.signal(signum, group=True)
        t0 = time.time()
        assert started.exit_code(10) == 128 + signum and time.time() - t0 < 2
        assert "stopped at once" in started.stderr() and "a second Ctrl-C" in started.stderr()
    finally:
        started.cleanup()


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_stop_that_takes_longer_than_the_grace_exits_at_once():
    started = _Started([sys.executable, "-c", _HANDLED], _env(ETO_STOP_GRACE_S="1.5"))
    try:
        started.wait_for_hang(60)
        t0 = time.time()
        started.signal(signal.SIGTERM, group=False)
        assert started.exit_code(10) == 128 + signal.SIGTERM and 1.3 < time.time() - t0 < 4
        assert "stopping took over 1.5 s" in started.stderr()
    finally:
        started.cleanup()


def test_a_stopped_tune_says_how_to_continue():
    import argparse

    from eto.cli.interrupt import stopped_message

    args = argparse.Namespace(command="tune", db="my-db", command_line=["tune", "--op", "DENSE(M=8,N=8,K=8)",
                                                                         "--db", "my-db"])
    text = stopped_message(args, signal.SIGTERM)
    assert "stopped by SIGTERM" in text and "saved in my-db" in text and "run the same command again" in text
    assert text.endswith("eto tune --op 'DENSE(M=8,N=8,K=8)' --db my-db")
    assert stopped_message(argparse.Namespace(command="plan"), signal.SIGINT) == "eto: interrupted (SIGINT)"


# -- `eto tune`, stopped --------------------------------------------------------------------------
def _tune_cmd(db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "eto", "tune", *[a for op in OPS for a in ("--op", op)], *TUNE, "--db", str(db),
            *extra]


def _readable(db_dir: Path) -> "object":
    """The database, checked: eto reads it with no problem and no orphan record, MetaSchedule reads
    every stored program."""
    from tvm.s_tir import meta_schedule as ms

    from eto.store.database import Database

    db = Database(db_dir)
    assert db.problems == [] and db.orphans == [], (db.problems, db.orphans)
    assert len(ms.database.JSONDatabase(work_dir=str(db_dir)).get_all_tuning_records()) == len(db.programs())
    return db


def _ops():
    from eto.operators import Operator

    return [Operator.parse(op) for op in OPS]


#: where a run is held when the signal comes: planning (no worker yet); the root's backend run inside
#: MetaSchedule's C++ loop, after its 5th candidate is durable (the batch's other runs in flight);
#: the reuse search after its 3rd candidate is durable (its batch's other runs in flight)
POINTS = {"planning": "plan.before", "backend": "backend.checkpointed:5", "reuse": "reuse.checkpointed:3"}


@pytest.mark.slow
@pytest.mark.serial  # worker processes, and 5 s limits a second run on the cores would skew
@pytest.mark.skipif(not LINUX, reason="reads /proc")
@pytest.mark.parametrize(("where", "signum"), [("planning", signal.SIGTERM), ("planning", signal.SIGINT),
                                               ("backend", signal.SIGTERM), ("reuse", signal.SIGINT)],
                         ids=["planning-SIGTERM", "planning-SIGINT", "backend-SIGTERM", "reuse-SIGINT"])
def test_a_signal_stops_eto_tune_cleanly(tmp_path, where, signum):
    """SIGTERM to the process (``kill PID``), SIGINT to its group (a terminal's Ctrl-C): the command
    exits with 128 + the signal and says how to continue; nothing of its group is alive 5 s later;
    the database reads in eto and in MetaSchedule and holds what was measured; after a stop in the
    backend or the reuse, the same command continues from it. Both signals take the same way out
    once caught (:mod:`eto.cli.interrupt`), so each tuning stage is stopped by one of them (every
    stop costs a tuning run) and planning, before any worker, by both."""
    from eto.target import parse_target

    db_dir = tmp_path / "db"
    started = _Started(_tune_cmd(db_dir), _env(ETO_HANG_AT=POINTS[where]))
    try:
        started.wait_for_hang()
        t0 = time.time()
        started.signal(signum, group=signum == signal.SIGINT)
        code = started.exit_code(30)
        alive = _gone_within(started.proc.pid, 5 - (time.time() - t0))
        assert alive == [], alive
        assert code == 128 + signum, started.stderr()[-3000:]
        assert "run the same command again" in started.stderr() and f"stopped by {signal.Signals(signum).name}" in \
            started.stderr()
    finally:
        started.cleanup()
    db = _readable(db_dir)
    root, alpha = _ops()
    target = parse_target("cpu")
    backend, reuse = db.progress(root, target), db.progress(alpha, target, "reuse")
    if where == "planning":
        assert backend.trials == 0 and not db.results()
    elif where == "backend":  # five candidates durable, one line each; the root has no result yet
        assert 5 <= backend.trials < 8 and not db.results()
    else:
        assert [r["method"] for r in db.results()] == ["backend"] and reuse.trials >= 3
    if where == "planning":
        return
    rerun = subprocess.run(_tune_cmd(db_dir, "--quiet"), cwd=ROOT, env=_env(), capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    after = {r["method"]: r for r in _readable(db_dir).results()}
    if where == "backend":  # the root continued from its five: three more trials, its budget in all
        assert after["backend"]["resumed_after"] == backend.trials and after["backend"]["candidates"] == 8
    else:
        assert after["reuse"]["resumed_after"] == len(reuse.latencies) and after["reuse"]["candidates"] >= reuse.trials


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.skipif(not LINUX, reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_run_stopped_while_a_build_hangs_leaves_no_worker_behind(tmp_path, signum):
    """The root's first builds hang in their build servers (forks of the build workers): SIGTERM
    stops the workers and their servers; SIGKILL to the run alone (no cleanup at all) takes them
    with it (PR_SET_PDEATHSIG), where a MetaSchedule worker used to run on, orphaned."""
    started = _Started(_tune_cmd(tmp_path / "db"), _env(ETO_HANG_AT="build"))
    try:
        started.wait_for_hang()
        workers = [line for line in _live_in_group(started.proc.pid) if "popen_worker" in line]
        assert len(workers) >= 3  # a runner, the build workers, a build server hanging
        t0 = time.time()
        started.signal(signum, group=False)
        code = started.exit_code(30)
        assert _gone_within(started.proc.pid, 5 - (time.time() - t0)) == []
        assert code == (128 + signum if signum != signal.SIGKILL else -signum)
    finally:
        started.cleanup()
    _readable(tmp_path / "db")


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.skipif(not LINUX, reason="reads /proc")
def test_a_second_ctrl_c_in_a_database_write_exits_at_once_and_loses_nothing_durable(tmp_path):
    """Held inside a checkpoint's write (the first Ctrl-C waits for its end), a second Ctrl-C exits at
    once; the workers go with the process, and the database keeps every line written."""
    started = _Started(_tune_cmd(tmp_path / "db"), _env(ETO_HANG_AT="db.progress:2"))
    try:
        started.wait_for_hang()
        started.signal(signal.SIGINT, group=True)
        time.sleep(1.0)
        assert started.proc.poll() is None
        t0 = time.time()
        started.signal(signal.SIGINT, group=True)
        assert started.exit_code(10) == 128 + signal.SIGINT and time.time() - t0 < 2
        assert _gone_within(started.proc.pid, 5 - (time.time() - t0)) == []
    finally:
        started.cleanup()
    from eto.target import parse_target

    db = _readable(tmp_path / "db")
    assert db.progress(_ops()[0], parse_target("cpu")).trials >= 2  # the checkpoint held is written


@pytest.mark.slow
@pytest.mark.serial
def test_a_kill_inside_a_batch_loses_only_what_is_in_flight(tmp_path):
    """MetaSchedule alone with its batch the whole budget (8 of 8, as 64 of 64 by default): SIGKILL
    after three candidates are measured keeps those three, and the rerun measures the other five,
    seeded with them (before, a kill inside a batch lost the whole batch)."""
    from eto.store.database import Database
    from eto.target import parse_target

    db_dir = tmp_path / "db"
    cmd = [sys.executable, "-m", "eto", "tune", "--op", OPS[0], "--method", "ansor", "--trials", "8",
           "--trials-per-iter", "8", "--search", "light", "--seed", "0", "--db", str(db_dir), "--quiet"]
    killed = subprocess.run(cmd, cwd=ROOT, env=_env(ETO_KILL_AT="backend.checkpointed:3"), capture_output=True,
                            timeout=600, start_new_session=True)
    assert killed.returncode == -signal.SIGKILL
    op, target = _ops()[0], parse_target("cpu")
    progress = Database(db_dir).progress(op, target)
    assert progress.trials >= 3 and len(progress.latencies) >= 1 and not Database(db_dir).results()
    rerun = subprocess.run(cmd + ["--json"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    (result,) = _readable(db_dir).results()
    assert result["resumed_after"] == progress.trials and result["candidates"] == 8
