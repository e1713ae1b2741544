"""Lead "set-safe": register rows whose input rows collide in one L1 set are cut to the cache's ways."""

import dataclasses
import math

import pytest

from eto.operators import Operator
from eto.target import cpu_target
from tuner.reuse.cachesets import colliding_rows, set_safe_config, set_safe_tiles
from tuner.analysis.features import TileConfig
from tuner.analysis.host import CacheGeometry

tvm = pytest.importorskip("tvm")

L1 = CacheGeometry(32 << 10, 8, 64)  # 4 KB set span


def nest(op: Operator):
    from tvm.ir import IRModule

    from tuner.analysis.features import loop_nest_of, major_block

    mod = IRModule({"main": op.prim_func()})
    return loop_nest_of(mod, major_block(mod))


def one_by_one(ci: int) -> Operator:
    return Operator.create("C2D", N=1, CI=ci, H=14, W=14, CO=256, KH=1, KW=1)


def test_rows_collide_where_an_inputs_rows_are_a_multiple_of_the_set_span_apart():
    # the weights [256, CI, 1, 1]: output channel c reads a row CI x 4 bytes after channel c - 1
    assert {d: a.shape for d, a in colliding_rows(nest(one_by_one(1024)), L1.set_span).items()} == {1: (256, 1024, 1, 1)}
    assert list(colliding_rows(nest(one_by_one(2048)), L1.set_span)) == [1]
    assert colliding_rows(nest(one_by_one(1000)), L1.set_span) == {}  # 4,000 bytes: rows spread over the sets
    assert colliding_rows(nest(one_by_one(512)), L1.set_span) == {}  # 2 KB: two sets, 16 ways between them
    assert colliding_rows(nest(one_by_one(1024)), 0) == {}
    # a matmul's rows of A [M, K] with K = 1,024 collide; the vectorised last loop is never a row loop
    bmm = nest(Operator.create("BMM", B=1, M=64, N=256, K=1024))
    assert list(colliding_rows(bmm, L1.set_span)) == [1]


def test_set_safe_cuts_the_row_tile_to_the_ways_and_chunks_the_contiguous_reduction():
    alpha = nest(one_by_one(1024))
    kept = TileConfig("cpu", ((1, 1, 1, 1), (16, 1, 1, 16), (2, 1, 7, 1), (1, 1, 2, 7)), ((512, 2), (1, 1), (1, 1)))
    safe = set_safe_config("cpu", alpha, kept, L1)
    # MetaSchedule's program of ResNet-50's C2D[1,256,14,14,1024,1,1] (tuner/reuse/cachesets.py): 2 x 8 rows
    assert safe.space == ((1, 1, 1, 1), (16, 1, 2, 8), (2, 1, 7, 1), (1, 1, 2, 7))
    assert safe.reduction == ((64, 16), (1, 1), (1, 1))  # one 64-byte line of each weight row per step
    assert all(math.prod(f) == e for f, e in zip(safe.space + safe.reduction, alpha.extents))
    # a chunk already a line or longer stays; 12-way sets keep 12 rows (the largest divisor of 16: 8)
    longer = TileConfig("cpu", kept.space, ((16, 64), (1, 1), (1, 1)))
    assert set_safe_config("cpu", alpha, longer, L1).reduction == longer.reduction
    assert set_safe_config("cpu", alpha, kept, CacheGeometry(48 << 10, 12, 64)).space[1] == (16, 1, 2, 8)
    # nothing to do: rows within the ways, rows that do not collide, CUDA, an unknown cache
    few = TileConfig("cpu", ((1, 1, 1, 1), (32, 1, 1, 8), *kept.space[2:]), kept.reduction)
    assert set_safe_config("cpu", alpha, few, L1) is None
    assert set_safe_config("cpu", nest(one_by_one(1000)), kept, L1) is None
    assert set_safe_config("cuda", alpha, kept, L1) is None
    assert set_safe_config("cpu", alpha, kept, None) is None
    assert set_safe_config("cpu", alpha, kept, CacheGeometry(32 << 10, 0, 0)) is None
    # tiles of a loop nest with fewer reduction loops than α's (a prior's source of another nest, met by
    # eto plan with five models' databases as priors): no cut, not an IndexError
    assert set_safe_config("cpu", alpha, TileConfig("cpu", kept.space, kept.reduction[:2]), L1) is None


@pytest.mark.slow  # builds the program
def test_a_set_safe_program_builds_and_matches_numpy(monkeypatch):
    """The lead is a real program of α: β's sketch replayed with its tiles, checked against numpy."""
    from tests.tuner.test_reuse_tuner import sampled_record
    from eto.runs.verify import check_record
    from tuner.reuse import cachesets
    from tuner.reuse.search import ReuseTuner

    target = cpu_target()
    alpha, beta = one_by_one(1024), Operator.create("C2D", N=1, CI=512, H=14, W=14, CO=128, KH=1, KW=1)
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target)
    b = tuner.beta_cfg  # β as if its register block had 16 output channels: (8, 1, 1, 16) of 128
    wide = TileConfig("cpu", tuple((8, 1, 1, 16) if d == 1 else f for d, f in enumerate(b.space)), b.reduction)
    space = dataclasses.replace(tuner.space, beta_cfg=wide)
    assert space.kept_tiles().space[1] == (16, 1, 1, 16)
    monkeypatch.setattr(cachesets, "cpu_cache", lambda level=1: L1)
    safe = set_safe_tiles(space)
    assert safe is not None and safe.space[1] == (16, 1, 2, 8) and safe.reduction[0][1] >= 16
    cand = tuner._cand(safe)
    sch = tuner.schedule(cand)
    assert sch is not None
    assert check_record(alpha, tuner.record_of(sch, 1e-3), target).ok
