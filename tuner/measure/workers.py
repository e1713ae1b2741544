"""Worker processes bound to the run that started them: they die with it, and it stops them at once.

MetaSchedule's pools (``tvm.support.popen_pool``) start ``tvm.exec.popen_worker`` processes that
outlive a parent killed in the middle of a build or a run: SIGTERM 75 s into ``eto tune`` left one
running, orphaned, in one of two tries. Every worker eto starts (build workers, their build servers,
runner processes) runs :func:`bind_to_parent` first: on Linux the kernel sends it SIGKILL when its
parent goes (``prctl(PR_SET_PDEATHSIG)``), whatever signal ended the parent; elsewhere a thread
watches the parent's pid. Workers ignore SIGINT and SIGTERM: a terminal's Ctrl-C reaches the whole
process group, and a build or run cut by it would be recorded as a failed candidate; the parent
stops them itself (:func:`stop_pool`) or its death does.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
#: how often a worker without PR_SET_PDEATHSIG looks for its parent (seconds)
WATCH_S = 0.5


def bind_to_parent(parent: int | None = None) -> None:
    """Make this process die when ``parent`` (default: its parent now) does; ignore SIGINT and SIGTERM."""
    parent = os.getppid() if parent is None else parent
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if not _pdeathsig():
        threading.Thread(target=_watch, args=(parent,), daemon=True, name="eto-parent-watch").start()
    if os.getppid() != parent:  # the parent died before the binding took hold
        os._exit(1)


def _pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os._exit(1)


#: at most this long for a stopped pool's threads to end before it is shut down regardless
STOP_WAIT_S = 10.0


def stop_pool(pool) -> None:
    """Stop a ``PopenPoolExecutor`` now: no queued job starts, every worker process (and what it
    started) is killed, then the pool shuts down. Its own ``shutdown`` closes each worker's pipe
    first, which waits for the job in flight: up to a build's timeout."""
    threads = getattr(pool, "_threadpool", None)
    if threads is not None:
        threads.shutdown(wait=False, cancel_futures=True)
    # A job's thread ends once its worker is killed; one may be starting a worker (a warm-up,
    # tuner.measure.builder) as we kill, so kill until no thread is left: TVM's ``PopenWorker.kill`` is
    # not safe against that thread, and a worker it started after our kill would outlive the pool.
    give_up = time.monotonic() + STOP_WAIT_S
    while True:
        for worker in list(getattr(pool, "_worker_map", {}).values()):
            proc = getattr(worker, "_proc", None)
            if proc is not None:
                kill_tree(proc.pid)
        alive = [t for t in getattr(threads, "_threads", ()) if t.is_alive()]
        if not alive or time.monotonic() > give_up:
            break
        alive[0].join(0.05)
    try:
        pool.shutdown()
    finally:  # a shutdown that raised holds the pool's lock for good: its __del__ must not shut it down again
        pool._shutdown = True


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants (children first found, then the process)."""
    try:
        import psutil
    except ImportError:  # no psutil: the process alone
        children = []
    else:
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:  # the process is gone, or not ours to look into: the process alone
            children = []
    for p in [*children, None]:
        try:
            os.kill(pid if p is None else p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def remove_artifact(path: str) -> None:
    """Delete a built candidate's folder once it has run: a long tuning run builds thousands."""
    import shutil

    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
