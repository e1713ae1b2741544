"""The reuse-based tuner: Algorithm 1's enumeration (paper Example 3), GetS on CPU and CUDA, estimator."""

import dataclasses
import math
import re
import shutil
import subprocess
import zlib

import pytest

from eto.operators import Operator
from eto.target import cpu_target, cuda_target
from tuner.reuse.options import ReuseOptions

tvm = pytest.importorskip("tvm")

from tuner.reuse.cost_model import LearnedRanker  # noqa: E402
from tuner.reuse.estimate import estimate_trials, trials_for_config  # noqa: E402
from tuner.analysis.features import LoopNest, TileConfig, loop_nest_of, lowered_btm  # noqa: E402
from tuner.reuse.search import ReuseTuner, reuse_tune  # noqa: E402
from tuner.reuse.options import ReuseOptions
from tuner.reuse.space import ReuseSpace, target_limits  # noqa: E402
from tuner.measure.measurer import MeasureResult  # noqa: E402

from tests.stand_ins import StandInMeasurer  # noqa: E402


def nest(op: Operator) -> LoopNest:
    from tvm.ir import IRModule

    assert op.type == "C2D"
    return loop_nest_of(IRModule({"main": op.prim_func()}), "c2d")


def layer_matmul(B: int, M: int, N: int, K: int):
    """A model's matmul ``Z[b,i,j] = sum_k X[b,i,k] * W[k,j]`` (a linear layer's weights, contiguous
    along the columns; the catalogue's BMM reads ``Y[b,j,k]``), as a PrimFunc."""
    from tvm import te

    x = te.placeholder((B, M, K), "float32", name="X")
    w = te.placeholder((K, N), "float32", name="W")
    k = te.reduce_axis((0, K), name="k")
    z = te.compute((B, M, N), lambda b, i, j: te.sum(x[b, i, k] * w[k, j], axis=k), name="matmul")
    return te.create_prim_func([x, w, z])


def sampled_record(op, target, index: int = 0):
    """A program of ``op`` (an Operator or a PrimFunc) from MetaSchedule's design space (a stand-in
    for a tuned S*_β)."""
    from tvm.ir import IRModule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from tuner.analysis.intrinsics import register_tensor_intrinsics

    # a CUDA design space names tensor-core intrinsics: once eto has marked the intrinsics package
    # imported for a CPU target, a TuneContext no longer registers them itself
    register_tensor_intrinsics(target)
    mod = IRModule({"main": op.prim_func() if isinstance(op, Operator) else op})
    ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                         search_strategy="replay-trace", task_name="beta", num_threads=1, rand_state=7)
    sch = ctx.generate_design_space()[index]
    return TuningRecord(sch.trace, Workload(mod), [1e-3], target, ArgInfo.from_prim_func(mod["main"]))


# -- Example 3 (section 5.1) -------------------------------------------------------------------
@pytest.fixture(scope="module")
def example3():
    beta = Operator.create("C2D", N=1, CI=512, H=28, W=28, CO=128, KH=1, KW=1)
    alpha = Operator.create("C2D", N=1, CI=256, H=28, W=28, CO=128, KH=1, KW=1)
    # β's best program of Figure 2b: BShape [1,32,2,28], TShape ([1,1,1,1],[1,4,2,1]), LShape [4,1,1]
    beta_cfg = TileConfig("cuda", ((1, 1, 1, 1, 1), (4, 1, 8, 4, 1), (14, 1, 1, 2, 1), (1, 1, 28, 1, 1)),
                          ((4, 128, 1), (1, 1, 1), (1, 1, 1)))
    return ReuseSpace("cuda", nest(alpha), nest(beta), beta_cfg)


def test_example3_beta_features(example3):
    cfg = example3.beta_cfg
    assert cfg.bshape == (1, 32, 2, 28)
    assert cfg.tshape == ((1, 1, 1, 1), (1, 4, 2, 1))
    assert cfg.lshape == (4, 1, 1)
    assert cfg.B == 56 and cfg.T == 56 * 224
    assert cfg.block_bytes(example3.beta) == 11264 * 4  # the paper counts elements: M = 56 x 11264
    assert (example3.r1, example3.r2) == (2.0, 0.5)


def test_example3_b_values(example3):
    assert example3.b_values() == [28, 32, 49, 56, 64, 98, 112]


def test_example3_b56_bshape_lshape_threads_tshapes(example3):
    bshape = example3.bshape(56)
    assert bshape == (1, 32, 2, 28)
    lshape = example3.lshape(bshape)
    assert lshape == (2, 1, 1)
    threads = example3.threads_per_block(56, bshape)
    assert threads == [112, 128, 224]
    tshapes = {t: example3.tshape(t, bshape, lshape).tshape for t in threads}
    assert tshapes == {112: ((1, 1, 1, 1), (1, 4, 2, 2)), 128: ((1, 1, 1, 1), (1, 2, 1, 7)),
                       224: ((1, 1, 1, 1), (1, 4, 2, 1))}


def test_example3_m_round_tries_lshape_4(example3):
    best = example3.tshape(224, (1, 32, 2, 28), (2, 1, 1))
    assert [c.lshape for c in example3.m_round(best)] == [(4, 1, 1)]


def test_cpu_ranges_widen_the_paper_windows(example3):
    from dataclasses import replace

    wide = replace(example3, ranges="cpu")
    assert set(example3.b_values()) < set(wide.b_values())
    lo, hi = example3.t_range()
    assert wide.t_range() == (lo / 4, hi * 4)
    lo, hi = example3.m_range()
    assert wide.m_range() == (lo / 4, hi * 4)


def test_unroll_round_skips_options_with_the_same_effect():
    space = ReuseSpace("cuda", LoopNest((64,), (8,), ()), LoopNest((64,), (8,), ()),
                       TileConfig("cuda", ((2, 1, 8, 2, 2),), ((2, 2, 2),)))
    cfg = space.beta_cfg
    assert cfg.thread_work() == 4 * 4  # thread tile 4 x fetch chunk 4
    options = [0, 16, 64, 512, 1024]
    # every limit >= 16 unrolls the 16 iterations fully: from 1024 only 0 differs
    assert space.unroll_round(cfg, options, current=4) == [0]
    assert space.unroll_round(cfg, options, current=0) == [1]


def test_kept_tiles_change_only_what_the_new_extents_force():
    """β's factors kept innermost first (each the largest divisor of what is left), the outer factor
    takes the rest: a shorter M keeps the register and cache tiles, a length they do not divide
    shrinks the outermost of them first."""
    beta_cfg = TileConfig("cpu", ((1, 1, 1, 1), (2, 1, 16, 4), (16, 4, 1, 12)), ((128, 6),))
    beta = LoopNest((1, 128, 768), (768,), ())

    def kept(space, reduction):
        return ReuseSpace("cpu", LoopNest(space, reduction, ()), beta, beta_cfg).kept_tiles()

    assert kept((1, 64, 768), (768,)).space == ((1, 1, 1, 1), (1, 1, 16, 4), (16, 4, 1, 12))
    cfg = kept((1, 200, 3072), (256,))
    assert cfg.space == ((1, 1, 1, 1), (5, 1, 10, 4), (64, 4, 1, 12)) and cfg.reduction == ((64, 4),)
    assert [math.prod(f) for f in cfg.space] == [1, 200, 3072]
    space = ReuseSpace("cpu", LoopNest((1, 64, 768), (768,), ()), beta, beta_cfg)
    assert space.kept_lead() == space.kept_tiles() not in space.t_round()  # measured first in round T


def test_kept_tiles_with_parallel_growth_keep_betas_outer_partition():
    """growth="parallel" (CPU): where α's loop has room for β's two outer factors, the outermost
    keeps β's and level 1 takes the rest (BERT's 768x768 matmul at seq 384 from seq 128: M's
    (1, 4, 1, 32) becomes (1, 12, 1, 32), not (3, 4, 1, 32)); a shorter loop and the reduction are
    kept as before, and on CUDA both placements are the same."""
    beta_cfg = TileConfig("cpu", ((1, 1, 1, 1), (1, 4, 1, 32), (6, 8, 1, 16)), ((768, 1),))
    beta = LoopNest((1, 128, 768), (768,), ())

    def kept(space, growth, kind="cpu"):
        cfg = TileConfig(kind, beta_cfg.space, beta_cfg.reduction)
        return ReuseSpace(kind, LoopNest(space, (768,), ()), beta, cfg).kept_tiles(growth=growth)

    assert kept((1, 384, 768), "outer").space == ((1, 1, 1, 1), (3, 4, 1, 32), (6, 8, 1, 16))
    assert kept((1, 384, 768), "parallel").space == ((1, 1, 1, 1), (1, 12, 1, 32), (6, 8, 1, 16))
    wide = kept((1, 160, 1536), "parallel")  # 160 = 5 x 32: level 1 takes the 5; N's outer 6 stays, level 1 grows
    assert wide.space == ((1, 1, 1, 1), (1, 5, 1, 32), (6, 16, 1, 16)) and wide.reduction == ((768, 1),)
    assert kept((1, 64, 768), "parallel") == kept((1, 64, 768), "outer")  # no room: as before
    assert [math.prod(f) for f in kept((1, 200, 3072), "parallel").space] == [1, 200, 3072]


def test_a_vector_tile_beta_could_not_choose_becomes_a_full_vector():
    """β (a bridge with 7 output columns) could only tile its vectorised loop by 7; α's 56 columns
    get the full-vector divisor nearest 7 (8) in the kept tiles and in every round-T candidate that
    has one, while a β whose extent admits full vectors keeps its own factor."""
    beta_cfg = TileConfig("cpu", ((1, 1, 1, 1), (8, 1, 2, 4), (7, 1, 1, 1), (1, 1, 1, 7)), ((16, 4),))
    beta = LoopNest((1, 64, 7, 7), (64,), ())
    alpha = LoopNest((1, 256, 56, 56), (64,), ())
    space = ReuseSpace("cpu", alpha, beta, beta_cfg, ranges="cpu")
    assert space.free_vector == 8
    kept = space.kept_tiles()
    assert kept.space[-1] == (7, 1, 1, 8) and kept.space[:3] == ((1, 1, 1, 1), (32, 1, 2, 4), (56, 1, 1, 1))
    for cfg in space.t_round():
        per_thread = math.prod(cfg.space[-1][2:])
        assert cfg.space[-1][-1] % 8 == 0 or per_thread % 8, cfg.space
    assert any(cfg.space[-1][-1] == 8 for cfg in space.t_round())
    # α's extent has no full vector (28 columns), or β's had one (56): β's factor is kept
    assert ReuseSpace("cpu", LoopNest((1, 256, 28, 28), (64,), ()), beta, beta_cfg).free_vector == 0
    wide = ReuseSpace("cpu", alpha, LoopNest((1, 64, 56, 56), (64,), ()),
                      TileConfig("cpu", ((1, 1, 1, 1), (8, 1, 2, 4), (56, 1, 1, 1), (8, 1, 1, 7)), ((16, 4),)))
    assert wide.free_vector == 0 and wide.kept_tiles().space[-1] == (8, 1, 1, 7)
    assert ReuseSpace("cuda", alpha, beta, beta_cfg).free_vector == 0


def test_an_inner_tile_beta_s_extent_capped_is_grown_for_alpha():
    """β (7 output columns) could tile them by 7 at most: α with 14 or 28 columns gets a lead with
    14-wide inner tiles (the outer factor takes the rest, every other loop kept), counted by the
    trial estimator; a loop β's tile did not fill, or an α no larger there, gets none."""
    from tuner.reuse.estimate import count_trials

    beta_cfg = TileConfig("cpu", ((1, 1, 1, 1), (8, 1, 2, 4), (7, 1, 1, 1), (1, 1, 1, 7)), ((16, 4),))
    beta = LoopNest((1, 64, 7, 7), (64,), ())
    for w, outer in ((28, 2), (14, 1)):
        space = ReuseSpace("cpu", LoopNest((1, 256, w, w), (64,), ()), beta, beta_cfg, ranges="cpu")
        kept, grown = space.kept_tiles(), space.grown_tiles()
        assert kept.space[-1] == (w // 7, 1, 1, 7) and grown.space[-1] == (outer, 1, 1, 14)
        assert grown.space[:3] == kept.space[:3] and grown.reduction == kept.reduction
        assert [math.prod(f) for f in grown.space] == [1, 256, w, w]
        assert dataclasses.replace(space, beta=LoopNest((1, 64, 7, w), (64,), ())).grown_tiles() is None  # β had room

        class Ungrown(ReuseSpace):
            def grown_tiles(self):
                return None

        ungrown = Ungrown(**{f.name: getattr(space, f.name) for f in dataclasses.fields(ReuseSpace)})
        options = dict(unroll_values=[0, 16, 64, 512], fetch_lanes=[], n_fetch=0)
        assert count_trials(space, **options) == count_trials(ungrown, **options) + 1
    assert ReuseSpace("cpu", beta, beta, beta_cfg).grown_tiles() is None
    # α's 56 columns take a full vector instead (free_vector): that loop is not grown again
    assert ReuseSpace("cpu", LoopNest((1, 256, 56, 56), (64,), ()), beta, beta_cfg).grown_tiles() is None
    assert ReuseSpace("cuda", LoopNest((1, 256, 28, 28), (64,), ()), beta, beta_cfg).grown_tiles() is None


def test_core_region_is_the_box_of_one_core_s_contiguous_chunk_of_blocks():
    """Brute force: cut the row-major block loop into ``cores`` contiguous chunks; where core 0's
    chunk is a box, core_region is that box; where it wraps a row, it still holds as many blocks."""
    import itertools

    from tuner.reuse.cost_model import core_region

    for counts in itertools.product((1, 2, 3, 4, 6), (1, 2, 4, 8), (1, 3, 5)):
        B = math.prod(counts)
        for cores in (1, 2, 4, 8):
            chunk = list(itertools.islice(itertools.product(*map(range, counts)), math.ceil(B / cores)))
            box = tuple(len({idx[d] for idx in chunk}) for d in range(len(counts)))
            region = core_region(counts, (1,) * len(counts), cores)
            if math.prod(box) == len(chunk):
                assert region == box, (counts, cores)
            assert math.prod(region) >= len(chunk), (counts, cores)


def test_cpu_bshape_keeps_a_large_operand_split_between_cores():
    """BERT-Base's feed-forward matmul [128 x 768] x [768 x 3072] on 2 cores with 1 MiB caches:
    64 square-ish blocks split the rows, so each core streams all 9.4 MB of weights; the per-core
    cost keeps the rows whole and gives each core half the weights (activations, 393 KB, fit).
    The paper's count (no cache) still picks the square blocks; a small operator that fits the
    cache on either choice ties, and the tie goes to β's BShape."""
    from tvm.ir import IRModule

    from tuner.reuse.cost_model import bshape_cost
    from tuner.analysis.features import major_block
    from tuner.reuse.space import _best_bshape

    mod = IRModule({"main": Operator.create("BMM", B=1, M=128, N=3072, K=768).prim_func()})
    ff1 = loop_nest_of(mod, major_block(mod))
    assert ff1.space == (1, 128, 3072) and ff1.reduction == (768,)
    cpu = dict(cores=2, cache_bytes=1 << 20)
    whole, split = (1, 128, 48), (1, 64, 96)
    # lines of 64 bytes: all activations (128 x 768 x 4 B) once + half the weights, vs
    # half the activations once + every block's weight columns (32 blocks per core, 768 x 96 x 4 B each)
    assert bshape_cost(ff1, whole, 64, 64, **cpu) == 128 * 768 * 4 // 64 + 768 * 1536 * 4 // 64
    assert bshape_cost(ff1, split, 64, 64, **cpu) == 64 * 768 * 4 // 64 + 32 * 768 * 96 * 4 // 64
    assert _best_bshape("cpu", ff1, 64, split, **cpu) == whole
    assert _best_bshape("cpu", ff1, 64, whole) == split  # the paper's cost
    for B in (8, 32, 256):
        assert _best_bshape("cpu", ff1, B, split, **cpu)[1] == 128
    small = LoopNest((1, 64, 28, 28), (64,), ())  # no inputs: nothing to load, every shape ties
    assert _best_bshape("cpu", small, 8, (1, 16, 14, 28), **cpu) == (1, 16, 14, 28)
    assert target_limits("cpu", cpu_target(num_cores=3))["cores"] == 3
    assert target_limits("cuda", cuda_target())["max_threads"] == 1024


def test_a_target_without_num_cores_gets_the_threads_the_tuners_own_target_gets(monkeypatch):
    # the plan's estimator (no target) and the tuner (cpu_target()) must enumerate one space: both
    # follow TVM_NUM_THREADS, not the logical CPU count
    from eto.target import cpu_target

    for threads in ("1", "3"):
        monkeypatch.setenv("TVM_NUM_THREADS", threads)
        assert target_limits("cpu")["cores"] == int(threads)
        assert target_limits("cpu", cpu_target())["cores"] == int(threads)
    monkeypatch.setenv("TVM_NUM_THREADS", "x")
    with pytest.raises(ValueError, match="TVM_NUM_THREADS"):
        target_limits("cpu")


def test_vector_round_uses_power_of_two_words_up_to_16_bytes(example3):
    assert example3.vector_round([1, 2, 3, 4], 0, 0) == [1, 3]  # float32: 2 and 4 lanes (8, 16 bytes)


# -- CUDA: GetS, VerifyGPUCode, lowered B/T/M, nvcc (no GPU needed) ---------------------------
@pytest.mark.slow
def test_cuda_candidates_verify_and_lower_to_the_intended_btm(tmp_path):
    target = cuda_target("nvidia/nvidia-a100")
    beta = Operator.create("C2D", N=1, CI=128, H=14, W=14, CO=64, KH=1, KW=1)
    alpha = Operator.create("C2D", N=1, CI=64, H=14, W=14, CO=64, KH=1, KW=1)
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target)
    measured = []

    def dry_measure(schedules):  # no GPU here: a surrogate latency, the same in every process
        measured.extend(schedules)
        return [1.0 + zlib.crc32(str(s.trace).encode()) % 1000 / 1000 for s in schedules]

    intended = {}
    schedule = tuner.schedule

    def remember(cand):
        sch = schedule(cand)
        if sch is not None:
            intended[id(sch)] = cand.cfg
        return sch

    tuner.schedule = remember
    res = tuner.tune(dry_measure, strategy="global")
    assert res.candidates == len(measured) > 5
    assert {"T", "unroll"} <= set(res.rounds) and any(k.startswith("vector") for k in res.rounds)
    from tvm.s_tir import meta_schedule as ms

    verify = next(p for p in tuner.postprocs if isinstance(p, ms.postproc.VerifyGPUCode))
    nvcc = shutil.which("nvcc")
    compiled = set()  # (threads, shared bytes) already through nvcc: one candidate of each (nvcc takes seconds)
    for i, sch in enumerate(measured):
        cfg = intended[id(sch)]
        assert verify.apply(sch), f"candidate {i} fails VerifyGPUCode"
        got = lowered_btm(sch.mod, target)
        assert (got.blocks, got.threads_per_block, got.shared_bytes_per_block) == \
            (cfg.B, cfg.threads_per_block, cfg.block_bytes(tuner.alpha)), f"candidate {i}: {cfg}"
        kind = (cfg.threads_per_block, cfg.block_bytes(tuner.alpha))
        if nvcc and kind not in compiled:  # a candidate of each kind compiles, and ptxas agrees on its shared memory
            compiled.add(kind)
            src = tvm.compile(sch.mod, target=target).mod.imports[0].inspect_source()
            cu = tmp_path / f"k{i}.cu"
            cu.write_text(src)
            out = subprocess.run([nvcc, "-cubin", f"-arch={target.attrs['arch']}", "-Xptxas", "-v", "-o", str(tmp_path / f"k{i}.cubin"),
                                  str(cu)], capture_output=True, text=True)
            assert out.returncode == 0, out.stderr
            smem = re.search(r"(\d+) bytes smem", out.stderr)
            assert smem and int(smem.group(1)) == cfg.block_bytes(tuner.alpha)


def test_reuse_condition_1_failure_is_named():
    target = cpu_target()
    beta = Operator.create("C2D", N=1, CI=16, H=8, W=8, CO=16, KH=1, KW=1)
    alpha = Operator.create("BMM", B=2, M=16, N=16, K=16)
    with pytest.raises(ValueError, match="reuse condition 1"):
        ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target)


# -- CPU: every returned program matches numpy -------------------------------------------------
CPU_PAIRS = [
    ("C2D", dict(N=1, CI=32, H=14, W=14, CO=32, KH=3, KW=3, padding=1),
     dict(N=1, CI=64, H=14, W=14, CO=64, KH=3, KW=3, padding=1)),
    ("C1D", dict(N=1, CI=32, L=64, CO=32, K=3, padding=1), dict(N=1, CI=16, L=32, CO=32, K=3, padding=1)),
    ("BMM", dict(B=2, M=64, N=32, K=64), dict(B=4, M=64, N=64, K=64)),
    ("DEP", dict(N=1, C=32, H=28, W=28, KH=3, KW=3, padding=1), dict(N=1, C=64, H=28, W=28, KH=3, KW=3, padding=1)),
]


@pytest.mark.slow
@pytest.mark.parametrize("op_type,alpha,beta", CPU_PAIRS, ids=[p[0] for p in CPU_PAIRS])
def test_cpu_reuse_program_matches_numpy(op_type, alpha, beta):
    from eto.runs.verify import check_record
    from tuner.measure.measurer import MeasureConfig, Measurer

    target = cpu_target()
    a, b = Operator.create(op_type, **alpha), Operator.create(op_type, **beta)
    with Measurer.local(MeasureConfig(number=1, repeat=2, min_repeat_ms=5)) as m:
        # the paper's windows keep this test short; the CPU windows measure about 3x more
        res = reuse_tune(a.prim_func(), sampled_record(b, target), target, m, ReuseOptions(strategy="global", ranges="paper"))
    assert res.record is not None and math.isfinite(res.latency_s)
    assert 0 < res.candidates <= 40 and res.rounds["T"] > 0
    assert res.trajectory[-1].best_s == res.latency_s
    lats = [s for _, s in res.measured]  # what reuse-then-evolve continues from: all that ran, best first
    assert lats == sorted(lats) and lats[0] == res.latency_s and len(lats) == res.candidates - res.failed
    check = check_record(a, res.record, target)
    assert check.ok, f"max abs error {check.max_abs_error}"


# -- the estimator -------------------------------------------------------------------------------
def test_estimator_counts_what_the_tuner_measures():
    """For a known β program, the estimator's count is what the reuse tuner really measures (plus
    what GetS rejects) when the estimator's stand-in for round T's winner, the median candidate,
    does win and no later round improves on it."""
    target = cpu_target()
    beta = Operator.create("C2D", N=1, CI=64, H=14, W=14, CO=64, KH=3, KW=3, padding=1)
    alpha = Operator.create("C2D", N=1, CI=32, H=14, W=14, CO=32, KH=3, KW=3, padding=1)
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target, ranges="paper")
    t_round = tuner.space.t_round()
    winner = t_round[len(t_round) // 2]
    cfg_of, schedule = {}, tuner.schedule

    def remember(cand):
        sch = schedule(cand)
        if sch is not None:
            cfg_of[id(sch)] = cand.cfg
        return sch

    batches = []

    lead = tuner.space.kept_lead() is not None  # β's kept tiles are measured first, on their own

    def dry_measure(schedules):  # round T: the median candidate wins; every later one is slower
        batches.append(len(schedules))
        in_t = len(batches) <= 1 + lead
        return [1.0 if in_t and cfg_of[id(s)] == winner else 2.0 if in_t else 3.0 for s in schedules]

    tuner.schedule = remember
    res = tuner.tune(dry_measure, strategy="global")
    assert res.config == winner and res.rounds["T"] > 1 and len(batches) > 1
    estimated = trials_for_config("cpu", tuner.alpha, tuner.beta, tuner.beta_cfg, strategy="global",
                                  unroll_values=tuner.unroll_values, beta_unroll=tuner.beta_unroll, ranges="paper")
    # the placement round of α's padding (where β computed its own, then elsewhere) is counted by the plan
    # beside this estimate (tuner.reuse.estimate.placement_trials: at most two a padding stage)
    placed = sum(n for name, n in res.rounds.items() if name.startswith("place"))
    assert estimated + placed == res.candidates + res.invalid


def test_estimate_is_reproducible_and_global_measures_less_than_per_b(example3):
    glob, per_b_options = ReuseOptions(strategy="global", top_k=None), ReuseOptions(strategy="per-b", top_k=None)
    e1 = estimate_trials("cpu", example3.alpha, example3.beta, glob, samples=8, seed=3)
    assert e1 == estimate_trials("cpu", example3.alpha, example3.beta, glob, samples=8, seed=3)
    assert e1.samples == 8 and e1.low < e1.high  # the sampled β programs differ
    per_b = estimate_trials("cpu", example3.alpha, example3.beta, per_b_options, samples=8, seed=3)
    with pytest.raises(ValueError, match="resolved top_k"):
        estimate_trials("cpu", example3.alpha, example3.beta, ReuseOptions(), samples=1)
    assert per_b.mean > e1.mean and per_b.low >= e1.low  # rounds after T once per B value vs once


def test_estimate_many_in_worker_processes_gives_the_same_numbers(example3, monkeypatch):
    """A plan's pairs are estimated in subprocesses: same numbers, same order; a worker that dies
    (here: a broken interpreter path) leaves its share to this process."""
    import sys

    import tuner.reuse.estimate as est

    ops = [Operator.create("C2D", N=1, CI=ci, H=14, W=14, CO=co, KH=1, KW=1) for ci, co in ((64, 64), (128, 32), (96, 48))]
    nests = [nest(o) for o in ops] + [example3.alpha, example3.beta]
    pairs = [(a, b) for a in nests for b in nests if a is not b]
    options = ReuseOptions(strategy="global", top_k=None)
    serial = [estimate_trials("cpu", a, b, options, samples=4) for a, b in pairs]
    monkeypatch.setenv("ETO_CACHE_DIR", "off")  # each call estimates, none reads the last one's numbers
    monkeypatch.setattr(est, "PARALLEL_MIN_PAIRS", 2)
    assert est.estimate_many("cpu", pairs, workers=3, options=options, samples=4) == serial
    monkeypatch.setattr(sys, "executable", "/bin/false")
    assert est.estimate_many("cpu", pairs, workers=2, options=options, samples=4) == serial


# -- other sketch types (section 5.2) ------------------------------------------------------------
def test_scaled_tiles_follow_beta_and_the_extent_ratio():
    from tuner.analysis.subsketch import scaled_tiles

    # outer factor between β's (8) and β's scaled by the extent ratio (8 x 4 = 32); inner factor β's
    tiles = scaled_tiles(256, (8, 8))
    assert tiles[0] == (32, 8) and set(tiles) == {(32, 8), (16, 16), (8, 32)}
    assert all(math.prod(t) == 256 and t[-1] <= 64 for t in tiles)
    assert scaled_tiles(100, (8, 2, 4)) == [(10, 5, 2)]  # innermost: largest divisor <= β's 4


SUB_PAIRS = [  # (type, alpha, beta)
    ("FRB", dict(B=1, M=128, N=256), dict(B=1, M=256, N=256)),  # rfactor two-level tile, no MLT
    ("WIN", dict(N=1, CI=32, H=14, W=14, CO=32), dict(N=1, CI=64, H=14, W=14, CO=64)),  # composite
]


@pytest.mark.slow
@pytest.mark.parametrize("op_type,alpha,beta", SUB_PAIRS, ids=[p[0] for p in SUB_PAIRS])
def test_cpu_other_sketches_match_numpy(op_type, alpha, beta):
    from eto.runs.verify import check_record
    from tuner.measure.measurer import MeasureConfig, Measurer

    target = cpu_target()
    a, b = Operator.create(op_type, **alpha), Operator.create(op_type, **beta)
    # β's sketch: the first of its design space with sub-sketch tiles (rfactor / transforms); the
    # order of MetaSchedule's design space depends on the CPU, so it is searched, not indexed
    for index in range(8):
        try:
            tuner = ReuseTuner(a.prim_func(), sampled_record(b, target, index), target)
        except IndexError:
            pytest.fail("no design-space sketch of β has sub-sketch tiles (rfactor / transforms)")
        if any(s.kind == "tile" for s in tuner.sub.slots):
            break
    else:
        pytest.fail("no design-space sketch of β has sub-sketch tiles (rfactor / transforms)")
    assert tuner.has_mlt == (op_type == "WIN")
    # a ranked few per round (an untrained ranker: seeded random order), as the pipeline measures
    with Measurer.local(MeasureConfig(number=1, repeat=2, min_repeat_ms=5)) as m:
        res = tuner.tune(lambda scheds: [r.median for r in m.measure([s.mod for s in scheds], target)],
                         strategy="global", ranker=LearnedRanker(target))
    assert res.record is not None and math.isfinite(res.latency_s)
    assert ("transfer" in res.rounds) == (op_type == "FRB")
    assert sum(res.rounds.values()) == res.candidates
    check = check_record(a, res.record, target)
    assert check.ok, f"max abs error {check.max_abs_error}"


@pytest.mark.slow
def test_cuda_cross_thread_reduction_candidates_verify():
    target = cuda_target("nvidia/nvidia-a100")
    a = Operator.create("FRB", B=1, M=128, N=256)
    b = Operator.create("FRB", B=1, M=256, N=256)
    from tvm.s_tir import meta_schedule as ms

    tuner = None
    for index in range(4):  # the cross-thread reduction sketch: a categorical thread count, no MLT
        try:
            rec = sampled_record(b, target, index)
        except IndexError:
            break
        t = ReuseTuner(a.prim_func(), rec, target)
        if any(s.kind == "categorical" for s in t.sub.slots):
            tuner = t
            break
    assert tuner is not None, "MetaSchedule's CUDA design space of FRB has a cross-thread reduction sketch"
    measured = []
    res = tuner.tune(lambda scheds: measured.extend(scheds) or [1.0 + i for i in range(len(scheds))],
                     strategy="global")
    assert res.candidates == len(measured) >= 2
    verify = next(p for p in tuner.postprocs if isinstance(p, ms.postproc.VerifyGPUCode))
    for sch in measured:
        assert verify.apply(sch)
        tvm.compile(sch.mod, target=target)  # lowers and generates CUDA


def test_mutated_parallel_extent_keeps_the_sketch_and_getS_takes_betas():
    """MetaSchedule's MutateParallel changes an annotation's value, not the sketch: a β program
    whose parallel extent was mutated still meets reuse condition 1, and α's candidates keep β's value."""
    from tvm.ir import IRModule
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.schedule import Trace

    from tuner.analysis.sketch import Sketch, plain

    target = cpu_target()
    a, b = Operator.create("BMM", B=1, M=32, N=32, K=64), Operator.create("BMM", B=1, M=32, N=32, K=128)
    rec = sampled_record(b, target)
    insts, decisions = plain(rec.trace.as_json())
    parallel = [inst for inst in insts if inst[0] == "Annotate" and inst[2] == ["meta_schedule.parallel"]]
    assert len(parallel) == 1 and parallel[0][1][1] != 7
    parallel[0][1][1] = 7
    sch = Schedule(IRModule({"main": b.prim_func()}))
    Trace.apply_json_to_schedule([insts, decisions], sch)
    mutated = TuningRecord(sch.trace, rec.workload, [1e-3], target, rec.args_info)
    assert Sketch(mutated.trace).signature == Sketch(rec.trace).signature
    tuner = ReuseTuner(a.prim_func(), mutated, target)
    assert [i[1][1] for i in tuner.sketch.insts if i[0] == "Annotate" and i[2] == ["meta_schedule.parallel"]] == [7]
    cand = tuner.schedule(tuner._cand(tuner.space.t_round()[0]))
    insts, _ = plain(cand.trace.as_json())
    assert [i[1][1] for i in insts if i[0] == "Annotate" and i[2] == ["meta_schedule.parallel"]] == [7]


@pytest.mark.slow  # builds the candidates
def test_a_padding_stage_beta_lacks_is_placed_at_the_root_then_tried_inlined():
    """α is padded, β (like a bridge) is not: β says nothing about where α's padding is computed.
    GetS computes it at the root by default (no bounds checks in the main loop nest), and one
    round tries it inlined and where α's design space sampled it; the programs stay correct."""
    from eto.runs.verify import check_record
    from tuner.analysis.subsketch import INLINE, ROOT

    target = cpu_target()
    alpha = Operator.create("C2D", N=1, CI=3, H=16, W=16, CO=8, KH=3, KW=3, padding=1)
    beta = Operator.create("C2D", N=1, CI=3, H=9, W=9, CO=8, KH=3, KW=3)
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target)
    places = [s for s in tuner.sub.slots if s.kind == "place"]
    assert len(places) == 1 and places[0].default() == ROOT
    assert INLINE in places[0].alternatives(ROOT) and ROOT not in places[0].alternatives(ROOT)
    assert any(name.startswith("place") for name, _ in tuner.sub.rounds())
    cand = tuner._cand(tuner.space.kept_tiles())
    sch = tuner.schedule(cand)
    assert sch is not None and cand.extra[places[0].inst] == ROOT
    inlined = tuner.schedule(cand.but(extra={**cand.extra, places[0].inst: INLINE}))
    assert inlined is not None
    for s in (sch, inlined):
        check = check_record(alpha, tuner.record_of(s, 1e-3), target)
        assert check.ok, check
    # an unpadded α reusing an unpadded β has nothing to place
    unpadded = Operator.create("C2D", N=1, CI=3, H=16, W=16, CO=8, KH=3, KW=3)
    plain = ReuseTuner(unpadded.prim_func(), sampled_record(beta, target), target)
    assert not [s for s in plain.sub.slots if s.kind == "place"]
    # the plan's estimate counts the placement round (two candidates) where α has padding to place
    from tvm.ir import IRModule

    from tuner.reuse.estimate import placement_trials
    from tuner.analysis.features import producer_count

    pa, pb = (producer_count(IRModule({"main": op.prim_func()})) for op in (alpha, unpadded))
    assert (pa, pb) == (1, 0)
    assert placement_trials(pa) == 2 >= len(places[0].alternatives(ROOT)) and placement_trials(pb) == 0


def test_alternate_sources_lead_round_t_with_their_tiles_kept_on_alpha():
    """Another operator's program (not β) gives α a lead candidate: its tile factors kept on α's
    loops. The search measures it in its first batch; a program of another tiling structure gives none."""
    from tuner.analysis.features import program_features
    from tuner.reuse.search import _kept_from

    target = cpu_target()
    alpha = Operator.create("C2D", N=1, CI=16, H=16, W=16, CO=32, KH=1, KW=1)
    beta = Operator.create("C2D", N=1, CI=8, H=8, W=8, CO=16, KH=1, KW=1)
    other = Operator.create("C2D", N=1, CI=16, H=8, W=8, CO=32, KH=1, KW=1)
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target)
    rec = sampled_record(other, target, index=0)
    cfg, other_nest = program_features(rec, "cpu")
    kept = _kept_from(rec, tuner)
    assert kept == ReuseSpace("cpu", tuner.alpha, other_nest, cfg).kept_tiles() and tuner._fits(kept)
    dense = Operator.create("DENSE", M=16, N=32, K=16)
    assert _kept_from(sampled_record(dense, target), tuner) is None

    class FirstBatch(StandInMeasurer):  # a measurer that keeps the first batch and times nothing
        first: list = []

        def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
            if not self.first:
                self.first.extend(mods)
            return [MeasureResult((1e-3 + i * 1e-6,)) for i in range(len(mods))]

    m = FirstBatch()
    res = reuse_tune(alpha.prim_func(), sampled_record(beta, target), target, m, ReuseOptions(top_k=None), alternates=[rec])
    assert res.candidates > 0
    lead = tuner.schedule(tuner._cand(kept)).mod
    from tvm_ffi import structural_equal

    from tuner.reuse.leads import lead_tiles

    first = len(lead_tiles(tuner.space)) + 1  # after β's own kept tiles and their variants
    assert any(structural_equal(lead, mod) for mod in m.first[:first])


# -- reuse across epilogues and ranks (fused tasks of a model) -------------------------------------
def _dense_bias_relu(m: int, n: int, k: int):
    """A fused task as Relax compiles ``relu(x @ w + b)``: a 2-D ``matmul`` block and its
    element-wise consumers (MetaSchedule writes the tile back through them, not a cache)."""
    from tvm import te

    x = te.placeholder((m, k), "float32", name="X")
    w = te.placeholder((k, n), "float32", name="W")
    b = te.placeholder((n,), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    mm = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[r, j], axis=r), name="matmul")
    add = te.compute((m, n), lambda i, j: mm[i, j] + b[j], name="T_add")
    out = te.compute((m, n), lambda i, j: te.max(add[i, j], te.const(0, "float32")), name="compute")
    return te.create_prim_func([x, w, b, out])


@pytest.mark.slow  # builds the program
@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_program_with_an_epilogue_is_reused_for_a_bare_batch_matmul_of_another_rank(index):
    """β: a 3-loop ``matmul+add+relu`` program (its epilogue is the write stage); α: a 4-loop batch
    matmul (a cache write). Their sketch signatures differ; their families match, GetS replays α's
    own sketch with β's tiles (a unit batch loop added) and the program matches numpy."""
    from tvm.ir import IRModule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from eto.runs.verify import check_record
    from tuner.analysis.sketch import Sketch

    target = cpu_target()
    beta_mod = IRModule({"main": _dense_bias_relu(32, 64, 48)})
    ctx = ms.TuneContext(mod=beta_mod, target=target, space_generator="post-order-apply",
                         search_strategy="replay-trace", task_name="beta", num_threads=1, rand_state=7)
    sch = ctx.generate_design_space()[index]
    record = TuningRecord(sch.trace, Workload(beta_mod), [1e-3], target, ArgInfo.from_prim_func(beta_mod["main"]))
    alpha = Operator.create("BMM", B=3, M=32, N=64, K=48)
    tuner = ReuseTuner(alpha.prim_func(), record, target)
    beta = Sketch(record.trace)
    assert tuner.sketch.signature != beta.signature and tuner.sketch.family == beta.family
    assert tuner.beta.space == (1, 32, 64) and tuner.beta_cfg.space[0] == (1, 1, 1, 1)
    kept = tuner.space.kept_tiles()
    assert kept.space[0][0] == 3 and kept.space[1:] == tuple(
        tuple(f) for f in beta.tile_decisions()[0])  # β's tiles on α's M and N, the batch outermost

    class Fake(StandInMeasurer):  # times nothing: this test is about GetS, not speed
        def measure(self, mods, target, screen=False, search=False, spread=False, build_cap=None):
            return [MeasureResult((1e-3 + i * 1e-6,)) for i in range(len(mods))]

    res = reuse_tune(alpha.prim_func(), record, target, Fake(), ReuseOptions(top_k=None))
    assert res.record is not None and res.candidates > 0
    check = check_record(alpha, res.record, target)
    assert check.ok, f"max abs error {check.max_abs_error}"


def test_align_loops_adds_unit_loops_drops_extra_ones_and_refuses_other_reductions():
    """β's tiles on α's loop ranks: space loops pair from the innermost; a loop β lacks is a unit
    loop of β (its bytes unchanged), one α lacks is dropped; other reduction loops: no alignment."""
    from tuner.analysis.features import Access, align_loops

    dense = LoopNest((32, 64), (48,), (Access("X", (32, 48), ((1, 0, 0), (0, 0, 1))),
                                      Access("W", (48, 64), ((0, 0, 1), (0, 1, 0)))))
    cfg = TileConfig("cpu", ((2, 4, 1, 4), (1, 2, 4, 8)), ((6, 8),))
    bmm = LoopNest((3, 32, 64), (48,), ())
    nest3, cfg3 = align_loops(dense, cfg, bmm)
    assert nest3.space == (1, 32, 64) and cfg3.space == ((1, 1, 1, 1),) + cfg.space
    assert cfg3.block_bytes(nest3) == cfg.block_bytes(dense) and cfg3.B == cfg.B
    back, cfg2 = align_loops(nest3, cfg3, dense)
    assert back == dense and cfg2 == cfg
    assert align_loops(dense, cfg, LoopNest((32, 64), (3, 3, 48), ())) is None


def test_runner_ups_bring_betas_other_inner_tiles_and_round_m_keeps_the_winners(tmp_path):
    """β's measured programs within 1.5x of its best with inner tiles other than the best's (and each
    other's) lead round T; round M then varies the winner's reduction tiles, not β's inner tiles."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.ir import IRModule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from eto.store.database import Database
    from eto.planning.lead_sources import runner_ups
    from tuner.analysis.features import program_features
    from tuner.reuse.search import _kept_from

    target = cpu_target()
    beta = Operator.create("BMM", B=1, M=32, N=64, K=32)
    mod = IRModule({"main": beta.prim_func()})
    records, seen = [], set()
    for state in range(40):  # design-space samples with distinct inner tiles stand in for a backend run
        ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             search_strategy="replay-trace", task_name="beta", num_threads=1, rand_state=state)
        trace = ctx.generate_design_space()[0].trace
        cfg, _ = program_features(TuningRecord(trace, Workload(mod), [1.0], target, ArgInfo.from_prim_func(mod["main"])),
                                  "cpu")
        inner = tuple(f[-1] for f in cfg.space)
        if inner not in seen:
            seen.add(inner)
            records.append((trace, inner))
        if len(records) == 4:
            break
    assert len(records) == 4
    # the best (1.0 ms), one with the best's inner tiles again, two others at 1.2 and 1.4 ms, one at 2 ms
    times = [1e-3, 1.2e-3, 1.4e-3, 2e-3]
    recs = [TuningRecord(t, Workload(mod), [s], target, ArgInfo.from_prim_func(mod["main"]))
            for (t, _), s in zip(records, times)]
    same = TuningRecord(records[0][0], Workload(mod), [1.1e-3], target, ArgInfo.from_prim_func(mod["main"]))
    db = Database(tmp_path / "db")
    db.commit(beta, target, recs + [same], method="backend", candidates=5, seconds=1.0)
    best = db.best(beta, target)
    def inner(recs):
        return [tuple(f[-1] for f in program_features(r, "cpu")[0].space) for r in recs]

    ups = [p.tuning_record for p in runner_ups(beta, best, db, target)]
    assert inner(ups) == [records[1][1], records[2][1]]  # fastest first; the best's tiles and the 2 ms one left out
    assert inner([p.tuning_record for p in runner_ups(beta, best, db, target, ratio=1.3)]) == [records[1][1]]
    from tuner.analysis.sketch import Sketch  # runner_ups reads the stored traces, not TVM's replay of them

    for p in db.programs(op=beta):
        assert Sketch.from_json(p.stored_trace).tile_decisions() == Sketch(p.tuning_record.trace).tile_decisions()
    with pytest.raises(ValueError, match="not a stored trace"):
        Sketch.from_json([["GetSBlock"]])

    alpha = Operator.create("BMM", B=1, M=64, N=256, K=128)
    tuner = ReuseTuner(alpha.prim_func(), best.tuning_record, target)
    lead = _kept_from(ups[0], tuner)
    assert [f[-1] for f in lead.space] == list(records[1][1]) != [f[-1] for f in tuner.beta_cfg.space]
    m_round = tuner.space.m_round(lead)
    assert m_round and all([f[-1] for f in cfg.space] == list(records[1][1]) for cfg in m_round)

    # the plan counts these seeds as the pipeline will hand them over (eto.planning.lead_sources.LeadCount)
    from eto.store.database import PREDICTED
    from eto.planning.lead_sources import ALTERNATE_SOURCES, RUNNER_UPS, LeadCount

    peers = [Operator.create("BMM", B=1, M=m, N=256, K=128) for m in (16, 32, 128)]
    unit = Operator.create("BMM", B=1, M=1, N=256, K=128)  # a loop of extent 1: never an alternate source
    assert len({op.sketch_key() for op in [alpha, beta, *peers]}) == 1
    count = LeadCount(db, target, [alpha, *peers, unit])
    assert count(alpha, beta) == ALTERNATE_SOURCES + 2  # three peers besides α and β, capped; β's 2 runner-ups
    assert count(unit, beta) == 2  # no alternates: nothing shares its unit loop
    assert count(alpha, peers[0]) == ALTERNATE_SOURCES + RUNNER_UPS  # an untuned β: the runner-ups expected
    assert LeadCount(db, target, [unit])(unit, beta) == 2 and LeadCount(None, None)(alpha, beta) == RUNNER_UPS
    def commit_one(op, method):  # one design-space program as op's result
        omod = IRModule({"main": op.prim_func()})
        ctx = ms.TuneContext(mod=omod, target=target, space_generator="post-order-apply",
                             search_strategy="replay-trace", task_name="op", num_threads=1, rand_state=0)
        db.commit(op, target, [TuningRecord(ctx.generate_design_space()[0].trace, Workload(omod), [1e-3], target,
                                            ArgInfo.from_prim_func(omod["main"]))],
                  method=method, candidates=1, seconds=0.0)

    commit_one(alpha, PREDICTED)
    assert LeadCount(db, target, [alpha, *peers])(alpha, beta) == 1 + ALTERNATE_SOURCES + 2  # α's instant program

    # once the peers are tuned, the records the pipeline hands the reuse tuner are the ones the plan counts
    from eto.planning.lead_sources import leads

    for op in peers[:2]:
        commit_one(op, "backend")
    seeds, alternates = leads(alpha, beta, best, db, target)
    assert (len(seeds), len(alternates)) == (1, ALTERNATE_SOURCES + 2)
    assert LeadCount(db, target)(alpha, beta) == len(seeds) + len(alternates)
