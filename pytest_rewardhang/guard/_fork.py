"""Run one call in a forked child and SIGKILL it, with everything below it, at the deadline.

The parent starts no thread and installs no signal handler: it waits in ``poll()`` on the
child's pidfd and on three pipes (result, output, stack) with the time left as the timeout, so
it wakes exactly at the deadline, drains a large result while the child writes it, and works
from any thread and from many threads at once.
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import os
import pickle
import resource
import select
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from . import _proctree
from ._outcome import Mechanism, Outcome, Status

#: Bytes of stdout/stderr kept per call; the rest is read and thrown away, never buffered.
OUTPUT_LIMIT = 64 * 1024
_STACK_LIMIT = 1024 * 1024
_HEADER = struct.Struct("!Q")
_CHUNK = 1 << 20
#: faulthandler's watchdog thread cannot be used: a child forked from a process that has one
#: armed (pytest's faulthandler_timeout does) deadlocks re-arming it. A signal handler that
#: faulthandler runs in C dumps the stack just as well while the child is inside a C call.
#: A real-time signal, so scorers that use SIGUSR1/2 for their own ends are not disturbed.
DUMP_SIGNAL = signal.SIGRTMIN + 6 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
#: How long before the deadline the stack is dumped, so the dump is in hand at the kill.
DUMP_LEAD_S = 0.02


def run_forked(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    budget: float,
    memory_mb: float | None,
) -> Outcome:
    _proctree.prepare()
    result_r, result_w = os.pipe2(os.O_CLOEXEC)
    output_r, output_w = os.pipe2(os.O_CLOEXEC)
    stack_r, stack_w = os.pipe2(os.O_CLOEXEC)
    parent_pid = os.getpid()
    start = time.perf_counter()
    try:
        pid = os.fork()
    except BaseException:
        for fd in (result_r, result_w, output_r, output_w, stack_r, stack_w):
            os.close(fd)
        raise
    if pid == 0:  # pragma: no cover - the child; it reports through the pipes and never returns
        os.close(result_r)
        os.close(output_r)
        os.close(stack_r)
        _child(fn, args, kwargs, memory_mb, parent_pid, result_w, output_w, stack_w)
    for fd in (result_w, output_w, stack_w):
        os.close(fd)
    return _Parent(pid, start, budget, result_r, output_r, stack_r).wait()


class _Parent:
    """The caller's side of one call: wait, drain, kill if need be, reap, close."""

    def __init__(
        self, pid: int, start: float, budget: float, result_r: int, output_r: int, stack_r: int
    ) -> None:
        self.pid = pid
        self.start = start
        self.budget = budget
        self.result = bytearray()
        self.output = bytearray()
        self.output_dropped = 0
        self.stack = bytearray()
        self.fds = {result_r: self.result, output_r: self.output, stack_r: self.stack}
        self.result_r = result_r
        self.output_r = output_r
        for fd in self.fds:
            os.set_blocking(fd, False)
        self.pidfd = os.pidfd_open(pid)

    def wait(self) -> Outcome:
        dumped = timed_out = False
        leaked = 0
        wait_status: int | None = None
        usage: resource.struct_rusage | None = None
        try:
            exited = self._wait_until(self.start + self.budget - DUMP_LEAD_S)
            if not exited and not self._result_complete():
                dumped = self._signal(DUMP_SIGNAL)
                exited = self._wait_until(self.start + self.budget)
            wall = time.perf_counter() - self.start
            if not exited:
                timed_out = not self._result_complete()
                leaked = self._kill_tree()
            wait_status, usage = self._reap()
            self._drain()
        finally:
            if wait_status is None:  # interrupted (KeyboardInterrupt in the caller): leave nothing
                self._kill_tree()
                self._reap()
            for fd in (*self.fds, self.pidfd):
                os.close(fd)
        return self._outcome(wall, timed_out, dumped, wait_status, usage, leaked)

    def _wait_until(self, deadline: float) -> bool:
        """Drain the pipes until the child exits (True) or the deadline passes (False)."""
        poller = select.poll()
        for fd in self.fds:
            poller.register(fd, select.POLLIN)
        poller.register(self.pidfd, select.POLLIN)
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            for fd, _ in poller.poll(math.ceil(left * 1000)):
                if fd == self.pidfd:
                    return True
                if not self._read(fd):
                    poller.unregister(fd)

    def _read(self, fd: int) -> bool:
        """Read what is there; False at EOF."""
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            buffer = self.fds[fd]
            if fd == self.result_r:
                buffer += chunk
                continue
            room = (OUTPUT_LIMIT if fd == self.output_r else _STACK_LIMIT) - len(buffer)
            buffer += chunk[: max(room, 0)]
            if fd == self.output_r:
                self.output_dropped += max(len(chunk) - max(room, 0), 0)

    def _drain(self) -> None:
        # Other children forked meanwhile (by other threads) may hold our write ends, so EOF
        # cannot be awaited; the exited child's data is all in the pipes already.
        for fd in self.fds:
            self._read(fd)

    def _result_complete(self) -> bool:
        size = len(self.result)
        return size >= _HEADER.size and size >= _HEADER.size + _HEADER.unpack_from(self.result)[0]

    def _signal(self, signum: int) -> bool:
        try:
            signal.pidfd_send_signal(self.pidfd, signum)
        except ProcessLookupError:
            return False
        return True

    def _kill_tree(self) -> int:
        return kill_tree(self.pid, self.pidfd)

    def _reap(self) -> tuple[int | None, resource.struct_rusage | None]:
        try:
            _, status, usage = os.wait4(self.pid, 0)
        except ChildProcessError:  # the caller reaps children itself, or ignores SIGCHLD
            return -1, None
        return status, usage

    def _outcome(
        self,
        wall: float,
        timed_out: bool,
        dumped: bool,
        wait_status: int | None,
        usage: resource.struct_rusage | None,
        leaked: int,
    ) -> Outcome:
        common: dict[str, Any] = {
            "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime if usage else math.nan,
            "max_rss_mb": usage.ru_maxrss / 1024 if usage else math.nan,
            "output": self._output_text(),
            "budget": self.budget,
            "mechanism": Mechanism.FORK,
        }
        if timed_out:
            stack = self.stack.decode("utf-8", "replace") or None
            return Outcome(Status.TIMEOUT, stack=stack, leaked=leaked, **common)
        if self._result_complete():
            return _decode(bytes(self.result[_HEADER.size :]), leaked, common)
        signum = exit_code = None
        if wait_status is not None and wait_status >= 0:
            if os.WIFSIGNALED(wait_status):
                signum = os.WTERMSIG(wait_status)
                if dumped and signum == DUMP_SIGNAL:  # it reset faulthandler's handler
                    return Outcome(Status.TIMEOUT, leaked=leaked, **common)
            elif os.WIFEXITED(wait_status):
                exit_code = os.WEXITSTATUS(wait_status)
        return Outcome(Status.CRASHED, signal=signum, exit_code=exit_code, leaked=leaked, **common)

    def _output_text(self) -> str:
        return output_text(bytes(self.output), self.output_dropped)


def read_bounded(fd: int, limit: int) -> tuple[bytes, int]:
    """What is in the pipe now, up to ``limit`` bytes, and how many more were dropped."""
    kept = bytearray()
    dropped = 0
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        room = max(limit - len(kept), 0)
        kept += chunk[:room]
        dropped += max(len(chunk) - room, 0)
    return bytes(kept), dropped


def output_text(output: bytes, dropped: int) -> str:
    text = output.decode("utf-8", "replace")
    if dropped:
        text += f"\n[... {dropped} more bytes of output discarded]"
    return text


def kill_tree(pid: int, pidfd: int) -> int:
    """Freeze the child ``pid``, kill its descendants and its group, then the child itself.

    ``pid`` must be a child of the calling process (``waitid`` on its pidfd sees it stop).
    Returns how many descendants there were; 0 if the child was already gone.
    """
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
    except ProcessLookupError:
        return 0
    # Until the stop takes effect the child could still finish a fork.
    with contextlib.suppress(ChildProcessError):
        os.waitid(os.P_PIDFD, pidfd, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
    leaked = _proctree.kill_descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    return leaked


def _decode(payload: bytes, leaked: int, common: dict[str, Any]) -> Outcome:
    try:
        status, value, error, exception, child_leaked = pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - e.g. a class that only exists in the child
        return unpickle_failed(exc, leaked, common)
    return outcome_from_frame(status, value, error, exception, leaked + child_leaked, common)


def unpickle_failed(exc: Exception, leaked: int, common: dict[str, Any]) -> Outcome:
    error = f"{type(exc).__name__}: the call's result could not be unpickled: {exc}"
    return Outcome(Status.ERROR, error=error, leaked=leaked, **common)


def outcome_from_frame(
    status: str,
    value: Any,
    error: str | None,
    exception: bytes | None,
    leaked: int,
    common: dict[str, Any],
) -> Outcome:
    """The :class:`Outcome` of a frame that :func:`call` made and the parent unpickled."""
    raised: BaseException | None = None
    if exception is not None:
        try:
            raised = pickle.loads(exception)
        except Exception:  # noqa: BLE001 - the text in ``error`` still says what happened
            raised = None
    return Outcome(
        Status(status), value=value, error=error, exception=raised, leaked=leaked, **common
    )


def _child(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    memory_mb: float | None,
    parent_pid: int,
    result_w: int,
    output_w: int,
    stack_w: int,
) -> None:  # pragma: no cover - runs only in the forked child
    code = 70
    try:
        os.setsid()
        subreaper = _proctree.become_subreaper(parent_pid)
        setup_child(output_w, stack_w, memory_mb)
        frame = call(fn, args, kwargs)
        leaked = _proctree.kill_descendants(os.getpid()) if subreaper else 0
        if subreaper:
            _reap_all()
        payload = pickle_frame((*frame, leaked))
        write_all(result_w, _HEADER.pack(len(payload)) + payload)
        code = 0
    except BaseException:  # noqa: BLE001, S110 - no result is reported as a crash by the parent
        pass
    finally:
        os._exit(code)


def setup_child(
    output_w: int, stack_w: int, memory_mb: float | None
) -> None:  # pragma: no cover - child only
    """Point stdio at the output pipe, arm the stack dump, and apply the memory limit."""
    _redirect_stdio(output_w)
    # A crash's traceback goes to the call's output, not to the caller's terminal.
    faulthandler.enable(file=2, all_threads=True)
    faulthandler.register(DUMP_SIGNAL, file=stack_w, all_threads=True, chain=False)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {DUMP_SIGNAL})
    if memory_mb is not None:
        limit_memory(memory_mb)


def call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[Any, ...]:  # pragma: no cover - child only
    """``(status, value, error, pickled exception)`` of one call, its output flushed."""
    try:
        frame: tuple[Any, ...] = (Status.OK.value, fn(*args, **kwargs), None, None)
    except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are results too
        frame = _error_frame(exc)
    for stream in (sys.stdout, sys.stderr):
        # A plain try, not suppress(): this runs once per item in a pool worker.
        try:  # noqa: SIM105
            stream.flush()
        except BaseException:  # noqa: BLE001, S110 - the call may have closed or replaced them
            pass
    return frame


def pickle_frame(frame: tuple[Any, ...]) -> bytes:
    """Pickle ``(status, value, error, exception, *rest)``; an unpicklable value turns to error."""
    try:
        return pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        if frame[0] == Status.OK.value:
            what = type(frame[1]).__qualname__
            text = f"{type(exc).__name__}: the call returned a {what} that cannot be pickled: {exc}"
            return pickle_frame((Status.ERROR.value, None, text, None, *frame[4:]))
        raise


def _error_frame(exc: BaseException) -> tuple[Any, ...]:
    lines = traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).strip() + "\n\n" + "".join(traceback.format_exception(exc))
    status = Status.MEMORY if caused_by_memory(exc) else Status.ERROR
    try:  # pickled apart, so an exception that will not travel still leaves its text
        exception: bytes | None = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001
        exception = None
    return (status.value, None, text, exception)


def caused_by_memory(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 32:
        if isinstance(exc, MemoryError):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _redirect_stdio(output_w: int) -> None:  # pragma: no cover - child only
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(output_w, 1)
    os.dup2(output_w, 2)
    os.close(output_w)
    # The caller's sys.stdout may be an in-memory capture (pytest's): point Python at the fds.
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


def _reap_all() -> None:  # pragma: no cover - child only
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def write_all(fd: int, data: bytes | memoryview) -> None:  # pragma: no cover - child only
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
