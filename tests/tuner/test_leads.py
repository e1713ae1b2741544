"""Round T's leads from β's tiles (tuner.reuse.leads): the native-width vector lead, and one list for the
tuner and the trial estimator."""

import dataclasses
import math

import pytest

from tuner.reuse.estimate import count_trials
from tuner.analysis.features import LoopNest, TileConfig
from tuner.reuse.leads import lead_tiles, vector_tiles
from tuner.reuse.space import ReuseSpace

OPTIONS = dict(unroll_values=[0, 16, 64, 512], fetch_lanes=[], n_fetch=0)
# a 14x14 1x1 bridge whose best program split its 14 columns 2 x 7 (MobileNetV2's, seed 0)
BETA = LoopNest((1, 24, 14, 14), (144,), ())
BETA_CFG = TileConfig("cpu", ((1, 1, 1, 1), (1, 2, 1, 12), (1, 7, 1, 2), (1, 2, 1, 7)), ((3, 48),))


def space(w: int, lanes: int = 16, kind: str = "cpu", beta=BETA, beta_cfg=BETA_CFG) -> ReuseSpace:
    return ReuseSpace(kind, LoopNest((1, 96, w, w), (576,), ()), beta, beta_cfg, ranges="cpu", native_lanes=lanes)


# at 112 columns the kept tile is already a full 8-lane vector (ReuseSpace.free_vector): 16 then
@pytest.mark.parametrize("w, want", [(14, (1, 1, 1, 14)), (28, (1, 2, 1, 14)), (112, (7, 1, 1, 16))])
def test_the_vector_lead_widens_the_kept_vector_tile_to_the_native_width(w, want):
    """α's columns get the widest multiple of β's 7-wide tile that divides them and fits 16 lanes
    (MetaSchedule's own programs of these convolutions tile 14 columns); the factor comes from
    the outer levels, every other loop and the reduction stay β's kept tiles."""
    s = space(w)
    kept, lead = s.kept_tiles(), vector_tiles(s)
    assert lead.space[-1] == want and lead.space[:-1] == kept.space[:-1] and lead.reduction == kept.reduction
    assert [math.prod(f) for f in lead.space] == [1, 96, w, w]
    assert lead in lead_tiles(s)


def test_no_vector_lead_where_there_is_nothing_wider():
    assert vector_tiles(space(7)) is None  # α's 7 columns: 7 is all there is
    assert vector_tiles(space(56)) is None  # kept 8 wide (a full 8-lane vector); 16 does not divide 56
    assert vector_tiles(space(28, lanes=4)) is None  # a 4-lane machine: 7 already fills more
    assert vector_tiles(space(28, lanes=0)) is None  # no native width known
    assert vector_tiles(space(28, kind="cuda")) is None  # on CUDA the inner levels are thread tiles
    wide = TileConfig("cpu", BETA_CFG.space[:-1] + ((1, 1, 1, 14),), BETA_CFG.reduction)
    assert vector_tiles(space(28, beta_cfg=wide)) is None  # β's tile already 14 wide


def test_the_estimator_counts_each_distinct_lead_once():
    """The vector leads add one candidate each to the estimate; where one equals another lead (a 7x7
    bridge whose capped 7-wide tile is grown to 14, tuner.reuse.space.grown_tiles) it is measured once
    and counted once."""
    s = space(28)
    assert vector_tiles(s) != vector_tiles(s, same_block=True) is not None
    assert count_trials(s, **OPTIONS) == count_trials(dataclasses.replace(s, native_lanes=0), **OPTIONS) + 2
    bridge = LoopNest((1, 64, 7, 7), (64,), ())
    bridge_cfg = TileConfig("cpu", ((1, 1, 1, 1), (8, 1, 2, 4), (7, 1, 1, 1), (1, 1, 1, 7)), ((16, 4),))
    s = ReuseSpace("cpu", LoopNest((1, 256, 28, 28), (64,), ()), bridge, bridge_cfg, ranges="cpu", native_lanes=16)
    assert s.grown_tiles() == vector_tiles(s) is not None
    assert lead_tiles(s).count(s.grown_tiles()) == 1
    extra = vector_tiles(s, same_block=True) is not None
    assert count_trials(s, **OPTIONS) == count_trials(dataclasses.replace(s, native_lanes=0), **OPTIONS) + extra


def test_the_same_block_vector_lead_reshapes_the_register_block():
    """2 rows of 7 columns become 1 row of 14: the row loop nearest the vectorised one gives its
    register factor to its outermost level; every loop keeps its extent, the block its size."""
    s = space(14)
    kept, lead = s.kept_tiles(), vector_tiles(s, same_block=True)
    assert kept.space[2][-1] == 2 and kept.space[3][-1] == 7
    assert lead.space[3] == vector_tiles(s).space[3] == (1, 1, 1, 14)
    assert lead.space[2] == (kept.space[2][0] * 2, *kept.space[2][1:-1], 1) and lead.space[:2] == kept.space[:2]
    assert math.prod(f[-1] for f in lead.space) == math.prod(f[-1] for f in kept.space)
    assert [math.prod(f) for f in lead.space] == [1, 96, 14, 14]
    assert lead_tiles(s).index(vector_tiles(s)) + 1 == lead_tiles(s).index(lead)
    # no other loop holds a register tile: nothing to reshape
    flat = TileConfig("cpu", ((1, 1, 1, 1), (24, 1, 1, 1), (7, 2, 1, 1), (1, 2, 1, 7)), ((3, 48),))
    assert vector_tiles(space(14, beta_cfg=flat), same_block=True) is None and vector_tiles(space(14, beta_cfg=flat))



# BERT-Base's 768x768 matmul as MetaSchedule tuned it (set benchmark N = 100, seed 2): the best
# program keeps 32 rows of one vector (12 columns), 32 accumulators on a 32-register AVX-512 CPU;
# its runner-up (1.11x slower) 32 rows of two 16-lane vectors, 64
BERT = LoopNest((1, 128, 768), (768,), ())
BERT_BEST = TileConfig("cpu", ((1, 1, 1, 1), (1, 4, 1, 32), (8, 8, 1, 12)), ((768, 1),))
BERT_RUNNER_UP = TileConfig("cpu", ((1, 1, 1, 1), (1, 4, 1, 32), (12, 1, 2, 32)), ((128, 6),))


def test_a_register_block_that_spills_is_not_a_candidate():
    """The runner-up's tiles kept on the feed-forward matmul (3072 columns) hold 64 accumulators,
    twice the registers: as a lead there they built in 3.8 s and ran 12-15x slower than the
    operator's best, so with the registers known they are not admissible. β's own block stays
    admissible whatever its size (its backend run chose it), and only CPU targets are bounded."""
    ff = LoopNest((1, 128, 3072), (768,), ())
    space = ReuseSpace("cpu", ff, BERT, BERT_BEST, ranges="cpu", native_lanes=16, registers=32)
    runner_up = dataclasses.replace(space, beta_cfg=BERT_RUNNER_UP).kept_tiles()
    assert [f[-1] for f in runner_up.space] == [1, 32, 32] and [f[-1] for f in space.kept_tiles().space] == [1, 32, 12]
    assert space.in_registers(space.kept_tiles()) and not space.in_registers(runner_up)
    assert not space.valid(runner_up) and dataclasses.replace(space, registers=0).valid(runner_up)
    assert dataclasses.replace(space, kind="cuda").in_registers(runner_up)
    own = dataclasses.replace(space, beta_cfg=BERT_RUNNER_UP)  # β's own 64: kept, and the bound for α
    assert own.kept_lead() == runner_up and own.in_registers(runner_up)
    assert not own.in_registers(TileConfig("cpu", ((1, 1, 1, 1), (1, 2, 1, 64), (96, 1, 1, 32)), ((128, 6),)))
