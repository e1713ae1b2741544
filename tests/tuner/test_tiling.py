"""A vector tile made for a new extent: no wider than the tile it came from, or the nearest in ratio."""

from tuner.analysis.features import LoopNest, TileConfig
from tuner.analysis.tiling import split_inner, split_vector
from tuner.reuse.space import ReuseSpace


def test_a_kept_vector_tile_is_the_widest_whole_vector_not_above_the_one_it_came_from():
    assert split_vector(24, 14, 8) == (1, 24)  # nearest 14 in ratio: 24 (24/14 = 1.71) before 8 (14/8 = 1.75)
    assert split_vector(24, 14, 8, wider=False) == (3, 8)
    assert split_vector(48, 40, 16, wider=False) == (3, 16)
    assert split_vector(24, 4, 8, wider=False) == (3, 8)  # below one vector: one vector
    assert split_vector(40, 7, 16, wider=False) == split_inner(40, 7)  # no whole vector divides 40


def test_kept_tiles_of_a_1x1_convolution_at_24_columns_from_28_keep_one_vector():
    """ResNet-50's 512-channel 1x1 convolution at 24x24 from MetaSchedule's program at 28x28 (14 columns
    innermost, no whole vector of 8 divides 28): 8 columns, not 24 (which ran 7.2x slower)."""
    beta = LoopNest((1, 512, 28, 28), (128,), ())
    cfg = TileConfig("cpu", ((1, 1, 1, 1), (4, 16, 2, 4), (2, 7, 1, 2), (1, 2, 1, 14)), ((8, 16),))
    space = ReuseSpace("cpu", LoopNest((1, 512, 24, 24), (128,), ()), beta, cfg, ranges="cpu", vector_lanes=8,
                       native_lanes=16)
    assert space.free_vector == 8
    assert space.kept_tiles().space == ((1, 1, 1, 1), (4, 16, 2, 4), (2, 6, 1, 2), (3, 1, 1, 8))
    assert space.kept_tiles(wider=True).space[-1] == (1, 1, 1, 24)  # the other variant the instant programs time
