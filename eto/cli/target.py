"""``eto target``: a target and the hardware description tuning uses for it."""

from __future__ import annotations

import argparse
import json

from eto.target import hardware_info, parse_target
from eto.cli.errors import EXIT_OK


def _show(args: argparse.Namespace) -> int:
    t = parse_target(args.target)
    info = hardware_info(args.target)
    if args.json:
        print(json.dumps({"target": str(t), **info.to_dict()}, indent=1))
    else:
        print(f"target: {t}")
        for k, v in info.to_dict().items():
            print(f"  {k}: {v}")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eto target [TARGET]``."""
    p = subparsers.add_parser("target", help="show a target and its hardware description")
    p.add_argument("target", nargs="?", default="cpu", help="cpu (default), cuda, or a TVM tag")
    p.add_argument("--json", action="store_true", help="print the target and its description as JSON")
    p.set_defaults(func=_show)
