"""Lead "register block": the innermost tiles a register model prefers, moved onto β's kept tiles."""

import dataclasses
import itertools
import math

import pytest

from eto.operators import Operator
from eto.target import cpu_target
from tuner.analysis.features import TileConfig
from tuner.reuse.registers import best_register_block, covering_unroll, long_chunk, register_cost, register_tiles
from tuner.analysis.tiling import vector_extent
from tuner.analysis.tiling import divisors

tvm = pytest.importorskip("tvm")


def nest(op: Operator):
    return nest_of_func(op.prim_func())


def nest_of_func(func):
    from tvm.ir import IRModule

    from tuner.analysis.features import loop_nest_of, major_block

    mod = IRModule({"main": func})
    return loop_nest_of(mod, major_block(mod))


def lead_space(alpha: Operator, beta: Operator, kept: TileConfig):
    """A reuse tuner of α from a sampled β program, and its space with β's tiles set to ``kept``
    (16 lanes, 32 vector registers, 2 cores: an AVX-512 machine, whatever this host is)."""
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import ReuseTuner

    target = cpu_target()
    func = alpha.prim_func() if isinstance(alpha, Operator) else alpha
    tuner = ReuseTuner(func, sampled_record(beta, target), target)
    return tuner, dataclasses.replace(tuner.space, beta_cfg=kept, native_lanes=16, cores=2, registers=32)


#: ResNet-50's C2D[1,512,7,7,2048,1,1]: 2,048 input channels, 512 output channels, 7 x 7 outputs
X = Operator.create("C2D", N=1, CI=2048, H=7, W=7, CO=512, KH=1, KW=1)


def test_the_vector_is_the_innermost_tiles_fused_while_each_covers_its_loop():
    assert vector_extent((1, 512, 7, 7), (1, 4, 7, 7)) == 49  # MetaSchedule's T.vectorized(49)
    assert vector_extent((1, 512, 7, 7), (1, 8, 1, 7)) == 7  # rows of 1 do not continue the vector
    assert vector_extent((1, 512, 7, 7), (1, 2, 7, 7)) == 49  # 98 > 64: the channels stay rows
    assert vector_extent((1, 64, 56, 56), (1, 1, 2, 8)) == 8  # 8 of 56 columns: the vector ends there
    assert vector_extent((4, 4), (4, 4)) == 16


def test_the_model_prefers_metaschedules_block_of_x_to_the_reuses_and_counts_loads_by_layout():
    alpha = nest(X)
    # the reuse (8 channels x 7 columns: 9 loads, 8 multiply-adds of 7 lanes) against MetaSchedule's
    # (4 channels x 49: 4 broadcasts + 4 vector loads, 16 multiply-adds): README / tuner/reuse/registers.py
    assert register_cost(alpha, (1, 8, 1, 7), 16) == pytest.approx(4.5 / 56)
    assert register_cost(alpha, (1, 4, 7, 7), 16) == pytest.approx(8 / 196)
    assert best_register_block(alpha, 16, 32) == (1, 4, 7, 7)
    # the best over every block of divisors, brute force: nothing cheaper fits 28 accumulators
    blocks = [b for b in itertools.product(*(divisors(e) for e in alpha.space))
              if math.prod(b) // vector_extent(alpha.space, b) * math.ceil(vector_extent(alpha.space, b) / 16) <= 28]
    assert min(register_cost(alpha, b, 16) for b in blocks) == register_cost(alpha, (1, 4, 7, 7), 16)
    # with 16 registers (AVX2, 8 lanes) the 49-wide vector needs 7 per channel: one channel row, or
    # fewer rows: the block must fit 12 accumulators
    small = best_register_block(alpha, 8, 16)
    v = vector_extent(alpha.space, small)
    assert math.prod(small) // v * math.ceil(v / 8) <= 12
    # a stride-2 input is gathered, not loaded as a vector: columns cost one load each
    strided = nest(Operator.create("C2D", N=1, CI=1024, H=14, W=14, CO=2048, KH=1, KW=1, stride=2))
    assert register_cost(strided, (1, 4, 7, 7), 16) > register_cost(alpha, (1, 4, 7, 7), 16) * 2


def test_the_lead_moves_the_block_onto_betas_kept_tiles_and_keeps_every_loops_extent():
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import ReuseTuner

    target = cpu_target()
    beta = Operator.create("C2D", N=1, CI=1024, H=14, W=14, CO=512, KH=1, KW=1, stride=2)
    tuner = ReuseTuner(X.prim_func(), sampled_record(beta, target), target)
    # β as the set benchmark's reuse found it: 8 channels x 7 columns, the rows in the parallel loop
    kept = TileConfig("cpu", ((1, 1, 1, 1), (16, 2, 2, 8), (7, 1, 1, 1), (1, 1, 1, 7)), ((128, 16), (1, 1), (1, 1)))
    space = dataclasses.replace(tuner.space, beta_cfg=kept, native_lanes=16, cores=2, registers=32)
    assert space.kept_tiles().space == kept.space
    lead = register_tiles(space)
    assert lead is not None and tuple(f[-1] for f in lead.space) == (1, 4, 7, 7)
    assert lead.space == ((1, 1, 1, 1), (16, 2, 4, 4), (1, 1, 1, 7), (1, 1, 1, 7))  # 4 channels: 2 more at level 2
    assert lead.reduction == ((64, 32), (1, 1), (1, 1))  # 16 steps grown to 32
    assert all(math.prod(f) == e for f, e in zip(lead.space, tuner.alpha.space))
    # β's kept block already the model's: no lead; none off CPU or without vectors
    best = TileConfig("cpu", lead.space, kept.reduction)
    assert register_tiles(dataclasses.replace(space, beta_cfg=best)) is None
    assert register_tiles(dataclasses.replace(space, native_lanes=0)) is None
    # too few parallel blocks left for the cores: no lead
    assert register_tiles(dataclasses.replace(space, cores=16)) is None
    # β's vector fills half a register or more: no lead (7 of AVX2's 8 lanes; 49 fused of 16)
    assert register_tiles(dataclasses.replace(space, native_lanes=8)) is None
    whole = TileConfig("cpu", ((1, 1, 1, 1), (16, 2, 2, 8), (1, 1, 1, 7), (1, 1, 1, 7)), kept.reduction)
    assert register_tiles(dataclasses.replace(space, beta_cfg=whole)) is None


def test_no_register_lead_where_a_row_fills_a_vector_register():
    """56-wide rows: a 4-lane vector of β is widened along the row by the vector lead; the register
    lead (rows fused) only paid compile time there."""
    alpha = Operator.create("C2D", N=1, CI=64, H=56, W=56, CO=256, KH=1, KW=1)
    beta = Operator.create("C2D", N=1, CI=128, H=56, W=56, CO=256, KH=1, KW=1)
    kept = TileConfig("cpu", ((1, 1, 1, 1), (16, 2, 2, 4), (7, 2, 4, 1), (1, 1, 14, 4)), ((32, 4), (1, 1), (1, 1)))
    tuner, space = lead_space(alpha, beta, kept)
    assert vector_extent(tuner.alpha.space, tuple(f[-1] for f in space.kept_tiles().space)) == 4
    assert register_tiles(space) is None


def test_a_register_lead_where_betas_block_is_too_small_to_fill_the_multiply_add_ports():
    """Long rows, but β's block holds fewer accumulators than PORTS x FMA_LATENCY: the BERT layer's
    feed-forward matmuls reused from a root with one row of four vectors (README, "Register blocks of
    a latency-bound root"); not where the vector gathers the weights (the catalogue's BMM)."""
    from tests.tuner.test_reuse_tuner import layer_matmul
    from tuner.reuse.registers import FMA_LATENCY, PORTS, latency_bound
    from tuner.analysis.tiling import accumulators

    alpha, beta = layer_matmul(1, 128, 3072, 768), layer_matmul(1, 128, 768, 768)
    one_row = TileConfig("cpu", ((1, 1, 1, 1), (1, 32, 4, 1), (16, 3, 1, 64)), ((96, 8),))
    tuner, space = lead_space(alpha, beta, one_row)
    inner = tuple(f[-1] for f in space.kept_tiles().space)
    assert latency_bound(tuner.alpha.space, inner, 16)  # 4 accumulators < 2 ports x 4 cycles
    lead = register_tiles(space)
    assert lead is not None and all(math.prod(f) == e for f, e in zip(lead.space, tuner.alpha.space))
    block = tuple(f[-1] for f in lead.space)
    assert PORTS * FMA_LATENCY <= accumulators(tuner.alpha.space, block, 16) <= 32 - 4
    assert register_cost(tuner.alpha, block, 16) <= register_cost(tuner.alpha, inner, 16) / 2
    # β's vector of 64 kept, four rows added from the parallel level; level 2 and 32 steps kept
    assert lead.space == ((1, 1, 1, 1), (1, 8, 4, 4), (16, 3, 1, 64)) and lead.reduction == ((24, 32),)
    # four rows of four vectors (the root's other runs): 16 accumulators fill the ports, no lead
    four_rows = TileConfig("cpu", ((1, 1, 1, 1), (1, 1, 32, 4), (8, 3, 2, 64)), ((16, 48),))
    _, space = lead_space(alpha, beta, four_rows)
    assert not latency_bound(tuner.alpha.space, tuple(f[-1] for f in space.kept_tiles().space), 16)
    assert register_tiles(space) is None
    # the same block over Y[b,j,k]: latency-bound too, but its vector gathers Y, so no lead
    bmm, gathered = lead_space(Operator.create("BMM", B=1, M=128, N=3072, K=768),
                               Operator.create("BMM", B=1, M=128, N=768, K=768), one_row)
    assert bmm.alpha.gathered(2) and not tuner.alpha.gathered(2) and not bmm.alpha.gathered(3)  # along k: contiguous
    assert latency_bound(bmm.alpha.space, inner, 16) and register_tiles(gathered) is None


@pytest.mark.slow  # builds the program
def test_a_register_lead_builds_and_matches_numpy():
    """The lead is a real program of α: β's sketch replayed with its tiles, checked against numpy."""
    from eto.runs.verify import check_record
    from tuner.reuse.leads import lead_tiles

    target = cpu_target()
    alpha = Operator.create("C2D", N=1, CI=64, H=7, W=7, CO=64, KH=1, KW=1)
    beta = Operator.create("C2D", N=1, CI=32, H=7, W=7, CO=64, KH=1, KW=1)
    kept = TileConfig("cpu", ((1, 1, 1, 1), (4, 2, 1, 8), (7, 1, 1, 1), (1, 1, 1, 7)), ((4, 8), (1, 1), (1, 1)))
    tuner, space = lead_space(alpha, beta, kept)
    lead = register_tiles(space)
    assert lead is not None and lead in lead_tiles(space)  # 8 parallel blocks left for 2 cores
    assert vector_extent(tuner.alpha.space, tuple(f[-1] for f in lead.space)) == 49
    sch = tuner.schedule(tuner._cand(lead))
    assert sch is not None
    assert check_record(alpha, tuner.record_of(sch, 1e-3), target).ok


def test_the_lead_gives_the_innermost_reduction_loop_at_least_16_steps():
    """The accumulators are loaded and stored once per sweep of the innermost reduction loop: the
    reuse of X kept a chunk of 4 input channels, MetaSchedule's program 32."""
    assert long_chunk((2048, 1, 1), ((512, 4), (1, 1), (1, 1))) == ((64, 32), (1, 1), (1, 1))
    assert long_chunk((2048, 1, 1), ((32, 64), (1, 1), (1, 1))) == ((32, 64), (1, 1), (1, 1))  # long enough
    assert long_chunk((64, 3, 3), ((32, 2), (3, 1), (1, 3))) == ((4, 16), (3, 1), (1, 3))  # 16 x 3 steps
    assert long_chunk((7,), ((7, 1),)) == ((1, 7),)  # a short loop: all of it
    alpha = nest(X)
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import ReuseTuner

    beta = Operator.create("C2D", N=1, CI=1024, H=14, W=14, CO=512, KH=1, KW=1, stride=2)
    tuner = ReuseTuner(X.prim_func(), sampled_record(beta, cpu_target()), cpu_target())
    kept = TileConfig("cpu", ((1, 1, 1, 1), (16, 2, 1, 16), (7, 1, 1, 1), (1, 1, 1, 7)), ((256, 4), (1, 1), (1, 1)))
    space = dataclasses.replace(tuner.space, beta_cfg=kept, native_lanes=16, cores=2, registers=32)
    lead = register_tiles(space)
    assert lead.reduction[0][1] >= 32 and math.prod(lead.reduction[0]) == alpha.reduction[0]
    # measured with the unroll limit that covers 4 rows x 32 steps: 512 of MetaSchedule's options
    assert covering_unroll(lead, alpha.space, [0, 16, 64, 512]) == 3
    assert covering_unroll(lead, alpha.space, [0, 16]) == 1 and covering_unroll(lead, alpha.space, []) is None


def test_unrolled_gathers_count_what_tvm_unrolls_and_cap_the_unroll_limit():
    """BMM reads Y[b,j,k] along its vector j: each vector of Y is gathered lane by lane, and an unroll
    limit that covers rows x steps puts all of those gathers into one body (on BERT-Base: LLVM took
    13 s on the first program below, which ran 4x slower than its reuse's best; the count matched
    the lowered code of 489 logged candidates exactly)."""
    from tests.tuner.test_reuse_tuner import layer_matmul
    from tuner.analysis.gathers import MAX_UNROLLED_GATHERS, bounded_unroll, unrolled_gathers

    ffn = nest(Operator.create("BMM", B=1, M=128, N=3072, K=768))
    # 4 rows x one 64-lane vector, a 32-step chunk: 512 unrolls rows x steps (128), 64 only the rows
    cfg = TileConfig("cpu", ((1, 1, 1, 1), (1, 1, 32, 4), (48, 1, 1, 64)), ((24, 32),))
    assert unrolled_gathers(ffn, cfg, 512) == 4 * 32 * 64 and unrolled_gathers(ffn, cfg, 64) == 4 * 64
    assert unrolled_gathers(ffn, cfg, 0) == 64  # nothing unrolled: one gather per body
    options = [0, 16, 64, 512]
    assert bounded_unroll(ffn, cfg, options, 3) == 2 and bounded_unroll(ffn, cfg, options, 1) == 1
    # all the rows of a head (64 x 2 tiles x 4 steps = 512 iterations) under a limit of 512
    head = nest(Operator.create("BMM", B=12, M=128, N=64, K=64))
    whole = TileConfig("cpu", ((12, 1, 1, 1), (2, 1, 64, 1), (2, 1, 2, 16)), ((16, 4),))
    assert unrolled_gathers(head, whole, 512) == 512 * 16 > MAX_UNROLLED_GATHERS
    assert unrolled_gathers(head, whole, 64) == 8 * 16  # the limit stops below the rows
    # a layer's weights W[k,j] are contiguous along j: nothing gathered, any limit
    layer = nest_of_func(layer_matmul(1, 128, 3072, 768))
    assert unrolled_gathers(layer, cfg, 512) == 0 and bounded_unroll(layer, cfg, options, 3) == 3


def test_the_unroll_round_and_every_candidate_keep_gathers_within_the_cap():
    """Round "unroll" does not try a limit over the cap, and GetS lowers any other candidate's
    (β's limit on α's tiles) to the largest option within it."""
    from tuner.analysis.gathers import MAX_UNROLLED_GATHERS, unrolled_gathers

    alpha, beta = Operator.create("BMM", B=1, M=128, N=3072, K=768), Operator.create("BMM", B=1, M=128, N=768, K=768)
    cfg = TileConfig("cpu", ((1, 1, 1, 1), (1, 1, 32, 4), (48, 1, 1, 64)), ((24, 32),))
    tuner, space = lead_space(alpha, beta, cfg)
    options = tuner.unroll_values
    assert options and max(options) >= 512
    tried = space.unroll_round(cfg, options, None)
    assert tried and all(unrolled_gathers(tuner.alpha, cfg, options[i]) <= MAX_UNROLLED_GATHERS for i in tried)
    assert options.index(max(options)) not in tried
    cand = tuner._cand(cfg, unroll=options.index(max(options)))
    sch = tuner.schedule(cand)
    assert sch is not None and unrolled_gathers(tuner.alpha, cfg, options[cand.unroll]) <= MAX_UNROLLED_GATHERS
    assert '"pragma_auto_unroll_max_step": 512' not in sch.mod.script()


def test_a_prepacked_weight_is_read_contiguously_so_a_latency_bound_nhwc_block_gets_a_register_lead():
    """A channels-last convolution vectorises over the output channels, along which the OHWI weight is
    strided as stored; in a model the weight is layout-free (``layout_free_buffers``) and repacked for
    the tiles at build time (eto.models.prepack), so the vector reads it contiguously: no gather, and a
    block of 2 accumulators (ResNet-50's 64-to-256 expansion on AVX2) gets rows added."""
    from tuner.analysis.tiling import accumulators
    from tuner.reuse.registers import FMA_LATENCY, PORTS

    alpha = Operator.create("C2DNHWC", N=1, CI=64, H=56, W=56, CO=256, KH=1, KW=1)
    beta = Operator.create("C2DNHWC", N=1, CI=128, H=56, W=56, CO=256, KH=1, KW=1)
    packed = alpha.prim_func().with_attr("layout_free_buffers", [1])
    as_stored, repacked = nest(alpha), nest_of_func(packed)
    assert [a.packed for a in repacked.inputs] == [False, True] and not any(a.packed for a in as_stored.inputs)
    assert as_stored.gathered(3) and not repacked.gathered(3)  # along the output channels
    assert as_stored.inputs[1].strides()[3] == 64 and repacked.inputs[1].strides()[3] == 1
    assert repacked.inputs[0].strides() == as_stored.inputs[0].strides()  # the activations stay as they are
    small = TileConfig("cpu", ((1, 1, 1, 1), (7, 1, 8, 1), (1, 4, 7, 2), (1, 4, 4, 16)), ((1, 1), (1, 1), (16, 4)))
    _, stored = lead_space(alpha, beta, small)
    assert register_tiles(stored) is None  # a vector that gathers the weight: no lead (the BMM case)
    tuner, space = lead_space(packed, beta, small)
    lead = register_tiles(space)
    assert lead is not None and all(math.prod(f) == e for f, e in zip(lead.space, tuner.alpha.space))
    block = tuple(f[-1] for f in lead.space)
    assert lead.space[3][-1] == 16  # the vector kept
    assert PORTS * FMA_LATENCY <= accumulators(tuner.alpha.space, block, 16) <= 32 - 4
    assert register_cost(tuner.alpha, block, 16) < register_cost(tuner.alpha, (1, 1, 2, 16), 16)
