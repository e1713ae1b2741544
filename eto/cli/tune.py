"""``eto tune``: tune an operator set (built-in, a JSON file, ``--op`` texts or a model) into a database.

TVM and MetaSchedule are imported inside the command, never when the parser is built.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Sequence

from tuner.measure.options import DEFAULT_TRIALS, DEFAULT_TRIALS_PER_ITER
from eto.models import extract_from_file
from eto.operators import Operator
from eto.operators.task import FUNCTION_TRIALS
from eto.operators.opsets import OperatorSet, load_opset
from eto.report import format_table
from eto.cli.errors import EXIT_FAILED, EXIT_OK, CLIError, check_target
from eto.cli.ops import add_dim_option, add_fast_math_option, parse_dims
from eto.cli.plan import add_prior_option, add_strategy_option, distance_weight_of, max_reduction_ratio_of, top_k_of

if TYPE_CHECKING:  # pragma: no cover
    from eto.options import TuneOptions
    from tvm.target import Target

    from eto.store.database import Database
    from eto.models.load import RelaxModel
    from eto.runs.tuning import TuneReport

DEFAULT_DB = "eto-db"


def operators_from_args(args: argparse.Namespace) -> OperatorSet:
    """The set to tune from ``--opset``, ``--op`` or ``--model`` (at most one; default quickstart)."""
    given = [flag for flag, v in (("--opset", args.opset), ("--op", args.op), ("--model", args.model)) if v]
    if len(given) > 1:
        raise CLIError(f"give one of --opset, --op and --model, not {' and '.join(given)}")
    if args.model:
        result = extract_from_file(args.model, dims=parse_dims(args.dim))
        for u in result.unsupported:
            print(f"eto: {args.model}: not tuned: {u.count} x {u.op} ({u.reason})", file=sys.stderr)
        return result.opset
    if args.op:
        return OperatorSet.from_layers("operators", [Operator.parse(t) for t in args.op])
    return load_opset(args.opset or "quickstart")


def add_operator_options(p: argparse.ArgumentParser) -> None:
    """``--opset``, ``--op`` and ``--model`` (read by :func:`operators_from_args`): one copy for tune and retune."""
    p.add_argument("--opset", help="built-in set name or JSON file (default: quickstart)")
    p.add_argument("--op", action="append", help="one operator, e.g. 'BMM(B=1,M=128,N=768,K=768)' (repeatable)")
    p.add_argument("--model", help="an ONNX model or torch.export .pt2 file: eto tune tunes the fused tasks Relax "
                   "compiles for it (eto build applies them), eto retune its operators")
    add_dim_option(p)
    add_fast_math_option(p)


def _open_database(path: str, priors: Sequence[str] = ()) -> "Database":
    """The database to write, with the programs of every prior database (read, never written) copied in:
    they cost nothing in the plan and serve as reuse sources, and the written database alone then holds
    every program its operators need."""
    from eto.store.database import Database

    for prior in priors:  # checked before anything is created
        if not os.path.isdir(prior):
            raise CLIError(f"--prior {prior}: no such database directory")
    db = Database(path)
    for p in db.problems:
        print(f"eto: warning: {os.path.join(path, str(p))} (skipped)", file=sys.stderr)
    for prior in priors:
        if os.path.abspath(prior) == os.path.abspath(path):
            continue
        counts = db.merge_from(Database(prior, readonly=True))
        print(f"eto: prior database {prior}: {counts['results']} results, {counts['records']} records copied into "
              f"{path}", file=sys.stderr)
    return db


def tasks_opset(model: "RelaxModel", target: "Target", *, fast_math: bool = False, label: str) -> OperatorSet:
    """The fused tasks Relax compiles for ``model`` (:mod:`eto.models.tasks`), ``fast_math`` applied
    first; those without a catalogue type (TASK operators, tuned after the plan) and those left alone
    are named on stderr, after ``label``."""
    from eto.models.fast_math import fast_math as approximate
    from eto.models.tasks import model_tasks

    tasks = model_tasks(approximate(model, fast_math), target)
    for t in tasks.left_alone:
        print(f"eto: {label}: not tuned: {t.weight} x {t.name} ({t.reason})", file=sys.stderr)
    functions = tasks.backend_only
    if functions:
        print(f"eto: {label}: {len(functions)} tasks without a catalogue type are tuned by the backend "
              f"(--function-trials each) or reused from the same task at another size: "
              f"{', '.join(t.name for t in functions)}", file=sys.stderr)
    return tasks.opset


def _tune(args: argparse.Namespace) -> int:
    from eto.target import parse_target
    from eto.runs.tuning import progress_printer, tune_with_backend

    target = parse_target(args.target)
    if args.fast_math and not args.model:
        raise CLIError("--fast-math applies to --model (it rewrites the model's functions)")
    if args.model and not (args.op or args.opset):
        from eto.models import load_relax

        opset = tasks_opset(load_relax(args.model, dims=parse_dims(args.dim)), target, fast_math=args.fast_math,
                            label=args.model)
    else:
        opset = operators_from_args(args)
    if args.method == "metaschedule" and (args.hot_share is not None or args.evolve or args.rpc or args.devices != 1):
        raise CLIError("--hot-share, --evolve, --rpc and --devices apply to --method eto only")
    if args.method in ("topk", "st") and (args.hot_share is not None or args.evolve):
        raise CLIError(f"--hot-share and --evolve apply to --method eto only, not {args.method}")
    # every flag checked before the database is opened: bad flags leave no empty database behind
    devices = _rpc_devices(args)
    options = tune_options_of(args)
    db = _open_database(args.db, args.prior)
    check_target(db, target, fatal=False)  # its programs are neither sources nor skipped
    todo = [e for e in opset if not db.attempted(e.op, target)]
    how = {"metaschedule": "MetaSchedule for every operator", "eto": "eto (reuse)",
           "topk": "eto's plan with TopK instead of the reuse tuner (baseline)",
           "st": "Selective Tuning (baseline)"}[args.method]
    print(f"eto: {opset.name}: {len(opset)} operators, {len(opset) - len(todo)} already in {args.db}; "
          f"tuning {len(todo)} with {how}, backend budget {args.trials} trials, target {target}", file=sys.stderr)
    from tuner.measure.backend import search_strategy

    options = options.replace(search=search_strategy(args.search))
    on_batch = None if args.json or args.quiet else progress_printer()
    if args.method == "metaschedule":
        report = tune_with_backend(opset, target, db, options.backend, on_batch=on_batch, verbose=args.verbose)
    else:
        from eto.runs.pipeline import tune

        from tuner.measure.measurer import Measurer

        measurers = None if devices is None else [Measurer.rpc(*devices[:3]) for _ in range(devices[3])]
        try:
            report = tune(opset, target, db, options, measurer=measurers, on_batch=on_batch,
                          log=None if args.quiet else (lambda m: print(f"eto: {m}", file=sys.stderr, flush=True)))
        finally:
            for m in measurers or ():
                m.close()
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(_report_table(report))
    return EXIT_FAILED if report.failed else EXIT_OK


#: flags whose value is an option field as it is (flag attribute -> TuneOptions.of name)
_OPTION_FLAGS = {"trials": "trials", "trials_per_iter": "num_trials_per_iter", "seed": "seed",
                 "plan_budget": "plan_budget", "bridges": "bridges", "cost": "cost", "strategy": "strategy",
                 "hot_share": "hot_share", "hot_factor": "hot_factor", "evolve": "evolve_trials"}


def tune_options_of(args: argparse.Namespace) -> "TuneOptions":
    """The :class:`eto.options.TuneOptions` that a command's flags say (``eto tune``, ``eto retune``),
    checked there, once; a bad value names its flag."""
    from eto.options import OptionError, TuneOptions

    given = vars(args)
    method = given.get("method", "eto")
    try:
        return TuneOptions.of(  # MetaSchedule alone (--method metaschedule) reads the backend's options only
            method="eto" if method == "metaschedule" else method,
            **{field: given[flag] for flag, field in _OPTION_FLAGS.items() if flag in given},
            top_k=top_k_of(args), max_reduction_ratio=max_reduction_ratio_of(args),
            distance_weight=distance_weight_of(args), finalists=finalists_of(args),
            function_trials=function_trials_of(args), polish=None if args.polish else False)
    except OptionError as exc:
        flag = {field: flag for flag, field in _OPTION_FLAGS.items()}.get(exc.name, exc.name)
        raise CLIError(f"--{flag.replace('_', '-')} {exc.message}") from None


def add_finalists_option(p: argparse.ArgumentParser) -> None:
    """``--finalists``: one copy for ``eto tune`` and ``eto retune``."""
    from tuner.measure.finalists import DEFAULT_FINALISTS

    p.add_argument("--finalists", type=int, default=DEFAULT_FINALISTS, metavar="F",
                   help=f"reuse tuner: time every candidate briefly (3 runs of >= 10 ms) and the F best again in "
                        f"full, which picks the winner (in ETO_SETTLE_PROCESSES runner processes, default 1; with "
                        f"2 or more the backend's F best are timed so too) (default {DEFAULT_FINALISTS}; 0: every "
                        f"candidate in full, about 0.2 s more each on a CPU; the plan's time model assumes the "
                        f"default)")


def finalists_of(args: argparse.Namespace) -> int:
    if args.finalists < 0:
        raise CLIError(f"--finalists must be >= 0 (0: every candidate timed in full), got {args.finalists}")
    return args.finalists


def add_function_trials_option(p: argparse.ArgumentParser, more: str = "") -> None:
    p.add_argument("--function-trials", type=int, default=None, metavar="N",
                   help=f"backend trials for each of a model's functions outside the catalogue (softmax, norms, "
                        f"element-wise) that cannot be reused (default {FUNCTION_TRIALS}, at most --trials){more}")


def function_trials_of(args: argparse.Namespace) -> int | None:
    if args.function_trials is not None and args.function_trials < 1:
        raise CLIError(f"--function-trials must be positive, got {args.function_trials}")
    return args.function_trials


def _rpc_devices(args: argparse.Namespace) -> "tuple[str, int, str, int] | None":
    """``--rpc HOST:PORT --rpc-key KEY --devices N``: (host, port, key, N) of the tracker's devices, checked
    (None: measure locally)."""
    if args.rpc is None:
        if args.devices != 1:
            raise CLIError("--devices needs --rpc (a tracker with that many devices)")
        return None
    host, _, port = args.rpc.rpartition(":")
    if not host or not port.isdigit():
        raise CLIError(f"--rpc {args.rpc!r}: expected HOST:PORT of an RPC tracker")
    if not args.rpc_key:
        raise CLIError("--rpc needs --rpc-key (the key the devices registered under)")
    if args.devices < 1:
        raise CLIError(f"--devices must be positive, got {args.devices}")
    return host, int(port), args.rpc_key, args.devices


def _report_table(report: "TuneReport") -> str:
    """One row per operator, then the weighted latency, candidates measured, wall time and failures."""
    def est(v: float | None, digits: int) -> object:
        return "-" if v is None else round(v, digits)

    rows = [(r.op, r.frequency, r.status, r.method, r.source or "-", r.candidates, est(r.estimated_candidates, 0),
             round(r.seconds, 1), est(r.estimated_seconds, 1),
             "-" if r.latency_s is None else round(r.latency_s * 1e6, 2),
             "-" if not r.gflops else round(r.gflops, 1)) for r in report.rows]
    lines = [format_table(("operator", "freq", "status", "method", "source", "trials", "est", "seconds", "est s",
                           "latency_us", "GFLOP/s"), rows, align="lrlllrrrrrr")]
    w = report.weighted_latency_s
    tuned = sum(r.candidates for r in report.rows if r.status == "tuned")
    estimate = "" if report.estimated_candidates is None else f" (plan estimated {report.estimated_candidates:.0f})"
    est_s = "" if report.estimated_seconds is None else f" (plan estimated {report.estimated_seconds:.0f} s)"
    lines.append(f"weighted latency sum: {'-' if w is None else f'{w * 1e3:.4f} ms'}; candidates measured "
                 f"{tuned}{estimate}; wall time {report.seconds:.1f} s{est_s}; failed: {len(report.failed)}")
    for r in report.failed:
        lines.append(f"  failed: {r.op}: {r.error}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eto tune`` and its options."""
    p = subparsers.add_parser("tune", help="tune an operator set into a database")
    add_operator_options(p)
    p.add_argument("--method", default="eto", choices=["eto", "metaschedule", "ansor", "topk", "st"],
                   type=lambda m: "metaschedule" if m == "ansor" else m,
                   help="eto: reuse pair selection + backend for roots + reuse tuner (default); "
                        "metaschedule (alias ansor): MetaSchedule for every operator; the paper's baselines: topk (eto's plan, "
                        "each reuse by TopK: the parent's top 3 programs applied, no search), st (Selective "
                        "Tuning: clusters by tuning-space overlap, one backend root each, the rest by TopK)")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help="measured candidates per backend-tuned operator")
    add_function_trials_option(p, "; --method metaschedule gives them --trials")
    p.add_argument("--plan-budget", type=int, default=None,
                   help="backend cost per operator when planning (default: --trials) (eto)")
    p.add_argument("--bridges", default="1hop", choices=["none", "1hop", "all"], help="bridge operators (eto)")
    p.add_argument("--cost", default="estimate", choices=["estimate", "analytic"],
                   help="OC-graph edge costs: the tuner's trial estimator or the analytic stand-in (eto)")
    add_strategy_option(p, suffix=" (eto)")
    add_finalists_option(p)
    p.add_argument("--hot-share", type=float, default=None, metavar="SHARE",
                   help="frequency-aware tuning (beyond the paper): operators with at least this share of the "
                        "set's frequency x FLOPs get backend tuning with --hot-factor x --trials, never reuse (eto)")
    p.add_argument("--hot-factor", type=float, default=2.0, help="budget multiplier for --hot-share operators")
    p.add_argument("--evolve", type=int, default=0, metavar="N",
                   help="reuse-then-evolve (beyond the paper): N more MetaSchedule trials per reused operator, "
                        "continuing from every candidate the reuse tuner measured (eto)")
    p.add_argument("--rpc", metavar="HOST:PORT", help="measure on devices of this TVM RPC tracker (eto)")
    p.add_argument("--rpc-key", help="device key registered with the tracker")
    p.add_argument("--devices", type=int, default=1,
                   help="tune this many independent subtrees of the plan at once, one RPC device each (eto)")
    p.add_argument("--trials-per-iter", type=int, default=DEFAULT_TRIALS_PER_ITER, help="MetaSchedule batch size")
    p.add_argument("--db", default=DEFAULT_DB, help=f"the database to write (default: {DEFAULT_DB})")
    add_prior_option(p, "their programs are copied into --db, cost nothing in the plan and are reused")
    p.add_argument("--target", default="cpu", help="cpu (this machine), cuda, or a TVM tag")
    p.add_argument("--search", default="evolutionary", choices=["evolutionary", "light"],
                   help="MetaSchedule's evolutionary search with its defaults, or a small-population one")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--verbose", action="store_true", help="MetaSchedule's own logging on the console")
    p.set_defaults(func=_tune)
