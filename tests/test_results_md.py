"""experiments/RESULTS.md is what ``python -m experiments.tools.results_md`` writes from the canonical result
files (no TVM, well under a second): a changed result file, or a changed experiment table in
experiments/README.md, without the page regenerated fails here."""

import subprocess
import sys
from pathlib import Path

from experiments.tools import results_md

ROOT = Path(__file__).resolve().parent.parent


def test_results_md_is_up_to_date():
    done = subprocess.run([sys.executable, "-m", "experiments.tools.results_md", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + "\nregenerate it: python -m experiments.tools.results_md"


def test_every_experiment_row_has_a_section_and_every_canonical_file_a_summary():
    rows = results_md.experiment_rows(results_md.README.read_text())
    page = results_md.render_page(results_md.README.read_text())
    assert [r["id"] for r in rows][:2] == ["E1", "E2"] and "E9" in [r["id"] for r in rows]
    for row in rows:
        assert f"## {row['id']}: " in page
        for name in row["files"]:
            assert f"(results/{name})" in page


def test_the_check_fails_on_a_stale_page(tmp_path, monkeypatch):
    stale = tmp_path / "RESULTS.md"
    stale.write_text("# Results of the experiments\n\nan old page\n")
    monkeypatch.setattr(results_md, "OUT", stale)
    assert results_md.main(["--check"]) == 1
    assert results_md.main([]) == 0
    assert results_md.main(["--check"]) == 0
