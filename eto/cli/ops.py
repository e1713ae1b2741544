"""``eto ops types|list|show|from-model``: the operator catalogue, operator sets and model import.

Only ``from-model`` reads a model (and imports TVM, onnx or torch when it runs); the others answer
from the catalogue in about a second.
"""

from __future__ import annotations

import argparse
import json
from typing import Sequence

from eto.models import ModelOperators, extract_from_file, operator_item
from eto.operators import operator_types
from eto.operators.opsets import builtin_opset, builtin_opsets, load_opset
from eto.report import format_table, plural
from eto.cli.errors import EXIT_OK, CLIError, usage
from eto.cli.format import operator_table, opset_summary


def _types(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps([
            {"type": t.name, "description": t.description, "space": list(t.space_names),
             "reduction": list(t.reduction_names), "params": [p.name for p in t.params],
             "composite": t.composite}
            for t in operator_types()
        ], indent=1))
        return EXIT_OK
    rows = [(t.name, "[" + ", ".join(t.space_names) + " | " + ", ".join(t.reduction_names) + "]", t.description)
            for t in operator_types()]
    print(format_table(("type", "major loop nest [space | reduction]", "description"), rows))
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    sets = builtin_opsets()
    if args.json:
        print(json.dumps([{"name": n, "description": d, "operators": len(builtin_opset(n))}
                          for n, d in sets.items()], indent=1))
        return EXIT_OK
    rows = []
    for name, desc in sets.items():
        s = builtin_opset(name)
        types = ", ".join(f"{n} {t}" for t, n in s.count_by_type().items())
        rows.append((name, len(s), sum(e.frequency for e in s), types, desc))
    print(format_table(("name", "distinct", "layers", "types", "description"), rows))
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    s = load_opset(args.name)
    if args.json:
        print(json.dumps([operator_item(e.op, e.frequency) for e in s], indent=1))
        return EXIT_OK
    print(opset_summary(s))
    print(operator_table(s))
    return EXIT_OK


def format_model_operators(result: ModelOperators) -> str:
    """The ``eto ops show`` table of the set, then the unsupported calls."""
    lines = [opset_summary(result.opset), f"source: {result.source}"]
    if len(result.opset):
        lines.append(operator_table(result.opset))
    if result.unsupported:
        lines.append(f"unsupported: {plural(result.unsupported_calls, 'call')} not in the set")
        lines.append(format_table(("count", "op", "call", "reason"),
                                  [(u.count, u.op, u.call, u.reason) for u in result.unsupported], align="rlll"))
    else:
        lines.append("unsupported: none")
    return "\n".join(lines)


def _parse_shapes(items: Sequence[str] | None) -> dict[str, list[int]]:
    """``--input-shape NAME=D1,D2,...`` (``x`` also separates) -> ``{NAME: [D1, D2, ...]}``."""
    shapes: dict[str, list[int]] = {}
    for item in items or ():
        key, eq, dims = item.partition("=")
        try:
            values = [int(d) for d in dims.replace("x", ",").split(",")]
        except ValueError:
            values = []
        if not eq or not key or not values or any(v < 1 for v in values):
            raise CLIError(f"--input-shape {item!r}: expected NAME=D1,D2,... with positive integers, "
                           "e.g. input=1,3,224,224")
        shapes[key] = values
    return shapes


def parse_dims(items: Sequence[str] | None) -> dict[str, int]:
    """``--dim NAME=SIZE`` (repeatable) -> ``{NAME: SIZE}``: sizes for a model's symbolic dimensions."""
    dims: dict[str, int] = {}
    for item in items or ():
        key, eq, value = item.partition("=")
        if not eq or not key or not value.strip().isdigit() or int(value) < 1:
            raise CLIError(f"--dim {item!r}: expected NAME=SIZE with a positive integer, e.g. seq=128")
        dims[key.strip()] = int(value)
    return dims


def add_dim_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dim", action="append", metavar="NAME=SIZE",
                   help="size for a symbolic dimension of the model (ONNX dim_param, torch.export's s0...; "
                        "repeatable; an unknown name lists the model's)")


def add_layout_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layout", choices=("auto", "NCHW", "NHWC", "NHWC-winograd"), default=None,
                   help="the layout the model's convolutions are tuned and built in: auto (the default for tuning: on a "
                        "CPU channels last, 3x3 convolutions by Winograd where predicted faster; on a GPU as written), "
                        "NCHW as written, NHWC (channels last, which CPUs vectorise), or NHWC-winograd (every eligible 3x3 "
                        "stride-1 convolution by Winograd). The database records it: eto build and bench use it "
                        "without the flag, and refuse another")


def add_fast_math_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fast-math", action="store_true",
                   help="the model's erf (GELU), exp, tanh and softmax as TVM's fast approximations; give it to "
                        "eto tune, build and bench alike (a database tuned with it holds the fast functions)")


def _from_model(args: argparse.Namespace) -> int:
    result = extract_from_file(args.file, name=args.name, shapes=_parse_shapes(args.input_shape),
                               dims=parse_dims(args.dim))
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(format_model_operators(result))
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eto ops`` and its subcommands."""
    ops = subparsers.add_parser("ops", help="the operator catalogue and operator sets")
    sub = ops.add_subparsers(dest="ops_command", metavar="SUBCOMMAND")
    p = sub.add_parser("types", help="operator types with their major loop nests")
    p.add_argument("--json", action="store_true",
                   help="JSON list: type, description, space and reduction loops, parameters, composite")
    p.set_defaults(func=_types)
    p = sub.add_parser("list", help="built-in operator sets")
    p.add_argument("--json", action="store_true", help="JSON list: name, description, number of operators")
    p.set_defaults(func=_list)
    p = sub.add_parser("show", help="the operators of a built-in set or a JSON file")
    p.add_argument("name", help="built-in set name (see 'eto ops list') or path to a JSON operator set")
    p.add_argument("--json", action="store_true", help="JSON list: type, params, space, reduction, frequency")
    p.set_defaults(func=_show)
    p = sub.add_parser("from-model", help="the operator set of an ONNX model or a torch.export .pt2 file",
                       description="Import a model with TVM's Relax frontend and list its tunable operators "
                                   "with frequencies, plus the calls that could not be mapped.")
    p.add_argument("file", help="an ONNX model (.onnx) or a torch.export.save archive (.pt2)")
    p.add_argument("--json", action="store_true",
                   help="JSON object: operators (as 'eto ops show --json') and unsupported; "
                        "also a valid operator-set file")
    p.add_argument("--name", help="name of the operator set (default: the file name)")
    p.add_argument("--input-shape", action="append", metavar="NAME=D1,D2,...",
                   help="static shape for an ONNX input with symbolic dimensions (repeatable)")
    add_dim_option(p)
    p.set_defaults(func=_from_model)
    ops.set_defaults(func=usage(ops))
