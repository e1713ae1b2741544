"""Claims: which process tunes an operator, so that two ``eto tune`` runs on one database never tune
the same operator twice.

A claim is an exclusive ``flock`` on ``<database>/.claims/<hash of operator and target>``: the
kernel drops it when its process exits, however it exits, so a killed run leaves no stale claim.
A run claims an operator before tuning it and, holding the claim, reloads the database: if another
process committed a result meanwhile, the operator is skipped. Batches of operators (one task
scheduler) are claimed without waiting, each operator one at a time otherwise, so two processes
never wait on each other in a cycle.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from eto.target import target_key

if TYPE_CHECKING:  # pragma: no cover
    from tvm.target import Target

    from eto.store.database import Database
    from eto.operators import Operator

CLAIMS = ".claims"
#: claims this process holds, by (file, thread): a thread that holds a claim already has it again
#: (flock would make a second descriptor of the same process wait on the first)
_held: dict[tuple[str, int], int] = {}


@contextmanager
def claim(database: "Database", op: "Operator", target: "str | Target", *, wait: bool = True) -> Iterator[bool]:
    """Hold ``op``'s claim on ``database`` (yields True), or yield False if another process holds it
    and ``wait`` is False. With the claim held, the database is reloaded (see the module doc)."""
    folder = os.path.join(database.path, CLAIMS)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha1(f"{op.key}|{target_key(target)}".encode()).hexdigest()[:20])
    mine = (path, threading.get_ident())
    if mine in _held:
        _held[mine] += 1
        try:
            yield True
        finally:
            _held[mine] -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            held = True
        except BlockingIOError:
            held = False
        if not held:
            yield False
            return
        database.reload()
        _held[mine] = 1
        try:
            yield True
        finally:
            del _held[mine]
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
