"""--fast-math: a model's GELU and softmax as TVM's vectorisable approximations; on CPUs erf always
(eto.models.fast_math)."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from eto.operators import Operator

from tests.test_model_path import cpu, failed_rows, files, pytorch_outputs, run, tuned  # noqa: F401  (fixtures)

torch = pytest.importorskip("torch")


def _calls(func, target) -> set[str]:
    """The functions the compiled ``func`` calls (its LLVM IR)."""
    import tvm
    from tvm.ir import IRModule

    lib = tvm.compile(IRModule({"main": func}), target=target)
    mods = [lib.mod, *getattr(lib.mod, "imports", [])]
    ir = next(src for m in mods for src in [_source(m)] if src)
    return set(re.findall(r"call [^@\n]*@([\w.]+)", ir))


def _source(mod) -> str:
    try:
        return mod.inspect_source("ll")
    except Exception:  # a module without LLVM IR (the host wrapper)
        return ""


@pytest.mark.slow  # builds the model
def test_fast_math_swaps_gelu_and_softmax_and_keeps_the_outputs(files, cpu):  # noqa: F811
    from eto.models import load_relax
    from eto.models.build import build_model, model_inputs
    from eto.models.fast_math import fast_math
    from eto.models.tasks import model_tasks

    exact = load_relax(files["tiny_transformer"])
    assert fast_math(exact, on=False) is exact
    fast = fast_math(exact)
    assert "fast math" in fast.source
    names = [t.name for t in model_tasks(fast, cpu).tasks]
    assert any("fast_erf" in n for n in names) and any("fast_softmax" in n for n in names)
    assert not any("gelu" in n or re.search(r"(?<!fast_)softmax", n) for n in names)
    built = build_model(fast, None, cpu)
    inputs = model_inputs(built.tasks, seed=5)
    for got, want in zip(built.run(inputs), pytorch_outputs("tiny_transformer", inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # builds the functions
def test_on_a_cpu_gelu_calls_no_scalar_erf_with_or_without_fast_math(files, cpu):  # noqa: F811
    """Why: TVM's erf is the C library's scalar erff, called per element even in a vectorised loop;
    on CPUs eto computes erf with TVM's polynomial (vector_math), so one program serves both."""
    from tvm import te, topi
    from tvm_ffi import structural_equal

    from eto.models import load_relax
    from eto.models.fast_math import fast_math
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    def gelu_task(model, target=cpu):
        (task,) = [t for t in model_tasks(model, target).tasks if "gelu" in t.name or "erf" in t.name]
        return task

    x = te.placeholder((64,), "float32", name="x")
    assert "erff" in _calls(te.create_prim_func([x, topi.erf(x)]), cpu)  # the reason, still TVM's
    model = load_relax(files["tiny_transformer"])
    exact, fast = gelu_task(model), gelu_task(fast_math(model))
    assert "fast_erf" in exact.name and "erff" not in _calls(exact.mod["main"], cpu)
    assert structural_equal(exact.mod["main"], fast.mod["main"])
    assert "gelu" in gelu_task(model, parse_target("cuda")).name  # a GPU's erf is left to its compiler


@pytest.mark.slow  # builds the model
def test_on_a_cpu_sigmoid_calls_no_scalar_expf_and_keeps_the_outputs(cpu):  # noqa: F811
    """Why: TVM lowers sigmoid to 1 / (1 + exp(-x)) and LLVM's vector exp is the C library's scalar expf,
    called per element (a 112x112x96 SiLU: 2.4 ms scalar, 0.3 ms as fast_exp here). SiLU and a
    squeeze-and-excitation gate, as EfficientNet writes them: no task calls expf, outputs as PyTorch's."""
    from eto.models.build import build_model
    from eto.models.load import torch_to_relax
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    class SiLUGate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 1)

        def forward(self, x):
            y = torch.nn.functional.silu(self.conv(x))
            return y * torch.sigmoid(self.fc(y.mean((2, 3), keepdim=True)))

    torch.manual_seed(0)
    module = SiLUGate().eval()
    x = torch.randn(1, 8, 12, 12) * 4
    model = torch_to_relax(module, (x,))
    tasks = model_tasks(model, cpu).tasks
    assert sum("fast_exp" in t.name for t in tasks) >= 2, [t.name for t in tasks]
    assert not any("expf" in _calls(t.mod["main"], cpu) for t in tasks)
    built = build_model(model, None, cpu)
    (got,) = built.run([x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-5, atol=1e-6)
    assert not any("fast_exp" in t.name for t in model_tasks(model, parse_target("cuda")).tasks)


@pytest.mark.slow  # builds the model
def test_on_a_cpu_tanh_softmax_and_cubes_call_no_scalar_math_and_keep_the_outputs(cpu):  # noqa: F811
    """Why: GPT-2's GELU (``0.5 x (1 + tanh(c (x + 0.044715 x^3)))``, ``torch.pow``) and its attention's
    softmax. LLVM computes ``pow`` with a scalar ``powf`` call per element, and TVM's ``tanh`` and softmax
    with scalar ``expf``: its GELU task alone took 27% of the model (3.9 ms a layer, ONNX Runtime's 0.16
    ms). On CPUs they are products and polynomials; no task calls the C library, outputs as PyTorch's."""
    import math

    from eto.models.build import build_model
    from eto.models.load import torch_to_relax
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 32)

        def forward(self, x):
            h = self.fc(x)
            g = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
            return torch.softmax(g @ g.transpose(-1, -2), dim=-1) + torch.pow(h, 2.0).mean()

    torch.manual_seed(0)
    module = Block().eval()
    x = torch.randn(1, 24, 16)
    model = torch_to_relax(module, (x,))
    tasks = model_tasks(model, cpu).tasks
    names = [t.name for t in tasks]
    assert any("fast_tanh" in n for n in names) and any("fast_softmax" in n for n in names), names
    scalar = {name: sorted({"powf", "expf", "tanhf"} & _calls(t.mod["main"], cpu)) for name, t in zip(names, tasks)}
    assert not any(scalar.values()), scalar
    built = build_model(model, None, cpu)
    (got,) = built.run([x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-5, atol=1e-6)
    gpu_names = [t.name for t in model_tasks(model, parse_target("cuda")).tasks]
    assert not any("fast_" in n for n in gpu_names) and any("power" in n for n in gpu_names), gpu_names


@pytest.mark.slow  # builds the function
def test_the_vector_tanh_is_within_a_relative_3e_7(cpu):  # noqa: F811
    """The error docs/models.md gives for tanh on CPUs (``topi.fast_tanh``), against float64 tanh on
    float32 points; TVM's own ``tanh`` there is ``expf``-based, and worse near 0 (relative 2.6e-3)."""
    import tvm
    from tvm import te, topi

    x = te.placeholder((1 << 16,), "float32", name="x")
    lib = tvm.compile(te.create_prim_func([x, topi.fast_tanh(x)]), target=cpu)
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.normal(0, 1, 1 << 15), rng.uniform(-12, 12, (1 << 15) - 8),
                         [0.0, 1e-30, -1e-8, 3e-4, 8.9, 9.1, np.inf, -np.inf]]).astype("float32")
    out = tvm.runtime.tensor(np.zeros_like(xs))
    lib(tvm.runtime.tensor(xs), out)
    want = np.tanh(xs.astype(np.float64))
    err = np.abs(out.numpy().astype(np.float64) - want)
    assert err.max() < 4e-7
    assert (err / np.maximum(np.abs(want), 1e-30))[want != 0].max() < 4e-7


@pytest.mark.slow  # builds the function
def test_the_vector_erf_is_within_a_few_units_in_the_last_place(cpu):  # noqa: F811
    """The error docs/models.md gives for erf on CPUs: against float64 erf, on float32 points."""
    import math

    import tvm
    from tvm import te, topi

    x = te.placeholder((1 << 16,), "float32", name="x")
    lib = tvm.compile(te.create_prim_func([x, topi.fast_erf(x)]), target=cpu)
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.normal(0, 1, 1 << 15), rng.uniform(-6, 6, 1 << 15)]).astype("float32")
    out = tvm.runtime.tensor(np.zeros_like(xs))
    lib(tvm.runtime.tensor(xs), out)
    want = np.array([math.erf(v) for v in xs.astype(np.float64)])
    err = np.abs(out.numpy().astype(np.float64) - want)
    assert (err / np.spacing(np.abs(want).astype(np.float32))).max() < 8
    assert (err / np.maximum(np.abs(want), 1e-30)).max() < 5e-7


@pytest.mark.slow  # builds the model
def test_the_tanh_gelu_is_written_out_for_fast_tanh_and_keeps_the_outputs(tmp_path, cpu):  # noqa: F811
    """GELU's tanh form (GPT-2's) is legalised late too: written out, FastMathTransform sees its tanh."""
    from eto.models import load_relax
    from eto.models.build import build_model, model_inputs
    from eto.models.fast_math import fast_math
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(approximate="tanh")).eval()
    x = torch.randn(4, 16)
    path = str(tmp_path / "gelu_tanh.pt2")
    torch.export.save(torch.export.export(module, (x,)), path)
    exact = load_relax(path)
    assert any("gelu" in t.name for t in model_tasks(exact, parse_target("cuda")).tasks)
    for model in (exact, fast_math(exact)):  # on a CPU, fast math or not (vector_math)
        names = [t.name for t in model_tasks(model, cpu).tasks]
        assert any("fast_tanh" in n for n in names) and not any("gelu" in n for n in names), names
    built = build_model(fast_math(exact), None, cpu)
    (inp,) = model_inputs(built.tasks, seed=3)
    with torch.no_grad():
        want = module(torch.from_numpy(inp)).numpy()
    np.testing.assert_allclose(built.run([inp])[0], want, rtol=1e-4, atol=1e-4)


def test_fast_math_applies_to_models_only(capsys):
    code, _, err = run(capsys, "tune", "--opset", "quickstart", "--fast-math", "--trials", "2")
    assert code == 2 and "--fast-math applies to --model" in err


@pytest.mark.slow  # tunes the model (tuned)
def test_the_plan_reads_a_models_tuned_tasks_back_with_their_functions(files, tuned, cpu):  # noqa: F811
    """A database reads a fused task without its function; the plan takes it from the stored workload
    (a second ``eto tune --model`` into a database with the model's bridges failed on them)."""
    from tvm_ffi import structural_equal

    from eto.store.database import Database
    from eto.models import load_relax
    from eto.models.tasks import model_tasks
    from eto.planning.nodes import stored_function

    db_dir, _ = tuned("tiny_cnn")
    db = Database(db_dir, readonly=True)
    assert any(op.fusion and op.task is None for op in db.tuned(cpu))
    ops = {stored_function(op, p) for op, p in db.tuned(cpu).items()}
    assert ops and all(op.task is not None for op in ops if op.fusion)
    for t in model_tasks(load_relax(files["tiny_cnn"]), cpu).catalogue:
        (op,) = [o for o in ops if o == t.op]
        assert structural_equal(op.prim_func(), t.mod["main"])
    plain = Operator.create("BMM", B=1, M=8, N=8, K=8)
    assert stored_function(plain, None) is plain  # a catalogue operator has its program already


@pytest.mark.slow
def test_on_a_cpu_fast_math_finds_a_transformers_functions_tuned_already(files, tuned, cpu, capsys, tmp_path):  # noqa: F811
    """The tiny transformer's GELU (erf) and softmax are vector math on CPUs with or without --fast-math
    (the same functions: FastMathTransform's and vector_math's), so tuning it again with the flag
    finds every task in the database, and the build with the flag uses them."""
    db_dir, _ = tuned("tiny_transformer")
    shutil.copytree(db_dir, tmp_path / "db")
    code, out, err = run(capsys, "tune", "--model", files["tiny_transformer"], "--fast-math", "--db", tmp_path / "db",
                         "--trials", "4", "--trials-per-iter", "4", "--search", "light", "--json", "--quiet")
    assert code == 0, err + failed_rows(out)
    import json

    rows = json.loads(out)["operators"]
    assert rows and not [r["key"] for r in rows if r["status"] == "tuned"]
    assert any("fast_softmax" in r["key"] for r in rows) and any("fast_erf" in r["key"] for r in rows)
    code, _, err = run(capsys, "build", "--model", files["tiny_transformer"], "--fast-math", "--db", tmp_path / "db",
                       "-o", tmp_path / "m.so")
    assert code == 0 and "default schedule" not in err, err
