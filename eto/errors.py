"""The exception eto raises for bad input, so that a caller can tell a user's mistake from a bug.

:class:`InputError` is a ``ValueError`` (code that catches ``ValueError`` keeps working): an unknown
operator, operator set or target, impossible parameters, an unreadable operator-set file, a malformed
``--vary``. The command line reports it as bad input (exit code 2) and any ``ValueError`` that is not
one, nor another of the input errors it knows (:mod:`eto.cli.errors`), as an internal error.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from the user: the message names what is wrong and where."""


__all__ = ["InputError"]
