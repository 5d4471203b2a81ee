"""What runs inside a guarded process: run's forked child, and a pool worker around each item.

Setting the process up (stdio onto the output pipe, the stack dump on ``DUMP_SIGNAL``, the
memory limit), making one call into a result frame, and run's child from its fork to ``_exit``.
"""

from __future__ import annotations

import faulthandler
import inspect
import os
import pickle
import resource
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

from . import _libc, _procfs, _reap, _walkkill
from ._outcome import Status, raised
from ._state import STATE
from ._wire import DUMP_SIGNAL, framed, pickle_frame, write_all

_OK = Status.OK.value
_PLAIN = frozenset({float, int, bool, str, dict, list, tuple, type(None)})


def run_child(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    memory_mb: float | None,
    parent_pid: int,
    result_w: int,
    output_w: int,
    stack_w: int,
) -> None:  # pragma: no cover - runs only in run's forked child; never returns
    """Run's child: make the call, kill what it left running, write the result frame, exit."""
    code = 70
    try:
        os.setsid()
        subreaper = _libc.become_subreaper(parent_pid)
        setup_child(output_w, stack_w, memory_mb)
        frame = call(fn, args, kwargs)
        leaked = 0
        if subreaper and not childless():
            leaked = _walkkill.kill_descendants(os.getpid())
            leaked += _reap.reap_children()
        write_all(result_w, framed(pickle_frame((*frame, leaked))))
        code = 0
    except BaseException:  # noqa: BLE001, S110 - no result is reported as a crash by the parent
        pass
    finally:
        os._exit(code)


def childless() -> bool:  # pragma: no cover - child only
    """Whether this process (a subreaper) has one thread and no child, living or a zombie:
    then nothing is below it, and the walks of :func:`._walkkill.kill_descendants` and
    :func:`._reap.reap_children` through ``/proc`` are not needed. A descendant whose parent
    has died re-parents to us, a child of an exited thread to a thread of ours: with one
    thread left, this one. The thread count is read first: only this thread could start
    another meanwhile."""
    if _procfs.own_threads() != 1:
        return False
    try:
        return not _procfs.read_small("/proc/thread-self/children").strip()
    except OSError:
        return False


def setup_child(
    output_w: int, stack_w: int, memory_mb: float | None
) -> None:  # pragma: no cover - child only
    """Point stdio at the output pipe, arm the stack dump, and apply the memory limit."""
    _redirect_stdio(output_w)
    # A crash's traceback goes to the call's output, not to the caller's terminal. Disabled
    # first: enable() on an enabled faulthandler only changes its file and keeps whatever
    # handler now holds SIGSEGV, and a Ray driver's core installs its own over pytest's.
    faulthandler.disable()
    faulthandler.enable(file=2, all_threads=True)
    faulthandler.register(DUMP_SIGNAL, file=stack_w, all_threads=True, chain=False)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {DUMP_SIGNAL})
    if memory_mb is not None:
        limit_memory(memory_mb)


def call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[Any, ...]:  # pragma: no cover - child only
    """``(status, value, error, pickled exception)`` of one call, its output flushed.

    An ``async def`` scorer (or one returning any awaitable) is awaited here, on a fresh event
    loop, so its deadline covers the awaiting too and a coroutine never has to be pickled.
    """
    try:
        value = fn(*args, **kwargs)
        # What scorers return skips the awaitable check: a pool item is tens of µs.
        if type(value) not in _PLAIN and inspect.isawaitable(value):
            value = awaited(value)
        frame: tuple[Any, ...] = (_OK, value, None, None)
    except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are results too
        frame = _error_frame(exc)
    for stream in (sys.stdout, sys.stderr):
        # A plain try, not suppress(): this runs once per item in a pool worker.
        try:  # noqa: SIM105
            stream.flush()
        except BaseException:  # noqa: BLE001, S110 - the call may have closed or replaced them
            pass
    return frame


def awaited(awaitable: Any) -> Any:
    """What an awaitable a scorer returned comes to, awaited on a loop of its own."""
    import asyncio

    async def wait() -> Any:
        return await awaitable

    # asyncio.run, not a loop kept per worker: tasks the item left behind are cancelled with
    # its loop instead of running on into the next item.
    return asyncio.run(wait())


def _error_frame(exc: BaseException) -> tuple[Any, ...]:  # pragma: no cover - child only
    status, text = raised(exc)
    try:  # pickled apart, so an exception that will not travel still leaves its text
        exception: bytes | None = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001
        exception = None
    return (status.value, None, text, exception)


def null_stdin() -> None:  # pragma: no cover - child only
    """fd 0 from /dev/null: nothing the call does can read the caller's input."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def _redirect_stdio(output_w: int) -> None:  # pragma: no cover - child only
    null_stdin()
    os.dup2(output_w, 1)
    os.dup2(output_w, 2)
    os.close(output_w)
    # The caller's sys.stdout may be an in-memory capture (pytest's): point Python at the fds.
    # The objects replaced are kept, never finalized here: a finalized file object flushes,
    # and what theirs hold (the half-written line of a call this guard is nested in) is not
    # this process's output.
    STATE.replaced_stdio.append((sys.stdin, sys.stdout, sys.stderr))
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115


def limit_memory(memory_mb: float) -> None:  # pragma: no cover - child only
    # An absolute limit below what the process already maps would break every allocation.
    with open("/proc/self/statm", "rb") as f:
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    limit = mapped + int(memory_mb * 1024 * 1024)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
