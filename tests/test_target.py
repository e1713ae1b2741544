import json

import pytest

from eto.target import CPUInfo, GPUInfo, hardware_info, parse_target


def test_cpu_target_names_the_detected_cpu():
    t = parse_target("cpu")
    assert t.kind.name == "llvm"
    assert int(t.attrs["num-cores"]) >= 1
    info = hardware_info("cpu")
    assert isinstance(info, CPUInfo)
    assert str(t.attrs["mcpu"]) == info.mcpu
    assert info.vector_bits in (128, 256, 512) and info.cores >= 1


def test_cuda_tag_gives_gpu_limits():
    info = hardware_info("nvidia/nvidia-a100")
    assert isinstance(info, GPUInfo)
    assert info.arch == "sm_80" and info.sms == 108
    assert info.max_threads_per_block == 1024 and info.warp_size == 32
    assert info.max_shared_memory_per_block == 48 * 1024
    assert parse_target("cuda").host is not None


def test_bad_targets_are_named():
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        parse_target("tpu")
    with pytest.raises(ValueError, match="unknown CUDA target tag 'nvidia/xyz'"):
        parse_target("nvidia/xyz")


def test_thread_count_comes_from_tvm_num_threads(monkeypatch):
    from eto.target import num_threads

    monkeypatch.setenv("TVM_NUM_THREADS", "3")
    assert num_threads() == 3
    monkeypatch.setenv("TVM_NUM_THREADS", "x")
    with pytest.raises(ValueError, match="TVM_NUM_THREADS"):
        num_threads()


def _fresh_process(code: str) -> "subprocess.CompletedProcess[str]":
    """``code`` in a new Python process without TVM_NUM_THREADS (TVM's pool then starts with one thread here)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, check=True)


@pytest.mark.slow  # a fresh process that imports TVM (seconds)
def test_in_process_kernels_run_on_the_threads_tuning_measures_with():
    # instant programs, the program cache, eto bench and eto dispatch time or serve programs in
    # this process: TVM's pool must start with num_threads() threads, not its default
    out = _fresh_process("from eto.target import num_threads, use_threads\nimport tvm\n"
                         "print(use_threads(), num_threads(), tvm.runtime.num_threads())")
    have, want, pool = map(int, out.stdout.split())
    assert have == want == pool
    assert "RuntimeWarning" not in out.stderr


@pytest.mark.slow  # a fresh process that imports TVM (seconds)
def test_a_pool_started_with_fewer_threads_is_named_not_ignored():
    out = _fresh_process("import tvm\nstarted = tvm.runtime.num_threads()\n"
                         "from eto.target import num_threads, use_threads\nprint(started, use_threads(), num_threads())")
    started, have, want = map(int, out.stdout.split())
    if started >= want:
        pytest.skip(f"TVM's default pool already runs {started} threads on this machine")
    assert started == have  # a started pool is not resized...
    assert "TVM's thread pool already runs" in out.stderr and "set TVM_NUM_THREADS" in out.stderr  # ...but named


def test_target_mismatch_names_the_attribute_that_differs():
    from eto.target import target_mismatch

    def key(**kw) -> str:
        return json.dumps({"keys": ["cpu"], "kind": "llvm", "mcpu": "znver4", "num-cores": 2, "tag": "", **kw},
                          separators=(",", ":"), sort_keys=True)

    assert target_mismatch([], key()) is None  # an empty database: nothing to say
    assert target_mismatch([key(), key(mcpu="x")], key()) is None  # some programs serve it
    why = target_mismatch([key()], key(**{"num-cores": 1}))
    assert "num-cores 2 there, 1 here" in why and "TVM_NUM_THREADS=2" in why
    why = target_mismatch([key(mcpu="rocketlake")], key())
    assert "mcpu rocketlake there, znver4 here" in why and "--target" in why and "TVM_NUM_THREADS" not in why
