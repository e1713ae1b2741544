"""Ranked reuse (beyond the paper): the learned ranker, the top-k batches and what the estimator counts."""

import math
from types import SimpleNamespace

import pytest

from eto.operators import Operator
from eto.target import cpu_target
from tuner.reuse.estimate import ranked_count, trials_for_config
from tuner.reuse.ranked import ranked_batches

tvm = pytest.importorskip("tvm")


def cands(n):
    return [SimpleNamespace(i=i, latency=math.inf) for i in range(n)]


def run_batches(items, k, incumbent, latency_of, min_gain=0.02):
    measured = []
    for batch in ranked_batches(items, k, incumbent, min_gain):
        for c in batch:
            c.latency = latency_of(c.i)
        measured.append([c.i for c in batch])
    return measured


def test_ranked_batches_stop_at_the_first_batch_that_does_not_improve():
    # an open round (no incumbent) always earns a second batch; the third needs the second to improve
    assert run_batches(cands(10), 3, math.inf, lambda i: 10.0 - i) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert run_batches(cands(10), 3, math.inf, lambda i: 1.0 + i) == [[0, 1, 2], [3, 4, 5]]
    # a later round stops after its first batch unless it beats the incumbent by min_gain
    assert run_batches(cands(10), 4, 1.0, lambda i: 0.99) == [[0, 1, 2, 3]]
    assert run_batches(cands(10), 4, 1.0, lambda i: 0.5 if i < 4 else 1.0) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="top_k"):
        run_batches(cands(3), 0, 1.0, lambda i: 1.0)


def test_ranked_count_is_the_expected_number_the_batches_measure():
    assert ranked_count(7, None, open_round=True) == 7  # no ranker: every candidate
    assert ranked_count(3, 4, open_round=False) == 3
    assert ranked_count(10, 4, open_round=False, continue_rate=0.0) == 4
    assert ranked_count(10, 4, open_round=True, continue_rate=0.0) == 8
    assert ranked_count(10, 4, open_round=True, continue_rate=1.0) == 10
    assert ranked_count(10, 4, open_round=False, continue_rate=0.5) == pytest.approx(4 + 0.5 * 4 + 0.25 * 2)


def test_ranked_tuner_measures_the_top_k_and_the_estimator_counts_it():
    """With a ranker that puts round T's median candidate first, and nothing after β's kept tiles
    improving, the tuner measures the kept tiles and their variants (on their own, first), k of
    round T and k of each later round: what the estimator counts with ``top_k=k`` and a zero
    continue rate."""
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.leads import lead_tiles
    from tuner.reuse.search import ReuseTuner

    target = cpu_target()
    beta = Operator.create("C2D", N=1, CI=64, H=14, W=14, CO=64, KH=3, KW=3, padding=1)
    alpha = Operator.create("C2D", N=1, CI=32, H=14, W=14, CO=32, KH=3, KW=3, padding=1)
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target, ranges="cpu")
    kept = tuner.space.kept_lead()  # β's own tiles on α's loops: not one of round T's configurations
    assert kept is not None and kept == tuner.space.kept_tiles() and kept not in tuner.space.t_round()
    t_round = tuner.space.t_round()
    k = 3
    assert len(t_round) > 2 * k

    class MedianFirst:
        trained = True
        observed = 0

        def knows(self, mod):
            return True

        def rank(self, mod, schedules):
            first = len(t_round) // 2 if len(schedules) == len(t_round) else 0
            return [first] + [i for i in range(len(schedules)) if i != first]

        def observe(self, mod, schedules, seconds):
            MedianFirst.observed += len(schedules)

    batches = []

    def dry_measure(schedules):
        batches.append(len(schedules))
        return [1.0 if len(batches) == 1 else 2.0 for _ in schedules]

    res = tuner.tune(dry_measure, strategy="global", ranker=MedianFirst(), top_k=k)
    # the ranked picks are not fed back: a biased sample would teach the ranker their tiles
    assert res.invalid == 0 and max(batches) <= k and MedianFirst.observed == 0
    assert lead_tiles(tuner.space)[0] == kept
    assert res.rounds["T"] == len(lead_tiles(tuner.space)) + k
    assert all(n <= k for name, n in res.rounds.items() if name != "T")
    assert res.config == kept and len(res.records) == res.candidates  # measured first, ties keep it
    estimated = trials_for_config("cpu", tuner.alpha, tuner.beta, tuner.beta_cfg, strategy="global",
                                  unroll_values=tuner.unroll_values, beta_unroll=tuner.beta_unroll, ranges="cpu",
                                  top_k=k, continue_rate=0.0)
    placed = sum(n for name, n in res.rounds.items() if name.startswith("place"))  # the plan counts it beside
    assert estimated + placed == res.candidates


def test_betas_kept_tiles_lead_even_when_round_t_holds_them_and_ranks_them_last():
    """Only the reduction grows (a 1x1 convolution of 128 channels from one of 64): round T holds
    β's kept tiles, and a ranker puts them last. They are still measured, with the leads (round T
    skips them), and win when fastest; the estimator counts them once."""
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.leads import lead_tiles
    from tuner.reuse.search import ReuseTuner

    target = cpu_target()
    beta = Operator.create("C2D", N=1, CI=64, H=7, W=7, CO=64, KH=1, KW=1)
    alpha = Operator.create("C2D", N=1, CI=128, H=7, W=7, CO=64, KH=1, KW=1)
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target, ranges="cpu")
    kept, t_round = tuner.space.kept_lead(), tuner.space.t_round()
    assert kept == tuner.space.kept_tiles() and kept in t_round and tuner.space.kept_in_t_round()
    assert lead_tiles(tuner.space)[0] == kept
    k = 3
    assert len(t_round) > 2 * k

    class KeptLast:
        trained = True

        def knows(self, mod):
            return True

        def rank(self, mod, schedules):
            last = [i for i, s in enumerate(schedules) if configs[id(s)] == kept]
            return [i for i in range(len(schedules)) if i not in last] + last

        def observe(self, mod, schedules, seconds):
            pass

    configs, schedule = {}, tuner.schedule

    def tagged(cand):
        sch = schedule(cand)
        configs[id(sch)] = cand.cfg
        return sch

    measured = []

    def dry_measure(schedules):  # β's kept tiles are the fastest
        measured.extend(configs[id(s)] for s in schedules)
        return [1.0 if configs[id(s)] == kept else 2.0 for s in schedules]

    tuner.schedule = tagged
    res = tuner.tune(dry_measure, strategy="global", ranker=KeptLast(), top_k=k)
    lead = len(lead_tiles(tuner.space))
    assert kept in measured[:lead] and kept not in measured[lead:lead + k] and res.config == kept
    assert res.rounds["T"] == lead + k  # the leads, then one batch of round T
    estimated = trials_for_config("cpu", tuner.alpha, tuner.beta, tuner.beta_cfg, strategy="global",
                                  unroll_values=tuner.unroll_values, beta_unroll=tuner.beta_unroll, ranges="cpu",
                                  top_k=k, continue_rate=0.0)
    assert estimated == res.candidates
    unranked = trials_for_config("cpu", tuner.alpha, tuner.beta, tuner.beta_cfg, strategy="global",
                                 unroll_values=tuner.unroll_values, beta_unroll=tuner.beta_unroll, ranges="cpu")
    assert unranked >= lead + len(t_round) - 1  # every slot of round T once: the kept tiles as the lead


def test_a_ranker_that_does_not_know_alphas_size_gets_a_random_sample_and_learns_from_it():
    """Batches as ranked ones are, but in a random order that a rerun repeats; the ranker is not
    asked to rank, and it is trained on every batch (a random sample is a fair one)."""
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.leads import lead_tiles
    from tuner.reuse.search import ReuseTuner

    target = cpu_target()
    beta = Operator.create("C2D", N=1, CI=64, H=14, W=14, CO=64, KH=3, KW=3, padding=1)
    alpha = Operator.create("C2D", N=1, CI=32, H=14, W=14, CO=32, KH=3, KW=3, padding=1)
    tuner = ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target, ranges="cpu")
    k = 3

    class Stranger:
        trained = True

        def __init__(self):
            self.observed = []

        def knows(self, mod):
            return False

        def rank(self, mod, schedules):
            raise AssertionError("a ranker that does not know α's size is not asked to rank")

        def observe(self, mod, schedules, seconds):
            self.observed += [str(s.trace) for s in schedules]

    configs = {}  # each built schedule's tile configuration
    schedule = tuner.schedule

    def tagged(cand):
        sch = schedule(cand)
        configs[id(sch)] = cand.cfg
        return sch

    tuner.schedule = tagged
    runs = []
    for _ in range(2):
        measured: list = []

        def dry_measure(schedules):
            measured.extend(configs[id(s)] for s in schedules)
            return [2.0 - 0.01 * len(measured) for _ in schedules]  # each batch a little better

        ranker = Stranger()
        res = tuner.tune(dry_measure, strategy="global", ranker=ranker, top_k=k)
        assert len(ranker.observed) == len(measured) == res.candidates
        runs.append(measured)
    assert runs[0] == runs[1]  # the same sample on a rerun
    lead = len(lead_tiles(tuner.space))  # measured first, all tied: β's kept tiles win them
    t_round = tuner.space.t_round()
    sampled = runs[0][lead:lead + k]
    assert len(t_round) > 3 * k and res.rounds["T"] <= lead + 2 * k
    assert set(sampled) <= set(t_round) and sampled != t_round[:k]  # round T's, not in its own order


@pytest.mark.slow
def test_learned_ranker_learns_measured_programs():
    """Trained on a dozen measured programs of an operator, the ranker puts one of the three fastest
    first; untrained, it declines to rank; it knows only workloads near those it was trained on."""
    from tvm.ir import IRModule
    from tvm.s_tir import meta_schedule as ms

    from tuner.reuse.cost_model import LearnedRanker
    from tuner.measure.measurer import MeasureConfig, Measurer

    target = cpu_target()
    op = Operator.create("BMM", B=2, M=64, N=64, K=64)
    mod = IRModule({"main": op.prim_func()})
    schedules = []
    for seed in range(1, 40):  # the design space's tile sizes are sampled anew for each seed
        ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             search_strategy="replay-trace", task_name="rank", num_threads=1, rand_state=seed)
        sch = ctx.generate_design_space()[0]
        sch.enter_postproc()
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):
            schedules.append(sch)
        if len(schedules) == 12:
            break
    ranker = LearnedRanker(target, min_samples=8)
    assert ranker.rank(mod, schedules[:12]) is None
    with Measurer.local(MeasureConfig(number=1, repeat=3, min_repeat_ms=5)) as m:
        secs = [r.median for r in m.measure([s.mod for s in schedules[:12]], target)]
    ranker.observe(mod, schedules[:12], secs)
    assert ranker.trained and ranker.samples == 12
    order = ranker.rank(mod, schedules[:12])
    assert sorted(order) == list(range(12))
    assert order[0] in sorted(range(12), key=secs.__getitem__)[:3]
    # its order is followed only near the shapes it was trained on (LearnedRanker.reach, per loop)
    def bmm(**kw):
        return IRModule({"main": Operator.create("BMM", **kw).prim_func()})

    near = bmm(B=2, M=128, N=128, K=64)  # two loops 2x
    far = bmm(B=2, M=512, N=512, K=64)
    same_size = bmm(B=2, M=64, N=256, K=16)  # the same iterations, N and K 4x apart
    assert ranker.knows(mod) and ranker.knows(near) and not ranker.knows(far) and not ranker.knows(same_size)
    assert not LearnedRanker(target, min_samples=8).knows(mod)  # untrained
