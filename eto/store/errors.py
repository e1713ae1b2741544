"""What goes wrong with a database as a whole or with one of its records: bad input (the command line
exits 2), never a bug, so each message names the path and what to do."""

from __future__ import annotations


class DatabaseError(ValueError):
    """A database that cannot be used at all (not a directory, unreadable)."""


class UnreadableRecord(DatabaseError):
    """A stored program TVM cannot read back: another TVM version wrote it, or its line is damaged yet
    still JSON of the right shape (so loading the database let it through)."""
