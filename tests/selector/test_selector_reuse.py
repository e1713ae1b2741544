"""Definition 2 (reuse conditions) and reuse-pair enumeration."""

import itertools
import random

import numpy as np
import pytest

from selector import LoopNestOp, dominates, is_reuse_pair, reuse_pair_indices, reuse_pairs


def op(name, ext, type_="C2D", sketch="K", n_space=4):
    return LoopNestOp(name=name, type=type_, sketch=sketch, space=ext[:n_space], reduction=ext[n_space:])


def test_loopnest_properties():
    a = op("a", [1, 64, 14, 14, 64, 3, 3])
    assert a.extents == (1, 64, 14, 14, 64, 3, 3)
    assert a.space == (1, 64, 14, 14) and a.reduction == (64, 3, 3)
    assert a.size == 64 * 14 * 14 * 64 * 9
    assert a.space_size == 64 * 14 * 14 and a.reduction_size == 576
    assert a.describe() == "C2D[1,64,14,14,64,3,3]"
    assert a.frequency == 1 and not a.tuned and not a.bridge
    with pytest.raises(Exception):
        a.name = "b"  # frozen


@pytest.mark.parametrize("kwargs", [
    dict(space=(1, 0), reduction=(3,)),       # zero extent
    dict(space=(1, 2.5), reduction=(3,)),     # non-integer
    dict(space=(True, 2), reduction=(3,)),    # bool
    dict(space=(), reduction=()),             # empty
])
def test_loopnest_rejects_bad_extents(kwargs):
    with pytest.raises((ValueError, TypeError)):
        LoopNestOp(name="x", type="C2D", sketch="K", **kwargs)


def test_loopnest_keyword_only():
    with pytest.raises(TypeError):
        LoopNestOp("x", "C2D", "K", (1,), (1,))  # type: ignore[misc]


def test_dominates():
    assert dominates([2, 3, 4], [2, 3, 4])            # reflexive
    assert dominates([2, 3, 4], [1, 3, 4])
    assert not dominates([1, 3, 4], [2, 3, 4])
    assert not dominates([2, 3], [1, 1, 1])           # different depth
    a, b = op("a", [1, 64, 28, 28, 64, 3, 3]), op("b", [1, 64, 14, 14, 64, 1, 1])
    assert dominates(a, b) and not dominates(b, a)


def test_paper_example_is_not_a_reuse_pair():
    # Section 6.2: 14 < 28 on the third loop but 3 > 1 on the last one.
    alpha = op("alpha", [1, 64, 14, 14, 64, 3, 3])
    beta = op("beta", [1, 64, 28, 28, 64, 1, 1])
    assert not is_reuse_pair(alpha, beta) and not is_reuse_pair(beta, alpha)
    gamma = op("gamma", [1, 64, 14, 14, 64, 1, 1])
    for x in (alpha, beta):
        assert is_reuse_pair(x, gamma) and is_reuse_pair(gamma, x)


def test_condition_1_type_sketch_and_structure():
    a = op("a", [1, 64, 28, 28, 64, 3, 3])
    b = op("b", [1, 64, 14, 14, 64, 1, 1])
    assert is_reuse_pair(a, b)
    assert not is_reuse_pair(a, op("b", [1, 64, 14, 14, 64, 1, 1], sketch="other"))
    assert not is_reuse_pair(a, op("b", [1, 64, 14, 14, 64, 1, 1], type_="T2D"))
    # same extents, different split into space/reduction loops: different loop structure
    assert not is_reuse_pair(a, op("b", [1, 64, 14, 14, 64, 1, 1], n_space=5))


def test_reuse_pairs_both_directions_and_no_self_pairs():
    ops = [op("a", [1, 8, 8, 8, 8, 1, 1]), op("b", [1, 4, 8, 8, 8, 1, 1]), op("c", [1, 16, 4, 8, 8, 1, 1])]
    pairs = {(x.name, y.name) for x, y in reuse_pairs(ops)}
    # a ≥ b; c vs a: 16 > 8 but 4 < 8 → incomparable; c vs b: 16 > 4, 4 < 8 → incomparable
    assert pairs == {("a", "b"), ("b", "a")}


def test_identical_loop_nests_are_reuse_pairs():
    # e.g. a stride-2 and a stride-1 conv2d can share a loop nest; they may reuse each other
    ops = [op("s1", [1, 8, 8, 8, 8, 1, 1]), op("s2", [1, 8, 8, 8, 8, 1, 1])]
    assert {(x.name, y.name) for x, y in reuse_pairs(ops)} == {("s1", "s2"), ("s2", "s1")}


def test_vectorized_enumeration_matches_definition():
    rng = random.Random(5)
    ops = []
    for i in range(160):
        k = rng.choice([3, 4])
        ext = [rng.choice([1, 2, 4, 8, 16]) for _ in range(k)]
        ops.append(LoopNestOp(name=f"o{i}", type=rng.choice(["A", "B"]), sketch=rng.choice(["k1", "k2"]),
                              space=ext[:2], reduction=ext[2:]))
    expected = {(i, j) for i, j in itertools.permutations(range(len(ops)), 2) if is_reuse_pair(ops[i], ops[j])}
    got = reuse_pair_indices(ops)
    assert got.dtype == np.int64 and got.shape[1] == 2
    assert set(map(tuple, got.tolist())) == expected
    assert len(got) == len(expected)  # no duplicates


def test_selector_imports_no_tvm_eto_or_tuner():
    import subprocess
    import sys
    from pathlib import Path
    code = ("import sys, selector, selector.solvers.steiner, selector.select, selector.graphio; "
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'tvm', 'eto', 'tuner'}); "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stdout + out.stderr


def test_selector_tests_import_no_tvm_under_the_suites_conftest():
    """The fast tier (``-m "not slow"``): selector tests run by pytest with ``tests/conftest.py`` import
    no TVM (the conftest imports it only for tests marked slow)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, pytest; rc = pytest.main(['-q', '-p', 'no:cacheprovider', '-m', 'not slow', "
            "'tests/selector/test_selector_plan.py', 'tests/selector/test_selector_graphio.py']); "
            "print('tvm imported' if 'tvm' in sys.modules else 'no tvm'); sys.exit(rc or 'tvm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0 and out.stdout.rstrip().endswith("no tvm"), out.stdout[-2000:] + out.stderr[-2000:]
