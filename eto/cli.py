"""The ``eto`` command line.

Exit codes: 0 success, 1 a run that finished with failures, 2 bad input (unknown operator or set,
malformed file, impossible shape), 130 interrupted. Commands that only inspect operators never
import TVM's schedule machinery, so they answer in about a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit code 2."""


# -- eto ops ------------------------------------------------------------------------------------
def _ops_types(args: argparse.Namespace) -> int:
    from .operators import operator_types

    if args.json:
        print(json.dumps([
            {"type": t.name, "description": t.description, "space": list(t.space_names),
             "reduction": list(t.reduction_names), "params": [p.name for p in t.params],
             "composite": t.composite}
            for t in operator_types()
        ], indent=1))
        return EXIT_OK
    from .report import format_table

    rows = [(t.name, "[" + ", ".join(t.space_names) + " | " + ", ".join(t.reduction_names) + "]", t.description)
            for t in operator_types()]
    print(format_table(("type", "major loop nest [space | reduction]", "description"), rows))
    return EXIT_OK


def _ops_list(args: argparse.Namespace) -> int:
    from .opsets import builtin_opset, builtin_opsets

    sets = builtin_opsets()
    if args.json:
        print(json.dumps([{"name": n, "description": d, "operators": len(builtin_opset(n))}
                          for n, d in sets.items()], indent=1))
        return EXIT_OK
    from .report import format_table

    rows = []
    for name, desc in sets.items():
        s = builtin_opset(name)
        types = ", ".join(f"{n} {t}" for t, n in s.count_by_type().items())
        rows.append((name, len(s), sum(e.frequency for e in s), types, desc))
    print(format_table(("name", "distinct", "layers", "types", "description"), rows))
    return EXIT_OK


def _ops_show(args: argparse.Namespace) -> int:
    from .opsets import load_opset

    s = load_opset(args.name)
    if args.json:
        print(json.dumps([
            {"name": e.op.name, "key": e.op.key, **e.op.to_dict(), "space": list(e.op.space),
             "reduction": list(e.op.reduction), "frequency": e.frequency, "gflop": e.op.flops / 1e9,
             "sketch": e.op.sketch_key()}
            for e in s
        ], indent=1))
        return EXIT_OK
    from .report import format_table

    rows = []
    for i, e in enumerate(s):
        op = e.op
        params = " ".join(f"{k}={_short(v)}" for k, v in op.params if not _is_default(op, k, v))
        rows.append((i, op.type, params, "[" + ",".join(map(str, op.space)) + " | " +
                     ",".join(map(str, op.reduction)) + "]", e.frequency, round(op.flops / 1e9, 4)))
    print(f"{s.name}: {len(s)} distinct operators, {sum(e.frequency for e in s)} layers, "
          f"{s.total_flops / 1e9:.2f} GFLOP in all")
    print(format_table(("#", "type", "parameters", "loop nest [space | reduction]", "freq", "GFLOP"), rows,
                       align="rlllrr"))
    return EXIT_OK


def _short(v) -> str:
    if isinstance(v, tuple):
        return str(v[0]) if len(set(v)) == 1 else "x".join(map(str, v))
    return str(v)


def _is_default(op, k, v) -> bool:
    param = next(p for p in op.spec.params if p.name == k)
    if param.default is None:
        return False
    d = param.default
    return (v == (d,) * len(v)) if isinstance(v, tuple) else v == d


# -- eto target ---------------------------------------------------------------------------------
def _target_show(args: argparse.Namespace) -> int:
    from .target import hardware_info, parse_target

    t = parse_target(args.target)
    info = hardware_info(args.target)
    if args.json:
        print(json.dumps({"target": str(t), **info.to_dict()}, indent=1))
    else:
        print(f"target: {t}")
        for k, v in info.to_dict().items():
            print(f"  {k}: {v}")
    return EXIT_OK


# -- parser -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eto", description="Reuse-driven operator tuning on TVM MetaSchedule.")
    parser.add_argument("--version", action="version", version=f"eto {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ops = sub.add_parser("ops", help="the operator catalogue and operator sets")
    ops_sub = ops.add_subparsers(dest="ops_command", metavar="SUBCOMMAND")
    p = ops_sub.add_parser("types", help="operator types with their major loop nests")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_ops_types)
    p = ops_sub.add_parser("list", help="built-in operator sets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_ops_list)
    p = ops_sub.add_parser("show", help="the operators of a built-in set or a JSON file")
    p.add_argument("name", help="built-in set name (see 'eto ops list') or path to a JSON operator set")
    p.add_argument("--json", action="store_true", help="JSON list: type, params, space, reduction, frequency")
    p.set_defaults(func=_ops_show)
    from .frontend import register_model_commands  # imports TVM/onnx/torch only when it runs

    register_model_commands(ops_sub)  # eto ops from-model FILE
    ops.set_defaults(func=lambda a: _usage(ops))

    tgt = sub.add_parser("target", help="show a target and its hardware description")
    tgt.add_argument("target", nargs="?", default="cpu", help="cpu (default), cuda, or a TVM tag")
    tgt.add_argument("--json", action="store_true")
    tgt.set_defaults(func=_target_show)

    from .commands import register_commands

    register_commands(sub)
    parser.set_defaults(func=lambda a: _usage(parser))
    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_BAD_INPUT


def _version() -> str:
    from . import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CLIError, ValueError, FileNotFoundError) as exc:
        print(f"eto: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("eto: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `eto ops show resnet50 | head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
