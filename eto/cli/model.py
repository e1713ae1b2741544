"""``eto build`` and ``eto bench``: a model compiled with a database, and what the tuning bought.

Both read the model as ``eto tune --model`` does, so the fused tasks they look up are the ones it
tuned (:mod:`eto.models.tasks`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from typing import TYPE_CHECKING

from eto.report import format_table
from eto.cli.errors import EXIT_OK, CLIError, check_target
from eto.cli.flags import advanced
from eto.cli.ops import add_dim_option, add_fast_math_option, add_layout_option, parse_dims
from eto.cli.progress import log

if TYPE_CHECKING:  # pragma: no cover
    from eto.models.bench import BenchReport
    from eto.models.build import BuiltModel


def _load(args: argparse.Namespace):
    from eto.store.database import Database
    from eto.models import load_relax
    from eto.models.fast_math import fast_math
    from eto.target import parse_target

    if not os.path.isdir(args.db):
        raise CLIError(f"--db {args.db}: no such database directory")
    db = Database(args.db, readonly=True)
    target = parse_target(args.target)
    check_target(db, target, fatal=True)
    from eto.models.layout import layout_from_database

    model = fast_math(load_relax(args.model, dims=parse_dims(args.dim)), args.fast_math)
    return layout_from_database(model, db, target, args.layout, building=True), db, target


def _build(args: argparse.Namespace) -> int:
    import eto.api

    model, db, target = _load(args)
    built = eto.api.build(model, database=db, target=target).built
    for t in built.unprogrammed:  # a fallback's warning, with TVM's error, came from the build
        log.warning(f"{t.name} ({t.op}, {t.weight} call(s)) has no program in {args.db}: TVM's default schedule")
    for t in built.tasks.left_alone:
        log.info(f"{t.name}: default schedule ({t.reason})")
    if built.instant:
        log.info(f"{len(built.instant)} task(s) run instant programs, not tuned yet (eto retune without "
                 f"--instant-only tunes them): {', '.join(t.name for t in built.instant)}")
    built.executable.export_library(args.output)
    failed = (f", {len(built.fallbacks)} on TVM's default schedule as their program did not apply "
              f"({', '.join(t.name for t, _ in built.fallbacks)})") if built.fallbacks else ""
    log.info(f"{model.name}: {len(built.applied)} of {len(built.applied) + len(built.missing)} tunable tasks run "
             f"programs from {args.db} ({built.applied_flops_share:.1%} of their FLOPs){failed}, "
             f"{len(built.tasks.left_alone)} other tasks default-scheduled; wrote {args.output}")
    if args.json:
        print(json.dumps(build_json(model.name, built, args.output), indent=1))
    return EXIT_OK


def build_json(name: str, built: "BuiltModel", output: str) -> dict:
    """What ``eto build --json`` prints: the library written, each tunable task applied (from the database)
    or missing (TVM's default schedule; with ``error`` where its stored program did not apply), the share of
    their FLOPs applied, the tasks left alone."""
    def task(t) -> dict:
        return {"name": t.name, "op": t.op.name, "key": t.op.key, "calls": t.weight, "flops": t.flops}

    instant = {t.name for t in built.instant}
    errors = {t.name: why for t, why in built.fallbacks}
    return {"model": name, "output": output, "target": json.loads(str(built.target)),  # a Target's text: its JSON
            "applied": [{**task(t), "instant": t.name in instant} for t in built.applied],
            "missing": [{**task(t), **({"error": errors[t.name]} if t.name in errors else {})} for t in built.missing],
            "applied_flops_share": built.applied_flops_share,
            "instant": sorted(instant),
            "left_alone": [{"name": t.name, "calls": t.weight, "reason": t.reason} for t in built.tasks.left_alone]}


def _bench(args: argparse.Namespace) -> int:
    if args.plot:  # before the benchmark, not after minutes of it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CLIError("--plot needs matplotlib: pip install 'eto[experiments]'") from None
    from eto.models.bench import bench_model, join_processes, onnxruntime_session
    from eto.target import num_threads

    if args.onnx and not os.path.isfile(args.onnx):
        raise CLIError(f"--onnx {args.onnx}: no such file")
    if args.processes < 1:
        raise CLIError(f"--processes must be at least 1, got {args.processes}")
    model, db, target = _load(args)
    if args.profile:
        return _profile(args, model, db, target)
    torch_module = _torch_module(args.model)
    onnx_file = args.onnx or (None if zipfile.is_zipfile(args.model) else args.model)  # .pt2 files are zips
    try:
        session = onnxruntime_session(onnx_file, num_threads()) if onnx_file else None
    except Exception as e:  # noqa: BLE001 -- ONNX Runtime's errors derive from Exception: the other baselines run
        if args.onnx:
            raise CLIError(f"--onnx {args.onnx}: ONNX Runtime cannot load it: {e}") from None
        log.warning(f"ONNX Runtime cannot run {onnx_file} ({e}); benchmarking without it")
        session = None
    if args.onnx and session is None:
        raise CLIError("--onnx needs ONNX Runtime: pip install onnxruntime")
    with contextlib.ExitStack() as stack:
        ms_work = args.ms_work
        if args.ms_trials and ms_work is None and args.processes > 1:  # the other processes reuse the run
            ms_work = stack.enter_context(tempfile.TemporaryDirectory(prefix="eto-bench-ms-"))
        report = bench_model(model, target, database=db, torch_module=torch_module, onnx_session=session,
                             ms_trials=args.ms_trials, ms_search=args.ms_search, ms_work_dir=ms_work, rounds=args.rounds,
                             log=log.info)
        if args.processes > 1:
            report = join_processes([report, *(_bench_elsewhere(args, ms_work, k) for k in range(2, args.processes + 1))])
    if args.plot:
        from eto.plots import model_bench_figure

        model_bench_figure(report).savefig(args.plot, dpi=120)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(_bench_table(report))
    return EXIT_OK


def _profile(args: argparse.Namespace, model, db, target) -> int:
    """``eto bench --profile``: eto's build task by task against the fp32 peak and ONNX Runtime (eto.models.profile)."""
    from eto.models.profile import profile_figure, profile_model

    onnx_file = args.onnx or (None if zipfile.is_zipfile(args.model) else args.model)  # .pt2 files are zips
    report = profile_model(model, db, target=target, onnx=onnx_file, rounds=args.rounds, log=log.info)
    if args.plot:
        profile_figure(report).savefig(args.plot, dpi=120)
    print(json.dumps(report.to_json(), indent=1) if args.json else report.table())
    return EXIT_OK


def _bench_elsewhere(args: argparse.Namespace, ms_work: str | None, k: int) -> "BenchReport":
    """The same builds timed in a fresh process (``eto bench --processes 1``; MetaSchedule's run reused)."""
    from eto.models.bench import BenchReport

    cmd = [sys.executable, "-m", "eto", "bench", "--model", str(args.model), "--db", str(args.db), "--target",
           args.target, "--rounds", str(args.rounds), "--processes", "1", "--json",
           *(f"--dim={d}" for d in args.dim or ()), *(["--fast-math"] if args.fast_math else []),
           *(["--layout", args.layout] if args.layout else []),
           *(["--onnx", str(args.onnx)] if args.onnx else []),
           *(["--ms-trials", str(args.ms_trials), "--ms-search", args.ms_search, "--ms-work", str(ms_work)]
             if args.ms_trials else [])]
    log.info(f"timing process {k} of {args.processes}: {' '.join(cmd[1:])}")
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise CLIError(f"timing process {k} of {args.processes} exited {done.returncode} (its errors above)")
    return BenchReport.from_json(json.loads(done.stdout))


def _bench_table(report: "BenchReport") -> str:
    base = report.result("untuned").median_s
    rows = [[r.method, f"{r.median_s * 1e3:.3f}", f"{r.spread[0] * 1e3:.3f}-{r.spread[1] * 1e3:.3f}",
             " / ".join(f"{m * 1e3:.3f}" for m in r.process_medians_s),
             f"{base / r.median_s:.2f}x", "-" if r.tuning_s is None else f"{r.tuning_s:.0f}",
             f"{r.max_abs_error:.2g}", "-" if r.applied_flops_share is None else f"{r.applied_flops_share:.0%}"]
            for r in report.results]
    return format_table(["method", "median ms", "p10-p90 ms", "per process ms", "vs untuned", "tuning s",
                         f"max err vs {report.reference}", "tuned FLOPs"], rows)


def _torch_module(path: str):
    """PyTorch eager on the same weights, for ``torch.export`` archives (None for ONNX files)."""
    try:
        import torch
    except ImportError:
        return None
    if not zipfile.is_zipfile(path):
        return None
    from eto.target import num_threads

    torch.set_num_threads(num_threads())
    return torch.export.load(path).module()


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="an ONNX model or torch.export .pt2 file")
    p.add_argument("--db", required=True, help="the database eto tune --model wrote")
    p.add_argument("--target", default="cpu", help="target the database was tuned for (default: cpu)")
    add_dim_option(p)
    add_fast_math_option(p)
    add_layout_option(p)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("build", help="compile a model with a database's programs applied",
                              description="Compile a model with the database's programs applied to its fused tasks; "
                                          "tasks without one keep TVM's default schedules and are named.")
    _common(p)
    p.add_argument("-o", "--output", required=True, help="the compiled library to write (.so)")
    p.add_argument("--json", action="store_true",
                   help="print what was built as JSON: the library, applied and missing tasks by name, the "
                        "share of their FLOPs applied, tasks running instant programs, tasks left alone")
    p.set_defaults(func=_build)
    p = subparsers.add_parser("bench", help="end-to-end latency of a model: eto's database against the baselines",
                              description="Time the model built without tuning, with the database, with "
                                          "MetaSchedule's own tuning (--ms-trials) and PyTorch eager (.pt2 files), "
                                          "interleaved, in this process and --processes - 1 fresh ones; outputs "
                                          "compared with PyTorch's.")
    _common(p)
    p.add_argument("--ms-trials", type=int, default=None,
                   help="also tune the same tasks with MetaSchedule, this many trials each (slow)")
    p.add_argument("--onnx", help="the same model as an ONNX file: ONNX Runtime joins the baselines (an .onnx "
                   "--model is its own; needs onnxruntime)")
    p.add_argument("--rounds", type=int, default=5, help="timing rounds, methods interleaved (default 5)")
    p.add_argument("--processes", type=int, default=3,
                   help="time every build in this process and N - 1 fresh ones, each with --rounds rounds: a "
                        "program's speed is drawn per process and kept for its life (default 3; 1: this one)")
    p.add_argument("--plot", help="write a figure of latency and tuning time per method (PNG)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--profile", action="store_true",
                   help="instead of timing the methods, show where eto's build spends its time: per task its share, "
                        "GFLOP/s, fraction of the cores' fp32 peak, and ONNX Runtime's time for the same layers "
                        "(ONNX files or --onnx); --plot draws it, --json prints it")
    a = advanced(p)
    a.add_argument("--ms-search", choices=["evolutionary", "light"], default="evolutionary",
                   help="MetaSchedule's search: its default, or a small population for a quick look")
    a.add_argument("--ms-work", help="MetaSchedule's work directory: a finished run there is reused")
    p.set_defaults(func=_bench)
