"""Where an interrupt may land in the caller's side of the guard: at a wait, never in between.

Python raises ``KeyboardInterrupt`` (or whatever a signal handler raises: pytest-timeout's
``SIGALRM`` one, say) at whatever bytecode the main thread runs when the signal comes. Between
creating a descriptor or a process and recording it, that leaks them: a 500 Hz ``SIGINT`` storm
left dozens of a pool's pipes open. So that code runs with the asynchronous signals blocked in
the calling thread (:func:`hold`), and lets them in only around its waits (:func:`let_in`),
where everything it owns is recorded. ``pthread_sigmask`` runs the handlers of the signals that
came meanwhile before it returns, so an interrupt raised as they are let in, or held back
again, lands at the wait too.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import threading
from collections.abc import Callable, Iterable, Iterator

#: Never blocked: the signals a fault raises synchronously, and those that cannot be.
_SYNCHRONOUS = {"SIGKILL", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP", "SIGSYS"}
MASKED = frozenset(
    sig
    for sig in signal.valid_signals()
    if not (isinstance(sig, signal.Signals) and sig.name in _SYNCHRONOUS)
)
#: ``signal.pthread_sigmask`` turns the mask it returns into a set of enum members: with every
#: signal blocked that is 60 enum look-ups a call, a fifth of ``run``'s own cost per call. The
#: C function under it returns plain ints (and runs pending handlers just the same).
sigmask: Callable[[int, Iterable[int]], set[int]] | None = getattr(
    importlib.import_module("_signal"), "pthread_sigmask", None
)
#: The main thread's masks before each :func:`hold` still in force, outermost first.
_held: list[set[int]] = []


def hold() -> set[int] | None:
    """In the main thread (the only one Python runs handlers in), block :data:`MASKED`.

    Returns the mask before, for :func:`release`; None in any other thread, or where there is
    no ``pthread_sigmask``. Holds nest.
    """
    if sigmask is None or threading.current_thread() is not threading.main_thread():
        return None
    previous = sigmask(signal.SIG_BLOCK, MASKED)
    _held.append(previous)
    return previous


def release(previous: set[int] | None) -> None:
    """Undo :func:`hold`: a handler of a signal that came meanwhile runs (and may raise) here."""
    if previous is not None and sigmask is not None:
        _held.pop()
        sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def let_in() -> Iterator[None]:
    """Around a wait inside :func:`hold`: the signals blocked by the outermost hold come in."""
    if not _held or sigmask is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    sigmask(signal.SIG_SETMASK, _held[0])
    try:
        yield
    finally:
        sigmask(signal.SIG_BLOCK, MASKED)
