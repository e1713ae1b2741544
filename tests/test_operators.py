"""The operator catalogue: programs versus numpy, loop nests versus hand computation, bad input."""

import math

import numpy as np
import pytest

from eto.operators import Operator, operator_type, operator_types, transform_weight

# Two configurations per type, with the major loop nest computed by hand for each.
CASES = [
    # C1D: OL = (L + 2p - d(K-1) - 1)/s + 1
    ("C1D", dict(N=2, CI=3, L=10, CO=4, K=3, dilation=2), (2, 4, 6, 3, 3)),
    ("C1D", dict(N=1, CI=5, L=17, CO=6, K=5, stride=2, padding=2), (1, 6, 9, 5, 5)),
    # C2D: [N, CO, OH, OW, CI, KH, KW]
    ("C2D", dict(N=1, CI=4, H=9, W=9, CO=6, KH=3, KW=3, stride=2, padding=1), (1, 6, 5, 5, 4, 3, 3)),
    ("C2D", dict(N=2, CI=3, H=8, W=11, CO=5, KH=1, KW=3), (2, 5, 8, 9, 3, 1, 3)),
    # C2DNHWC (channels last): [N, OH, OW, CO, KH, KW, CI]
    ("C2DNHWC", dict(N=1, CI=4, H=9, W=9, CO=6, KH=3, KW=3, stride=2, padding=1), (1, 5, 5, 6, 3, 3, 4)),
    ("C2DNHWC", dict(N=2, CI=3, H=8, W=11, CO=5, KH=1, KW=3, dilation=(1, 2)), (2, 8, 7, 5, 1, 3, 3)),
    # DEPNHWC (channels last): [N, OH, OW, C, KH, KW]
    ("DEPNHWC", dict(N=1, C=5, H=8, W=8, KH=3, KW=3, stride=2, padding=1), (1, 4, 4, 5, 3, 3)),
    ("DEPNHWC", dict(N=2, C=3, H=7, W=6, KH=3, KW=3, dilation=2, padding=2), (2, 7, 6, 3, 3, 3)),
    # C3D: [N, CO, OD, OH, OW, CI, KD, KH, KW]
    ("C3D", dict(N=1, CI=3, D=5, H=6, W=6, CO=4, KD=3, KH=1, KW=3, stride=(1, 2, 2), padding=(1, 0, 1)),
     (1, 4, 5, 3, 3, 3, 3, 1, 3)),
    ("C3D", dict(N=1, CI=2, D=4, H=5, W=5, CO=3, KD=1, KH=3, KW=3), (1, 3, 4, 3, 3, 2, 1, 3, 3)),
    # GRP: [N, CO, OH, OW, CI/groups, KH, KW]
    ("GRP", dict(N=1, CI=8, H=7, W=7, CO=4, KH=3, KW=3, groups=2, padding=1), (1, 4, 7, 7, 4, 3, 3)),
    ("GRP", dict(N=2, CI=6, H=6, W=6, CO=9, KH=3, KW=3, groups=3, stride=2), (2, 9, 2, 2, 2, 3, 3)),
    # DEP: [N, C, OH, OW, KH, KW]
    ("DEP", dict(N=1, C=5, H=8, W=8, KH=3, KW=3, stride=2, padding=1), (1, 5, 4, 4, 3, 3)),
    ("DEP", dict(N=2, C=3, H=7, W=6, KH=3, KW=3, dilation=2, padding=2), (2, 3, 7, 6, 3, 3)),
    # T2D: OH = (H-1)s - 2p + K + output_padding
    ("T2D", dict(N=1, CI=4, H=5, W=5, CO=3, KH=4, KW=4, stride=2, padding=1), (1, 3, 10, 10, 4, 4, 4)),
    ("T2D", dict(N=1, CI=3, H=3, W=4, CO=2, KH=3, KW=3, stride=2, padding=1, output_padding=1),
     (1, 2, 6, 8, 3, 3, 3)),
    # CAP: [N, OH, OW, cap_i, cap_j, CO, KH, KW, cap_k, CI]
    ("CAP", dict(N=1, H=6, W=6, CI=3, CO=2, K=3, capsule=2, padding=1), (1, 6, 6, 2, 2, 2, 3, 3, 2, 3)),
    ("CAP", dict(N=2, H=7, W=7, CI=2, CO=3, K=3, capsule=4, stride=2), (2, 3, 3, 4, 4, 3, 3, 3, 4, 2)),
    # BMM: [b, i, j, k]
    ("BMM", dict(B=2, M=5, N=6, K=7), (2, 5, 6, 7)),
    ("BMM", dict(B=3, M=16, N=8, K=1), (3, 16, 8, 1)),
    ("DENSE", dict(M=5, N=6, K=7), (5, 6, 7)),
    ("DENSE", dict(M=1, N=33, K=17), (1, 33, 17)),
    # FRB: [b, i, j]
    ("FRB", dict(B=3, M=5, N=7), (3, 5, 7)),
    ("FRB", dict(B=1, M=64, N=2), (1, 64, 2)),
    # WIN: [alpha, alpha, CO, P, CI] with P = N * ceil(OH/m) * ceil(OW/m)
    ("WIN", dict(N=1, CI=3, H=9, W=9, CO=4, tile_size=2), (4, 4, 4, 25, 3)),
    ("WIN", dict(N=2, CI=3, H=11, W=10, CO=4, tile_size=4), (6, 6, 4, 18, 3)),
]


def test_every_type_is_covered():
    catalogue = {t.name for t in operator_types() if not t.backend_only}
    assert catalogue == {"C1D", "C2D", "C2DNHWC", "C3D", "BMM", "GRP", "DEP", "DEPNHWC", "T2D", "CAP", "WIN", "FRB", "DENSE"}
    assert {t.name for t in operator_types() if t.backend_only} == {"TASK"}  # tests/test_model_path.py
    covered = {c[0] for c in CASES}
    for name in catalogue:
        assert sum(c[0] == name for c in CASES) >= 2, name
    assert covered == catalogue


def test_a_model_function_has_no_catalogue_program():
    """TASK (a model's function outside the catalogue) is read back from a database by its key, but
    its program only ever comes from its model, and it is never a bridge."""
    op = Operator.parse("TASK(size=64,hash=12345)+softmax")
    assert op.flops == 0 and op.extents == (64,) and op.sketch_key() == "TASK:12345"
    with pytest.raises(ValueError, match="comes from its model"):
        op.prim_func()
    with pytest.raises(ValueError, match="comes from its model"):
        op.anchor.prim_func()
    with pytest.raises(ValueError, match="not built from a loop nest"):
        Operator.from_loop_nest("TASK", [64], hash=12345)


@pytest.mark.parametrize("type_,params,extents", CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_loop_nest_matches_hand_computation(type_, params, extents):
    op = Operator.create(type_, **params)
    assert op.extents == extents
    spec = operator_type(type_)
    assert len(op.space) == len(spec.space_names) and len(op.reduction) == len(spec.reduction_names)


@pytest.mark.slow  # builds each program with LLVM
@pytest.mark.parametrize("type_,params,extents", CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_program_matches_numpy(type_, params, extents, run_llvm):
    op = Operator.create(type_, **params)
    inputs = op.random_inputs(seed=1)
    out = run_llvm(op, inputs)
    assert out.shape == op.output_shape
    np.testing.assert_allclose(out, op.reference(*inputs), rtol=1e-4, atol=1e-4)


def test_numpy_references_agree_with_independent_formulas():
    rng = np.random.default_rng(0)
    # C2D reference against a naive loop.
    op = Operator.create("C2D", N=1, CI=2, H=5, W=5, CO=3, KH=3, KW=3, stride=2, padding=1)
    x, w = op.random_inputs(seed=3)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    naive = np.zeros(op.output_shape)
    for o in range(3):
        for i in range(3):
            for j in range(3):
                naive[0, o, i, j] = np.sum(xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[o].astype(np.float64))
    np.testing.assert_allclose(op.reference(x, w), naive, rtol=1e-10)
    # GRP equals two independent C2D on the channel halves.
    g = Operator.create("GRP", N=1, CI=4, H=5, W=5, CO=6, KH=3, KW=3, groups=2)
    x, w = g.random_inputs(seed=4)
    half = Operator.create("C2D", N=1, CI=2, H=5, W=5, CO=3, KH=3, KW=3)
    expect = np.concatenate([half.reference(x[:, :2], w[:3]), half.reference(x[:, 2:], w[3:])], axis=1)
    np.testing.assert_allclose(g.reference(x, w), expect, rtol=1e-10)
    # T2D is the adjoint of a strided C2D: <conv(x), y> == <x, convT(y)>.
    c = Operator.create("C2D", N=1, CI=3, H=8, W=8, CO=2, KH=4, KW=4, stride=2, padding=1)
    t = Operator.create("T2D", N=1, CI=2, H=4, W=4, CO=3, KH=4, KW=4, stride=2, padding=1)
    x = rng.normal(size=c.input_shapes[0])
    w = rng.normal(size=c.input_shapes[1])
    y = rng.normal(size=t.input_shapes[0])
    assert math.isclose(np.sum(c.reference(x, w) * y), np.sum(x * t.reference(y, w)), rel_tol=1e-9)


@pytest.mark.slow  # builds with LLVM
def test_winograd_equals_direct_convolution(run_llvm):
    for m in (2, 4):
        win = Operator.create("WIN", N=1, CI=4, H=10, W=10, CO=3, tile_size=m, padding=1)
        direct = Operator.create("C2D", N=1, CI=4, H=10, W=10, CO=3, KH=3, KW=3, padding=1)
        x, w = direct.random_inputs(seed=5)
        kernel_pack = transform_weight(w, m).astype("float32")
        np.testing.assert_allclose(run_llvm(win, [x, kernel_pack]), direct.reference(x, w), rtol=1e-4, atol=1e-4)
        assert win.flops == direct.flops


def test_flops_count_multiply_adds():
    op = Operator.create("C2D", N=1, CI=512, H=28, W=28, CO=128, KH=1, KW=1)
    assert op.flops == 2 * 128 * 28 * 28 * 512
    assert Operator.create("BMM", B=12, M=128, N=128, K=64).flops == 2 * 12 * 128 * 128 * 64


@pytest.mark.parametrize("type_,params,extents", CASES, ids=lambda v: v if isinstance(v, str) else None)
def test_from_loop_nest_round_trip(type_, params, extents):
    op = Operator.create(type_, **params)
    rebuilt = Operator.from_loop_nest(type_, op.extents, **op.structural)
    assert rebuilt.extents == op.extents
    # stride 1, padding 0, dilation 1 wherever the type has them (Definition 5)
    for name, default in (("stride", 1), ("dilation", 1)):
        if name in dict(rebuilt.params):
            assert set(np.atleast_1d(rebuilt[name])) == {default}
    if "padding" in dict(rebuilt.params):
        assert set(np.atleast_1d(rebuilt["padding"])) == {0}


def test_bridge_operator_of_the_papers_example():
    a = Operator.create("C2D", N=1, CI=64, H=16, W=16, CO=64, KH=3, KW=3)     # [1,64,14,14,64,3,3]
    b = Operator.create("C2D", N=1, CI=64, H=28, W=28, CO=64, KH=1, KW=1)     # [1,64,28,28,64,1,1]
    assert a.extents == (1, 64, 14, 14, 64, 3, 3)
    bridge = Operator.from_loop_nest("C2D", [min(x, y) for x, y in zip(a.extents, b.extents)])
    assert bridge.extents == (1, 64, 14, 14, 64, 1, 1)
    assert bridge == Operator.create("C2D", N=1, CI=64, H=14, W=14, CO=64, KH=1, KW=1)


@pytest.mark.parametrize(
    "type_,params,message",
    [
        ("C2D", dict(N=0, CI=3, H=8, W=8, CO=4, KH=3, KW=3), "parameter N must be positive"),
        ("C2D", dict(N=1, CI=3, H=8, W=8, CO=-4, KH=3, KW=3), "parameter CO must be positive"),
        ("C2D", dict(N=1, CI=3, H=8, W=8, CO=4, KH=3, KW=3, padding=-1), "parameter padding must be non-negative"),
        ("C2D", dict(N=1, CI=3, H=2, W=8, CO=4, KH=5, KW=3, padding=1), "kernel KH=5"),
        ("C1D", dict(N=1, CI=3, L=4, CO=4, K=3, dilation=2), "kernel K=3 (dilation 2)"),
        ("GRP", dict(N=1, CI=6, H=8, W=8, CO=4, KH=3, KW=3, groups=4), "groups=4 does not divide input channels"),
        ("GRP", dict(N=1, CI=8, H=8, W=8, CO=6, KH=3, KW=3, groups=4), "groups=4 does not divide output channels"),
        ("DEP", dict(N=1, C=4, H=2, W=2, KH=3, KW=3), "kernel KH=3"),
        ("CAP", dict(N=1, H=2, W=2, CI=3, CO=2, K=3), "kernel K=3"),
        ("T2D", dict(N=1, CI=2, H=2, W=2, CO=2, KH=3, KW=3, stride=2, output_padding=2), "output_padding 2"),
        ("WIN", dict(N=1, CI=2, H=8, W=8, CO=2, tile_size=1), "parameter tile_size=1"),
        ("C2D", dict(N=1, CI=3, H=8, W=8, CO=4, KH=3), "missing parameter KW"),
        ("C2D", dict(N=1, CI=3, H=8, W=8, CO=4, KH=3, KW=3, groups=2), "unknown parameter(s) groups"),
        ("C2D", dict(N=1, CI=3, H=8, W=8, CO=4, KH=3, KW=3, stride=(1, 2, 3)), "parameter stride must be an int or 2 ints"),
        ("BMM", dict(B=1, M=2.5, N=3, K=4), "parameter M must be an int"),
    ],
)
def test_bad_parameters_name_the_problem(type_, params, message):
    with pytest.raises(ValueError) as err:
        Operator.create(type_, **params)
    assert message in str(err.value)


def test_unknown_type_and_bad_loop_nests():
    with pytest.raises(ValueError, match="unknown operator type 'C4D'.*C2D"):
        Operator.create("C4D", N=1)
    with pytest.raises(ValueError, match="a loop nest has 7 extents"):
        Operator.from_loop_nest("C2D", [1, 2, 3])
    with pytest.raises(ValueError, match="loop extent OH must be positive"):
        Operator.from_loop_nest("C2D", [1, 2, 0, 3, 4, 1, 1])
    with pytest.raises(ValueError, match="needs structural parameter"):
        Operator.from_loop_nest("GRP", [1, 4, 7, 7, 4, 3, 3])


def test_operators_are_values():
    a = Operator.create("C2D", N=1, CI=3, H=8, W=8, CO=4, KH=3, KW=3, stride=1)
    b = Operator.create("C2D", N=1, CI=3, H=8, W=8, CO=4, KH=3, KW=3, stride=(1, 1))
    assert a == b and hash(a) == hash(b) and a.key == b.key
    assert Operator.from_dict(a.to_dict()) == a
    assert a.replace(N=16).extents[0] == 16
