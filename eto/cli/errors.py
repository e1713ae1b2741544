"""Exit codes and the one place where a command's exceptions become messages and exit codes.

Exit codes: 0 success, 1 a run that finished with failures, 2 bad input (unknown operator or set,
malformed file, impossible shape, a missing optional package), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Callable

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
    message says what to install.
    """
    try:
        return int(command(args) or 0)
    except (CLIError, ValueError, FileNotFoundError, MissingExtraError) as exc:
        print(f"eto: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("eto: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `eto ops show resnet50 | head`
        return EXIT_OK


def usage(parser: argparse.ArgumentParser) -> Command:
    """A command for a group named without its subcommand: the group's help, exit code 2."""
    def show(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT

    return show
