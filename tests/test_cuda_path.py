"""eto's CUDA path without a GPU: the target, MetaSchedule's CUDA design space and the source TVM generates
for it, then planning, the backend, reuse and the database with real CUDA builds and only the runner
replaced by a stand-in; on a GPU, the stored programs run against numpy.

A lent GPU session has minutes, not hours: this keeps a Python error on the CUDA path from costing one
(it is how the H100 run of experiments/set_bench.py was checked beforehand). Latencies are made up, so
nothing here is about speed.

What needs what. Nothing but a GPU runs a kernel (:func:`test_stored_cuda_programs_match_numpy_on_a_gpu`).
A build is TVM's CUDA codegen, then, where TVM was built with the CUDA runtime, a compiler: NVRTC or nvcc,
as ``TVM_CUDA_COMPILE_MODE`` says. The CPU wheel this project installs has no CUDA runtime: its CUDA build
keeps the generated source as the module and calls no compiler (the tests below make sure of it), so the
builds run on any machine, nvcc or not; with a CUDA TVM they are skipped only where its compiler is missing.
The reuse tuner's CUDA candidates (VerifyGPUCode, the lowered B/T/M) are tests/tuner/test_reuse_tuner.py's.
"""

import os
import random
import shutil

import numpy as np
import pytest

from eto.options import TuneOptions
from eto.store.database import Database
from eto.operators import Operator
from eto.operators.opsets import OperatorSet
from eto.target import parse_target

pytestmark = pytest.mark.slow

SMALL, LARGE = Operator.create("BMM", B=2, M=64, N=64, K=32), Operator.create("BMM", B=2, M=128, N=64, K=64)
#: the value of ``TVM_CUDA_COMPILE_MODE`` where TVM has no CUDA runtime: TVM's compile callback raises on
#: it, so a build that called a CUDA compiler would fail
NO_COMPILER = "none (this TVM keeps CUDA builds as source)"


def missing_cuda_compiler() -> str | None:
    """Why CUDA programs cannot be built here, None if they can (see the module's docstring)."""
    import tvm

    if not tvm.runtime.enabled("cuda"):
        return None
    if os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower() == "nvcc":
        return None if shutil.which("nvcc") else "this TVM compiles CUDA builds with nvcc, which is not on PATH"
    try:
        import cuda.bindings.nvrtc  # noqa: F401
    except ImportError:
        return "this TVM compiles CUDA builds with NVRTC, and cuda-bindings is not installed"
    return None


def codegen_only(patch: pytest.MonkeyPatch) -> None:
    """Builds (here and in the build workers started after) may call no CUDA compiler where TVM has none;
    skip where TVM has one and it is missing."""
    import tvm

    reason = missing_cuda_compiler()
    if reason is not None:
        pytest.skip(reason)
    if not tvm.runtime.enabled("cuda"):
        patch.setenv("TVM_CUDA_COMPILE_MODE", NO_COMPILER)


@pytest.fixture(scope="module")
def design_space():
    """MetaSchedule's CUDA design space of SMALL for the A100, and the first sample of it (seeded) that
    passes the postprocessors (most samples ask more of a block than VerifyGPUCode allows: 4 of 60 here)."""
    from tvm.ir import IRModule
    from tvm.s_tir import meta_schedule as ms

    from tuner.analysis.intrinsics import register_tensor_intrinsics

    # the default CUDA rules name tensor-core intrinsics: registered here, as the tuner does, not left to
    # whichever test happened to run before in this process
    register_tensor_intrinsics(parse_target("nvidia/nvidia-a100"))

    def context(seed: int):
        return ms.TuneContext(mod=IRModule({"main": SMALL.prim_func()}), target=parse_target("nvidia/nvidia-a100"),
                              space_generator="post-order-apply", search_strategy="replay-trace", task_name="cuda",
                              num_threads=1, rand_state=seed)

    def passes(ctx, sch) -> bool:
        sch.enter_postproc()
        return all(p.apply(sch) for p in ctx.space_generator.postprocs)

    ctx = context(1)
    samples = ((c, sch) for c in map(context, range(1, 65)) for sch in c.generate_design_space())
    return ctx, ctx.generate_design_space(), next((sch for c, sch in samples if passes(c, sch)), None)


def test_the_cuda_target_and_its_design_space_bind_threads_and_share_memory(design_space):
    """The target eto parses for an A100 and MetaSchedule's CUDA design space for a BMM: blocks and threads
    bound, operands staged in shared memory, and samples that pass the postprocessors (VerifyGPUCode
    among them). Nothing is built."""
    from tvm.s_tir import meta_schedule as ms

    target = parse_target("nvidia/nvidia-a100")
    assert target.kind.name == "cuda" and target.attrs["arch"] == "sm_80" and target.host.kind.name == "llvm"
    assert (int(target.attrs["max_threads_per_block"]), int(target.attrs["max_shared_memory_per_block"])) == \
        (1024, 49152)
    ctx, spaces, sample = design_space
    assert any(isinstance(p, ms.postproc.VerifyGPUCode) for p in ctx.space_generator.postprocs)
    assert spaces
    for sch in spaces:
        trace = str(sch.trace)
        assert all(f'"{axis}"' in trace for axis in ("blockIdx.x", "threadIdx.x")), trace
        assert '"shared"' in trace, trace
    assert sample is not None


def test_a_cuda_program_builds_to_a_kernel_source(design_space, monkeypatch):
    """A sample of the CUDA design space built by TVM for the A100: a kernel over blocks and threads, its
    operands in shared memory."""
    import tvm

    codegen_only(monkeypatch)
    _, _, sample = design_space
    source = "".join(m.inspect_source()
                     for m in tvm.compile(sample.mod, target=parse_target("nvidia/nvidia-a100")).mod.imports)
    assert all(s in source for s in ("__global__", "blockIdx.x", "threadIdx.x", "__shared__")), source


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The two BMMs tuned for the A100 by eto's pipeline, every candidate built for real and 'run' by a
    stand-in runner in a made-up 10-100 us: (the database, the report, what the runner was given)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture

    from eto.runs.pipeline import tune

    ran = []

    class StandInRunner(PyRunner):
        def __init__(self, *args, **kwargs):
            super().__init__()
            self.rng = random.Random(0)

        def run(self, inputs):
            ran.extend(inputs)
            return [LocalRunnerFuture(res=[self.rng.uniform(1e-5, 1e-4)] * 3, error_message=None) for _ in inputs]

    with pytest.MonkeyPatch.context() as patch:
        codegen_only(patch)
        patch.setattr(ms.runner, "LocalRunner", StandInRunner)
        db = Database(tmp_path_factory.mktemp("cuda") / "db")
        # plan as if the backend had 64 trials (a reuse is then the cheaper edge), give it 8
        report = tune(OperatorSet.from_layers("cuda", [SMALL, LARGE]), parse_target("nvidia/nvidia-a100"), db,
                      TuneOptions.of(trials=8, plan_budget=64, bridges="none", seed=0))
    return db, report, ran


def test_cuda_set_plans_tunes_and_reuses_with_real_builds(tuned):
    import tvm

    from tuner.measure.apply import scheduled_module

    db, report, ran = tuned
    target = parse_target("nvidia/nvidia-a100")
    methods = {row.op: (row.status, row.method) for row in report.rows}
    # the root's best: the backend's program or its polish's (eto.runs.polish: a reuse search on CUDA too)
    assert sorted((s, "root" if m in ("backend", "polish") else m) for s, m in methods.values()) == [
        ("tuned", "reuse"), ("tuned", "root")], methods
    assert ran and all(inp.device_type == "cuda" for inp in ran)  # real artifacts were handed to the runner
    for op in (SMALL, LARGE):
        best = db.best(op, target)
        assert best is not None
        # the stored program compiles for CUDA again, to a kernel over threads (and blocks, unless the
        # stand-in runner's random timings made a one-block program the best: TVM then drops blockIdx)
        lib = tvm.compile(scheduled_module(best.tuning_record), target=target)
        source = "".join(m.inspect_source() for m in lib.mod.imports)
        assert "__global__" in source and "threadIdx" in source


def test_stored_cuda_programs_match_numpy_on_a_gpu(tuned):
    import tvm

    from eto.runs.verify import tolerance
    from tuner.measure.apply import scheduled_module

    if not tvm.cuda(0).exist:
        pytest.skip("running a CUDA kernel needs a GPU")
    db, _, _ = tuned
    target = parse_target("nvidia/nvidia-a100")
    dev = tvm.cuda(0)
    for op in (SMALL, LARGE):
        lib = tvm.compile(scheduled_module(db.best(op, target).tuning_record), target=target)
        inputs = op.random_inputs(0)
        out = tvm.runtime.tensor(np.zeros(op.output_shape, "float32"), dev)
        lib(*[tvm.runtime.tensor(x, dev) for x in inputs], out)
        np.testing.assert_allclose(out.numpy(), op.reference(*inputs), rtol=1e-4, atol=tolerance(op))
