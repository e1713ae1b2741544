"""A cache on disk of the plan's trial estimates (:func:`tuner.reuse.estimate.estimate_many`).

A plan estimates every reuse pair's candidates by enumerating the reuse tuner's rounds over sampled
β configurations: pure Python, ~1,000 pairs for ResNet-50 with its bridges, about 2.5 s of a 3.6 s
``eto plan`` on 2 cores. The numbers depend only on the two loop nests, the estimator's options and
the machine's limits, and the same pairs come back in every plan of the same model, in ``eto tune``
after ``eto plan``, and in every later model whose operators a database already holds. So each
estimate is kept, keyed by a hash of all of that and of the estimator's own source code (a changed
estimator never reads an old number).

Where: ``$ETO_CACHE_DIR``, else ``$XDG_CACHE_HOME/eto``, else ``~/.cache/eto``; ``ETO_CACHE_DIR=off``
turns it off. One JSON file per estimator setting (not pickle: a cache directory is no place to load
code from). A file that cannot be read is rebuilt (with a warning naming it); a directory that cannot be
written leaves the plan uncached, not failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

#: The estimator's packages: a change to any module of them is a change to the numbers.
_PACKAGES = ("tuner/reuse", "tuner/analysis")
#: Entries one file keeps: a plan of a large model with many priors asks for a few thousand.
MAX_ENTRIES = 200_000
OFF = "off"

T = TypeVar("T")


def cache_dir() -> Path | None:
    """The cache's directory, or None where ``ETO_CACHE_DIR=off``."""
    given = os.environ.get("ETO_CACHE_DIR")
    if given is not None:
        return None if given.strip().lower() == OFF else Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eto"


def _code_hash() -> str:
    root = Path(__file__).resolve().parent.parent.parent
    h = hashlib.sha256()
    for path in sorted(p for package in _PACKAGES for p in (root / package).glob("*.py")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()


def _digest(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:32]


def cached(setting: Any, keys: Sequence[Any], compute: Callable[[list[Any]], list[T]],
           encode: Callable[[T], list], decode: Callable[[list], T]) -> list[T]:
    """``compute(keys)``'s values, those already on disk for ``setting`` read back instead of computed.

    ``setting`` and each key must have a stable ``repr`` (frozen dataclasses, tuples, numbers); values
    go through ``encode``/``decode`` to JSON lists. O(len(keys)) hashing plus one file read and, when
    something was computed, one atomic write."""
    where = cache_dir()
    if where is None or not keys:
        return compute(list(keys))
    path = where / f"estimates-{_digest((_code_hash(), setting))[:16]}.json"
    table = _read(path)
    digests = [_digest(k) for k in keys]
    missing = [i for i, d in enumerate(digests) if d not in table]
    if missing:
        for i, value in zip(missing, compute([keys[i] for i in missing])):
            table[digests[i]] = encode(value)
        _write(path, table)
    return [decode(table[d]) for d in digests]


def _read(path: Path) -> dict[str, list]:
    try:
        with open(path) as f:
            table = json.load(f)
    except (FileNotFoundError, NotADirectoryError):  # nothing cached yet
        return {}
    except (OSError, ValueError) as exc:
        warnings.warn(f"estimate cache {path} cannot be read ({exc}); rebuilding it", stacklevel=3)
        return {}
    return table if isinstance(table, dict) else {}


def _write(path: Path, table: dict[str, list]) -> None:
    if len(table) > MAX_ENTRIES:  # keep the newest: dicts keep insertion order
        table = dict(list(table.items())[-MAX_ENTRIES:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(table, f)
        os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    except OSError as exc:
        warnings.warn(f"estimate cache {path} cannot be written ({exc}); the plan goes on without it", stacklevel=3)


__all__ = ["MAX_ENTRIES", "OFF", "cache_dir", "cached"]
