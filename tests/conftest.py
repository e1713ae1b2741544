import os
import tempfile

import numpy as np
import pytest

# Reuse finalists and backend roots are settled in one runner process (tuner.measure.measurer's default; a
# developer's ETO_SETTLE_PROCESSES does not reach the suite): tests/tuner/test_finalists.py checks the
# two-process settling with settle_processes given explicitly. Subprocesses inherit it.
os.environ["ETO_SETTLE_PROCESSES"] = "1"

# The plan's estimate cache (tuner.reuse.estimate_cache) of the suite is its own, fresh each run: a test
# never reads a developer's ~/.cache/eto, nor leaves anything there. Subprocesses inherit it.
os.environ["ETO_CACHE_DIR"] = tempfile.mkdtemp(prefix="eto-test-cache-")

# The fast tier (`python -m pytest -m "not slow" tests`) imports no TVM through this file: what follows
# imports it only for a test marked slow (one that builds or tunes programs), and ``run_llvm`` only for
# the tests that ask for it.
_RESTORE: list = []


def _small_evolutionary_population():
    """MetaSchedule's evolutionary search, in this process, is :func:`tuner.measure.backend.light_search` with a
    population of 128 instead of 512. The suite's backend runs measure 2-64 trials: at that budget the population's
    sampling and evolution, not the measured candidates, take most of a run (8 trials of a 3x3
    convolution: 31 s, 14 s with a population of 64). What the tests check (programs correct, results
    stored, resumed, reused) does not depend on the population's size; the benchmarks keep MetaSchedule's
    defaults. Subprocesses (``eto`` commands run by a test) keep them too. Returns the undo."""
    from tvm.s_tir.meta_schedule.search_strategy import SearchStrategy

    from tuner.measure.backend import light_search

    create = SearchStrategy.create

    def small(kind="evolutionary", *args, **kwargs):
        if kind == "evolutionary" and not args and not kwargs:
            return light_search(128)
        return create(kind, *args, **kwargs)

    SearchStrategy.create = staticmethod(small)

    def undo():
        SearchStrategy.create = staticmethod(create)

    return undo


#: The test files that take longest in CI's slow part, longest first (file paths under tests/). CI runs
#: that part with ``--dist loadfile --no-loadscope-reorder``: each pytest-xdist worker takes the next
#: file in collection order when it is free, so these go first and the last files to start are short
#: ones; with xdist's own order (files with the most tests first) a worker could start a six-minute
#: file while the others were running out of work. An order only: a file not listed runs after, as
#: collected, and nothing else depends on it.
LONGEST_FIRST = ("test_pipeline.py", "test_bench_scripts.py", "test_model_path.py", "test_corpus.py",
                 "tuner/test_reuse_tuner.py",
                 "test_resume.py", "test_fast_math.py", "test_retune.py", "test_notebook.py", "tuner/test_stage.py",
                 "test_api.py", "test_layout.py", "test_layout_patterns.py", "test_cuda_path.py")


def pytest_collection_modifyitems(config, items):
    """The files of :data:`LONGEST_FIRST` first, in its order; a file's tests stay together, in order."""
    here = os.path.dirname(os.path.abspath(__file__))

    def rank(item) -> int:
        rel = os.path.relpath(str(item.path), here).replace(os.sep, "/")
        return LONGEST_FIRST.index(rel) if rel in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their collected order


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """The small population from the first slow test on, for the rest of the session, set before the
    test's fixtures (a module fixture that tunes, e.g. ``tests/test_retune.py``'s ``tuned_db``, runs
    under it too)."""
    if not _RESTORE and item.get_closest_marker("slow") is not None:
        _RESTORE.append(_small_evolutionary_population())


def pytest_sessionfinish(session, exitstatus):
    while _RESTORE:
        _RESTORE.pop()()


@pytest.fixture(scope="session")
def run_llvm():
    """Build an operator's unscheduled program for llvm and run it on numpy inputs."""
    import tvm

    def run(op, inputs):
        lib = tvm.compile(op.prim_func(), target="llvm")
        dev = tvm.cpu()
        args = [tvm.runtime.tensor(a, dev) for a in inputs]
        out = tvm.runtime.tensor(np.zeros(op.output_shape, "float32"), dev)
        lib(*args, out)
        return out.numpy()

    return run
