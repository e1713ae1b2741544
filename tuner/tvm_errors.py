"""The exception types TVM raises, so that code expecting TVM to refuse something catches those and no more.

TVM's C++ errors reach Python through ``tvm_ffi`` as the builtin type their kind names (``ValueError``,
``TypeError``, ``AttributeError``, ``KeyError``, ``IndexError``, ``AssertionError``) or as a
``RuntimeError`` (every other kind; TVM's own registered errors, ``ScheduleError`` and
``InternalError`` among them, derive from it). A trace that does not replay, a record of another TVM
version, a function a pass rejects: each raises one of :data:`TVM_ERRORS`. Catching these rather than
``Exception`` lets what is none of them -- eto's own ``NameError`` or ``ImportError``, a
``DeadlineReached``, an ``OSError`` of the machine -- pass on under its own name.
"""

from __future__ import annotations

#: What a call into TVM raises for an input it refuses (the types ``tvm_ffi`` maps C++ error kinds to).
TVM_ERRORS: tuple[type[Exception], ...] = (RuntimeError, ValueError, TypeError, AttributeError, KeyError,
                                           IndexError, AssertionError)


def error_line(exc: BaseException, limit: int = 300) -> str:
    """The line of ``exc``'s message that says what went wrong: TVM puts it last, after the IR it
    printed and its C++ backtrace; the type's name where the message is empty."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else type(exc).__name__
