"""The walkthrough notebook: it runs top to bottom at scale ci on a fresh install (nbclient), and the
copy stored in the repository holds only what a reader should see: no MetaSchedule tables, no
absolute paths, and outputs (if any) from a run at scale small."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "walkthrough.ipynb"
#: what MetaSchedule's task scheduler shows per batch in a Jupyter kernel (a pandas table, then totals)
MS_TABLE = re.compile(r"Total trials:|Total latency \(us\):|Weighted Latency \(us\)|Speed \(GFLOPS\)")
#: an absolute path on Linux or macOS: a reader's machine has none of them
ABSOLUTE = re.compile(r"(?<![\w.~-])/(?:tmp|home|work|root|Users|var|private)(?:/|\b)")


def outputs(nb) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def texts(output) -> list[str]:
    """Every text an output holds: a stream's, an error's traceback, each text-like MIME type's."""
    if output.output_type == "stream":
        return [output.text]
    if output.output_type == "error":
        return [output.ename, output.evalue, *output.traceback]
    return [v if isinstance(v, str) else "".join(v) for k, v in output.get("data", {}).items()
            if k.startswith("text/") or k.endswith("json")]


def problems(nb) -> list[str]:
    """What a stored or executed notebook must not show, one line each."""
    found = []
    for i, output in enumerate(outputs(nb)):
        for text in texts(output):
            if table := MS_TABLE.search(text):
                found.append(f"output {i}: a MetaSchedule table: {table.group(0)!r}")
            if path := ABSOLUTE.search(text):
                found.append(f"output {i}: an absolute path: {text[path.start():].split()[0]!r}")
        if "text/html" in output.get("data", {}):
            found.append(f"output {i}: an HTML table (MetaSchedule shows its tables as pandas DataFrames)")
    return found


def stdout(nb) -> str:
    return "\n".join(o.text for o in outputs(nb) if o.output_type == "stream" and o.name == "stdout")


def test_the_checks_catch_a_metaschedule_table_and_a_tmp_path():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("tune()", outputs=[
        nbformat.v4.new_output("display_data", data={
            "text/plain": "     Name  FLOP  Weight  Speed (GFLOPS)  Latency (us)", "text/html": "<table></table>"}),
        nbformat.v4.new_output("stream", name="stdout", text="\nTotal trials: 8\nTotal latency (us): 11.4\n"),
        nbformat.v4.new_output("stream", name="stdout", text="scale ci: 8 trials, work folder /tmp/nbwork2\n"),
        nbformat.v4.new_output("stream", name="stdout", text="databases in walkthrough-work/, 3.5 us/op\n"),
    ])])
    found = problems(nb)
    assert [f.split(":")[0] for f in found] == ["output 0", "output 0", "output 1", "output 2"], found
    assert found[3] == "output 2: an absolute path: '/tmp/nbwork2'"


def test_stored_notebook_shows_no_metaschedule_tables_nor_absolute_paths():
    assert problems(nbformat.read(NOTEBOOK, as_version=4)) == []


def test_stored_notebook_outputs_if_any_come_from_scale_small():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    if not outputs(nb):
        pytest.skip("stored with outputs cleared")
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "".join(o.text for o in first.outputs if o.output_type == "stream").startswith("scale small: 64 trials")
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    assert all(c.execution_count is not None for c in nb.cells if c.cell_type == "code")  # executed in full


def test_notebook_tunes_and_retunes_through_the_public_api():
    source = "\n".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
    for call in ("eto.tune(", 'method="metaschedule"', "eto.retune(", "eto.operator_set(", "eto.TuneOptions"):
        assert call in source
    for deep in ("eto.runs.", "eto.shapes.", "tune_with_backend", "eto.store.", "eto.options"):
        assert deep not in source


@pytest.mark.slow
# not serial: nothing in it is timed, and alone on the cores it held the serial part up for 2+ minutes
def test_walkthrough_runs_and_shows_plan_convergence_comparison_and_retune(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("ETO_NOTEBOOK_SCALE", "ci")
    # beside the other test workers eto tune finds the machine busy and says so, with its file's path;
    # nothing here is timed, and the check below is for what the notebook shows on its own
    monkeypatch.setenv("PYTHONWARNINGS", "ignore:other processes used:RuntimeWarning")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    assert problems(nb) == []  # run in a kernel, where MetaSchedule would show its tables
    assert str(tmp_path) not in "\n".join(t for o in outputs(nb) for t in texts(o))
    text = stdout(nb)
    pngs = [o for o in outputs(nb) if "image/png" in o.get("data", {})]
    assert len(pngs) == 2  # the plan over its OC graph, the convergence plot
    assert text.startswith("scale ci: 8 trials, light search, databases in walkthrough-work/")
    assert "root  (total" in text and "tuning time: eto " in text
    assert "weighted throughput eto / MetaSchedule:" in text
    assert "2 new operators in" in text  # both batch matmuls at a new size, each retuned
    # both runs left databases, relative to the notebook's folder, that TVM's own JSON database reads
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    for name in ("eto", "metaschedule"):
        db = JSONDatabase(work_dir=str(tmp_path / "walkthrough-work" / name))
        assert len(db.get_all_tuning_records()) >= 3
