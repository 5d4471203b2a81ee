"""Where an interrupt may land in the caller's side of the guard: at a wait, never in between.

Python raises ``KeyboardInterrupt`` (or whatever a signal handler raises: pytest-timeout's
``SIGALRM`` one, say) at whatever bytecode the main thread runs when the signal comes. Between
creating a descriptor or a process and recording it, that leaks them: a 500 Hz ``SIGINT`` storm
left dozens of a pool's pipes open. So that code runs with the asynchronous signals blocked in
the calling thread (:func:`hold`), and lets them in only around its waits (:func:`let_in`),
where everything it owns is recorded. ``pthread_sigmask`` runs the handlers of the signals that
came meanwhile before it returns, so an interrupt raised as they are let in, or held back
again, lands at the wait too, and leaves them held for the cleanup it unwinds through.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
from collections.abc import Callable, Iterable, Sequence

from ._state import STATE

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


def hold() -> set[int] | None:
    """In the main thread (the only one Python runs handlers in), block :data:`MASKED`.

    Returns the mask before, for :func:`release`; None in any other thread, or where there is
    no ``pthread_sigmask``. Holds nest.
    """
    if sigmask is None or threading.current_thread() is not threading.main_thread():
        return None
    # Read first: a handler that runs (and raises) as the signals are blocked must not leave
    # them blocked with nobody to release them.
    previous = sigmask(signal.SIG_BLOCK, ())
    try:
        sigmask(signal.SIG_BLOCK, MASKED)
    except BaseException:
        sigmask(signal.SIG_SETMASK, previous)
        raise
    STATE.held_masks.append(previous)
    return previous


def release(previous: set[int] | None) -> None:
    """Undo :func:`hold`: a handler of a signal that came meanwhile runs (and may raise) here."""
    if previous is not None and sigmask is not None:
        STATE.held_masks.pop()
        sigmask(signal.SIG_SETMASK, previous)


class let_in:  # lower case: used as a function, ``with let_in():``
    """Around a wait inside :func:`hold`: the signals blocked by the outermost hold come in.

    A class, not a generator: a generator's ``finally`` that holds them back again runs when
    the generator is collected if an interrupt lands just after it yields, before the ``with``
    body starts, and that can be long after the hold was released: signals blocked for good.
    """

    def __init__(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        self.opened = bool(STATE.held_masks) and main

    def __enter__(self) -> None:
        if not self.opened or sigmask is None:
            return
        try:
            sigmask(signal.SIG_SETMASK, STATE.held_masks[0])
        except BaseException:
            # A signal that came while held: its handler raised here. Held again, for the
            # cleanup the exception unwinds through.
            sigmask(signal.SIG_BLOCK, MASKED)
            raise

    def __exit__(self, *_: object) -> None:
        if self.opened and sigmask is not None:
            sigmask(signal.SIG_BLOCK, MASKED)


_PIPE = {signal.SIGPIPE}


def writev(fd: int, parts: Sequence[bytes | bytearray]) -> int:
    """``os.writev`` that never raises ``SIGPIPE`` in the caller, whatever its disposition.

    A pipe whose reader died (a worker its item killed, or that closed its own end) makes the
    kernel send the writing thread ``SIGPIPE``: ignored by Python's default, it kills a caller
    that restored ``SIG_DFL`` (a CLI, an embedded interpreter). Blocked for the write, the
    signal is taken back after a broken pipe, so only ``BrokenPipeError`` is left; one that was
    pending before (the caller's own, under a :func:`hold`) is left as it was.
    """
    if sigmask is None:
        return os.writev(fd, parts)
    blocked = signal.SIGPIPE in sigmask(signal.SIG_BLOCK, _PIPE)
    theirs = blocked and signal.SIGPIPE in signal.sigpending()
    try:
        return os.writev(fd, parts)
    except BrokenPipeError:
        if not theirs:
            signal.sigtimedwait(_PIPE, 0)
        raise
    finally:
        if not blocked:
            sigmask(signal.SIG_UNBLOCK, _PIPE)
