"""``eto plan``: select reuse pairs for an operator set, or solve a plain graph, without tuning.

With the default ``--cost analytic`` and no ``--db`` nothing imports TVM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os

from typing import TYPE_CHECKING, get_args

from tuner.reuse.space import DEFAULT_STRATEGY, Strategy

from eto.operators.opsets import load_opset
from eto.options import DISTANCE_WEIGHT, MAX_REDUCTION_RATIO
from eto.cli.errors import EXIT_OK, CLIError, check_target

if TYPE_CHECKING:  # pragma: no cover
    from eto.store.database import Database


def add_strategy_option(p: argparse.ArgumentParser, *, suffix: str = "") -> None:
    """``--strategy`` and ``--top-k``: one copy for ``eto tune`` and ``eto plan``, so plans cost what tuning runs."""
    from tuner.reuse.ranked import DEFAULT_TOP_K

    p.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=list(get_args(Strategy)),
                   help="reuse tuner: rounds after T once (global) or per block count as in the paper (per-b); "
                        "plans estimate the same" + suffix)
    p.add_argument("--top-k", default="auto", metavar="K",
                   help=f"reuse tuner: measure each round's K best-ranked candidates at a time, ranked by a model "
                        f"learned from the database (default auto: {DEFAULT_TOP_K} on a CPU, on a GPU as many as the "
                        f"builder compiles at once; 0: measure every candidate, as in the paper); plans estimate "
                        f"the same" + suffix)
    p.add_argument("--max-reduction-ratio", type=float, default=MAX_REDUCTION_RATIO, metavar="R",
                   help=f"plan: no reuse edge where the operator's reduction is more than R times its source's "
                        f"(default {MAX_REDUCTION_RATIO:g}, measured: such reuses lose quality; inf lifts it)" + suffix)
    p.add_argument("--distance-weight", type=float, default=DISTANCE_WEIGHT, metavar="W",
                   help=f"plan: a reuse edge weighs 1 + W * (its loops' summed |log| extent ratios) times its "
                        f"seconds in the selection, so that of two sources of about the same cost the near one "
                        f"is taken (default {DISTANCE_WEIGHT:g}; 0: cost alone, as in the paper)" + suffix)
    p.add_argument("--no-polish", dest="polish", action="store_false",
                   help="do not polish each backend root's program by a self-reuse before its subtree derives "
                        "from it (beyond the paper; by default on where the backend budget is >= 32 trials, "
                        "which trains the reuse tuner's ranker); plans cost the same" + suffix)


def max_reduction_ratio_of(args: argparse.Namespace) -> float | None:
    """``--max-reduction-ratio`` as the API takes it (None: no cap)."""
    r = args.max_reduction_ratio
    if not r >= 1:  # NaN too
        raise CLIError(f"--max-reduction-ratio must be >= 1 (inf: no cap), got {r}")
    return None if math.isinf(r) else r


def distance_weight_of(args: argparse.Namespace) -> float:
    w = args.distance_weight
    if not (w >= 0 and not math.isinf(w)):  # NaN too
        raise CLIError(f"--distance-weight must be a finite number >= 0, got {w}")
    return w


def top_k_of(args: argparse.Namespace) -> "int | None | str":
    """``--top-k`` as the API takes it (None: measure everything; ``"auto"``: by target)."""
    if args.top_k == "auto":
        return "auto"
    try:
        k = int(args.top_k)
    except ValueError:
        k = -1
    if k < 0:
        raise CLIError(f"--top-k must be 'auto' or a number >= 0, got {args.top_k!r}")
    return k or None


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


def add_prior_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--prior DB`` (repeatable): databases read, never written; one copy for tune and plan."""
    p.add_argument("--prior", action="append", default=[], metavar="DB",
                   help=f"a prior database, read and never written (repeatable): {what}")


def _prior_database(paths: list[str], stack: contextlib.ExitStack) -> "Database":
    """One prior database read as it is, or several merged into a temporary one (none is written)."""
    import tempfile

    from eto.store.database import Database

    for path in paths:
        if not os.path.isdir(path):
            raise CLIError(f"--prior {path}: no such database directory")
    if len(paths) == 1:
        return Database(paths[0], readonly=True)
    db = Database(stack.enter_context(tempfile.TemporaryDirectory(prefix="eto-priors-")))
    for path in paths:
        db.merge_from(Database(path, readonly=True))
    return db


def _plan(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:
        return _plan_in(args, stack)


def _plan_in(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    if args.graph:
        if args.opset:
            raise CLIError("give either --graph or --opset, not both")
        return _solve_graph(args)
    from eto.planning.planner import plan_operator_set, plan_selective

    opset = load_opset(args.opset or "resnet50")
    db = target = None
    if args.prior or args.cost == "estimate":
        from eto.target import parse_target

        target = parse_target(args.target)
    if args.prior:
        db = _prior_database(args.prior, stack)
        check_target(db, target, fatal=False)
    if args.method == "st":
        from tuner.reuse.topk import DEFAULT_K

        result = plan_selective(opset, budget=args.budget, k=DEFAULT_K, database=db, target=target)
    else:
        from eto.options import OptionError, TuneOptions

        try:
            options = TuneOptions.of(trials=args.budget, bridges=args.bridges, solver=args.solver, cost=args.cost,
                                     strategy=args.strategy, top_k=top_k_of(args),
                                     max_reduction_ratio=max_reduction_ratio_of(args),
                                     distance_weight=distance_weight_of(args), polish=None if args.polish else False)
        except OptionError as exc:
            raise CLIError(f"--{'budget' if exc.name == 'trials' else exc.name.replace('_', '-')} {exc.message}") from None
        result = plan_operator_set(opset, options, database=db, target=target, time_limit=args.time_limit)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        plan = result.plan
        print(f"{opset.name}: {len(opset)} operators, bridges {args.bridges}: {len(plan.bridges)} bridge operators, "
              f"{plan.candidate_pairs} candidate reuse pairs")
        print(plan.format_tree(unit="s"))
        print(f"estimated {plan.total_cost:,.0f} s ({result.total_candidates:,.0f} candidates) vs "
              f"{plan.baseline_cost:,.0f} s tuning everything with the backend "
              f"({plan.total_cost / (plan.baseline_cost or 1):.1%}); costs in seconds by {_time_model_text(result)}")
    return EXIT_OK


def _time_model_text(result) -> str:
    tm = result.time_model
    b, r = tm.backend, tm.reuse
    src = "defaults" if not (b.samples or r.samples) else f"{b.samples} backend and {r.samples} reuse results"
    return (f"{b.per:.2f} s + {b.per_gflop:.2f} s/GFLOP per backend trial, "
            f"{r.fixed:.1f} s + {r.per:.2f} s + {r.per_gflop:.2f} s/GFLOP per reuse candidate ({src})")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eto plan`` and its options."""
    p = subparsers.add_parser("plan", help="select reuse pairs for an operator set (no tuning)")
    p.add_argument("--opset", help="built-in set name or JSON file (default: resnet50)")
    p.add_argument("--graph", help="solve a plain graph {root, terminals, arcs: [[u, v, cost], ...]} instead")
    p.add_argument("--method", default="eto", choices=["eto", "st"],
                   help="eto: the reuse pair selector (default); st: Selective Tuning's clusters (the paper's baseline)")
    p.add_argument("--bridges", default="1hop", choices=["none", "1hop", "all"])
    p.add_argument("--solver", default="auto", choices=["auto", "exact", "approx"])
    p.add_argument("--budget", type=int, default=1000, help="backend trials per operator (root edge cost)")
    add_prior_option(p, "its operators are free roots and reuse sources, as in eto tune")
    p.add_argument("--target", default="cpu", help="target of the prior databases' programs")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds for the exact solver")
    p.add_argument("--cost", default="estimate", choices=["estimate", "analytic"],
                   help="edge costs: the tuner's trial estimator (default; about 7-8 s for ResNet-50 on 2 cores) "
                        "or the selector's TVM-free analytic stand-in (milliseconds)")
    add_strategy_option(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_plan)
