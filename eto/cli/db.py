"""``eto db show|export|merge``: inspect a program database, export its best programs, merge databases."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Collection

from eto.report import format_table
from eto.cli.errors import EXIT_OK, CLIError, usage
from eto.cli.format import short_target
from eto.cli.progress import log

if TYPE_CHECKING:  # pragma: no cover
    from eto.store.database import ProgramRecord


def _show(args: argparse.Namespace) -> int:
    from eto.store.database import Database

    db = Database(args.db, readonly=True, warn=False)  # each problem is listed below
    db.check_lines()
    programs = db.programs() if args.all else db.best_programs()
    if args.json:
        print(json.dumps({
            "programs": [{"op": p.op.name, "key": p.op.key, "type": p.op.type, "target": json.loads(p.target),
                          "latency_s": p.latency_s, "gflops": p.gflops, "method": p.method, "source": p.source,
                          "candidates": p.candidates, "seconds": p.seconds, "timing": p.timing, "rank": p.rank,
                          "line": p.line + 1,
                          "features": p.features} for p in programs],
            "orphan_records": len(db.orphans),
            "problems": [str(p) for p in db.problems],
        }, indent=1))
    else:
        short = {t: short_target(t) for t in {p.target for p in programs}}
        rows = [(p.op.name, short[p.target], p.method, (p.source or "-")[:40], round(p.latency_s * 1e6, 2),
                 round(p.gflops, 1), p.timing, p.candidates, round(p.seconds, 1)) for p in programs]
        print(f"{args.db}: {len(db)} programs of {len({p.op for p in db.programs()})} operators")
        print(format_table(("operator", "target", "method", "source", "latency_us", "GFLOP/s", "timing", "trials",
                            "seconds"), rows, align="llllrrlrr"))
        if db.orphans:
            print(f"{len(db.orphans)} record(s) without eto metadata (an interrupted commit); "
                  "MetaSchedule can still use them")
    for p in db.problems:
        log.warning(f"{os.path.join(args.db, str(p))} (skipped)")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    """The best program per operator and target as TVMScript, and as a shared library with --lib; a program
    TVM cannot read is skipped with a warning naming it (bad input where none is left)."""
    from eto.store.database import Database
    from eto.store.errors import UnreadableRecord

    best = Database(args.db, readonly=True).best_programs(args.target)
    if not best:
        raise CLIError(f"{args.db}: no programs{'' if args.target is None else ' for target ' + args.target}")
    os.makedirs(args.out, exist_ok=True)
    suffixes = _target_suffixes({p.target for p in best})
    index, unreadable = [], []
    for p in sorted(best, key=lambda p: (p.op.key, p.target)):
        try:
            index.append(_export_program(p, args.out, _file_name(p.op.name) + suffixes[p.target], lib=args.lib))
        except UnreadableRecord as exc:
            unreadable.append(exc)
            log.warning(f"{p.op.name}: not exported: {exc}")
    if unreadable and not index:
        raise CLIError(f"{args.db}: TVM cannot read any of its {len(best)} best programs; the first: {unreadable[0]}")
    with open(os.path.join(args.out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
    log.info(f"exported {len(index)} programs to {args.out}")
    return EXIT_OK


def _export_program(p: "ProgramRecord", out: str, stem: str, *, lib: bool) -> dict:
    """Write ``stem.py`` (and ``stem.so``, compiled by the tuner's build); the program's index entry."""
    from tuner.measure.apply import build, scheduled_module

    from eto.target import parse_target

    mod = scheduled_module(p.tuning_record)
    files = {"tvmscript": f"{stem}.py"}
    with open(os.path.join(out, files["tvmscript"]), "w") as f:
        f.write(f"# {p.op.name} on {p.target}: {p.latency_s * 1e6:.2f} us ({p.method})\n{mod.script()}\n")
    if lib:
        files["lib"] = f"{stem}.so"
        build(mod, parse_target(p.target)).export_library(os.path.join(out, files["lib"]))
    return {"op": p.op.to_dict(), "key": p.op.key, "target": json.loads(p.target), "latency_s": p.latency_s,
            "method": p.method, "source": p.source, **files}


def _target_suffixes(keys: Collection[str]) -> dict[str, str]:
    """A file-name suffix per target key, so that programs of several targets do not overwrite each other.

    One target keeps the plain operator names; several get ``-<short target>``, plus a hash of the
    full key where two targets share a short name.
    """
    if len(keys) == 1:
        return {k: "" for k in keys}
    short = {k: "-" + _file_name(short_target(k)) for k in keys}
    shared = Counter(short.values())
    return {k: s + (f"-{hashlib.sha1(k.encode()).hexdigest()[:8]}" if shared[s] > 1 else "")
            for k, s in short.items()}


def _file_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def _merge(args: argparse.Namespace) -> int:
    from eto.store.database import Database

    for src in args.sources:  # every source checked before the destination is created
        if os.path.abspath(src) == os.path.abspath(args.dest):
            raise CLIError(f"cannot merge {src} into itself")
        if not os.path.isdir(src):
            raise CLIError(f"{src}: no such database directory")
    dest = Database(args.dest)
    total = {"results": 0, "records": 0, "orphans": 0, "problems": 0}
    for src in args.sources:
        counts = dest.merge_from(Database(src, readonly=True, warn=False))  # its problems are counted below
        for k, v in counts.items():
            total[k] += v
        log.info(f"{src}: {counts['results']} results, {counts['records']} records, "
                 f"{counts['orphans']} orphan records, {counts['problems']} unreadable lines")
    print(f"merged into {args.dest}: {total['results']} results, {total['records']} records"
          + (f"; {total['problems']} unreadable lines kept in {os.path.join(args.dest, 'corrupt_lines.txt')}"
             if total["problems"] else ""))
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eto db`` and its subcommands."""
    db = subparsers.add_parser("db", help="inspect and merge databases")
    sub = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND")
    p = sub.add_parser("show", help="the best program per operator and target")
    p.add_argument("db", help="the database directory")
    p.add_argument("--all", action="store_true", help="every stored program, not only the best")
    p.add_argument("--json", action="store_true",
                   help="print the programs as JSON (with their features), the orphan records and problems")
    p.set_defaults(func=_show)
    p = sub.add_parser("export", help="the best programs as TVMScript (and shared libraries with --lib)")
    p.add_argument("db", help="the database directory")
    p.add_argument("out", help="directory to write (created if missing)")
    p.add_argument("--target", help="only this target (cpu, cuda, a TVM tag)")
    p.add_argument("--lib", action="store_true", help="also compile each program to a shared library")
    p.set_defaults(func=_export)
    p = sub.add_parser("merge", help="merge databases into DEST (created if missing)")
    p.add_argument("dest", help="the database to merge into (created if missing)")
    p.add_argument("sources", nargs="+", help="the databases to merge from (read, never written)")
    p.set_defaults(func=_merge)
    db.set_defaults(func=usage(db))
