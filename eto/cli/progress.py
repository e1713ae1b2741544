"""What a command says while it runs: messages through the ``eto`` logger, progress updated in place.

:func:`console` sets the ``eto`` logger up for one command (:func:`eto.cli.main`, the only place that
configures logging): ``eto: message`` on stderr (``eto: warning: ...``, ``eto: error: ...``), at INFO by
default, WARNING with ``-q``, DEBUG with ``-v``; eto's own Python warnings (``warnings.warn``) print the
same way. Results stay on stdout (``print``). Library code never configures logging: it takes ``log``
and ``on_batch`` callables, which :class:`Progress` provides.

:class:`Progress` shows a tuning run's progress: on a terminal, tqdm bars updated in place (one per
operator being searched, with its budget or the plan's estimate as the total and an ETA, and one for
the set's operators); elsewhere (a log file, a pipe, a test), the plain lines of
:func:`eto.runs.tuning.progress_printer` at INFO.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import threading
import warnings
from contextlib import contextmanager
from typing import IO, Any, Callable, Iterator

#: the logger every command's messages go through (modules may use children: ``eto.progress`` ...)
log = logging.getLogger("eto")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PACKAGES = tuple(os.path.join(_ROOT, p) + os.sep for p in ("eto", "tuner", "selector"))  # side by side
_live: set["Progress"] = set()  # displays with bars on the screen: messages are written above them


class ConsoleFormatter(logging.Formatter):
    """``eto: message``, ``eto: warning: message``, ``eto: error: message`` (a traceback after, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelno
        text = f"eto: {'error: ' if level >= logging.ERROR else 'warning: ' if level >= logging.WARNING else ''}" \
               f"{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class ConsoleHandler(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (tests swap it), above any progress bars on screen."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(ConsoleFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if _live:  # tqdm clears the bars, writes the line and draws them again below it
                from tqdm import tqdm

                tqdm.write(text, file=sys.stderr)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
        except Exception:  # noqa: BLE001 -- logging's own policy for a handler that fails
            self.handleError(record)


def level_of(*, quiet: bool = False, verbose: bool = False) -> int:
    """The ``eto`` logger's level for ``-q`` / ``-v`` (``-v`` wins where both are given)."""
    return logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO


@contextmanager
def console(*, quiet: bool = False, verbose: bool = False) -> Iterator[ConsoleHandler]:
    """The ``eto`` logger on stderr for one command (see the module), put back as it was afterwards."""
    saved = log.level, log.propagate, list(log.handlers)
    for h in saved[2]:
        log.removeHandler(h)
    handler = ConsoleHandler()
    log.addHandler(handler)
    log.setLevel(level_of(quiet=quiet, verbose=verbose))
    log.propagate = False  # one line per message, whatever the root logger has
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning(warnings.showwarning)
            yield handler
    finally:
        log.removeHandler(handler)
        for h in saved[2]:
            log.addHandler(h)
        log.setLevel(saved[0])
        log.propagate = saved[1]


def _show_warning(default: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` that prints warnings raised in eto's packages as ``eto: warning: ...``."""
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if os.path.abspath(filename).startswith(_PACKAGES):
            log.warning(str(message))
        else:
            default(message, category, filename, lineno, file, line)
    return show


class Progress:
    """A command's progress display: :attr:`on_batch` after each measured batch, :meth:`say` for the
    run's messages (a set's :class:`~eto.runs.tuning.SetStatus` among them). Bars in place where
    ``stream`` is a terminal (``live``), else plain lines at INFO; nothing at all below INFO (``-q``).
    A context manager: leaving it closes every bar."""

    def __init__(self, stream: IO[str] | None = None, *, live: bool | None = None) -> None:
        from eto.runs.tuning import progress_printer

        self.stream = stream or sys.stderr
        self.shown = log.isEnabledFor(logging.INFO)
        self.live = self.shown and (_isatty(self.stream) if live is None else live)
        self.lines = progress_printer(logging.getLogger("eto.progress").info)
        self.bars: dict[str, Any] = {}  # label -> its tqdm bar
        self.last: dict[str, tuple[int, int]] = {}  # label -> (trials at its previous batch, its budget)
        self.set_bar: Any = None
        self.lock = threading.RLock()  # batches come from several threads (subtrees on RPC devices)

    @property
    def on_batch(self) -> Callable[[str, int, int, float], None] | None:
        """What a run takes as ``on_batch``: None where progress is not shown (``-q``)."""
        return self.batch if self.shown else None

    def batch(self, label: str, trials: int, budget: int, best: float) -> None:
        """One measured batch of ``label``'s search: ``trials`` so far against ``budget`` (0: none)."""
        if not self.live:
            self.lines(label, trials, budget, best)
            return
        from eto.runs.tuning import batch_total, past_budget

        with self.lock:
            step = trials - self.last.get(label, (trials, budget))[0]
            self.last[label] = trials, budget
            total = batch_total(trials, budget, step)
            bar = self.bars.get(label)
            if bar is None:
                for idle in [k for k, b in self.bars.items() if b.total is None]:
                    self._close(idle, say=True)  # searches without a budget (a model's functions) run one by one
                bar = self.bars[label] = self._bar(label, total, trials)
            bar.total = total
            bar.set_description_str(label + past_budget(trials, budget), refresh=False)
            bar.set_postfix_str("" if math.isinf(best) else f"best {best * 1e6:.2f} us", refresh=False)
            bar.n = trials
            bar.refresh()
            if total is not None and trials >= total:  # its budget spent: done
                self._close(label, say=True)

    def say(self, message: str) -> None:
        """A run's message (its ``log``): a set's status draws the set's bar where the bars are live."""
        from eto.runs.tuning import SetStatus, clock

        if not (self.live and isinstance(message, SetStatus)):
            log.info(message)
            return
        with self.lock:
            for label in [k for k in self.bars if any(k == n or k.endswith(" " + n) for n in message.finished)]:
                self._close(label, say=True)
            if self.set_bar is None:
                self.set_bar = self._tqdm(total=message.total, initial=message.done, desc="set",
                                          bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                                     "operators{postfix}")
            self.set_bar.n = message.done
            self.set_bar.set_postfix_str(f"{clock(message.elapsed)} elapsed, ETA {clock(message.eta)}", refresh=False)
            self.set_bar.refresh()
            if message.done >= message.total:
                self.set_bar.close()
                self.set_bar = None
                log.info(message)

    def _bar(self, label: str, total: int | None, trials: int) -> Any:
        return self._tqdm(total=total, initial=trials, desc=label, unit="trial", smoothing=0)

    def _tqdm(self, **kw: Any) -> Any:
        from tqdm import tqdm

        _live.add(self)
        size = _terminal_size(self.stream)
        return tqdm(file=self.stream, leave=False, ncols=size.columns, nrows=size.lines, mininterval=0, **kw)

    def _close(self, label: str, *, say: bool = False) -> None:
        """Close ``label``'s bar; ``say``: leave its last state as a line, since closed bars vanish."""
        from eto.runs.tuning import clock

        bar = self.bars.pop(label)
        budget = self.last.pop(label, (0, 0))[1]
        text = (f"  {label}: {bar.n} trials{f' ({budget} planned)' if budget else ''} in "
                f"{clock(bar.format_dict['elapsed'])}{', ' + bar.postfix if bar.postfix else ''}")
        bar.close()
        if say:
            log.info(text)

    def close(self) -> None:
        with self.lock:
            for label in list(self.bars):
                self._close(label)
            if self.set_bar is not None:
                self.set_bar.close()
                self.set_bar = None
            _live.discard(self)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _terminal_size(stream: IO[str]) -> os.terminal_size:
    """The terminal's size now; 100 x 24 where it says 0 (a pseudo-terminal as ``script`` makes one),
    where tqdm's own reading of it would draw nothing."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):  # no file descriptor (a test's stream)
        size = os.terminal_size((0, 0))
    return size if size.columns > 0 and size.lines > 0 else shutil.get_terminal_size((100, 24))


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
