"""``eto tune`` and ``eto db``: the commands that tune and keep programs.

Heavy imports (TVM, MetaSchedule) happen inside the command functions, never at parser build time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, CLIError

DEFAULT_DB = "eto-db"


def _operators(args: argparse.Namespace):
    from .operators import Operator
    from .opsets import OperatorSet, load_opset

    given = [flag for flag, v in (("--opset", args.opset), ("--op", args.op), ("--model", getattr(args, "model", None)))
             if v]
    if len(given) > 1:
        raise CLIError(f"give one of --opset, --op and --model, not {' and '.join(given)}")
    if getattr(args, "model", None):
        from .frontend import MissingExtraError, extract_from_file

        try:
            result = extract_from_file(args.model)
        except MissingExtraError as exc:
            raise CLIError(str(exc)) from None
        for u in result.unsupported:
            print(f"eto: {args.model}: not tuned: {u.count} x {u.op} ({u.reason})", file=sys.stderr)
        return result.opset
    if args.op:
        return OperatorSet.from_layers("operators", [Operator.parse(t) for t in args.op])
    return load_opset(args.opset or "quickstart")


# -- eto tune -----------------------------------------------------------------------------------
def _tune(args: argparse.Namespace) -> int:
    opset = _operators(args)
    if args.trials < 1:
        raise CLIError(f"--trials must be positive, got {args.trials}")
    from .database import Database
    from .target import parse_target
    from .tuning import progress_printer, tune_with_backend

    target = parse_target(args.target)
    paths = args.db or [DEFAULT_DB]
    db = Database(paths[0])
    for p in db.problems:
        print(f"eto: warning: {os.path.join(paths[0], str(p))} (skipped)", file=sys.stderr)
    for prior in paths[1:]:  # prior databases: their programs join the first one, then count as tuned
        if not os.path.isdir(prior):
            raise CLIError(f"--db {prior}: no such database directory")
        if os.path.abspath(prior) == os.path.abspath(paths[0]):
            continue
        counts = db.merge_from(Database(prior, readonly=True))
        print(f"eto: prior database {prior}: {counts['results']} results, {counts['records']} records merged into "
              f"{paths[0]}", file=sys.stderr)
    if args.method == "ansor" and (args.hot_share is not None or args.evolve or args.rpc or args.devices != 1):
        raise CLIError("--hot-share, --evolve, --rpc and --devices apply to --method eto only")
    todo = [e for e in opset if not db.attempted(e.op, target)]
    how = "MetaSchedule for every operator" if args.method == "ansor" else "eto (reuse)"
    print(f"eto: {opset.name}: {len(opset)} operators, {len(opset) - len(todo)} already in {paths[0]}; "
          f"tuning {len(todo)} with {how}, backend budget {args.trials} trials, target {target}", file=sys.stderr)
    search = "evolutionary"
    if args.search == "light":
        from tuner.backend import light_search

        search = light_search()
    on_batch = None if args.json or args.quiet else progress_printer()
    if args.method == "ansor":
        report = tune_with_backend(
            opset, target, db, trials=args.trials, num_trials_per_iter=args.trials_per_iter, seed=args.seed,
            strategy=search, on_batch=on_batch, verbose=args.verbose,
        )
    else:
        from .pipeline import tune

        measurers = _rpc_measurers(args)
        try:
            report = tune(opset, target, db, trials=args.trials, measurer=measurers, plan_budget=args.plan_budget,
                          num_trials_per_iter=args.trials_per_iter,
                          seed=args.seed, search=search, bridges=args.bridges, cost=args.cost,
                          strategy=args.strategy, on_batch=on_batch, hot_share=args.hot_share,
                          hot_factor=args.hot_factor, evolve_trials=args.evolve,
                          log=None if args.quiet else (lambda m: print(f"eto: {m}", file=sys.stderr, flush=True)))
        finally:
            for m in measurers or ():
                m.close()
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(_report_table(report))
    return EXIT_FAILED if report.failed else EXIT_OK


def _rpc_measurers(args: argparse.Namespace):
    """``--rpc HOST:PORT --rpc-key KEY --devices N``: N measurers on the tracker's devices (or None)."""
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
    from tuner.measure import Measurer

    return [Measurer.rpc(host, int(port), args.rpc_key) for _ in range(args.devices)]


def _report_table(report) -> str:
    from .report import format_table

    rows = [(r.op, r.frequency, r.status, r.method, r.source or "-", r.candidates, round(r.seconds, 1),
             "-" if r.latency_s is None else round(r.latency_s * 1e6, 2),
             "-" if r.gflops is None else round(r.gflops, 1)) for r in report.rows]
    lines = [format_table(("operator", "freq", "status", "method", "source", "trials", "seconds", "latency_us",
                           "GFLOP/s"), rows, align="lrlllrrrr")]
    w = report.weighted_latency_s
    tuned = sum(r.candidates for r in report.rows if r.status == "tuned")
    estimate = "" if report.estimated_candidates is None else f" (plan estimated {report.estimated_candidates:.0f})"
    lines.append(f"weighted latency sum: {'-' if w is None else f'{w * 1e3:.4f} ms'}; candidates measured "
                 f"{tuned}{estimate}; wall time {report.seconds:.1f} s; failed: {len(report.failed)}")
    for r in report.failed:
        lines.append(f"  failed: {r.op}: {r.error}")
    return "\n".join(lines)


# -- eto plan -----------------------------------------------------------------------------------
def _plan(args: argparse.Namespace) -> int:
    if args.graph:
        if args.opset:
            raise CLIError("give either --graph or --opset, not both")
        from selector import GraphFormatError, load_graph, solve

        try:
            inst = load_graph(args.graph)
        except GraphFormatError as exc:
            raise CLIError(str(exc)) from None
        except OSError as exc:
            raise CLIError(f"{args.graph}: {exc.strerror}") from None
        sol = solve(inst.graph, inst.root, inst.terminals, solver=args.solver, time_limit=args.time_limit)
        out = {"total_cost": sol.cost, "edges": [[u, v] for u, v in sol.edges], "solver": sol.solver,
               "optimal": sol.optimal, "lower_bound": sol.lower_bound, "seconds": sol.seconds}
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            print(f"total cost {sol.cost:g} ({sol.solver}, {'optimal' if sol.optimal else 'not proven optimal'})")
            for u, v in sol.edges:
                print(f"  {u} -> {v}")
        return EXIT_OK

    from .opsets import load_opset
    from .plan import plan_operator_set

    opset = load_opset(args.opset or "resnet50")
    db = target = None
    if args.db or args.cost == "estimate":
        from .target import parse_target

        target = parse_target(args.target)
    if args.db:
        from .database import Database

        db = Database(args.db, readonly=True)
    result = plan_operator_set(opset, budget=args.budget, bridges=args.bridges, solver=args.solver,
                               database=db, target=target, time_limit=args.time_limit, cost=args.cost)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        plan = result.plan
        print(f"{opset.name}: {len(opset)} operators, bridges {args.bridges}: {len(plan.bridges)} bridge operators, "
              f"{plan.candidate_pairs} candidate reuse pairs")
        print(plan.format_tree())
        print(f"estimated cost {plan.total_cost:,.0f} trials vs {plan.baseline_cost:,.0f} tuning everything "
              f"with the backend ({plan.total_cost / plan.baseline_cost:.1%})")
    return EXIT_OK


# -- eto db -------------------------------------------------------------------------------------
def _db_show(args: argparse.Namespace) -> int:
    from .database import Database

    db = Database(args.db, readonly=True)
    programs = db.programs()
    if not args.all:
        best: dict = {}
        for p in programs:
            k = (p.op, p.target)
            if k not in best or p.latency_s < best[k].latency_s:
                best[k] = p
        programs = list(best.values())
    if args.json:
        print(json.dumps({
            "programs": [{"op": p.op.name, "key": p.op.key, "type": p.op.type, "target": json.loads(p.target),
                          "latency_s": p.latency_s, "gflops": p.gflops, "method": p.method, "source": p.source,
                          "candidates": p.candidates, "seconds": p.seconds, "rank": p.rank, "line": p.line + 1,
                          "features": p.features} for p in programs],
            "orphan_records": len(db.orphans),
            "problems": [str(p) for p in db.problems],
        }, indent=1))
    else:
        from .report import format_table

        targets = sorted({p.target for p in programs})
        short = {t: _short_target(t) for t in targets}
        rows = [(p.op.name, short[p.target], p.method, (p.source or "-")[:40], round(p.latency_s * 1e6, 2),
                 round(p.gflops, 1), p.candidates, round(p.seconds, 1)) for p in programs]
        print(f"{args.db}: {len(db)} programs of {len({p.op for p in db.programs()})} operators")
        print(format_table(("operator", "target", "method", "source", "latency_us", "GFLOP/s", "trials", "seconds"),
                           rows, align="llllrrrr"))
        if db.orphans:
            print(f"{len(db.orphans)} record(s) without eto metadata (an interrupted commit); "
                  "MetaSchedule can still use them")
    for p in db.problems:
        print(f"eto: warning: {os.path.join(args.db, str(p))} (skipped)", file=sys.stderr)
    return EXIT_OK


def _db_export(args: argparse.Namespace) -> int:
    """The best program per operator and target as TVMScript, and as a shared library with --lib."""
    from .database import Database, target_key

    db = Database(args.db, readonly=True)
    best = {}
    for p in db.programs():
        if p.op not in best or p.latency_s < best[p.op].latency_s:
            if args.target is None or p.target == target_key(args.target):
                best[p.op] = p
    if not best:
        raise CLIError(f"{args.db}: no programs{'' if args.target is None else ' for target ' + args.target}")
    import tvm

    from tuner.apply import scheduled_module

    os.makedirs(args.out, exist_ok=True)
    index = []
    for op, p in sorted(best.items(), key=lambda kv: kv[0].key):
        mod = scheduled_module(p.tuning_record)
        stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in op.name)
        files = {"tvmscript": f"{stem}.py"}
        with open(os.path.join(args.out, files["tvmscript"]), "w") as f:
            f.write(f"# {op.name} on {p.target}: {p.latency_s * 1e6:.2f} us ({p.method})\n{mod.script()}\n")
        if args.lib:
            from tvm.target import Target

            files["lib"] = f"{stem}.so"
            tvm.compile(mod, target=Target(json.loads(p.target))).export_library(os.path.join(args.out, files["lib"]))
        index.append({"op": op.to_dict(), "key": op.key, "target": json.loads(p.target), "latency_s": p.latency_s,
                      "method": p.method, "source": p.source, **files})
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    print(f"exported {len(index)} programs to {args.out}", file=sys.stderr)
    return EXIT_OK


def _short_target(t: str) -> str:
    d = json.loads(t)
    if d.get("kind") == "llvm":
        return f"llvm/{d.get('mcpu', 'generic')}/{d.get('num-cores', '?')}c"
    return f"{d.get('kind')}/{d.get('arch', '')}"


def _db_merge(args: argparse.Namespace) -> int:
    from .database import Database

    dest = Database(args.dest)
    total = {"results": 0, "records": 0, "orphans": 0, "problems": 0}
    for src in args.sources:
        if os.path.abspath(src) == os.path.abspath(args.dest):
            raise CLIError(f"cannot merge {src} into itself")
        counts = dest.merge_from(Database(src, readonly=True))
        for k, v in counts.items():
            total[k] += v
        print(f"{src}: {counts['results']} results, {counts['records']} records, "
              f"{counts['orphans']} orphan records, {counts['problems']} unreadable lines", file=sys.stderr)
    print(f"merged into {args.dest}: {total['results']} results, {total['records']} records"
          + (f"; {total['problems']} unreadable lines kept in {os.path.join(args.dest, 'corrupt_lines.txt')}"
             if total["problems"] else ""))
    return EXIT_OK


def register_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune an operator set into a database")
    p.add_argument("--opset", help="built-in set name or JSON file (default: quickstart)")
    p.add_argument("--op", action="append", help="one operator, e.g. 'BMM(B=1,M=128,N=768,K=768)' (repeatable)")
    p.add_argument("--model", help="an ONNX model or torch.export .pt2 file: tune its operator set")
    p.add_argument("--method", default="eto", choices=["eto", "ansor"],
                   help="eto: reuse pair selection + backend for roots + reuse tuner (default); "
                        "ansor: MetaSchedule for every operator")
    p.add_argument("--trials", type=int, default=64, help="measured candidates per backend-tuned operator")
    p.add_argument("--plan-budget", type=int, default=None,
                   help="backend cost per operator when planning (default: --trials) (eto)")
    p.add_argument("--bridges", default="1hop", choices=["none", "1hop", "all"], help="bridge operators (eto)")
    p.add_argument("--cost", default="estimate", choices=["estimate", "analytic"],
                   help="OC-graph edge costs: the tuner's trial estimator or the analytic stand-in (eto)")
    p.add_argument("--strategy", default="global", choices=["global", "per-b"],
                   help="reuse tuner: rounds after T once (global) or per block count as in the paper (eto)")
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
    p.add_argument("--trials-per-iter", type=int, default=64, help="MetaSchedule batch size")
    p.add_argument("--db", action="append", default=None,
                   help=f"database directory (default: {DEFAULT_DB}); repeat to add prior databases, whose "
                        "programs are merged into the first and reused")
    p.add_argument("--target", default="cpu", help="cpu (this machine), cuda, or a TVM tag")
    p.add_argument("--search", default="evolutionary", choices=["evolutionary", "light"],
                   help="MetaSchedule's evolutionary search with its defaults, or a small-population one")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--verbose", action="store_true", help="MetaSchedule's own logging on the console")
    p.set_defaults(func=_tune)

    p = sub.add_parser("plan", help="select reuse pairs for an operator set (no tuning)")
    p.add_argument("--opset", help="built-in set name or JSON file (default: resnet50)")
    p.add_argument("--graph", help="solve a plain graph {root, terminals, arcs: [[u, v, cost], ...]} instead")
    p.add_argument("--bridges", default="1hop", choices=["none", "1hop", "all"])
    p.add_argument("--solver", default="auto", choices=["auto", "exact", "approx"])
    p.add_argument("--budget", type=int, default=1000, help="backend trials per operator (root edge cost)")
    p.add_argument("--db", help="prior database: its operators are free reuse sources")
    p.add_argument("--target", default="cpu", help="target of the prior database's programs")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds for the exact solver")
    p.add_argument("--cost", default="analytic", choices=["analytic", "estimate"],
                   help="edge costs: the selector's analytic stand-in (fast) or the tuner's trial estimator")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_plan)

    db = sub.add_parser("db", help="inspect and merge databases")
    dsub = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND")
    s = dsub.add_parser("show", help="the best program per operator and target")
    s.add_argument("db")
    s.add_argument("--all", action="store_true", help="every stored program, not only the best")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_db_show)
    x = dsub.add_parser("export", help="the best programs as TVMScript (and shared libraries with --lib)")
    x.add_argument("db")
    x.add_argument("out", help="directory to write (created if missing)")
    x.add_argument("--target", help="only this target (cpu, cuda, a TVM tag)")
    x.add_argument("--lib", action="store_true", help="also compile each program to a shared library")
    x.set_defaults(func=_db_export)
    m = dsub.add_parser("merge", help="merge databases into DEST (created if missing)")
    m.add_argument("dest")
    m.add_argument("sources", nargs="+")
    m.set_defaults(func=_db_merge)

    def usage(_a: argparse.Namespace) -> int:
        db.print_help(sys.stderr)
        return EXIT_BAD_INPUT

    db.set_defaults(func=usage)
