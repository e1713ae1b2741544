"""The per-target time model: seconds per backend trial and per reuse candidate, learned from results."""

import pytest

from eto.planning.time_model import FUNCTION_DEFAULTS, KIND_PRIOR, MIN_FIT, Line, fit_line, fit_time_model
from eto.planning.time_priors import (COLD_CPU_DEFAULTS, COLD_SCALE, CPU_DEFAULTS, CPU_KIND_DEFAULTS, DEFAULTS,
    POLISH_DEFAULTS, default_lines, learn_time_model, prior)

SKYLAKE = '{"kind": "llvm", "mcpu": "skylake", "num-cores": 2}'  # a CPU no prior was measured on


def generic() -> "TimeModel":  # noqa: F821
    """The prior of a CPU without measurements, timed hot: the kind's defaults."""
    return prior(SKYLAKE, "cpu", "hot")


def test_fit_line_recovers_a_line_and_falls_back_on_little_data():
    default = Line(1.0, 0.5)
    pts = [(c, 0.1, 2.0 + 0.25 * c) for c in (4, 8, 12, 16, 30)]  # one size: no growth with size to fit
    line = fit_line(pts, default, with_intercept=True)
    assert (line.fixed, line.per, line.per_gflop, line.samples) == (pytest.approx(2.0), pytest.approx(0.25), 0, 5)
    assert fit_line([], default, with_intercept=True) == default
    few = fit_line(pts[:2], default, with_intercept=True)  # keep the default set-up, learn the rate
    assert few.fixed == 1.0 and few.per == pytest.approx((sum(s for _, _, s in pts[:2]) - 2.0) / 12)
    through0 = fit_line([(100, 0.1, 70.0), (200, 0.1, 150.0)], default, with_intercept=False)
    assert (through0.fixed, through0.per) == (0.0, pytest.approx(220 / 300))
    same = fit_line([(10, 0.1, 5.0)] * MIN_FIT, default, with_intercept=True)  # no spread: default intercept
    assert same.fixed == 1.0 and same.per == pytest.approx(0.4)


def test_fit_line_learns_how_a_candidate_grows_with_the_operator():
    """Backend trials of a big operator cost more (each candidate runs longer): fitted once sizes differ."""
    truth = Line(3.0, 0.4, 2.0)
    pts = [(c, g, truth(c, g)) for c, g in ((10, 0.01), (20, 0.05), (15, 0.3), (30, 0.6), (12, 1.2))]
    fitted = fit_line(pts, Line(4.0, 0.45, 0.4), with_intercept=True)
    assert (fitted.fixed, fitted.per, fitted.per_gflop) == (pytest.approx(3.0), pytest.approx(0.4), pytest.approx(2.0))
    backend = fit_line([(c, g, truth(c, g) - 3.0) for c, g, _ in pts], Line(0.0, 1.0), with_intercept=False)
    assert (backend.fixed, backend.per, backend.per_gflop) == (0.0, pytest.approx(0.4), pytest.approx(2.0))
    # too few results, or one size only: the default's growth with size is kept, the rate learned
    default = Line(0.0, 0.5, 1.0)
    few = fit_line([(100, 0.5, 100.0)], default, with_intercept=False)
    assert few.per_gflop / few.per == pytest.approx(2.0) and few(100, 0.5) == pytest.approx(100.0)
    # noise that makes a coefficient negative falls back to the default's shape
    noisy = [(10, 0.01, 9.0), (10, 0.1, 8.0), (10, 0.2, 7.0), (10, 0.4, 6.0), (10, 0.8, 5.0)]
    shaped = fit_line(noisy, default, with_intercept=False)
    assert shaped.per_gflop >= 0 and shaped.per_gflop / shaped.per == pytest.approx(2.0)


def test_a_backend_runs_set_up_is_learned_only_from_runs_of_different_lengths():
    """A backend run costs a set-up whatever its trials (MetaSchedule's space, cost model, first search):
    runs of one length cannot tell it from the rate, so the default's set-up is kept until lengths differ."""
    truth = Line(12.0, 0.4, 1.0)
    sizes = (0.001, 0.01, 0.05, 0.2, 0.6)
    mixed = [(c, g, truth(c, g)) for c in (8, 64) for g in sizes]
    fitted = fit_line(mixed, Line(5.0, 0.5, 1.0), with_intercept=True, by_count=True)
    assert (fitted.fixed, fitted.per, fitted.per_gflop) == (pytest.approx(12.0), pytest.approx(0.4),
                                                             pytest.approx(1.0))
    one_length = [(8, g, truth(8, g)) for g in sizes]
    kept = fit_line(one_length, Line(5.0, 0.5, 1.0), with_intercept=True, by_count=True)
    assert kept.fixed == 5.0 and kept.per_gflop / kept.per == pytest.approx(2.0)
    # and what it learned still reproduces the runs' total time
    assert sum(kept(c, g) for c, g, _ in one_length) == pytest.approx(sum(s for _, _, s in one_length))


def test_time_model_learns_from_the_targets_results_only(tmp_path):
    from eto.store.database import Database
    from eto.operators import Operator
    from eto.target import parse_target
    from tests.test_database import make_records

    cpu = parse_target("cpu")
    db = Database(tmp_path / "db")
    assert learn_time_model(db, cpu, "cpu", "hot") == learn_time_model(None, cpu, "cpu", "hot")
    assert learn_time_model(None, cpu, "cpu", "hot").backend == default_lines(cpu, "cpu")[0]
    ops = [Operator.create("BMM", B=1, M=16 * i, N=16, K=16) for i in range(1, 8)]
    db.commit(ops[0], cpu, make_records(ops[0], [[1e-3]], cpu), method="backend", candidates=100, seconds=50.0)
    db.commit(ops[1], cpu, make_records(ops[1], [[1e-3]], cpu), method="backend", candidates=300, seconds=250.0)
    for i, op in enumerate(ops[2:]):
        n = 8 + 4 * i
        db.commit(op, cpu, make_records(op, [[1e-3]], cpu), method="reuse", candidates=n, seconds=3.0 + 0.5 * n,
                  extra={"estimate": n / 1.5})
    tm = learn_time_model(db, cpu, "cpu", "hot")  # (results that record no timing were timed hot)
    assert tm.count_scale == pytest.approx(1.5) and tm.reuse_candidates(10) == pytest.approx(15)
    gf = [op.flops / 1e9 for op in ops]
    here = default_lines(cpu, "cpu")[0]
    k = here.per_gflop / here.per  # two backend results: the default's shape and set-up kept
    per = (300 - 2 * here.fixed) / (100 * (1 + k * gf[0]) + 300 * (1 + k * gf[1]))
    assert tm.backend_seconds(100, gf[0]) == pytest.approx(here.fixed + 100 * per * (1 + k * gf[0]))
    assert (tm.reuse.fixed, tm.reuse.per) == (pytest.approx(3.0), pytest.approx(0.5))
    # a root's polish (eto.runs.polish) costs more than a reuse of its candidates: it teaches its own scale
    for i, op in enumerate(ops[2:]):
        n = 8 + 4 * i
        db.commit(op, cpu, make_records(op, [[1e-3]], cpu), method="polish", candidates=n, seconds=2 * (3.0 + 0.5 * n))
    polished = learn_time_model(db, cpu, "cpu", "hot")
    assert (polished.reuse.fixed, polished.reuse.per) == (pytest.approx(3.0), pytest.approx(0.5))  # reuses alone
    # five polishes at twice the line over a reuse's seconds (with BMM's scale), KIND_PRIOR at the default beside
    actual = sum(2 * (3.0 + 0.5 * (8 + 4 * i)) for i in range(5))
    reuse = sum(polished.reuse_seconds(8 + 4 * i, gf[2 + i], "BMM") for i in range(5))
    w = KIND_PRIOR * reuse / 5
    assert polished.polish_scale == pytest.approx((actual + w * POLISH_DEFAULTS["cpu"]) / (reuse + w))
    assert polished.polish_seconds(12, gf[3], "BMM") == pytest.approx(
        polished.reuse_seconds(12, gf[3], "BMM") * polished.polish_scale)
    other = parse_target('{"kind": "llvm", "mcpu": "skylake", "num-cores": 2}')
    assert learn_time_model(db, other, "cpu", "hot").reuse == DEFAULTS["cpu"][1]
    assert learn_time_model(db, other, "cpu", "hot").count_scale == 1.0


def test_defaults_are_the_cpus_own_where_measured_else_the_kinds():
    """Before a target has results its CPU's measured lines stand in (``CPU_DEFAULTS`` by ``mcpu``);
    an unmeasured CPU gets ``DEFAULTS["cpu"]``, a GPU ``DEFAULTS["cuda"]``."""
    from eto.target import parse_target

    def cpu(mcpu):
        return parse_target('{"kind": "llvm", "mcpu": "%s", "num-cores": 2}' % mcpu)

    for mcpu, lines in CPU_DEFAULTS.items():
        assert default_lines(cpu(mcpu), "cpu") == lines
        assert learn_time_model(None, cpu(mcpu), "cpu", "hot").reuse == lines[1]
    assert "emeraldrapids" in CPU_DEFAULTS and CPU_DEFAULTS["emeraldrapids"] != DEFAULTS["cpu"]
    assert default_lines(cpu("skylake"), "cpu") == DEFAULTS["cpu"]
    assert default_lines(parse_target("nvidia/nvidia-h100"), "cuda") == DEFAULTS["cuda"]
    # few results on a measured CPU: its own default's shape is what the rate is learned on
    k = CPU_DEFAULTS["emeraldrapids"][0].per_gflop / CPU_DEFAULTS["emeraldrapids"][0].per
    result = {"method": "backend", "op": {"type": "BMM", "params": {"B": 1, "M": 64, "N": 64, "K": 64}},
              "candidates": 100, "seconds": 80.0, "records": [{}]}
    fitted = fit_time_model([result], prior(cpu("emeraldrapids"), "cpu", "hot"))
    assert fitted.backend.per_gflop / fitted.backend.per == pytest.approx(k)


def test_a_model_functions_results_teach_their_own_line_not_the_backend_rate():
    """TASK results (a model's softmax or reshape: one to 64 short trials) are never planned, so
    they must not make the plan's backend trials look cheap; they fit the function line."""
    def result(op, candidates, seconds):
        return {"method": "backend", "op": op, "candidates": candidates, "seconds": seconds, "records": [{}]}

    bmm = {"type": "BMM", "params": {"B": 1, "M": 64, "N": 64, "K": 64}}
    task = {"type": "TASK", "params": {"size": 4096, "hash": 7}, "fusion": "softmax"}
    fitted = fit_time_model([result(bmm, 100, 80.0), result(bmm, 200, 160.0)], generic())
    with_tasks = fit_time_model([result(bmm, 100, 80.0), result(bmm, 200, 160.0)]
                                + [result(task, 1, 0.3)] * 8 + [result(task, 64, 9.0)] * 2, generic())
    assert with_tasks.backend == fitted.backend and fitted.backend != DEFAULTS["cpu"][0]
    # they teach their own line: 0.3 s for a space of one program, 9 s for 64 trials
    assert fitted.function == FUNCTION_DEFAULTS["cpu"]
    assert (with_tasks.function(1), with_tasks.function(64)) == (pytest.approx(0.3), pytest.approx(9.0))
    assert learn_time_model(None, SKYLAKE, "cpu", "hot").function == FUNCTION_DEFAULTS["cpu"]


def test_each_operator_types_reuses_teach_its_own_scale_of_the_reuse_line():
    """Depthwise reuses that cost twice what the line says and batch matmuls half: each type's reuses
    are priced by its own record, shrunk towards the line by KIND_PRIOR results; a type without
    results keeps the line."""
    from eto.planning.time_model import KIND_SCALE_CAP, kind_scales
    from eto.target import parse_target

    def result(op, candidates, seconds, method="reuse"):
        return {"method": method, "op": op, "candidates": candidates, "seconds": seconds, "records": [{}]}

    dep = {"type": "DEP", "params": {"N": 1, "C": 32, "H": 28, "W": 28, "KH": 3, "KW": 3, "stride": 1, "padding": 1}}
    bmm = {"type": "BMM", "params": {"B": 1, "M": 64, "N": 64, "K": 64}}
    rows = [result(dep, 16, 20.0)] * 6 + [result(bmm, 16, 5.0)] * 5 + [result(bmm, 16, 5.0, "polish")]
    tm = fit_time_model(rows, generic())
    line = tm.reuse(16, 0.0)
    # (n x actual + KIND_PRIOR x line) / ((n + KIND_PRIOR) x line)
    assert tm.reuse_kind["DEP"] == pytest.approx((6 * 20.0 / line + KIND_PRIOR) / (6 + KIND_PRIOR), rel=1e-3)
    # five reuses (the polish has its own scale)
    assert tm.reuse_kind["BMM"] == pytest.approx((5 * 5.0 / line + KIND_PRIOR) / (5 + KIND_PRIOR), rel=1e-3)
    assert tm.reuse_seconds(16, 0.0, "DEP") > line > tm.reuse_seconds(16, 0.0, "BMM")
    assert tm.reuse_seconds(16, 0.0, "C2D") == tm.reuse_seconds(16, 0.0) == pytest.approx(line)
    assert tm.to_json()["reuse_kind"] == tm.reuse_kind
    # one odd reuse moves its type's scale less than all the way; a far-off type is capped
    one = kind_scales([("C1D", (10, 0.0, 30.0))], Line(10.0, 0.0))
    assert one["C1D"] == pytest.approx((30.0 + KIND_PRIOR * 10.0) / (10.0 + KIND_PRIOR * 10.0))
    far = kind_scales([("C1D", (10, 0.0, 1000.0))] * 50, Line(10.0, 0.0))
    assert far["C1D"] == KIND_SCALE_CAP
    # before results, a measured CPU's per-type scales; a type's results are shrunk towards its default
    znver4 = parse_target('{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}')
    empty = learn_time_model(None, znver4, "cpu", "hot")
    assert empty.reuse_kind == CPU_KIND_DEFAULTS["znver4"] and empty.polish_scale == POLISH_DEFAULTS["cpu"]
    assert empty.reuse_seconds(16, 0.0, "DEPNHWC") > empty.reuse_seconds(16, 0.0) > empty.reuse_seconds(16, 0.0, "BMM")
    d = CPU_KIND_DEFAULTS["znver4"]["DEPNHWC"]
    shrunk = kind_scales([("DEPNHWC", (10, 0.0, 30.0))], Line(10.0, 0.0), prior=CPU_KIND_DEFAULTS["znver4"])
    assert shrunk["DEPNHWC"] == pytest.approx((30.0 + KIND_PRIOR * d * 10.0) / (10.0 + KIND_PRIOR * 10.0))
    assert shrunk["BMM"] == CPU_KIND_DEFAULTS["znver4"]["BMM"]
    skylake = parse_target('{"kind": "llvm", "mcpu": "skylake", "num-cores": 2}')
    assert learn_time_model(None, skylake, "cpu", "hot").reuse_kind == {}


def test_a_runs_timing_picks_its_prior_and_the_results_it_learns_from(tmp_path):
    """A candidate timed cold is a few single runs where a hot one is runs in a row: the same tuning costs
    less cold, so a cold run's plan is priced by a cold prior and by the database's cold results only."""
    from eto.store.database import Database
    from eto.operators import Operator
    from eto.target import parse_target
    from tests.test_database import make_records

    znver4 = parse_target('{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}')
    cold, hot = (learn_time_model(None, znver4, "cpu", t) for t in ("cold", "hot"))
    assert cold == COLD_CPU_DEFAULTS["znver4"] and hot.backend == CPU_DEFAULTS["znver4"][0]
    assert cold.backend == hot.backend  # a backend trial costs its search and builds more than its timing
    assert cold.reuse_seconds(20, 0.2, "C2DNHWC") < hot.reuse_seconds(20, 0.2, "C2DNHWC")
    assert cold.function_seconds(32) < hot.function_seconds(32)
    # a CPU measured hot only: its hot lines scaled by what cold cost over hot where both were measured
    emr = parse_target('{"kind": "llvm", "mcpu": "emeraldrapids", "num-cores": 2}')
    e_cold, e_hot = prior(emr, "cpu", "cold"), prior(emr, "cpu", "hot")
    for line, f in zip(("backend", "reuse", "function"), COLD_SCALE):
        assert getattr(e_cold, line)(10, 0.5) == pytest.approx(f * getattr(e_hot, line)(10, 0.5))
    assert (e_cold.reuse_kind, e_cold.count_scale) == (e_hot.reuse_kind, e_hot.count_scale)
    # a GPU times hot whatever the run asks
    gpu = parse_target("nvidia/nvidia-h100")
    assert prior(gpu, "cuda", "cold") == prior(gpu, "cuda", "hot")
    with pytest.raises(ValueError, match="timing"):
        prior(znver4, "cpu", "lukewarm")

    db = Database(tmp_path / "db")
    ops = [Operator.create("BMM", B=1, M=16 * i, N=16, K=16) for i in range(1, 8)]
    for i, op in enumerate(ops):  # hot runs only, at twice the cold prior's cost
        n = 8 + 4 * i
        db.commit(op, znver4, make_records(op, [[1e-3]], znver4), method="reuse", candidates=n,
                  seconds=2 * cold.reuse_seconds(n, op.flops / 1e9), extra={"timing": "hot"})
    assert learn_time_model(db, znver4, "cpu", "cold") == cold  # nothing timed cold to learn from
    assert learn_time_model(db, znver4, "cpu", "hot").reuse.samples == len(ops)
    for op in ops[:5]:
        db.commit(op, znver4, make_records(op, [[1e-3]], znver4), method="reuse", candidates=10, seconds=3.0,
                  extra={"timing": "cold"})
    learned = learn_time_model(db, znver4, "cpu", "cold")
    assert learned.reuse.samples == 5 and learned.reuse(10, ops[2].flops / 1e9) == pytest.approx(3.0, rel=1e-3)
    on_gpu = Database(tmp_path / "gpu")  # a GPU's results are hot: a cold run there learns from them
    on_gpu.commit(ops[0], gpu, make_records(ops[0], [[1e-3]], gpu), method="backend", candidates=64, seconds=40.0,
                  extra={"timing": "hot"})
    assert learn_time_model(on_gpu, gpu, "cuda", "cold").backend.samples == 1
