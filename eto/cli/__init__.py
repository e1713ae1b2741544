"""The ``eto`` command line: one module per command group, each adding its own subcommands.

Exit codes and error messages are in :mod:`eto.cli.errors`. Commands that only inspect operators
never import TVM's schedule machinery (modules import it inside their command functions), so they
answer in about a second.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from .. import __version__
from . import db, model, ops, plan, retune, target, tune
from .errors import run_command, usage


def build_parser() -> argparse.ArgumentParser:
    """The ``eto`` parser with every command group registered."""
    parser = argparse.ArgumentParser(prog="eto", description="Reuse-driven operator tuning on TVM MetaSchedule.")
    parser.add_argument("--version", action="version", version=f"eto {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in (ops, target, tune, retune, plan, db, model):
        group.register(subparsers)
    parser.set_defaults(func=usage(parser))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``eto`` on ``argv`` (default: the process arguments); the exit code."""
    args = build_parser().parse_args(argv)
    return run_command(args.func, args)
