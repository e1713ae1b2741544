"""The ``eto`` command line: one module per command group, each adding its own subcommands.

Exit codes and error messages are in :mod:`eto.cli.errors`; messages, ``-q``/``-v`` and progress in
:mod:`eto.cli.progress`. Results go to stdout, everything else to stderr. Commands that only inspect
operators never import TVM's schedule machinery (modules import it inside their command functions),
so they answer in about a second.
"""

from __future__ import annotations

import argparse
import sys
import time
import zipfile
from typing import Sequence

from eto import __version__
from eto.cli import db, model, ops, plan, retune, target, tune
from eto.cli.errors import run_command, usage
from eto.cli.flags import Parser
from eto.cli.interrupt import handled
from eto.cli.progress import console


def build_parser() -> argparse.ArgumentParser:
    """The ``eto`` parser with every command group registered; every parser in it is a
    :class:`~eto.cli.flags.Parser` (defaults in ``--help``, ``-q``/``-v``)."""
    parser = Parser(prog="eto", description="Reuse-driven operator tuning on TVM MetaSchedule.")
    parser.add_argument("--version", action="version", version=f"eto {__version__}", help="print eto's version")
    parser.set_defaults(quiet=False, verbose=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for group in (ops, target, tune, retune, plan, db, model):
        group.register(subparsers)
    parser.set_defaults(func=usage(parser))
    return parser


#: Commands that never load a model unless given ``--model`` (then they need PyTorch).
TORCH_FREE_COMMANDS = frozenset({"plan", "tune", "retune", "dispatch", "db", "target"})


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``eto`` on ``argv`` (default: the process arguments); the exit code. SIGINT and SIGTERM stop
    it cleanly (:mod:`eto.cli.interrupt`).

    As the process's own command (``argv`` None), a command that loads no model, or an ONNX one, imports TVM
    without PyTorch (:func:`import_tvm_without_torch`): 2 of ``import tvm``'s 3 s here.
    """
    # a time budget is the command's wall time: as the process's own command, its start and imports count too
    started = time.perf_counter() - (process_age() if argv is None else 0.0)
    args = build_parser().parse_args(argv)
    args.command_line = list(sys.argv[1:] if argv is None else argv)  # what a stopped run says to rerun
    args.started = started
    model = getattr(args, "model", None)
    if argv is None and args.command in TORCH_FREE_COMMANDS and not (model and zipfile.is_zipfile(model)):
        import_tvm_without_torch()  # an ONNX file needs no PyTorch either; a torch.export archive is a zip
    with console(quiet=args.quiet, verbose=args.verbose), handled():  # Ctrl-C, SIGTERM: a clean stop
        return run_command(args.func, args)


def import_tvm_without_torch() -> None:
    """Import TVM while ``import torch`` fails, unless either is imported already.

    TVM's FFI (``tvm_ffi/__init__.py``) imports PyTorch first thing, to dodge a symbol clash seen on
    Windows only, and with it about 1,800 modules: ``import tvm`` takes 3.1 s on 2 cores with it
    and 1.1 s without, a third of ``eto plan --opset resnet50``. Nothing else TVM does here needs
    PyTorch; only its DLPack fast path for PyTorch tensors stays off in this process, which a
    command that loads no model never uses. PyTorch itself stays importable afterwards.
    """
    if "tvm" in sys.modules or "torch" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # makes ``import torch`` raise ImportError
    try:
        import tvm  # noqa: F401
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


def process_age() -> float:
    """Seconds since this process started, from the kernel's start time (Linux; 0 elsewhere): Python's
    start and ``import tvm`` take 1-3 s that a ``--time-budget`` run would otherwise spend past its
    budget. Resolution: the kernel's clock tick (10 ms)."""
    import os

    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime; fields from 3 follow ")"
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0
