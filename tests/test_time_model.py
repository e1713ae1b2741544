"""The per-target time model: seconds per backend trial and per reuse candidate, learned from results."""

import pytest

from eto.time_model import DEFAULTS, MIN_FIT, Line, fit_line, learn_time_model


def test_fit_line_recovers_a_line_and_falls_back_on_little_data():
    default = Line(1.0, 0.5)
    pts = [(c, 2.0 + 0.25 * c) for c in (4, 8, 12, 16, 30)]
    line = fit_line(pts, default, with_intercept=True)
    assert (line.fixed, line.per, line.samples) == (pytest.approx(2.0), pytest.approx(0.25), 5)
    assert fit_line([], default, with_intercept=True) == default
    few = fit_line(pts[:2], default, with_intercept=True)  # keep the default set-up, learn the rate
    assert few.fixed == 1.0 and few.per == pytest.approx((sum(s for _, s in pts[:2]) - 2.0) / 12)
    through0 = fit_line([(100, 70.0), (200, 150.0)], default, with_intercept=False)
    assert (through0.fixed, through0.per) == (0.0, pytest.approx(220 / 300))
    same = fit_line([(10, 5.0)] * MIN_FIT, default, with_intercept=True)  # no spread: default intercept
    assert same.fixed == 1.0 and same.per == pytest.approx(0.4)


def test_time_model_learns_from_the_targets_results_only(tmp_path):
    from eto.database import Database
    from eto.operators import Operator
    from eto.target import parse_target
    from tests.test_database import make_records

    cpu = parse_target("cpu")
    db = Database(tmp_path / "db")
    assert learn_time_model(db, cpu, "cpu") == learn_time_model(None, cpu, "cpu")
    assert learn_time_model(None, cpu, "cpu").backend == DEFAULTS["cpu"][0]
    ops = [Operator.create("BMM", B=1, M=16 * i, N=16, K=16) for i in range(1, 8)]
    db.commit(ops[0], cpu, make_records(ops[0], [[1e-3]], cpu), method="backend", candidates=100, seconds=50.0)
    db.commit(ops[1], cpu, make_records(ops[1], [[1e-3]], cpu), method="backend", candidates=300, seconds=250.0)
    for i, op in enumerate(ops[2:]):
        n = 8 + 4 * i
        db.commit(op, cpu, make_records(op, [[1e-3]], cpu), method="reuse", candidates=n, seconds=3.0 + 0.5 * n,
                  extra={"estimate": n / 1.5})
    tm = learn_time_model(db, cpu, "cpu")
    assert tm.count_scale == pytest.approx(1.5) and tm.reuse_candidates(10) == pytest.approx(15)
    assert tm.backend_seconds(100) == pytest.approx(100 * 300 / 400)
    assert (tm.reuse.fixed, tm.reuse.per) == (pytest.approx(3.0), pytest.approx(0.5))
    other = parse_target('{"kind": "llvm", "mcpu": "skylake", "num-cores": 2}')
    assert learn_time_model(db, other, "cpu").reuse == DEFAULTS["cpu"][1]
    assert learn_time_model(db, other, "cpu").count_scale == 1.0
