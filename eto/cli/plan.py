"""``eto plan``: preview what ``eto tune`` with the same arguments would run, or solve a plain graph.

``eto plan`` takes ``eto tune``'s operator and tuning options with the same defaults
(:mod:`eto.cli.flags`), reads the database ``eto tune`` would write (``--db``, never written here)
and its ``--prior`` databases, and prints the plan ``eto tune`` would log before tuning, then the
plan's tree. With ``--cost analytic`` and no database nothing imports TVM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from eto.cli.errors import EXIT_OK, CLIError, check_target
from eto.cli.flags import (DEFAULT_DB, add_operator_options, add_prior_option, add_tuning_options, advanced,
    tune_options_of, tuning_opset)

if TYPE_CHECKING:  # pragma: no cover
    from eto.store.database import Database


def _solve_graph(args: argparse.Namespace) -> int:
    """``--graph FILE``: the selector on a plain graph {root, terminals, arcs}."""
    from selector import GraphFormatError, load_graph, solve

    try:
        inst = load_graph(args.graph)
    except GraphFormatError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"{args.graph}: {exc.strerror}") from None
    try:
        sol = solve(inst.graph, inst.root, inst.terminals, solver=args.solver, time_limit=args.time_limit)
    except ValueError as exc:  # e.g. a terminal the root cannot reach
        raise CLIError(f"{args.graph}: {exc}") from None
    out = {"total_cost": sol.cost, "edges": [[u, v] for u, v in sol.edges], "solver": sol.solver,
           "optimal": sol.optimal, "lower_bound": sol.lower_bound, "seconds": sol.seconds}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"total cost {sol.cost:g} ({sol.solver}, {'optimal' if sol.optimal else 'not proven optimal'})")
        for u, v in sol.edges:
            print(f"  {u} -> {v}")
    return EXIT_OK


def _read_databases(paths: list[str]) -> "list[Database]":
    """The databases ``eto tune`` would read (its ``--db`` and ``--prior``), read-only."""
    from eto.store.database import Database

    return [Database(path, readonly=True) for path in paths]


def _plan(args: argparse.Namespace) -> int:
    if args.graph:
        if args.opset or args.op or args.model:
            raise CLIError("give either --graph or an operator set (--opset, --op, --model), not both")
        return _solve_graph(args)
    from eto.planning.budget import plan_run
    from eto.planning.planner import hot_operators
    from eto.planning.time_priors import timing_on
    from eto.runs.pipeline import plan_summary
    from eto.target import parse_target, target_kind

    options = tune_options_of(args)  # checked as eto tune checks them
    if args.method == "metaschedule":
        raise CLIError("--method metaschedule tunes every operator with the backend: there is no plan to preview")
    for prior in args.prior:
        if not os.path.isdir(prior):
            raise CLIError(f"--prior {prior}: no such database directory")
    target = parse_target(args.target)
    opset, _ = tuning_opset(args, target)
    from eto.store.programs import DatabaseUnion

    dbs = _read_databases([d for d in [args.db] if os.path.isdir(d)] + list(args.prior))
    for member in dbs:
        check_target(member, target, fatal=False)
    # several as one, nothing copied (eto tune reads them so too, and copies only its operators' results)
    db = dbs[0] if len(dbs) == 1 else DatabaseUnion(dbs) if dbs else None
    hot = hot_operators(opset, options.plan.hot_share) if options.plan.hot_share is not None else frozenset()
    # as eto tune plans
    fitted = plan_run(opset, options, database=db, target=target, hot=hot, seconds=options.time_budget,
                      time_limit=args.time_limit)
    result, options = fitted.planned, fitted.options
    if options.time_budget is not None and args.method != "st":
        print(file=sys.stderr if args.json else sys.stdout, *[f"eto: a time budget of {options.time_budget:.0f} s affords {options.backend.trials} trials per backend "
              f"root: the plan is estimated at {fitted.seconds:.0f} s, the rest goes to the operators with the "
              f"most latency to gain"])
    if args.json:
        print(json.dumps({**result.to_json(), "functions_seconds": fitted.functions_seconds,
                          "prior_polish_seconds": fitted.polish_seconds, "trials": options.backend.trials}, indent=1))
    else:
        plan = result.plan
        print(f"eto: {opset.name}: {len(opset)} operators; {plan_summary(fitted, len(hot))}")
        print(plan.format_tree(unit="s"))
        print(f"bridges {options.plan.bridges}: {len(plan.bridges)} bridge operators, {plan.candidate_pairs} "
              f"candidate reuse pairs; costs in seconds by "
              f"{_time_model_text(result, timing_on(target_kind(target), options.timing))}")
    return EXIT_OK


def _time_model_text(result, timing: str) -> str:
    """The time model's lines, and what they come from: the database's results of runs timed as the plan's
    run will time (:mod:`eto.planning.time_priors`), else this CPU's prior for that timing."""
    tm = result.time_model
    b, r = tm.backend, tm.reuse
    src = (f"this CPU's prior for {timing} timing" if not (b.samples or r.samples)
           else f"{b.samples} backend and {r.samples} reuse results timed {timing}")
    kinds = ", ".join(f"{t} x{k:.2f}" for t, k in sorted(tm.reuse_kind.items()) if abs(k - 1) >= 0.005)
    return (f"a backend root {b.fixed:.1f} s + ({b.per:.2f} s + {b.per_gflop:.2f} s/GFLOP) a trial, "
            f"a reuse {r.fixed:.1f} s + ({r.per:.2f} s + {r.per_gflop:.2f} s/GFLOP) a candidate"
            + (f" (by type: {kinds})" if kinds else "")
            + (f", a polish x{tm.polish_scale:.2f} a reuse" if abs(tm.polish_scale - 1) >= 0.005 else "") + f" ({src})")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eto plan`` and its options (``eto tune``'s, and the exact solver's time limit)."""
    p = subparsers.add_parser("plan", help="preview the plan eto tune would run with the same arguments (no tuning)",
                              description="Preview the plan eto tune would run with the same arguments, without "
                                          "tuning, or solve a plain graph (--graph).")
    add_operator_options(p)
    p.add_argument("--db", default=DEFAULT_DB,
                   help="the database eto tune would write: read if it exists (its operators are free roots), "
                        "never written")
    add_prior_option(p, "its operators are free roots and reuse sources, as in eto tune")
    p.add_argument("--target", default="cpu", help="cpu (this machine), cuda, or a TVM tag")
    p.add_argument("--graph", help="solve a plain graph {root, terminals, arcs: [[u, v, cost], ...]} instead")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_tuning_options(p)
    advanced(p).add_argument("--time-limit", type=float, default=30.0,
                             help="seconds for the exact Steiner tree solver")
    p.set_defaults(func=_plan)
