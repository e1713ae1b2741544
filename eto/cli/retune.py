"""``eto retune``: a set's operators at new sizes, instant programs first, then tuned by reuse.

TVM and MetaSchedule are imported inside the command, never when the parser is built.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import TYPE_CHECKING

from tuner.analysis.kinds import is_cpu
from tuner.measure.options import DEFAULT_TRIALS
from eto.operators.opsets import OperatorSet, parse_vary, vary
from eto.report import format_table
from eto.cli.errors import EXIT_FAILED, EXIT_OK, CLIError, check_target
from eto.cli.ops import parse_dims
from eto.cli.flags import (DEFAULT_DB, add_finalists_option, add_function_trials_option, add_operator_options,
    add_strategy_option, add_time_budget_option, add_timing_option, advanced, budget_left, operators_from_args,
    tasks_opset, tune_options_of)
from eto.cli.progress import Progress, log

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.store.models import ModelLayout


def _retune(args: argparse.Namespace) -> int:
    from tuner.measure import deadline

    with deadline.until(budget_left(args)):  # from the process's start: the instant programs count too
        return _retune_in(args)


def _retune_in(args: argparse.Namespace) -> int:
    dim, values = parse_vary(args.vary)
    if not os.path.isdir(args.db):
        raise CLIError(f"--db {args.db}: no such database directory (tune the known sizes first: eto tune)")
    if (args.fast_math or args.layout is not None) and not args.model:
        raise CLIError(f"{'--fast-math' if args.fast_math else '--layout'} applies to --model (it rewrites the "
                       "model's functions)")
    options = tune_options_of(args)
    import eto.api
    from eto.store.database import Database
    from eto.store.models import record_layout
    from eto.target import parse_target

    target = parse_target(args.target)
    shapes, layouts = _model_shapes(args, dim, values, target)
    if shapes is None:
        base: str | OperatorSet = args.opset if args.opset and not (args.op or args.model) else operators_from_args(args)
        shapes = vary(base, dim, values)
    db = Database(args.db)
    check_target(db, target, fatal=True)  # else every shape would go to the backend, unasked
    for entry in layouts:  # each size's layout, under the model's name: eto build --dim reads it
        record_layout(db.path, entry)
    log.info(f"retune {len(values)} sizes of {dim} ({', '.join(map(str, values[:8]))}"
             f"{', ...' if len(values) > 8 else ''}) from {args.db}, target {target}")
    with Progress() as progress:
        report = eto.api.retune(shapes, dim=dim, database=db, target=target, options=options,
                                instant_only=args.instant_only, log=None if args.json else progress.say)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(_table(report))
    # --instant-only leaves a model's functions outside the catalogue to a run with the backend
    missing = [r for r in report.rows if r.latency_s is None and r.instant_latency_s is None
               and not (args.instant_only and r.function)]
    return EXIT_FAILED if missing else EXIT_OK


def _model_shapes(args: argparse.Namespace, dim: str, values: list[int], target: "Target"
                  ) -> "tuple[list[tuple[int, OperatorSet]] | None, list[ModelLayout]]":
    """``--model`` with ``--vary`` over one of its symbolic dimensions: at each size, the fused tasks
    Relax compiles for the model (as ``eto tune --model`` tunes them, so ``eto build --model --dim``
    at that size finds their programs), and the layout line of each; None when there is no model, or
    ``dim`` is not symbolic in it: then operator parameters vary."""
    if not args.model or args.opset or args.op:
        return None, []
    from eto.models import bind_dims, load_relax, symbolic_dims

    model, fixed = load_relax(args.model), parse_dims(args.dim)
    names = symbolic_dims(model)
    if dim not in names:
        unbound = [f"{n} ({where})" for n, where in names.items() if n not in fixed]
        if unbound:  # its operators would stay dynamic: name what can be varied
            raise CLIError(f"--vary {dim}: {args.model} has no symbolic dimension {dim!r}; its symbolic "
                           f"dimensions: {', '.join(unbound)}")
        return None, []  # a static model: vary an operator parameter
    sized = [(v, *tasks_opset(bind_dims(model, {**fixed, dim: v})._replace(name=f"{model.name}@{dim}={v}"), target,
                              fast_math=args.fast_math, layout=args.layout, label=f"{args.model} at {dim}={v}",
                              db=args.db, record_as=model.name)) for v in values]
    return [(v, opset) for v, opset, _ in sized], [entry for _, _, entry in sized]


def _table(report) -> str:
    def us(v: float | None) -> object:
        return "-" if v is None else round(v * 1e6, 1)

    rows = [(r.value, r.op, r.instant_source or "-", us(r.instant_latency_s),
             "-" if r.instant_seconds is None else round(r.instant_seconds, 2), r.method or "-", r.source or "-",
             r.candidates, round(r.seconds, 1), us(r.latency_s)) for r in report.rows]
    lines = [format_table((report.dim, "operator", "instant from", "instant us", "instant s", "method", "source",
                           "trials", "seconds", "latency_us"), rows, align="rlllrllrrr")]
    lines.append(f"wall time {report.seconds:.1f} s, of which instant programs {report.instant_seconds:.1f} s")
    for r in report.rows:
        if r.error:
            lines.append(f"  {r.op}: {r.error}")
    return "\n".join(lines)


def _dispatch(args: argparse.Namespace) -> int:
    from eto.shapes.dispatch import build_dispatch, parse_sizes, parse_symbolic, save, symbolic_dims
    from eto.operators import Operator

    op = Operator.parse(args.op)
    symbolic = symbolic_dims(op, parse_symbolic(args.symbolic))
    sizes = parse_sizes(args.sizes)
    if not os.path.isdir(args.db):
        raise CLIError(f"--db {args.db}: no such database directory (tune the operator at some sizes first)")
    if args.max_buckets is not None and args.max_buckets < 1:
        raise CLIError(f"--max-buckets must be positive, got {args.max_buckets}")
    from eto.store.database import Database
    from eto.target import parse_target

    target = parse_target(args.target)
    if not is_cpu(target):
        raise CLIError(f"eto dispatch measures on this machine's CPU; --target {args.target} is {target.kind.name}")
    traffic = _traffic(args.traffic) if args.traffic else None
    db = Database(args.db, readonly=True)
    check_target(db, target, fatal=True)
    fn, report = build_dispatch(op, symbolic, db, target, sizes=sizes, max_buckets=args.max_buckets,
                                tolerance=args.tolerance, log=None if args.json else log.info, traffic=traffic)
    if args.output:
        save(fn, report, args.output)
        log.info(f"wrote {args.output} (load: tvm.relax.VirtualMachine(tvm.runtime.load_module(PATH), tvm.cpu())) "
                 f"and {args.output}.json")
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
        return EXIT_OK
    rows = [(b["from"], "-" if b["to"] is None else b["to"], b["candidate"], b["method"]) for b in report.buckets]
    print(format_table(("from", "to", "program:kind", "method"), rows, align="rrll"))
    best = [min(col) for col in zip(*report.latency_s)]
    slow = [d / b for d, b in zip(report.dispatch_latency_s, best)]
    print(f"{len(report.candidates)} candidates timed at {len(sizes)} sizes in {report.seconds:.1f} s; the function "
          f"at a median {sorted(slow)[len(slow) // 2]:.2f}x (worst {max(slow):.2f}x) the best candidate per size")
    for s in report.skipped:
        print(f"  skipped {s}")
    return EXIT_OK


def _traffic(path: str) -> dict[int, float]:
    """``--traffic FILE``: a JSON object of size -> requests, e.g. ``{"12": 840, "128": 95}``."""
    try:
        with open(path) as f:
            raw = json.load(f)
        traffic = {int(k): float(v) for k, v in raw.items()}
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        raise CLIError(f"--traffic {path}: expected a JSON object of size -> requests, e.g. "
                       f'{{"12": 840, "128": 95}} ({exc})') from None
    bad = next(((k, v) for k, v in traffic.items() if k < 1 or not 0 <= v < math.inf), None)
    if bad is not None or not any(traffic.values()):
        what = f"size {bad[0]} with count {bad[1]:g}" if bad else "no requests at any size"
        raise CLIError(f"--traffic {path}: {what}; sizes must be positive and counts finite and non-negative, "
                       "with some requests")
    return traffic


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eto retune`` and ``eto dispatch`` and their options."""
    d = subparsers.add_parser("dispatch", help="one compiled function for a symbolic size: stored programs per "
                                               "bucket of sizes, chosen by measurement")
    d.add_argument("--op", required=True, help="the operator at any one size, e.g. 'BMM(B=12,M=128,N=128,K=64)'")
    d.add_argument("--symbolic", required=True, metavar="PARAM=NAME[,...]",
                   help="parameters that become the symbolic dimension, e.g. M=seq,N=seq")
    d.add_argument("--sizes", required=True, help="sizes to time the candidates at, e.g. 1,2,4,8,16:512:16; the "
                                                  "largest bucket also serves larger sizes")
    d.add_argument("--db", default=DEFAULT_DB, help="the database holding the operator's programs at some sizes")
    d.add_argument("-o", "--output", help="write the function here as a shared library (and PATH.json)")
    d.add_argument("--traffic", metavar="FILE",
                   help="JSON object of size -> requests (e.g. from a serving log): the buckets favour the "
                        "sizes users ask for; each sampled size stands for the sizes above the one before it")
    d.add_argument("--target", default="cpu", help="cpu (this machine)")
    d.add_argument("--json", action="store_true", help="print the report as JSON (no progress messages)")
    a = advanced(d)
    a.add_argument("--max-buckets", type=int, default=None, help="at most this many programs (default: no limit)")
    a.add_argument("--tolerance", type=float, default=0.05,
                   help="fewest buckets whose summed slowdown is within this of the best (default 0.05: "
                        "timings here vary by a few percent, so a smaller gain is noise)")
    d.set_defaults(func=_dispatch)

    p = subparsers.add_parser("retune", help="new sizes of a tuned set: instant programs, then reuse tuning",
                              description="A tuned set's operators (or a model's tasks) at new sizes: an instant "
                                          "program for each at once, then tuned by reuse from the database.")
    add_operator_options(p)
    p.add_argument("--vary", required=True, metavar="DIM=VALUES",
                   help="the new sizes: a built-in set's dimension (batch, seq, hw), a symbolic dimension of --model "
                        "(ONNX dim_param, torch.export's s0...) or an operator parameter (N, M, H...); values "
                        "as 1,2,4 or START:STOP:STEP")
    p.add_argument("--db", default=DEFAULT_DB, help=f"the database of known sizes, where results go (default {DEFAULT_DB})")
    p.add_argument("--target", default="cpu", help="cpu (this machine), cuda, or a TVM tag")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help="backend trials where nothing can be reused")
    p.add_argument("--instant-only", action="store_true", help="store the instant programs and stop (seconds)")
    add_function_trials_option(p)
    add_time_budget_option(p)
    add_timing_option(p)
    p.add_argument("--seed", type=int, default=None, help="random seed of the searches (default: none)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (no progress messages)")
    a = advanced(p)
    a.add_argument("--plan-budget", type=int, default=None,
                   help="backend cost per operator when planning (default: --trials)")
    add_strategy_option(a)
    add_finalists_option(a)
    p.set_defaults(func=_retune)
