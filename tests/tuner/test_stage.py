"""Round "stage" of the reuse tuner: round T's best on α's sketches that write the tile back at
another level, or not through a cache (:func:`tuner.reuse.search.write_stage_siblings`)."""

import pytest

from eto.operators import Operator
from eto.target import cpu_target, cuda_target

tvm = pytest.importorskip("tvm")

from tests.tuner.test_reuse_tuner import sampled_record  # noqa: E402
from tuner.reuse.estimate import WRITE_STAGE_SIBLINGS  # noqa: E402
from tuner.reuse.search import ReuseTuner  # noqa: E402
from tuner.analysis.sketch import Sketch  # noqa: E402
from tuner.measure.trajectory import median_secs  # noqa: E402

PAIRS = [
    (Operator.create("C2D", N=1, CI=32, H=14, W=14, CO=32, KH=3, KW=3, padding=1),
     Operator.create("C2D", N=1, CI=64, H=14, W=14, CO=64, KH=3, KW=3, padding=1)),
    (Operator.create("BMM", B=2, M=64, N=32, K=64), Operator.create("BMM", B=4, M=64, N=64, K=64)),
    (Operator.create("DEP", N=1, C=32, H=28, W=28, KH=3, KW=3, padding=1),
     Operator.create("DEP", N=1, C=64, H=28, W=28, KH=3, KW=3, padding=1)),
]


# cuda: the first CUDA target registers CUDA's tensor intrinsics (seconds)
@pytest.mark.parametrize("kind", ["cpu", pytest.param("cuda", marks=pytest.mark.slow)])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_the_tuner_finds_the_sibling_write_stages_the_estimator_counts(kind, index):
    """Whichever of its write stages β's program has, the tuner finds the others in α's design
    space, as many as the plan's estimator counts (a test that fails if the two drift apart)."""
    target = cpu_target() if kind == "cpu" else cuda_target()
    for alpha, beta in PAIRS:
        tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target, index), target)
        assert len(tuner.siblings) == WRITE_STAGE_SIBLINGS[kind], (alpha, beta)
        signatures = {tuner.sketch.signature} | {sk.signature for sk, _ in tuner.siblings}
        assert len(signatures) == 1 + len(tuner.siblings)  # each sibling another sketch
        assert all(sk.stageless == tuner.sketch.stageless for sk, _ in tuner.siblings)


@pytest.mark.slow  # builds the program
def test_a_sibling_write_stage_that_wins_is_kept_through_the_later_rounds_and_matches_numpy():
    """The stage round puts round T's best decisions on each sibling sketch (the tiles land on the
    sibling's own tile instructions); when one wins, the rounds after it build on that sketch."""
    from eto.runs.verify import check_record

    target = cpu_target()
    alpha, beta = PAIRS[0]
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target, 0), target, ranges="paper")
    want = tuner.siblings[-1][0].signature

    def measure(schedules):  # the last sibling's programs are fast, all others slow
        return [1e-3 if Sketch(s.trace).signature == want else 2e-3 for s in schedules]

    res = tuner.tune(measure, strategy="global")
    assert res.rounds["stage"] == len(tuner.siblings) == 2
    won = Sketch(res.record.trace)
    assert won.signature == want
    assert won.tile_decisions() == ([list(f) for f in res.config.space], [list(f) for f in res.config.reduction])
    fast = [r for r in res.records if median_secs(r.run_secs) == 1e-3]
    assert len(fast) > 1  # rounds M / unroll measured more programs of the sibling's sketch
    check = check_record(alpha, res.record, target)
    assert check.ok, f"max abs error {check.max_abs_error}"


def test_decision_maps_pair_only_sketches_of_the_same_decisions():
    from tvm.ir import IRModule
    from tvm.s_tir import meta_schedule as ms

    target = cpu_target()

    def space(op):
        ctx = ms.TuneContext(mod=IRModule({"main": op.prim_func()}), target=target, space_generator="post-order-apply",
                             search_strategy="replay-trace", task_name="x", num_threads=1)
        return [Sketch(s.trace) for s in ctx.generate_design_space()]

    conv, bmm = space(PAIRS[0][0]), space(PAIRS[1][0])
    where = conv[0].decision_map(conv[1])
    assert where is not None and len(where) == len(conv[0].decisions)
    assert all(conv[0].insts[i][0] == conv[1].insts[j][0] for i, j in where.items())
    assert conv[0].decision_map(bmm[0]) is None  # other loops, other tile levels
