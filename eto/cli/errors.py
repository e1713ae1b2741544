"""Exit codes and the one place where a command's exceptions become messages and exit codes.

Exit codes: 0 success, 1 a run that finished with failures, 2 bad input (unknown operator or set,
malformed file, impossible shape, a bad option value, a missing file or optional package: the
exceptions in :data:`USER_ERRORS`, printed as ``eto: error: ...``), 3 an internal error (any other
exception: a bug in eto, printed as ``eto: internal error: Type: message`` with a line on how to
report it; ``-v`` prints its traceback), 128 + the signal's number when stopped by a signal: 130
interrupted (Ctrl-C), 143 terminated (SIGTERM) (:mod:`eto.cli.interrupt`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from typing import TYPE_CHECKING, Callable

from tuner.analysis.host import EnvironmentValueError
from tuner.measure import stop
from tuner.measure.options import OptionError
from eto.errors import InputError
from eto.models import MissingExtraError, ModelImportError
from eto.store.errors import DatabaseError
from eto.cli.progress import log

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.store.database import Database

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

Command = Callable[[argparse.Namespace], "int | None"]


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit code 2."""


#: what a user's input or environment causes, never a bug: bad input, exit code 2 (a ``ValueError``
#: that is none of these is a bug, like any other exception)
USER_ERRORS = (CLIError, InputError, OptionError, ModelImportError, DatabaseError, MissingExtraError,
               EnvironmentValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


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
    log.warning(f"{db.path}: {why}")


def run_command(command: Command, args: argparse.Namespace) -> int:
    """Run one command: user errors print ``eto: error: ...`` (no traceback) and give exit code 2, any
    other exception ``eto: internal error: ...`` and exit code 3 (the traceback with ``-v``).

    A model that needs an uninstalled extra (``onnx``, ``torch``) is bad input like any other: the
    message says what to install. Whatever ends a command once a stop was requested (SIGINT,
    SIGTERM: :mod:`tuner.measure.stop`) is that stop, even an error it became inside TVM's C++.
    """
    try:
        return int(command(args) or 0)
    except BaseException as exc:  # noqa: BLE001 - sorted below; SystemExit and the like are raised again
        signum = stop.requested()
        if signum is not None or isinstance(exc, KeyboardInterrupt):
            from eto.cli.interrupt import stopped_message

            print(stopped_message(args, signum or signal.SIGINT), file=sys.stderr)
            return 128 + (signum or signal.SIGINT)
        if isinstance(exc, USER_ERRORS):
            print(f"eto: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(exc, BrokenPipeError):  # e.g. `eto ops show resnet50 | head`
            return EXIT_OK
        if not isinstance(exc, Exception):
            raise
        return internal_error(exc, verbose=getattr(args, "verbose", False))


def internal_error(exc: Exception, *, verbose: bool) -> int:
    """Say that ``exc`` is a bug in eto and how to report it, with its traceback where ``verbose``; exit code 3."""
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    print(f"eto: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    print("eto: this is a bug in eto, please report it with the command line and "
          + ("the traceback above" if verbose else "its traceback (run the command again with -v to print it)"),
          file=sys.stderr)
    return EXIT_INTERNAL


def usage(parser: argparse.ArgumentParser) -> Command:
    """A command for a group named without its subcommand: the group's help, exit code 2."""
    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT

    return show
