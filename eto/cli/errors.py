"""Exit codes and the one place where a command's exceptions become messages and exit codes.

Exit codes: 0 success, 1 a run that finished with failures, 2 bad input (unknown operator or set,
malformed file, impossible shape, a missing optional package), 128 + the signal's number when
stopped by a signal: 130 interrupted (Ctrl-C), 143 terminated (SIGTERM) (:mod:`eto.cli.interrupt`).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Callable

from tuner.measure import stop
from eto.models import MissingExtraError

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.store.database import Database

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

Command = Callable[[argparse.Namespace], "int | None"]


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit code 2."""


def check_target(db: "Database", target: "Target", *, fatal: bool) -> None:
    """A database whose programs are all for other targets: an error where the command needs its
    programs (``fatal``), else a warning naming the difference (both say which attribute differs).
    The warning is only for targets of the same kind: one database may well hold CPU and GPU programs."""
    import json

    from eto.target import target_mismatch

    stored = {p.target for p in db.programs()}
    if not fatal:
        stored = {k for k in stored if json.loads(k).get("kind") == target.kind.name}
    why = target_mismatch(stored, target)
    if why is None:
        return
    if fatal:
        raise CLIError(f"{db.path}: {why}")
    print(f"eto: warning: {db.path}: {why}", file=sys.stderr)


def run_command(command: Command, args: argparse.Namespace) -> int:
    """Run one command: user errors print ``eto: error: ...`` (no traceback) and give an exit code.

    A model that needs an uninstalled extra (``onnx``, ``torch``) is bad input like any other: the
    message says what to install. Whatever ends a command once a stop was requested (SIGINT,
    SIGTERM: :mod:`tuner.measure.stop`) is that stop, even an error it became inside TVM's C++.
    """
    try:
        return int(command(args) or 0)
    except BaseException as exc:  # noqa: BLE001 - sorted below; anything else is raised again
        signum = stop.requested()
        if signum is not None or isinstance(exc, KeyboardInterrupt):
            from eto.cli.interrupt import stopped_message

            print(stopped_message(args, signum or signal.SIGINT), file=sys.stderr)
            return 128 + (signum or signal.SIGINT)
        if isinstance(exc, (CLIError, ValueError, FileNotFoundError, MissingExtraError)):
            print(f"eto: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(exc, BrokenPipeError):  # e.g. `eto ops show resnet50 | head`
            return EXIT_OK
        raise


def usage(parser: argparse.ArgumentParser) -> Command:
    """A command for a group named without its subcommand: the group's help, exit code 2."""
    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT

    return show
