"""Building candidates: persistent worker processes, and a forked build server for cut builds.

MetaSchedule's default ``LocalBuilder`` starts a fresh process pool for every batch and each worker
imports ``tvm.s_tir.tensor_intrin`` (~25 s here), which eats the 30 s build timeout on 2 cores.
:class:`PersistentBuilder` keeps its workers alive (recycled every ``recycle_after`` builds against
TVM's known worker memory leak), builds without that import (safe for float32 programs that use no
tensor intrinsics) and exports a linked shared library. eto's searches cut builds short
(``MeasureConfig.search_build_timeout_s``, :func:`tuner.measure.measurer.search_build_cap`); killing the
worker of a cut build cost its restart, TVM's import, 2.4 s here, so those builds run in a fork of
the warm worker (:class:`_BuildServer`) and a cut kills only the fork.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import traceback
from typing import TYPE_CHECKING

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

from tuner.analysis.host import physical_cores
from tuner.analysis.kinds import is_cpu
from tuner.measure.faults import hang_point
from tuner.measure.workers import bind_to_parent, stop_pool

if TYPE_CHECKING:  # pragma: no cover
    from tvm.ir import IRModule
    from tvm.target import Target


def _build_and_export(mod: "IRModule", target: "Target", out_dir: str) -> tuple[str, float]:
    """Build in a worker without the tensor_intrin import; export a linked ``.so``: (path, seconds)."""
    import tvm

    from tuner.measure.apply import prepacked

    start = time.perf_counter()
    mod = prepacked(mod)
    rt_mod = tvm.compile(mod, target=target)
    # One directory per artifact: MetaSchedule's RemoveBuildArtifact deletes the whole directory.
    path = os.path.join(tempfile.mkdtemp(prefix="candidate-", dir=out_dir), "candidate.so")
    rt_mod.export_library(path)
    return path, time.perf_counter() - start


#: targets this worker process has built for (:func:`_warm_up`)
_WARM_TARGETS: set[str] = set()


def _warm_up(target: "Target", out_dir: str) -> None:
    """Build and export a tiny kernel once per worker and target: TVM's lazy imports and LLVM's
    first-use set-up then happen here, once, and not again in each build server (measured: a fork
    of a cold worker built a 64x64 matmul in 0.09-0.16 s, of a warm one in 0.076 s, as the worker
    itself)."""
    key = str(target)
    if key in _WARM_TARGETS:
        return
    import tvm
    from tvm import te

    a = te.placeholder((16,), name="a")
    b = te.compute((16,), lambda i: a[i] * 2.0, name="b")
    path, _ = _build_and_export(tvm.IRModule({"main": te.create_prim_func([a, b])}), target, out_dir)
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    _WARM_TARGETS.add(key)


def _warm_job(target: "Target", out_dir: str) -> None:
    """Worker job sent ahead of the first builds (:meth:`PersistentBuilder.warm`): TVM's import, and for
    CPU targets :func:`_warm_up`'s LLVM set-up."""
    if is_cpu(target):
        _warm_up(target, out_dir)


class _BuildServer:
    """A fork of a warm worker that builds the worker's cut builds one after another.

    Forked once, not per build: forked per build, the same builds took 11-31% longer (a fork's
    first touches of its parent's memory, about 25 ms a build and slower builds), while a server
    builds as fast as the worker itself (40 BERT-Base root programs one after another: 7.55-8.04 s
    against 7.64-8.10 s in the worker)."""

    def __init__(self) -> None:
        import multiprocessing

        self.conn, child = multiprocessing.Pipe()
        worker = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:  # the server: build each job, reply (ok, value); exit when the worker goes
            try:
                self.conn.close()
                bind_to_parent(worker)  # a fork does not inherit its parent's binding
                _serve(child)
            finally:  # never back into the worker's code
                os._exit(0)
        child.close()

    def build(self, job: tuple, timeout_s: float) -> tuple[bool, object] | None:
        """The server's reply, or None past ``timeout_s``; raises if the server died."""
        self.conn.send(job)
        if self.conn.poll(timeout_s):
            try:
                return self.conn.recv()
            except EOFError:
                pass
            _, status = os.waitpid(self.pid, 0)
            how = f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) else f"exit {status}"
            raise RuntimeError(f"the build's process died ({how})")
        self.stop()
        return None

    def stop(self) -> None:
        self.conn.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _serve(conn) -> None:
    """The build server's loop: build each job, reply (ok, value); return when the worker goes."""
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        try:
            hang_point("build")
            reply = (True, _build_and_export(*job))
        except BaseException:  # noqa: BLE001 - every failure goes back to the worker as text
            reply = (False, traceback.format_exc())
        conn.send(reply)


def _build_job(job: tuple) -> tuple[str, float]:
    """A worker's build (MetaSchedule's builds, uncut): :func:`_build_and_export`."""
    hang_point("build")
    return _build_and_export(*job)


#: this worker process's build server (:func:`_build_in_fork`)
_SERVER: _BuildServer | None = None


def _build_in_fork(mod: "IRModule", target: "Target", out_dir: str, timeout_s: float) -> tuple[str, float] | None:
    """Worker job: :func:`_build_and_export` in this worker's build server; None past ``timeout_s``.

    A cut kills the server, not the worker, and the next build forks a new one (no restart); a
    server that dies (a crash in LLVM) is an error naming its signal, not a lost worker."""
    global _SERVER
    _warm_up(target, out_dir)
    if _SERVER is None:
        _SERVER = _BuildServer()
    try:
        reply = _SERVER.build((mod, target, out_dir), timeout_s)
    except RuntimeError:
        _SERVER = None
        raise
    if reply is None:
        _SERVER = None
        return None
    ok, value = reply
    if not ok:
        raise RuntimeError(value)
    return value  # type: ignore[return-value]


#: A builder's artifact folder in the temporary directory: ``eto-build-PID-XXXXXXXX``.
BUILD_DIR_PREFIX = "eto-build-"
#: A dead process's folder is removed once untouched this long (a live builder touches its
#: folder at every build; the wait spares one whose process this PID namespace cannot see).
ORPHAN_AGE_S = 600.0


def remove_orphans(tmp: str | None = None, *, age_s: float = ORPHAN_AGE_S) -> list[str]:
    """Remove the artifact folders of builders whose process died without shutting down (a killed
    run); returns their paths. O(entries of the temporary directory)."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    for name in os.listdir(tmp):
        pid = name[len(BUILD_DIR_PREFIX):].split("-")[0] if name.startswith(BUILD_DIR_PREFIX) else ""
        path = os.path.join(tmp, name)
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            if time.time() - os.stat(path).st_mtime < age_s:
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@derived_object
class PersistentBuilder(PyBuilder):
    """A MetaSchedule builder whose worker processes live across batches."""

    def __init__(self, *, max_workers: int | None = None, timeout_sec: float = 30.0, recycle_after: int = 256):
        super().__init__()
        self.max_workers = max_workers or physical_cores()
        self.timeout_sec = timeout_sec
        remove_orphans()
        self.out_dir = tempfile.mkdtemp(prefix=f"{BUILD_DIR_PREFIX}{os.getpid()}-")
        self.pool = PopenPoolExecutor(
            max_workers=self.max_workers,
            timeout=timeout_sec,
            maximum_process_uses=recycle_after,
            initializer=bind_to_parent,
            initargs=(os.getpid(),),
        )
        #: each input of the last batch: its build's seconds (the timeout for one that timed out,
        #: None for one that failed)
        self.seconds: list[float | None] = []

    def warm(self, target: "Target") -> None:
        """Start every worker now, in the background, e.g. while a plan is made. Started by the first
        builds instead, each worker's start (TVM's import, LLVM's set-up: about 3 s here) came one after
        another and ate a short time budget's first seconds."""
        for _ in range(self.max_workers):  # each job on a new thread of the pool, so on its own worker
            self.pool.submit(_warm_job, target, self.out_dir)

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        """MetaSchedule's builds: in the workers themselves, a worker killed and restarted past
        ``timeout_sec`` (rare at 30 s)."""
        return self._build(build_inputs, None)

    def build_within(self, build_inputs: list[BuilderInput], timeout_sec: float) -> list[BuilderResult]:
        """Builds cut at ``timeout_sec`` (at most the builder's own), in a fork of a warm worker
        (:func:`_build_in_fork`): eto's searches cut often, and a cut then costs no restart."""
        return self._build(build_inputs, min(timeout_sec, self.timeout_sec))

    def _build(self, build_inputs: list[BuilderInput], cut: float | None) -> list[BuilderResult]:
        results, self.seconds = [], []
        limit = self.timeout_sec if cut is None else cut
        if cut is None:
            jobs, job = [(b.mod, b.target, self.out_dir) for b in build_inputs], _build_job
        else:
            jobs, job = [(b.mod, b.target, self.out_dir, cut) for b in build_inputs], lambda x: _build_in_fork(*x)
        for res in self.pool.map_with_error_catching(job, jobs):
            if res.status == StatusKind.COMPLETE and res.value is not None:
                results.append(BuilderResult(res.value[0], None))
                self.seconds.append(res.value[1])
            elif res.status in (StatusKind.TIMEOUT, StatusKind.COMPLETE):
                results.append(BuilderResult(None, f"build timed out after {limit:g} s"))
                self.seconds.append(limit)
            else:
                results.append(BuilderResult(None, f"build failed: {one_line(res.value)}"))
                self.seconds.append(None)
        return results

    def shutdown(self) -> None:
        """Stop the workers at once (a build in flight is abandoned) and remove the artifacts."""
        stop_pool(self.pool)
        shutil.rmtree(self.out_dir, ignore_errors=True)


def one_line(exc: object) -> str:
    """An error's message in one line (TVM errors put it last, after a C++ backtrace)."""
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    # TVM errors put the message last, after a C++ backtrace.
    return (lines[-1] if len(lines) > 1 else lines[0])[:500]
