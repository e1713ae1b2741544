"""An interrupted run's checkpoints, as :meth:`eto.store.database.Database.progress` reads them back.

A run in flight appends one ``eto_progress.json`` line per measured batch (:meth:`Database.checkpoint
<eto.store.database.Database.checkpoint>`); a rerun counts its trials and seconds against the budget
and seeds its search with its programs. A program TVM cannot read back (another TVM version wrote
it, or the line is damaged yet still JSON) costs that one seed, with a warning that counts them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from eto.store.errors import UnreadableRecord

if TYPE_CHECKING:  # pragma: no cover
    from tvm.s_tir.meta_schedule.database import TuningRecord


class RecordReader(Protocol):
    """What reads a checkpoint's records: :class:`eto.store.database.Database`."""

    def read_record(self, workload: int, record: list, where: str = ...) -> "TuningRecord": ...


@dataclass(frozen=True)
class Progress:
    """An interrupted run's durable checkpoints: trials, seconds and measured programs so far."""

    trials: int = 0
    seconds: float = 0.0
    latencies: tuple[float, ...] = ()
    trajectory: tuple = ()  # [seconds, trial, best latency] points, the run's own clock
    _entries: tuple = field(default=(), repr=False)  # [workload line, record JSON] per program
    _db: RecordReader | None = field(default=None, compare=False, repr=False)
    label: str = ""  # whose run: its operator's key, for the warning about unreadable programs

    def programs(self) -> list[tuple["TuningRecord", float]]:
        """The programs as (MetaSchedule TuningRecord, seconds); those TVM cannot read are skipped,
        counted in a warning that gives the first one's error."""
        out, errors = [], []
        for (wl, rec), secs in zip(self._entries, self.latencies):
            try:
                out.append((self._db.read_record(wl, rec), secs))  # type: ignore[union-attr]
            except UnreadableRecord as exc:
                errors.append(exc)
        if errors:
            warnings.warn(f"{len(errors)} of {len(self._entries)} checkpointed programs of {self.label} skipped: "
                          f"{errors[0]}", RuntimeWarning, stacklevel=2)
        return out


def progress_batch_ok(obj: Any, workloads: int) -> bool:
    """Whether a progress line is a batch eto wrote: typed fields, records on known workloads."""
    if not (isinstance(obj, dict) and all(isinstance(obj.get(k), str) for k in ("op_key", "target", "method"))
            and isinstance(obj.get("trials"), int) and isinstance(obj.get("seconds"), (int, float))
            and isinstance(obj.get("records", []), list) and isinstance(obj.get("trajectory", []), list)):
        return False
    return all(isinstance(e, list) and len(e) == 3 and isinstance(e[0], int) and 0 <= e[0] < workloads
               and isinstance(e[2], (int, float)) for e in obj.get("records", []))
