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
