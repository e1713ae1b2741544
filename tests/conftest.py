import os

import numpy as np
import pytest

# Reuse finalists and backend roots are settled in one runner process (tuner.measure's default; a
# developer's ETO_SETTLE_PROCESSES does not reach the suite): tests/tuner/test_finalists.py checks the
# two-process settling with settle_processes given explicitly. Subprocesses inherit it.
os.environ["ETO_SETTLE_PROCESSES"] = "1"


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
