"""The command line's conventions: -q/-v through the ``eto`` logger, progress, --help, exit codes.

Fast: no test builds or tunes; the commands that would are given stand-ins for :mod:`eto.api`'s
functions, which the command line calls (it is a thin layer over them).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from types import SimpleNamespace

import pytest

import eto.api
from eto.cli import build_parser, main
from eto.cli.errors import CLIError, run_command
from eto.cli.flags import HelpFormatter
from eto.cli.progress import Progress, console, log
from eto.errors import InputError
from eto.runs.tuning import SetStatus
from eto.store.database import META


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def parsers(parser: argparse.ArgumentParser, name: str = "eto"):
    """Every parser of the command line with its command name: the main one and each subcommand's."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from parsers(p, f"{name} {sub}")


# -- 1: -q / -v through logging ------------------------------------------------------------------
def test_messages_go_to_stderr_as_eto_lines_and_quiet_keeps_warnings_only(capsys, tmp_path):
    (tmp_path / "src").mkdir()
    code, out, err = run(capsys, "db", "merge", tmp_path / "dest", tmp_path / "src")
    assert code == 0 and out.startswith("merged into") and err == f"eto: {tmp_path / 'src'}: 0 results, 0 records, " \
        "0 orphan records, 0 unreadable lines\n"
    for argv in (("-q", "db", "merge"), ("db", "merge", "--quiet")):  # before or after the command's name
        code, again, err = run(capsys, *argv, tmp_path / "dest", tmp_path / "src")
        assert code == 0 and again == out and err == ""
    (tmp_path / "dest" / META).write_text("not json\n")  # a warning still shows under -q
    code, out, err = run(capsys, "db", "show", tmp_path / "dest", "-q")
    assert code == 0 and "programs" in out
    assert err.startswith(f"eto: warning: {tmp_path / 'dest' / META}:1") and err.count("\n") == 1
    assert logging.getLogger("eto").handlers == [] and logging.getLogger("eto").level == logging.NOTSET


def test_verbose_turns_debug_on_and_the_levels_are_put_back(capsys):
    with console(verbose=True):
        log.debug("looking")
        log.info("said")
    with console(quiet=True):
        log.info("hidden")
        log.warning("careful")
    assert capsys.readouterr().err == "eto: looking\neto: said\neto: warning: careful\n"
    assert not logging.getLogger("eto").handlers


def test_eto_warnings_print_as_eto_warnings(capsys):
    """A warning raised in eto's packages (``warnings.warn``) prints as the logger's warnings do; others
    are left to Python."""
    import os
    import warnings

    import eto.target

    with warnings.catch_warnings(record=True) as others, console():
        warnings.simplefilter("always")
        warnings.warn_explicit("db: no program for this target", RuntimeWarning, eto.target.__file__, 1)
        warnings.warn_explicit("elsewhere", RuntimeWarning, os.path.join(os.sep, "lib", "other.py"), 1)
    assert capsys.readouterr().err == "eto: warning: db: no program for this target\n"
    assert [str(w.message) for w in others] == ["elsewhere"]


# -- 2: progress ------------------------------------------------------------------------------------
def test_progress_off_a_terminal_is_plain_lines_at_info_with_honest_totals(capsys):
    with console(), Progress() as progress:
        assert not progress.live
        progress.on_batch("C2D a", 16, 64, 2e-6)
        progress.on_batch("reuse b", 10, 12, 1e-6)
        progress.on_batch("reuse b", 20, 12, 1e-6)  # past the plan's estimate: the total grows, never full
        progress.on_batch("reuse c", 5, 0, float("inf"))  # no estimate: no total
        progress.say(SetStatus(done=1, total=4, elapsed=5.0, eta=15.0, finished=["b"]))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("eto:   C2D a") and "[#####               ]   16/64   best       2.00 us" in lines[0]
    assert " 20/30 " in lines[2] and lines[2].endswith("(more than the 12 planned)") and "#" * 20 not in lines[2]
    assert "    5/?    best         -" in lines[3] and lines[3].endswith("ETA -")
    assert lines[4] == "eto: set: 1/4 operators, 0:05 elapsed, ETA 0:15"
    with console(quiet=True), Progress() as progress:
        assert progress.on_batch is None  # -q: no progress at all


def test_progress_on_a_terminal_updates_bars_in_place(capsys):
    screen = Terminal()
    with console(), Progress(screen) as progress:
        assert progress.live
        progress.on_batch("C2D a", 32, 64, 2e-6)
        bar = progress.bars["C2D a"]
        assert (bar.n, bar.total) == (32, 64)
        progress.on_batch("C2D a", 64, 64, 1e-6)  # its budget spent: the bar goes, its last state stays as a line
        assert "C2D a" not in progress.bars
        progress.on_batch("reuse b", 10, 12, 1e-6)
        progress.on_batch("reuse b", 20, 12, 1e-6)
        bar = progress.bars["reuse b"]
        assert (bar.n, bar.total) == (20, 30) and "more than the 12 planned" in bar.desc
        log.info("a message above the bars")
        progress.say(SetStatus(done=2, total=3, elapsed=5.0, eta=3.0, finished=["b"]))
        assert not progress.bars and (progress.set_bar.n, progress.set_bar.total) == (2, 3)
    drawn = screen.getvalue()
    assert "\r" in drawn and "32/64" in drawn and "20/30" in drawn and "2/3 operators, 0:05 elapsed, ETA 0:03" in drawn
    assert capsys.readouterr().err.splitlines() == [  # closed bars leave a line: what was measured, against what
        "eto:   C2D a: 64 trials (64 planned) in 0:00, best 1.00 us", "eto: a message above the bars",
        "eto:   reuse b: 20 trials (12 planned) in 0:00, best 1.00 us"]


def test_a_reuse_search_reports_the_plans_estimate_as_its_budget(monkeypatch):
    """The reuse search's display gets the plan's estimate as the budget even past it (the display
    grows the total), not max(measured, estimate), which read full while the search went on."""
    import tuner.reuse.search
    from eto.runs import derive

    batches, fell_back = [], []

    def reuse_tune(func, record, target, measurer, options, *, on_measured, on_batch, **_kw):
        for _ in range(3):
            on_measured([SimpleNamespace(run_secs=[1e-5])], 8, 0.1)
            on_batch()
        return SimpleNamespace(record=None, failed=0)

    monkeypatch.setattr(tuner.reuse.search, "reuse_tune", reuse_tune)
    monkeypatch.setattr(derive, "leads", lambda *a: ([], []))
    db = SimpleNamespace(search_base=lambda *a, **k: SimpleNamespace(tuning_record=None), checkpoint=lambda *a, **k: None,
                         progress=lambda *a: SimpleNamespace(programs=lambda: [], seconds=0.0))
    run = SimpleNamespace(database=db, target=None, options=SimpleNamespace(reuse=None), ranker=None,
                          on_batch=lambda *a: batches.append(a), fallback=lambda *a, **k: fell_back.append(a))
    alpha, beta = SimpleNamespace(name="a", prim_func=lambda: None), SimpleNamespace(name="b")
    derive.ReuseSearch().derive(alpha, beta, run, None, estimate={"estimate": 12.4})
    assert [b[1:3] for b in batches] == [(8, 12), (16, 12), (24, 12)] and batches[0][0] == "reuse a"
    assert fell_back  # nothing built: the backend's turn


# -- 3: eto build --json ------------------------------------------------------------------------------
def test_build_json_says_what_was_written_applied_and_missing(capsys, tmp_path, monkeypatch):
    import eto.cli.model

    def task(name, flops, weight=1):
        return SimpleNamespace(name=name, weight=weight, flops=flops, reason="",
                               op=SimpleNamespace(name=f"op_{name}", key=f"KEY({name})"))

    applied, missing, instant = task("conv", 300, 2), task("dense", 100), task("bmm", 200)
    failed = task("pool", 50)  # a stored program that did not apply: build_model warned, with TVM's error
    left = SimpleNamespace(name="reshape", weight=1, reason="no loop nest")
    built = SimpleNamespace(applied=(applied, instant), missing=(missing, failed), instant=(instant,),
                            fallbacks=((failed, "its trace does not replay: no"),), unprogrammed=(missing,),
                            target='{"kind": "llvm"}',
                            tasks=SimpleNamespace(left_alone=(left,)), applied_flops_share=0.8,
                            executable=SimpleNamespace(export_library=lambda path: open(path, "w").close()))
    calls = []
    monkeypatch.setattr(eto.cli.model, "_load", lambda args: (SimpleNamespace(name="tiny"), "db", "target"))
    monkeypatch.setattr(eto.api, "build", lambda model, **kw: calls.append((model, kw)) or SimpleNamespace(built=built))
    code, out, err = run(capsys, "build", "--model", "m.onnx", "--db", tmp_path, "-o", tmp_path / "m.so", "--json")
    assert code == 0 and (tmp_path / "m.so").exists() and calls[0][1] == {"database": "db", "target": "target"}
    report = json.loads(out)
    assert report["output"] == str(tmp_path / "m.so") and report["model"] == "tiny"
    assert report["target"] == {"kind": "llvm"}
    assert [t["name"] for t in report["applied"]] == ["conv", "bmm"] and report["applied"][1]["instant"]
    assert report["missing"] == [{"name": "dense", "op": "op_dense", "key": "KEY(dense)", "calls": 1, "flops": 100},
                                 {"name": "pool", "op": "op_pool", "key": "KEY(pool)", "calls": 1, "flops": 50,
                                  "error": "its trace does not replay: no"}]
    assert report["applied_flops_share"] == 0.8 and report["instant"] == ["bmm"]
    assert report["left_alone"] == [{"name": "reshape", "calls": 1, "reason": "no loop nest"}]
    assert "eto: warning: dense" in err and "eto: warning: pool" not in err
    assert "2 of 4 tunable tasks run programs from" in err
    assert "(80.0% of their FLOPs), 1 on TVM's default schedule as their program did not apply (pool)" in err


# -- 4: --help ----------------------------------------------------------------------------------------
def test_every_option_has_help_and_every_help_shows_defaults():
    missing, plain = [], []
    for name, parser in parsers(build_parser()):
        if not issubclass(parser.formatter_class, HelpFormatter):
            plain.append(name)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{name} {c.dest}" for c in action._choices_actions if not c.help]
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not plain, f"parsers without eto's HelpFormatter: {plain}"
    assert not missing, f"options without help: {missing}"


@pytest.mark.parametrize("command, main_option, advanced_options", [
    ("tune", "--trials", ["--solver", "--bridges", "--cost", "--hot-share", "--evolve", "--search",
                          "--trials-per-iter", "--strategy", "--plan-budget"]),
    ("plan", "--method", ["--solver", "--bridges", "--time-limit"]),
    ("retune", "--vary", ["--strategy", "--plan-budget", "--finalists"]),
    ("bench", "--rounds", ["--ms-search"]),
])
def test_experiment_knobs_come_after_the_main_options(capsys, command, main_option, advanced_options):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    advanced = text.index("\nadvanced:\n")
    assert text.index(f"  {main_option} ") < advanced
    for option in advanced_options:
        assert text.index(f"  {option} ") > advanced, option
    if command == "tune":
        assert "(default: 64)" in text and "(default: eto-db)" in text


# -- 5: errors ----------------------------------------------------------------------------------------
def _raising(exc: BaseException):
    def command(_args):
        raise exc
    return command


@pytest.mark.parametrize("exc", [CLIError("bad flag"), InputError("bad operator"), FileNotFoundError("no such file"),
                                 __import__("eto.models").models.MissingExtraError("pip install onnx"),
                                 __import__("eto.options").options.OptionError("trials", "must be positive")])
def test_user_errors_are_bad_input(capsys, exc):
    assert run_command(_raising(exc), argparse.Namespace(verbose=False)) == 2
    assert capsys.readouterr().err == f"eto: error: {exc}\n"


def test_anything_else_is_an_internal_error_with_a_traceback_under_verbose(capsys, monkeypatch):
    import eto.cli.ops

    assert run_command(_raising(ValueError("a bug")), argparse.Namespace(verbose=False)) == 3  # not bad input
    assert capsys.readouterr().err.startswith("eto: internal error: ValueError: a bug\n")
    monkeypatch.setattr(eto.cli.ops, "builtin_opsets", lambda: {}["boom"])
    code, out, err = run(capsys, "ops", "list")
    assert code == 3 and out == "" and "Traceback" not in err
    assert err.splitlines() == ["eto: internal error: KeyError: 'boom'",
                                "eto: this is a bug in eto, please report it with the command line and its traceback "
                                "(run the command again with -v to print it)"]
    code, _, err = run(capsys, "ops", "list", "-v")
    assert code == 3 and err.startswith("Traceback (most recent call last)") and "KeyError: 'boom'" in err
    assert err.endswith("the traceback above\n")
    with pytest.raises(SystemExit):
        run_command(_raising(SystemExit(4)), argparse.Namespace(verbose=False))


@pytest.mark.parametrize("call", [
    lambda: __import__("eto.operators").operators.Operator.parse("BMM(B=0,M=1,N=1,K=1)"),
    lambda: __import__("eto.operators").operators.Operator.parse("FOO(x=1)"),
    lambda: __import__("eto.operators.opsets").operators.opsets.load_opset("resnet51"),
    lambda: __import__("eto.operators.opsets").operators.opsets.parse_vary("seq"),
    lambda: __import__("eto.shapes.dispatch").shapes.dispatch.parse_symbolic("M"),
])
def test_bad_operators_sets_and_shapes_raise_input_errors(call):
    with pytest.raises(InputError):
        call()


def test_bench_plot_without_matplotlib_fails_before_the_benchmark(capsys, monkeypatch, tmp_path):
    import eto.cli.model
    import eto.models.bench

    ran = []
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    monkeypatch.setattr(eto.models.bench, "bench_model", lambda *a, **k: ran.append("bench"))
    monkeypatch.setattr(eto.cli.model, "_load", lambda args: ran.append("load"))
    code, _, err = run(capsys, "bench", "--model", "m.onnx", "--db", tmp_path, "--plot", tmp_path / "f.png")
    assert code == 2 and "--plot needs matplotlib" in err and ran == []


# -- 6: the command line over eto.api ----------------------------------------------------------------
def test_tune_calls_the_api_with_its_progress_and_verbose(capsys, tmp_path, monkeypatch):
    from eto.runs.tuning import TuneReport

    calls = []

    def tune(what, **kw):
        calls.append((what, kw))
        kw["log"]("planned")
        return TuneReport("llvm", (), 0.0)

    monkeypatch.setattr(eto.api, "tune", tune)
    argv = ["tune", "--op", "BMM(B=1,M=16,N=16,K=16)", "--db", tmp_path / "db", "--trials", "8"]
    code, out, err = run(capsys, *argv, "--method", "metaschedule", "-v", "--json")
    (what, kw), = calls
    assert code == 0 and json.loads(out)["operators"] == [] and len(what) == 1
    assert kw["method"] == "metaschedule" and kw["verbose"] and kw["on_batch"] is None  # --json: no batches
    assert kw["options"].backend.trials == 8 and "eto: planned" in err and "eto: options: " in err  # -v: debug
    code, _, err = run(capsys, *argv, "-q")
    assert code == 0 and err == "" and calls[1][1]["on_batch"] is None and calls[1][1]["method"] is None
    code, _, err = run(capsys, *argv)
    assert calls[2][1]["on_batch"] is not None and "tuning 1 with eto (reuse)" in err and "eto: planned" in err


def test_retune_calls_the_api_with_the_new_sets(capsys, tmp_path, monkeypatch):
    calls = []

    def retune(what, **kw):
        calls.append((what, kw))
        return SimpleNamespace(rows=[], to_json=lambda: {"rows": []})

    monkeypatch.setattr(eto.api, "retune", retune)
    (tmp_path / "db").mkdir()
    code, out, _ = run(capsys, "retune", "--op", "BMM(B=1,M=16,N=16,K=16)", "--vary", "M=32,64", "--db",
                       tmp_path / "db", "--json", "--instant-only")
    (shapes, kw), = calls
    assert code == 0 and json.loads(out) == {"rows": []}
    assert [v for v, _ in shapes] == [32, 64] and [e.op.params for _, e in [(v, s.entries[0]) for v, s in shapes]] \
        == [(("B", 1), ("M", 32), ("N", 16), ("K", 16)), (("B", 1), ("M", 64), ("N", 16), ("K", 16))]
    assert kw["dim"] == "M" and kw["instant_only"] and kw["log"] is None  # --json: no progress messages
