"""One function for a symbolic size: bucket choice (against brute force), the dispatch against numpy."""

import itertools
import json
import math
import random

import numpy as np
import pytest

from eto.cli import main
from eto.store.database import Database
from eto.shapes.dispatch import parse_sizes, parse_symbolic, symbolic_dims
from eto.operators import Operator
from tuner.analysis.symbolic import choose_buckets


# -- the choice of buckets (no TVM) --------------------------------------------------------------
def _brute_force(latency, sizes, max_buckets, weights=None):
    """Every split of the sizes into at most max_buckets contiguous runs, each run its best candidate
    (a candidate that cannot run at some size of a run cannot serve it, whatever that size's weight)."""
    n = len(sizes)
    w = weights or [1.0] * n
    best = [min(row[i] for row in latency) for i in range(n)]

    def run_cost(row, a, b):
        if any(math.isinf(row[i]) for i in range(a, b)):
            return math.inf
        return sum(w[i] * row[i] / best[i] for i in range(a, b))

    out = {}
    for cuts in itertools.product([0, 1], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        k = len(bounds) - 1
        if k > max_buckets:
            continue
        cost = sum(min(run_cost(row, a, b) for row in latency) for a, b in zip(bounds, bounds[1:]))
        out[k] = min(out.get(k, math.inf), cost)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_choose_buckets_is_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    n, cands = rng.randint(1, 7), rng.randint(1, 4)
    sizes = sorted(rng.sample(range(1, 600), n))
    latency = [[rng.uniform(1, 10) for _ in range(n)] for _ in range(cands)]
    kmax = rng.randint(1, n)
    exact = _brute_force(latency, sizes, kmax)
    choice = choose_buckets(latency, sizes, max_buckets=kmax, tolerance=0.0)
    assert choice.cost == pytest.approx(min(exact.values()))
    assert len(choice.uppers) == min(k for k, c in exact.items() if c <= min(exact.values()) * (1 + 1e-12))
    assert choice.uppers[-1] == sizes[-1] and list(choice.uppers) == sorted(choice.uppers)
    # the recorded candidates reproduce the cost
    best = [min(row[i] for row in latency) for i in range(n)]
    assert sum(latency[choice.candidate_for(s)][i] / best[i] for i, s in enumerate(sizes)) == pytest.approx(choice.cost)
    # a tolerance trades a little cost for fewer buckets, never more than it allows
    loose = choose_buckets(latency, sizes, max_buckets=kmax, tolerance=0.1)
    assert len(loose.uppers) <= len(choice.uppers) and loose.cost <= min(exact.values()) * 1.1 + 1e-9


@pytest.mark.parametrize("seed", range(12))
def test_weighted_choice_with_sizes_a_candidate_cannot_run_is_the_brute_force_optimum(seed):
    rng = random.Random(100 + seed)
    n, cands = rng.randint(2, 7), rng.randint(2, 4)
    sizes = sorted(rng.sample(range(1, 600), n))
    latency = [[rng.uniform(1, 10) if rng.random() > 0.25 else math.inf for _ in range(n)] for _ in range(cands)]
    for i in range(n):  # every size has a program that runs
        latency[rng.randrange(cands)][i] = rng.uniform(1, 10)
    weights = [rng.choice([0.0, 0.5, 1.0, 7.0]) for _ in range(n)]
    weights[rng.randrange(n)] = 3.0
    kmax = rng.randint(1, n)
    exact = _brute_force(latency, sizes, kmax, weights)
    choice = choose_buckets(latency, sizes, max_buckets=kmax, tolerance=0.0, weights=weights)
    assert choice.cost == pytest.approx(min(exact.values()))
    assert all(math.isfinite(latency[choice.candidate_for(s)][i]) for i, s in enumerate(sizes))


def test_traffic_weights_give_each_sampled_size_the_requests_it_stands_for():
    from tuner.analysis.symbolic import traffic_weights

    # 1..8 -> 8, 9..64 -> 64, beyond 64 -> 64 as well (the largest bucket serves larger sizes)
    assert traffic_weights([8, 64], {1: 5, 8: 1, 9: 2, 64: 3, 500: 4}) == [6.0, 9.0]
    with pytest.raises(ValueError, match="traffic: size 0"):
        traffic_weights([8], {0: 1})
    # mostly short requests: a program fast at short sizes wins the single bucket it would lose unweighted
    sizes, short, long = [8, 64, 512], [1, 4, 8], [2, 1, 1]
    assert choose_buckets([short, long], sizes, max_buckets=1).candidates == (1,)
    assert choose_buckets([short, long], sizes, max_buckets=1,
                          weights=traffic_weights(sizes, {4: 90, 100: 5})).candidates == (0,)
    with pytest.raises(ValueError, match="weights must be 3"):
        choose_buckets([short], sizes, weights=[0, 0, 0])


def test_choose_buckets_prefers_one_program_when_it_wins_everywhere_and_splits_where_another_wins():
    sizes = [1, 2, 4, 8, 16, 32]
    small_wins = [1, 1, 1, 4, 8, 16]
    large_wins = [3, 3, 3, 2, 4, 8]
    choice = choose_buckets([small_wins, large_wins], sizes)
    assert choice.uppers == (4, 32) and choice.candidates == (0, 1)
    assert choose_buckets([small_wins, [x * 2 for x in small_wins]], sizes).candidates == (0,)
    with pytest.raises(ValueError, match=r"no candidate runs at size\(s\) \[8\]"):
        choose_buckets([[1, 1, 1, math.inf, 1, 1]], sizes)
    with pytest.raises(ValueError, match="increasing"):
        choose_buckets([[1, 1]], [4, 2])


def test_parse_sizes_and_symbolic_parameters():
    assert parse_sizes("1,2,16:64:16,2") == [1, 2, 16, 32, 48, 64]
    for bad in ("", "0", "a", "4:1:0", "1:2:3:4"):
        with pytest.raises(ValueError, match="--sizes"):
            parse_sizes(bad)
    assert parse_symbolic("M=seq, N=seq") == {"M": "seq", "N": "seq"}
    with pytest.raises(ValueError, match="PARAM=NAME"):
        parse_symbolic("M")
    bmm = Operator.create("BMM", B=2, M=16, N=16, K=8)
    with pytest.raises(ValueError, match="BMM has no parameter H"):
        symbolic_dims(bmm, {"H": "h"})
    for bad in ("1x", "z", "x0", "bucket2"):
        with pytest.raises(ValueError, match="must be a Python identifier other than"):
            symbolic_dims(bmm, {"M": bad})
    with pytest.raises(ValueError, match="branches on one size"):
        symbolic_dims(bmm, {"M": "a", "N": "b"})
    with pytest.raises(ValueError, match="p is not a dimension of any input of C2D"):
        symbolic_dims(Operator.create("C2D", N=1, CI=4, H=8, W=8, CO=4, KH=3, KW=3), {"padding": "p"})


# -- the dispatch (TVM, real tuning at scale ci) -------------------------------------------------
SMALL, LARGE = Operator.create("BMM", B=2, M=8, N=8, K=16), Operator.create("BMM", B=2, M=48, N=48, K=16)
SEQ = {"M": "seq", "N": "seq"}


@pytest.fixture(scope="module")
def two_sizes_db(tmp_path_factory):
    """A database holding the same BMM tuned at two sizes of M = N."""
    path = tmp_path_factory.mktemp("dispatch") / "db"
    code = main(["tune", "--op", SMALL.key, "--op", LARGE.key, "--db", str(path), "--method", "ansor",
                 "--trials", "8", "--trials-per-iter", "8", "--search", "light", "--seed", "0", "--quiet"])
    assert code == 0
    return path


@pytest.mark.slow
def test_a_dispatch_over_two_programs_matches_numpy_in_every_bucket(two_sizes_db):
    """Both ways of running a program at any size (padded to its tile multiple, masked), in one
    function that branches on the size, checked against numpy on both sides of the split."""
    from eto.shapes.dispatch import at_size, candidates, check, compile_dispatch
    from eto.target import parse_target
    from tuner.analysis.symbolic import tile_multiples

    target = parse_target("cpu")
    cands = candidates(SMALL, SEQ, Database(two_sizes_db, readonly=True), target)
    assert [(c.source, c.kind) for c in cands] == [(SMALL, "pad"), (SMALL, "mask"), (LARGE, "pad"), (LARGE, "mask")]
    for c in cands:  # the tile multiple divides the size the program was tuned at
        mult = tile_multiples(SMALL.prim_func(symbolic={"M": "M", "N": "N"}), c.record)
        assert set(mult) == {"M", "N"} and all(c.source[p] % t == 0 for p, t in mult.items())
    small_pad, _, _, large_mask = cands
    fn = compile_dispatch(SMALL, SEQ, [(20, small_pad), (40, large_mask), (60, cands[2])], target)
    check(fn, [1, 7, 8, 20, 21, 33, 40, 41, 48, 61, 97])
    x = at_size(SMALL, SEQ, 5).random_inputs(3)
    np.testing.assert_allclose(fn(*x), at_size(SMALL, SEQ, 5).reference(*x), rtol=1e-4, atol=1e-4)
    # two padded programs side by side (their padded buffers once shared storage across branches)
    check(compile_dispatch(SMALL, SEQ, [(12, small_pad), (64, cands[2])], target), [1, 12, 13, 30, 47, 64, 65])
    # one symbolic parameter (a dense layer's tokens): padded and exact multiples
    rows = {"M": "seq"}
    (pad_rows,) = candidates(SMALL, rows, Database(two_sizes_db, readonly=True), target, kinds=("pad",))
    check(compile_dispatch(SMALL, rows, [(64, pad_rows)], target), [1, 8, 16, 23])


@pytest.mark.slow
def test_eto_dispatch_chooses_buckets_writes_a_loadable_library_and_names_bad_input(two_sizes_db, tmp_path, capsys):
    import tvm
    from tvm import relax

    out = tmp_path / "bmm_seq.so"
    traffic = tmp_path / "traffic.json"  # requests per size, as a serving log would count them
    traffic.write_text(json.dumps({"3": 5, "30": 1, "64": 2, "100": 1}))
    code = main(["dispatch", "--op", SMALL.key, "--symbolic", "M=seq,N=seq", "--sizes", "1,8,24,48,64",
                 "--db", str(two_sizes_db), "-o", str(out), "--traffic", str(traffic), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["sizes"] == [1, 8, 24, 48, 64] and len(report["candidates"]) == 4
    assert report["weights"] == [0.0, 5.0, 0.0, 1.0, 3.0]  # 3 -> 8, 30 -> 48, 64 and beyond -> 64
    assert len(report["latency_s"]) == 4 and all(len(r) == 5 for r in report["latency_s"])
    assert report["buckets"][0]["from"] == 1 and report["buckets"][-1]["to"] is None
    assert json.loads((tmp_path / "bmm_seq.so.json").read_text())["buckets"] == report["buckets"]
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(out)), tvm.cpu())
    for m in (3, 30, 70):  # the reloaded library, inside and beyond the sampled sizes
        op = SMALL.replace(M=m, N=m)
        x = op.random_inputs(1)
        got = vm["main"](*[tvm.runtime.tensor(a) for a in x]).numpy()
        np.testing.assert_allclose(got, op.reference(*x), rtol=1e-4, atol=1e-4)
    # an operator the database holds at no size, an unknown parameter: named, exit code 2
    code = main(["dispatch", "--op", "BMM(B=3,M=8,N=8,K=16)", "--symbolic", "M=seq", "--sizes", "4",
                 "--db", str(two_sizes_db)])
    assert code == 2 and "holds no program of BMM with M=seq at any size" in capsys.readouterr().err
    code = main(["dispatch", "--op", SMALL.key, "--symbolic", "Q=seq", "--sizes", "4", "--db", str(two_sizes_db)])
    assert code == 2 and "BMM has no parameter Q" in capsys.readouterr().err
    traffic.write_text("[1, 2]")  # not an object of size -> requests
    code = main(["dispatch", "--op", SMALL.key, "--symbolic", "M=seq", "--sizes", "4", "--db", str(two_sizes_db),
                 "--traffic", str(traffic)])
    assert code == 2 and f"--traffic {traffic}: expected a JSON object of size -> requests" in capsys.readouterr().err


@pytest.mark.slow
def test_the_serving_example_runs_on_a_stream_of_stored_lengths(two_sizes_db, tmp_path, capsys):
    """examples/serve_stream.py on lengths the database holds: served tuned at once, outputs checked."""
    import shutil
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import serve_stream

    db = tmp_path / "db"
    shutil.copytree(two_sizes_db, db)
    assert serve_stream.main(["--db", str(db), "--op", SMALL.key, "--lengths", "48,8,48"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.strip().split(" ")[0].isdigit()]
    assert [(r[0], r[1]) for r in rows] == [("48", "tuned"), ("8", "tuned"), ("48", "tuned")] * 2


@pytest.mark.slow
def test_the_symbolic_benchmark_runs_at_scale_ci(two_sizes_db, tmp_path):
    """E7b at scale ci: every method timed, the summary and the plot written."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    import symbolic_bench

    out = tmp_path / "e7b.json"
    assert symbolic_bench.main(["--scale", "ci", "--db", str(two_sizes_db), "--op", f"{SMALL.key}@M=seq,N=seq",
                                "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    (row,) = result["ops"]
    assert row["stored_sizes"] == [8, 48] and row["sizes"] == [3, 13, 23, 33, 43, 53, 63]
    lat = row["latency_s"]
    assert set(lat["dispatch"]) == {str(s) for s in row["sizes"]} and all(v > 0 for v in lat["dispatch"].values())
    assert set(lat["padded"]) == {"3", "13", "23", "33", "43"}  # sizes up to the largest stored one
    assert set(lat["tvm"]) == {"3", "23", "43", "63"} and set(row["dispatch_over"]) >= {"per_size", "padded", "tvm"}
    assert (tmp_path / "e7b.png").stat().st_size > 0
