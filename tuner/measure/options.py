"""How the backend (MetaSchedule) searches: one record for eto's roots, its fallbacks and MetaSchedule's own runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

#: Trials per task (MetaSchedule's measured candidates), the default of every entry point.
DEFAULT_TRIALS = 64
#: MetaSchedule's batch: candidates measured per search iteration.
DEFAULT_TRIALS_PER_ITER = 64
#: MetaSchedule's task schedulers.
Scheduler = Literal["gradient", "round-robin"]


class OptionError(ValueError):
    """A bad option value; ``name`` is the option's field, which a command line turns into its flag."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name} {message}")
        self.name, self.message = name, message


def check_positive(name: str, value: int | None, *, allow_none: bool = False) -> None:
    """An :class:`OptionError` unless ``value`` is a positive number (or None, where allowed)."""
    if value is None and allow_none:
        return
    if value is None or value < 1:
        raise OptionError(name, f"must be positive, got {value}")


def check_choice(name: str, value: Any, kind: Any) -> None:
    """An :class:`OptionError` unless ``value`` is one of the ``Literal`` ``kind``'s values."""
    if value not in get_args(kind):
        raise OptionError(name, f"must be one of {', '.join(get_args(kind))}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class BackendOptions:
    """How MetaSchedule tunes a task: its budget, batch, search strategy, seed and task scheduler."""

    #: measured candidates per task
    trials: int = DEFAULT_TRIALS
    #: MetaSchedule's batch size (never more than ``trials``)
    num_trials_per_iter: int = DEFAULT_TRIALS_PER_ITER
    #: a strategy name (:func:`tuner.measure.backend.search_strategy`) or MetaSchedule ``SearchStrategy``
    search: Any = "evolutionary"
    seed: int | None = None
    scheduler: Scheduler = "gradient"

    def __post_init__(self) -> None:
        check_positive("trials", self.trials)
        check_positive("num_trials_per_iter", self.num_trials_per_iter)
        check_choice("scheduler", self.scheduler, Scheduler)


__all__ = ["BackendOptions", "DEFAULT_TRIALS", "DEFAULT_TRIALS_PER_ITER", "OptionError", "Scheduler", "check_choice",
           "check_positive"]
