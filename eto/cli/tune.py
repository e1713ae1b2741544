"""``eto tune``: tune an operator set (built-in, a JSON file, ``--op`` texts or a model) into a database.

TVM and MetaSchedule are imported inside the command, never when the parser is built.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Sequence

from eto.report import format_table
from eto.cli.errors import EXIT_FAILED, EXIT_OK, CLIError, check_target
from eto.cli.flags import (DEFAULT_DB, add_operator_options, add_prior_option, add_tuning_options, budget_left,
    tune_options_of, tuning_opset)
from eto.cli.progress import Progress, log

if TYPE_CHECKING:  # pragma: no cover
    from eto.store.database import Database
    from eto.runs.tuning import TuneReport


def _open_database(path: str, priors: Sequence[str] = ()) -> "Database":
    """:func:`eto.api.open_database`, its messages logged (a warning counts the lines it could not read);
    a missing prior is bad input."""
    from eto.api import open_database

    try:
        return open_database(path, priors, log=log.info)
    except FileNotFoundError as exc:
        raise CLIError(f"--prior {exc.filename}: no such database directory") from None


def _tune(args: argparse.Namespace) -> int:
    from tuner.measure import deadline

    with deadline.until(budget_left(args)):  # from the process's start: reading a model counts too
        return _tune_in(args)


def _tune_in(args: argparse.Namespace) -> int:
    import eto.api
    from eto.store.models import record_layout
    from eto.runs.tuning import clock
    from eto.target import parse_target

    target = parse_target(args.target)
    opset, layout = tuning_opset(args, target)
    if args.method == "metaschedule" and (args.hot_share is not None or args.evolve or args.rpc or args.devices != 1
                                          or args.time_budget is not None):
        raise CLIError("--hot-share, --evolve, --time-budget, --rpc and --devices apply to --method eto only")
    if args.method in ("topk", "st") and (args.hot_share is not None or args.evolve):
        raise CLIError(f"--hot-share and --evolve apply to --method eto only, not {args.method}")
    # every flag checked before the database is opened: bad flags leave no empty database behind
    devices = _rpc_devices(args)
    options = tune_options_of(args)
    db = _open_database(args.db, args.prior)
    check_target(db, target, fatal=False)  # its programs are neither sources nor skipped
    if layout is not None:  # eto build and bench compile the model in the layout it was tuned in
        record_layout(db.path, layout)
    todo = [e for e in opset if not db.attempted(e.op, target)]
    how = {"metaschedule": "MetaSchedule for every operator", "eto": "eto (reuse)",
           "topk": "eto's plan with TopK instead of the reuse tuner (baseline)",
           "st": "Selective Tuning (baseline)"}[args.method]
    log.info(f"{opset.name}: {len(opset)} operators, {len(opset) - len(todo)} already in {args.db}; "
             f"tuning {len(todo)} with {how}, " + (f"time budget {clock(args.time_budget)}" if args.time_budget
                                                   else f"backend budget {args.trials} trials") + f", target {target}")
    from tuner.measure.backend import search_strategy

    options = options.replace(search=search_strategy(args.search))
    log.debug(f"options: {options}")
    from tuner.measure.measurer import Measurer
    from tuner.measure.timing import measure_config

    config = measure_config(options.timing, target)
    measurers = None if devices is None else [Measurer.rpc(*devices[:3], config) for _ in range(devices[3])]
    try:
        with Progress() as progress:
            report = eto.api.tune(opset, target=target, database=db, options=options, measurer=measurers,
                                  method="metaschedule" if args.method == "metaschedule" else None,
                                  on_batch=None if args.json else progress.on_batch, log=progress.say,
                                  verbose=args.verbose)
    finally:
        for m in measurers or ():
            m.close()
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(_report_table(report))
    return EXIT_FAILED if report.failed else EXIT_OK


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
    est_s = "" if report.estimated_seconds is None else f" (plan estimated {report.estimated_seconds:.0f} s" + (
        f", {report.setup_seconds:.0f} s of it set-up and planning as measured" if report.setup_seconds else "") + ")"
    budget = "" if report.time_budget is None else f" of a {report.time_budget:.0f} s budget"
    lines.append(f"weighted latency sum: {'-' if w is None else f'{w * 1e3:.4f} ms'}; candidates measured "
                 f"{tuned}{estimate}; wall time {report.seconds:.1f} s{budget}{est_s}; failed: {len(report.failed)}")
    if report.pending:
        instant = sum(r.latency_s is not None for r in report.pending)
        why = f"stopped by the {report.stopped}" if report.stopped else "cut by the roots' share of the time budget"
        lines.append(f"{why}: {len(report.pending)} operators not reached"
                     + (f" ({instant} of them run instant programs until tuned)" if instant else "")
                     + "; the same command goes on from there")
    for r in report.failed:
        lines.append(f"  failed: {r.op}: {r.error}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eto tune`` and its options."""
    p = subparsers.add_parser("tune", help="tune an operator set or a model's tasks into a database",
                              description="Tune an operator set (built-in, a JSON file, --op texts) or a model's "
                                          "fused tasks into a database; a rerun resumes where it stopped.")
    add_operator_options(p)
    p.add_argument("--db", default=DEFAULT_DB, help="the database to write")
    add_prior_option(p, "their programs cost nothing in the plan and are reused; the results of the operators "
                        "tuned are copied into --db, so it alone builds the model")
    p.add_argument("--target", default="cpu", help="cpu (this machine), cuda, or a TVM tag")
    add_tuning_options(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON (no per-batch progress)")
    r = p.add_argument_group("remote devices")
    r.add_argument("--rpc", metavar="HOST:PORT", help="measure on devices of this TVM RPC tracker (eto)")
    r.add_argument("--rpc-key", help="device key registered with the tracker")
    r.add_argument("--devices", type=int, default=1,
                   help="tune this many independent subtrees of the plan at once, one RPC device each (eto)")
    p.set_defaults(func=_tune)
