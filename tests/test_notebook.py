"""The walkthrough notebook runs top to bottom at scale ci on a fresh install (nbclient)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "walkthrough.ipynb"


def test_walkthrough_runs_and_shows_plan_convergence_comparison_and_retune(tmp_path, monkeypatch):
    monkeypatch.setenv("ETO_NOTEBOOK_SCALE", "ci")
    monkeypatch.setenv("ETO_NOTEBOOK_WORK", str(tmp_path / "work"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stdout")
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 2  # the plan over its OC graph, the convergence plot
    assert "scale ci: 8 trials, light search" in text and "root  (total" in text
    assert "weighted throughput eto / MetaSchedule:" in text
    assert "2 new operators in" in text  # both batch matmuls at a new size, each retuned
    # both runs left databases that TVM's own JSON database reads
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    for name in ("eto", "metaschedule"):
        folder = tmp_path / "work" / name
        db = JSONDatabase(work_dir=str(folder))
        assert len(db.get_all_tuning_records()) >= 3
