"""docs/deploy.md's recipes, run as the page writes them: a library ``eto build`` wrote, loaded with eto
and with TVM alone; an eto database applied by MetaSchedule's ``MetaScheduleApplyDatabase`` after
TVM's own fusion passes, the weights pre-packed as eto tuned them.

Scale ci: a convolution without bias, a batch norm, ReLU, a mean and a classifier (ResNet's stem in
small), exported with torch.export and tuned at 4 trials per task. The page's code blocks are taken
from the page and executed in a directory holding the files they name (``model.pt2``, ``eto-db``);
every output is compared with PyTorch's, and which functions the database scheduled is checked.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from eto.cli import main

torch = pytest.importorskip("torch")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "deploy.md"
NOT_FOUND = "Tuning record is not found for primfunc"
#: the two lines of the database recipe that fold batch norms (eto's preparation)
FOLDS = ("relax.transform.FoldBatchnormToConv2D()(mod)", "relax.transform.FoldConstant()(mod)")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def network():
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)).eval()
    with torch.no_grad():  # statistics that change the output: a wrong fold shows
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
        net[1].weight.uniform_(0.5, 1.5)
        net[1].bias.uniform_(-0.5, 0.5)
    return net


def pytorch(x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return network()(torch.from_numpy(x)).numpy()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """``model.pt2`` and ``eto-db`` (``eto tune --model --layout NCHW`` at 4 trials per task, as the page's
    TVM-alone recipe asks) in one directory."""
    import eto
    from tuner.measure.backend import light_search

    d = tmp_path_factory.mktemp("deploy")
    torch.export.save(torch.export.export(network(), (torch.randn(1, 3, 224, 224),)), str(d / "model.pt2"))
    report = eto.tune(d / "model.pt2", database=d / "eto-db", layout="NCHW", trials=4, num_trials_per_iter=4,
                      search=light_search(), function_trials=2, seed=0)
    assert {r.status for r in report.rows} == {"tuned"} and not any(r.error for r in report.rows)
    return d


@pytest.fixture
def workdir(tuned, tmp_path, monkeypatch) -> Path:
    """A fresh directory holding the tuned files under the names the page uses."""
    for name in ("model.pt2", "eto-db"):
        os.symlink(tuned / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_block(code: str) -> dict:
    namespace: dict = {"__name__": "deploy_recipe"}
    exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102 -- the page's own code
    return namespace


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def scheduled(namespace: dict) -> set[str]:
    """The tasks of the recipe's module that its database replaced (``MetaScheduleApplyDatabase`` marks
    the functions it replaced; a task whose weights were then packed runs as ``<task>_prepacked``, the
    packing, folded away at build time, is ``<task>_weight_prepack``)."""
    import tvm

    from eto.models.prepack import task_symbol

    return {task_symbol(gv.name_hint) for gv, f in namespace["mod"].functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and "tirx.is_scheduled" in f.attrs
            and not gv.name_hint.endswith("_weight_prepack")}


def test_the_page_has_its_recipes():
    """What the slow tests below take from the page (fast: reads the page only)."""
    python = blocks("python")
    assert len(python) == 3 and "eto.load(" in python[0] and "tvm.runtime.load_module(" in python[1]
    assert all(p in python[2] for p in ("AttachAttrLayoutFreeBuffers()", "MetaScheduleApplyDatabase(",
                                        "SplitLayoutRewritePreproc()", *FOLDS))
    assert any(line.startswith("eto build ") for line in blocks("bash")[0].splitlines())


@pytest.mark.slow
def test_a_built_library_runs_with_eto_and_with_tvm_alone(workdir, capsys):
    """``eto build`` as the page runs it, every tunable task on a stored program; both loading recipes
    give PyTorch's outputs, the same from either."""
    (build,) = [line for line in blocks("bash")[0].splitlines() if line.startswith("eto build ")]
    assert main(shlex.split(build)[1:]) == 0
    err = capsys.readouterr().err
    assert "4 of 4 tunable tasks run programs from eto-db (100.0% of their FLOPs)" in err, err
    with_eto, with_tvm = (run_block(code) for code in blocks("python")[:2])
    for ns in (with_eto, with_tvm):
        assert ns["y"].shape == (1, 10)
        np.testing.assert_allclose(ns["y"], pytorch(ns["x"]), rtol=1e-4, atol=1e-5)
    # each recipe draws its own input: the TVM-alone VM on eto's input gives eto's output exactly
    x, dev = with_eto["x"], with_tvm["dev"]
    np.testing.assert_array_equal(with_tvm["vm"]["main"](with_tvm["tvm"].runtime.tensor(x, dev))[0].numpy(),
                                  with_eto["y"])


@pytest.mark.slow
def test_tvms_passes_apply_the_database_after_etos_preparation(workdir, capfd):
    """The database recipe as written: every fused function found in the database (none named
    on stderr, every one replaced), outputs PyTorch's, the database's files unchanged. Without the
    two fold lines (the preparation skipped) the convolution is not found: it keeps TVM's default
    schedule, named on stderr, and the outputs are still right."""
    from eto.models import load_relax
    from eto.models.tasks import model_tasks
    from eto.target import parse_target

    before = digest(workdir / "eto-db")
    capfd.readouterr()
    ns = run_block(blocks("python")[2])
    err = capfd.readouterr().err
    assert NOT_FOUND not in err, err
    np.testing.assert_allclose(ns["y"], pytorch(ns["x"]), rtol=1e-4, atol=1e-5)
    tasks = {t.name for t in model_tasks(load_relax(workdir / "model.pt2"), parse_target("cpu")).tasks}
    assert len(tasks) == 4 and scheduled(ns) == tasks  # the tasks eto tuned, each replaced
    assert re.search(r"call\s+fused_conv2d\w*_prepacked", ns["ex"].as_text())  # its weight packed at build time
    assert (workdir / "model.so").stat().st_size > 0 and digest(workdir / "eto-db") == before

    skipped = blocks("python")[2]
    for line in FOLDS:
        skipped = skipped.replace(line, "mod")
    ns = run_block(skipped)
    err = capfd.readouterr().err
    missing = set(re.findall(rf"{NOT_FOUND}: (\S+)", err))
    # (a function's number follows the names already taken in the process)
    assert {"conv2d", "fused_batch_norm_relu"} <= {re.sub(r"\d+$", "", m) for m in missing}, err
    assert scheduled(ns) and scheduled(ns).isdisjoint(missing) and len(scheduled(ns)) < len(tasks)
    np.testing.assert_allclose(ns["y"], pytorch(ns["x"]), rtol=1e-4, atol=1e-5)
