"""Round "panel" (beyond the paper, tuner.reuse.panel): which nests get it, its tilings, its unroll, and that
the trial estimator counts what the tuner measures with it."""

import math

import pytest

from eto.operators import Operator
from eto.target import cpu_target
from tuner.reuse.estimate import trials_for_config
from tuner.reuse.panel import panel_configs, unroll_covering

tvm = pytest.importorskip("tvm")

#: BERT-Base's feed-forward matmul at a new length: 9.4 MB of weights, read along the columns only;
#: as the catalogue's BMM (``Y[b,j,k]``: a vector of the weights is a gather) and as the model's
#: layer computes it (``W[k,j]``: contiguous, :func:`layer_matmul`)
FFN = Operator.create("BMM", B=1, M=256, N=768, K=3072)
FFN_SOURCE = Operator.create("BMM", B=1, M=128, N=768, K=3072)


def _tuner(monkeypatch, alpha, beta):
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import ReuseTuner

    monkeypatch.setenv("ETO_CPU_CACHE_BYTES", str(1 << 20))
    target = cpu_target()
    return ReuseTuner(alpha, sampled_record(beta, target), target, ranges="cpu")


@pytest.fixture
def ffn_tuner(monkeypatch):
    from tests.tuner.test_reuse_tuner import layer_matmul

    return _tuner(monkeypatch, layer_matmul(1, 256, 768, 3072), layer_matmul(1, 128, 768, 3072))


def test_panel_keeps_the_rows_whole_and_tiles_alpha_exactly(ffn_tuner, monkeypatch):
    space = ffn_tuner.space
    configs = space.panel_round()
    assert len(configs) == 11 and len(set(configs)) == 11  # 2 widths x 2 tiles x 2 chunks, 3 blocked
    for cfg in configs:
        assert all(math.prod(f) == e for f, e in zip(cfg.space + cfg.reduction, FFN.extents))
        batch, rows, cols = cfg.space
        assert rows[:2] == (1, 1) and rows[2] * rows[3] == 256 and batch == (1, 1, 1, 1)  # the rows whole
        assert cols[1] == 1  # threads split the columns only
    first = [c for c in configs if c.space[1][3] == 1]
    assert {(c.space[2][2], c.space[2][3], c.reduction[0][1]) for c in first} == \
        {(n, v, k) for n in (1, 2) for v in (8, 16) for k in (4, 8)}
    # blocked: 4 or 8 register rows of 2 or 4 vectors, at most 16 accumulators, a chunk of 32
    lanes = space.native_lanes or space.vector_lanes
    assert {(c.space[1][3], c.space[2][2], c.space[2][3], c.reduction[0][1]) for c in configs if c not in first} == \
        {(4, 1, 2 * lanes, 32), (4, 1, 4 * lanes, 32), (8, 1, 2 * lanes, 32)}
    # the catalogue's BMM gathers the weights along the vector: the first family only
    gathered = _tuner(monkeypatch, FFN.prim_func(), FFN_SOURCE).space.panel_round()
    assert set(gathered) == set(first) and len(gathered) == 8
    # no panel: on CUDA, where no input outgrows the cache, or with the cache model off
    assert panel_configs("cuda", space.alpha, space.kept_tiles(), 8, 1 << 20) == ()
    assert panel_configs("cpu", space.alpha, space.kept_tiles(), 8, 16 << 20) == ()
    assert panel_configs("cpu", space.alpha, space.kept_tiles(), 8, 0) == ()


def test_attention_matmuls_get_no_panel(monkeypatch):
    """A head's operands (12 x 256 x 64 floats, 786 KB) fit the cache: nothing for a panel to keep."""
    from tests.tuner.test_reuse_tuner import sampled_record
    from tuner.reuse.search import ReuseTuner

    monkeypatch.setenv("ETO_CPU_CACHE_BYTES", str(1 << 20))
    target = cpu_target()
    alpha, beta = Operator.create("BMM", B=12, M=256, N=256, K=64), Operator.create("BMM", B=12, M=128, N=128, K=64)
    assert ReuseTuner(alpha.prim_func(), sampled_record(beta, target), target).space.panel_round() == []


def test_the_largest_blocked_panel_leads_round_panel(ffn_tuner):
    from tuner.reuse.panel import blocked_lead

    configs = ffn_tuner.space.panel_round()
    lead = blocked_lead(configs)
    lanes = ffn_tuner.space.native_lanes or ffn_tuner.space.vector_lanes
    assert lead.space[1][3] == 4 and lead.space[2][3] == 4 * lanes  # 4 x 4 vectors over 8 x 2: fewer rows
    assert blocked_lead([c for c in configs if c.space[1][3] == 1]) is None


def test_the_panel_unroll_covers_its_register_block(ffn_tuner):
    configs = {(c.space[2][2], c.reduction[0][1]): c for c in ffn_tuner.space.panel_round() if c.space[1][3] == 1}
    options = [0, 16, 64, 512]
    assert unroll_covering(configs[(2, 8)], options) == 1  # 2 tiles x 8 chunk = 16 iterations
    assert unroll_covering(configs[(1, 4)], options) == 1
    assert unroll_covering(configs[(2, 8)], [0, 8]) == 1  # none covers it: the largest
    assert unroll_covering(configs[(2, 8)], []) is None
    blocked = next(c for c in ffn_tuner.space.panel_round() if c.space[1][3] == 4)
    assert unroll_covering(blocked, options) == 3  # 4 register rows x 1 tile x 32 chunk = 128 iterations


def test_the_tuner_measures_the_panel_round_and_the_estimator_counts_it(ffn_tuner):
    """Nothing improves after β's kept tiles: the tuner measures them, k of round T, k of the panel
    round and k of each later round, which is what the estimator counts with a zero continue rate."""
    tuner, k = ffn_tuner, 3

    class InOrder:
        trained = True

        def knows(self, mod):
            return True

        def rank(self, mod, schedules):
            return list(range(len(schedules)))

        def observe(self, mod, schedules, seconds):
            pass

    batches = []

    def dry_measure(schedules):
        batches.append(len(schedules))
        return [1.0 if len(batches) == 1 else 2.0 for _ in schedules]

    res = tuner.tune(dry_measure, strategy="global", ranker=InOrder(), top_k=k)
    assert res.rounds.get("panel") == k and res.invalid == 0
    estimated = trials_for_config("cpu", tuner.alpha, tuner.beta, tuner.beta_cfg, strategy="global",
                                  unroll_values=tuner.unroll_values, beta_unroll=tuner.beta_unroll, ranges="cpu",
                                  top_k=k, continue_rate=0.0)
    assert estimated == res.candidates


def test_a_panel_seed_leads_round_panel_even_when_ranked_last(ffn_tuner):
    """α's instant program may be a panel (eto.runs.instant): it is measured first in round "panel", not in
    round T's lead, so a round that stops at its first batch still measures what the database serves."""
    from tuner.reuse.search import config_of

    tuner, k = ffn_tuner, 2
    seed = tuner.space.panel_round()[0]

    class Reversed:
        trained = True

        def knows(self, mod):
            return True

        def rank(self, mod, schedules):
            return list(range(len(schedules)))[::-1]

        def observe(self, mod, schedules, seconds):
            pass

    def run(seeds):
        batches = []

        def dry_measure(schedules):
            batches.append(len(schedules))
            return [1.0 if len(batches) == 1 else 2.0 for _ in schedules]

        return tuner.tune(dry_measure, strategy="global", ranker=Reversed(), top_k=k, seeds=seeds)

    plain, seeded = run([]), run([seed])
    assert seeded.rounds["panel"] == plain.rounds["panel"] == k  # the round stopped after one batch...
    assert seeded.rounds["T"] == plain.rounds["T"]  # ...and round T did not measure the seed
    assert seed in {config_of(r, tuner) for r in seeded.records}  # ranked last, measured first
    assert seed not in {config_of(r, tuner) for r in plain.records}
    from tuner.reuse.panel import blocked_lead  # the blocked lead too: ranked last as well, measured in both

    lead = blocked_lead(tuner.space.panel_round())
    assert all(lead in {config_of(r, tuner) for r in res.records} for res in (plain, seeded))
