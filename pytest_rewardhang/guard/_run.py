"""``run`` and ``@guarded``: one call under a fork-kill budget, or the weaker fallbacks.

In-process deadlines cannot be trusted with a reward function: SIGALRM never fires inside one
long C call, is unavailable off the main thread, and is defeated by code that swallows
``BaseException`` or re-arms the alarm; a thread cannot be killed at all. :func:`run` forks,
runs the call in the child, and SIGKILLs the child and all its descendants at the budget.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, ParamSpec, TypeVar, overload

from . import _limits
from ._box import Confining
from ._child import awaited
from ._fork import run_forked
from ._outcome import Mechanism, Outcome, Status, raised
from ._quota import MAX_PROCESSES
from ._state import STATE

log = logging.getLogger("pytest_rewardhang.guard")

P = ParamSpec("P")
R = TypeVar("R")
D = TypeVar("D")


def run(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    budget: float = 2.0,
    memory_mb: float | None = None,
    objects: bool = False,
    max_processes: int | None = MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
) -> Outcome:
    """Call ``fn(*args, **kwargs)`` in a forked child that is SIGKILLed at ``budget`` seconds.

    ``memory_mb`` bounds what the call may allocate on top of what the process already maps,
    and, where the kernel has a cgroup memory controller, what all its processes hold together
    (plus a small headroom). ``max_processes`` bounds its tasks (processes and threads) at
    once, where there is a pids controller (None: no bound). ``network=False`` gives the call
    a network namespace of its own, loopback only; ``unprivileged=True`` runs a root caller's
    call as a uid no other guarded process holds, without capabilities. ``Outcome.confined``
    says what applied; each call also has a temporary folder (``TMPDIR``) and, where root, a
    ``/dev/shm`` and SysV IPC of its own, removed after it. Where one asked for cannot apply,
    one warning is logged.
    Raises only for its own arguments (``fn`` not callable, a nonsense option), never for
    anything the call does: the :class:`Outcome` says what happened, and control comes back
    within about ``budget`` plus 0.1 s whatever the call does, plus the time its processes
    take to exit when it has started hundreds (each is gone before ``run`` returns: 300 to 900
    sleeping forks of a 55 MiB caller add 0.15 to 0.7 s on 2 busy cores).

    The value comes back only if it is plain data (None, bool, int, float, complex, str,
    bytes, bytearray, list, tuple, dict, set, frozenset, nested; numpy scalars when numpy is
    imported): rebuilding any other object would run code the call chose in the caller. Any
    other value is an ERROR saying what came back, unless ``objects=True``, which unpickles it
    as is and so trusts the call. Likewise ``Outcome.exception`` is the exception object only
    when it is of a builtin class holding plain data (or ``objects=True``); the text is in
    ``Outcome.error`` always.
    """
    _limits.function(fn, spec=False)
    switches = {"objects": objects, "network": network, "unprivileged": unprivileged}
    _check_limits(budget, memory_mb, max_processes, **switches)
    kwargs = {} if kwargs is None else kwargs
    if hasattr(os, "fork"):
        confining = Confining(memory_mb, max_processes, network, unprivileged)
        return run_forked(fn, tuple(args), kwargs, float(budget), memory_mb, objects, confining)
    if memory_mb is not None:
        _warn_once("memory")
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        _warn_once("alarm")
        return _run_with_alarm(fn, tuple(args), kwargs, float(budget))
    _warn_once("unbounded")
    return _run_unbounded(fn, tuple(args), kwargs, float(budget))


def _check_limits(
    budget: object, memory_mb: object, max_processes: object = None, **switches: object
) -> None:
    """Each option's one-line ValueError; ``switches``: the bool ones, by name."""
    _limits.seconds("budget", budget)
    _limits.mebibytes("memory_mb", memory_mb)
    if max_processes is not None:
        _limits.count("max_processes", max_processes)
    for name, value in switches.items():
        _limits.switch(name, value)


@overload
def guarded(
    budget: float = 2.0,
    *,
    memory_mb: float | None = None,
    objects: bool = False,
    max_processes: int | None = MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, R | None]]: ...


@overload
def guarded(
    budget: float = 2.0,
    default: D = ...,
    *,
    memory_mb: float | None = None,
    objects: bool = False,
    max_processes: int | None = MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, R | D]]: ...


def guarded(
    budget: float = 2.0,
    default: Any = None,
    *,
    memory_mb: float | None = None,
    objects: bool = False,
    max_processes: int | None = MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, Any]]:
    """Decorate a scorer so every call runs under :func:`run`.

    On timeout, crash or memory the call returns ``default`` and logs one warning line naming
    the cause; an exception raised by the scorer is raised again in the caller when it came
    back as an object (see :func:`run`: a builtin exception class, or any with
    ``objects=True``), else as :class:`CallFailed` holding its text. ``SystemExit``,
    ``KeyboardInterrupt`` and ``GeneratorExit`` raised by the scorer are never raised again
    as themselves: they would stop or unwind the caller; :class:`CallFailed` carries their
    text instead. A value that is not plain data needs ``objects=True`` as for :func:`run`;
    ``max_processes``, ``network`` and ``unprivileged`` confine each call as they do there.
    """
    switches = {"objects": objects, "network": network, "unprivileged": unprivileged}
    _check_limits(budget, memory_mb, max_processes, **switches)  # now, not in training
    options: dict[str, Any] = {
        "budget": budget,
        "memory_mb": memory_mb,
        "objects": objects,
        "max_processes": max_processes,
        "network": network,
        "unprivileged": unprivileged,
    }

    def decorate(fn: Callable[P, R]) -> Callable[P, Any]:
        _limits.function(fn, spec=False)

        def result(out: Outcome) -> Any:
            if out.status is Status.OK:
                return out.value
            if out.status is Status.ERROR:
                raise out.to_exception()
            log.warning("%s: %s; returned %r", fn.__qualname__, out.describe(), default)
            return default

        if inspect.iscoroutinefunction(fn):
            # Awaitable in turn, and the waiting happens on a thread: the caller's loop runs on.
            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                import asyncio

                call = functools.partial(run, fn, args, kwargs, **options)
                return result(await asyncio.to_thread(call))

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            return result(run(fn, args, kwargs, **options))

        return wrapper

    return decorate


def _warn_once(mechanism: str) -> None:
    if not STATE.say_once(f"run:{mechanism}"):
        return
    if mechanism == "alarm":
        text = "os.fork is unavailable: guarding with SIGALRM, which cannot stop a hang inside C"
    elif mechanism == "memory":
        text = "os.fork is unavailable: memory_mb is NOT enforced (the call runs in this process)"
    else:
        text = "os.fork and SIGALRM are unavailable here: guarded calls run WITHOUT a deadline"
    warnings.warn(text, RuntimeWarning, stacklevel=3)


class _AlarmTimeout(BaseException):
    pass


def _run_with_alarm(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], budget: float
) -> Outcome:
    stuck: list[FrameType | None] = []

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        stuck.append(frame)
        raise _AlarmTimeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    start = time.perf_counter()
    cpu = time.process_time()
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, budget)
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = awaited(value)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _AlarmTimeout:
        stack = "".join(traceback.format_stack(stuck[0])) if stuck else None
        return _in_process(Status.TIMEOUT, Mechanism.ALARM, start, cpu, budget, stack=stack)
    except BaseException as exc:  # noqa: BLE001 - the call's failure is its outcome
        return _in_process_error(exc, Mechanism.ALARM, start, cpu, budget)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return _in_process(Status.OK, Mechanism.ALARM, start, cpu, budget, value=value)


def _run_unbounded(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], budget: float
) -> Outcome:
    start = time.perf_counter()
    cpu = time.process_time()
    try:
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = awaited(value)
    except BaseException as exc:  # noqa: BLE001 - the call's failure is its outcome
        return _in_process_error(exc, Mechanism.UNBOUNDED, start, cpu, budget)
    return _in_process(Status.OK, Mechanism.UNBOUNDED, start, cpu, budget, value=value)


def _in_process_error(
    exc: BaseException, mechanism: Mechanism, start: float, cpu: float, budget: float
) -> Outcome:
    status, text = raised(exc)
    return _in_process(status, mechanism, start, cpu, budget, error=text, exception=exc)


def _in_process(
    status: Status, mechanism: Mechanism, start: float, cpu: float, budget: float, **fields: Any
) -> Outcome:
    return Outcome(
        status,
        wall_s=time.perf_counter() - start,
        cpu_s=time.process_time() - cpu,
        max_rss_mb=_own_max_rss_mb(),
        budget=budget,
        mechanism=mechanism,
        **fields,
    )


def _own_max_rss_mb() -> float:
    try:
        import resource
    except ImportError:
        return math.nan
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale
