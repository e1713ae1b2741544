"""The ops and target commands: output a script can rely on, exit codes, no TVM on the way."""

import json
import subprocess
import sys

import pytest

from eto.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ops_types_lists_the_catalogue(capsys):
    code, out, _ = run(capsys, "ops", "types")
    assert code == 0
    for t in ("C1D", "C2D", "C3D", "BMM", "GRP", "DEP", "T2D", "CAP", "WIN", "FRB", "DENSE"):
        assert any(line.startswith(t + " ") for line in out.splitlines()), t
    assert "[N, CO, OH, OW | CI, KH, KW]" in out


def test_ops_show_json_has_loop_nests(capsys):
    code, out, _ = run(capsys, "ops", "show", "bert_base", "--json")
    assert code == 0
    items = json.loads(out)
    assert len(items) == 5
    for item in items:
        assert {"type", "space", "reduction", "frequency", "params"} <= set(item)
    assert {tuple(i["space"] + i["reduction"]) for i in items} >= {(12, 128, 128, 64)}
    assert sum(i["frequency"] for i in items) == 96


def test_ops_show_table_and_list(capsys):
    code, out, _ = run(capsys, "ops", "show", "resnet50")
    assert code == 0 and "20 distinct operators, 53 layers" in out
    code, out, _ = run(capsys, "ops", "list")
    assert code == 0 and "mobilenetv2" in out and "bert_l" in out


def test_ops_show_file_and_errors(capsys, tmp_path):
    f = tmp_path / "set.json"
    f.write_text(json.dumps({"name": "mine", "operators": [
        {"type": "DEP", "params": {"N": 1, "C": 8, "H": 8, "W": 8, "KH": 3, "KW": 3}, "frequency": 2}]}))
    code, out, _ = run(capsys, "ops", "show", str(f), "--json")
    assert code == 0 and json.loads(out)[0]["frequency"] == 2
    code, _, err = run(capsys, "ops", "show", "resnet51")
    assert code == 2 and "unknown operator set 'resnet51'" in err
    f.write_text(json.dumps({"operators": [{"type": "C2D", "params": {"N": 1}}]}))
    code, _, err = run(capsys, "ops", "show", str(f))
    assert code == 2 and "operator #0" in err and "missing parameter CI" in err


def test_console_script_does_not_import_tvm():
    code = ("import sys; from eto.cli import main; main(['ops', 'show', 'mobilenetv2', '--json']); "
            "sys.stderr.write('TVM' if 'tvm' in sys.modules else 'NO_TVM')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stderr.endswith("NO_TVM")


@pytest.mark.slow  # a fresh process per command, TVM imported
def test_commands_without_a_model_import_tvm_without_torch():
    """`eto target` as the process's command: TVM without PyTorch, which stays importable."""
    code = ("import sys; sys.argv = ['eto', 'target', 'cpu', '--json']; from eto.cli import main; main(); "
            "loaded = 'tvm' in sys.modules, 'torch' in sys.modules; import torch; "
            "sys.stderr.write(repr(loaded + (torch.ones(2).sum().item(),)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stderr.strip().endswith("(True, False, 2.0)"), r.stderr


def test_a_time_budget_counts_from_the_process_start(monkeypatch):
    """``--time-budget`` is the command's wall time: as the process's own command, Python's start and its
    imports (1-3 s) count; called in a process already running (a notebook, these tests), from the call."""
    import argparse
    import time

    import eto.cli.plan as plan_cli
    from eto.cli.flags import budget_left

    code = "import time; time.sleep(0.5); from eto.cli import process_age; print(process_age())"
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.5 <= age < 30
    assert 54.5 < budget_left(argparse.Namespace(time_budget=60.0, started=time.perf_counter() - 5.0)) <= 55.0
    assert budget_left(argparse.Namespace(time_budget=None, started=0.0)) is None
    seen = []
    monkeypatch.setattr(plan_cli, "_plan", lambda args: seen.append(args.started) or 0)  # registered by main
    before = time.perf_counter()
    assert main(["plan", "--op", "BMM(B=1,M=8,N=8,K=8)"]) == 0
    assert before <= seen[0] <= time.perf_counter()  # in-process: from the call, not from the process's start


def test_target_show(capsys):
    code, out, _ = run(capsys, "target", "nvidia/nvidia-a100", "--json")
    assert code == 0 and json.loads(out)["max_threads_per_block"] == 1024


def test_plan_names_an_unknown_target_and_exits_2(capsys, tmp_path, monkeypatch):
    """``eto plan`` parses the target as ``eto tune`` does, even with the analytic costs."""
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "--target", "foo", "--cost", "analytic"]) == 2
    assert "unknown target 'foo'" in capsys.readouterr().err


def test_db_merge_checks_every_source_before_creating_the_destination(capsys, tmp_path):
    assert main(["db", "merge", str(tmp_path / "dest"), str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such database directory" in capsys.readouterr().err
    assert not (tmp_path / "dest").exists()
