"""Instant programs (eto.runs.instant, tuner.reuse.predict): the variants timed, and timed as a model runs them."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from eto.operators import Operator
from tuner.analysis.features import TileConfig


def _space(kept: TileConfig, alpha_space: tuple[int, ...], beta_last: tuple[int, ...], *, valid: bool = True):
    """A stand-in for tuner.reuse.space.ReuseSpace: what full_vector_tiles reads of one."""
    return SimpleNamespace(kind="cpu", vector_lanes=8, kept_tiles=lambda: kept, valid=lambda cfg: valid,
                           alpha=SimpleNamespace(space=alpha_space),
                           beta_cfg=SimpleNamespace(space=((1, 1, 1, 1),) * (len(alpha_space) - 1) + (beta_last,)))


def test_a_full_vector_takes_the_innermost_tile_where_the_kept_one_is_not_a_whole_vector():
    from tuner.reuse.predict import full_vector_tiles

    # BERT-Base's attention matmul, 12x128x128x64 -> 12x40x40x64: β ran 64 columns at level 2 over an
    # innermost tile of 1 (LLVM vectorised the loop above it); at 40 the kept tiles are (1, 1, 40, 1):
    # one vector innermost (two do not divide 40), the rest of the run at level 2
    kept = TileConfig("cpu", ((2, 6, 1, 1), (1, 1, 40, 1), (1, 1, 40, 1)), ((16, 4),))
    got = full_vector_tiles(_space(kept, (12, 40, 40), (1, 2, 64, 1)))
    assert got == TileConfig("cpu", ((2, 6, 1, 1), (1, 1, 40, 1), (1, 1, 5, 8)), ((16, 4),))
    # two vectors where they divide and β's run is wider; a thread's block as wide as β's run
    kept = TileConfig("cpu", ((2, 6, 1, 1), (1, 1, 64, 1), (1, 1, 64, 1)), ((16, 4),))
    got = full_vector_tiles(_space(kept, (12, 64, 64), (1, 2, 64, 1)))
    assert got.space[-1] == (1, 1, 4, 16) and got.space[:-1] == kept.space[:-1] and got.reduction == kept.reduction
    # at 200 the kept run (50) takes no vector: the extent is split again, 40 columns a thread (<= β's 64)
    kept = TileConfig("cpu", ((2, 6, 1, 1), (1, 1, 200, 1), (2, 2, 50, 1)), ((16, 4),))
    assert full_vector_tiles(_space(kept, (12, 200, 200), (1, 2, 64, 1))).space[-1] == (1, 5, 5, 8)
    # β's outermost factor kept where it divides: 96 columns, β's run one vector -> 12 blocks = 3 x 4
    kept = TileConfig("cpu", ((1, 1, 1, 1), (1, 1, 1, 1), (3, 1, 32, 1)), ((4, 4),))
    assert full_vector_tiles(_space(kept, (1, 1, 96), (3, 1, 8, 1))).space[-1] == (3, 4, 1, 8)
    # nothing to do: already a whole vector; no vector divides the extent; not admissible here
    whole = TileConfig("cpu", ((1, 1, 1, 1), (1, 1, 5, 8)), ((4, 4),))
    assert full_vector_tiles(_space(whole, (1, 40), (1, 1, 8, 8))) is None
    odd = TileConfig("cpu", ((1, 1, 1, 1), (1, 1, 49, 1)), ((4, 4),))
    assert full_vector_tiles(_space(odd, (1, 49), (1, 1, 64, 1))) is None
    assert full_vector_tiles(_space(kept, (1, 1, 96), (3, 1, 8, 1), valid=False)) is None


def test_the_native_register_variant_takes_exactly_the_targets_vector_width():
    """An AVX-512 register holds 16 float32s: MobileNet v3's depthwise 14x14x672 3x3 convolution from v2's
    576-channel one (β's innermost channel tile 4) ran 33.6 us with an 8-wide tile and 25.9 us with a
    16-wide one, against 23.7 us tuned alone (Zen 5, cold, 2 threads); the width comes from the target."""
    from tuner.reuse.predict import full_vector_tiles

    kept = TileConfig("cpu", ((1, 1, 1, 1), (1, 7, 2, 1), (1, 7, 2, 1), (21, 4, 2, 4)), ((1, 3), (1, 3), (1, 1)))
    space = _space(kept, (1, 14, 14, 672), (18, 4, 2, 4))
    assert full_vector_tiles(space).space[-1] == (21, 4, 1, 8)  # nearest β's run of 8: one 8-lane vector
    native = full_vector_tiles(space, lanes=16)
    assert native.space[-1] == (21, 2, 1, 16) and native.space[:-1] == kept.space[:-1]
    assert math.prod(native.space[-1]) == 672 and native.reduction == kept.reduction
    # already a whole native register, or no 16-wide divisor: no variant
    whole = TileConfig("cpu", ((1, 1, 1, 1), (1, 1, 5, 16)), ((4, 4),))
    assert full_vector_tiles(_space(whole, (1, 80), (1, 1, 5, 16)), lanes=16) is None
    odd = TileConfig("cpu", ((1, 1, 1, 1), (1, 1, 5, 8)), ((4, 4),))
    assert full_vector_tiles(_space(odd, (1, 40), (1, 1, 5, 8)), lanes=16) is None


@pytest.mark.slow  # builds and times a handful of programs
def test_instant_times_a_convolution_with_its_weights_packed_as_a_model_runs_it(tmp_path, monkeypatch):
    """A CPU convolution program packs its weight into its own layout inside the function; the model
    packs it once, at build time, and the measurer leaves the packing out. The instant program is timed
    the same way (arguments in the packed layout), and the program stored still packs for itself and
    matches numpy."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from tvm_ffi import structural_equal

    from eto.runs.instant import instant
    from eto.runs.verify import check_record
    from eto.store.database import Database
    from eto.target import parse_target
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.measure.apply import prepacked, scheduled_module

    written_func = Operator.prim_func  # a model's task marks its weight layout-free (Relax: a constant)
    monkeypatch.setattr(Operator, "prim_func", lambda op: written_func(op).with_attr("layout_free_buffers", [1]))
    target = parse_target("cpu")
    known = Operator.create("C2DNHWC", N=1, CI=32, H=14, W=14, CO=64, KH=1, KW=1)
    new = Operator.create("C2DNHWC", N=1, CI=32, H=28, W=28, CO=64, KH=1, KW=1)
    db = Database(tmp_path / "db")
    db.commit(known, target, [sampled_record(known, target)], method="backend", candidates=1, seconds=0.0)
    import eto.runs.instant as instant_mod

    timed_shapes, time_all = [], instant_mod._time_all
    monkeypatch.setattr(instant_mod, "_time_all", lambda libs, args, timing: (
        timed_shapes.extend([tuple(a.shape) for a in one] for one in args), time_all(libs, args, timing))[1])
    r = instant(new, db, target)
    mod = scheduled_module(r.program.tuning_record)
    packed = [tuple(int(d) for d in a.shape) for a in ArgInfo.from_entry_func(mod, remove_preproc=True)]
    written = [tuple(int(d) for d in a.shape) for a in ArgInfo.from_entry_func(mod, remove_preproc=False)]
    assert packed[1] != written[1] == (64, 1, 1, 32)  # the weight, in the program's own layout when timed
    assert packed in timed_shapes  # the stored program was timed on its packed weight, as the measurer times it
    assert not structural_equal(prepacked(mod), mod)  # so it was checked as written, packing its weight itself
    assert np.isfinite(r.latency_s) and check_record(new, r.program.tuning_record, target).ok


@pytest.mark.slow  # derives, builds and times a handful of programs
def test_instant_programs_also_try_the_padding_inlined_where_the_source_placed_it_at_the_root(tmp_path):
    """β placed its padding at the root (a separate pass and parallel region); the fastest variants are
    timed again beside their twins with α's padding inlined into the convolution, the tiles the same,
    and the one stored matches numpy whichever wins. The reuse search's placement round tries it too."""
    from eto.runs.instant import INLINED_TWINS, instant
    from eto.runs.verify import check_record
    from eto.store.database import Database
    from eto.target import parse_target
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.analysis.subsketch import INLINE, ROOT
    from tuner.reuse.predict import inlined, predict
    from tuner.reuse.search import ReuseTuner, built_candidate

    target = parse_target("cpu")
    known = Operator.create("DEP", N=1, C=32, H=28, W=28, KH=3, KW=3, padding=1)
    new = Operator.create("DEP", N=1, C=64, H=14, W=14, KH=3, KW=3, padding=1)
    tuner = ReuseTuner(known.prim_func(), sampled_record(known, target), target)
    producers = [s.inst for s in tuner.sub.slots if s.kind == "place" and s.inst in tuner.sketch.tainted_decisions()]
    assert producers  # the padding block
    beta = tuner._cand(tuner.space.kept_tiles())
    beta.extra = {**beta.extra, **{i: ROOT for i in producers}}
    assert built_candidate(tuner, beta)
    source = tuner.record_of(beta.sch, 1e-3)

    def locations(pred) -> set[int]:
        return {int(v) for inst, v in pred.schedule.trace.decisions.items() if inst.kind.name == "SampleComputeLocation"}

    pred = predict(new.prim_func(), source, target)
    preds = (pred, *pred.alternatives)
    assert not any(p.by.endswith("-inlined") for p in preds)  # twins only of the fastest, by eto.runs.instant
    twins = [(p, inlined(p)) for p in preds]
    assert all(t is not None for _, t in twins)
    for plain, twin in twins:
        assert twin.by == plain.by + "-inlined" and twin.config == plain.config
        assert INLINE in locations(twin) and INLINE not in locations(plain)
        assert inlined(twin) is None  # inlined already
    # the reuse search starts from β's placement too, and its placement round tries the others
    (place,) = [s for s in ReuseTuner(new.prim_func(), source, target).sub.slots if s.kind == "place"]
    assert place.default() == ROOT and INLINE in place.alternatives(ROOT)
    db = Database(tmp_path / "db")
    db.commit(known, target, [source], method="backend", candidates=1, seconds=0.0)
    r = instant(new, db, target)
    assert r.by in {p.by for p in preds} | {t.by for _, t in twins}
    assert [x["timed"] for x in db.results() if x["op_key"] == new.key] == [len(preds) + min(INLINED_TWINS, len(preds))]
    assert check_record(new, r.program.tuning_record, target).ok
