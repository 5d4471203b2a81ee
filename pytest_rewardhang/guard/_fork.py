"""The caller's side of one forked ``run()`` call: wait, dump the stack, kill, reap, decode.

The parent starts no thread and installs no signal handler: it waits in ``poll()`` on the
child's pidfd and on three pipes (result, output, stack) with the time left as the timeout, so
it wakes exactly at the deadline, drains a large result while the child writes it, and works
from any thread and from many threads at once. The child's side is :mod:`._child`.
"""

from __future__ import annotations

import math
import os
import resource
import select
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import _proctree
from ._child import run_child
from ._outcome import Outcome, Status
from ._wire import (
    CHUNK,
    DUMP_LEAD_S,
    DUMP_SIGNAL,
    OUTPUT_LIMIT,
    STACK_LIMIT,
    common_fields,
    died,
    frame_complete,
    frame_outcome,
    output_text,
)


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
        run_child(fn, args, kwargs, memory_mb, parent_pid, result_w, output_w, stack_w)
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
        dumped = timed_out = reaped = False
        leaked = 0
        try:
            exited = self._wait_until(self.start + self.budget - DUMP_LEAD_S)
            if not exited and not frame_complete(self.result):
                dumped = self._signal(DUMP_SIGNAL)
                exited = self._wait_until(self.start + self.budget)
            wall = time.perf_counter() - self.start
            if exited:
                wait_status, usage = _proctree.reap(self.pid)
            else:
                timed_out = not frame_complete(self.result)
                leaked, wait_status, usage = _proctree.kill_and_reap(self.pid, self.pidfd)
            reaped = True
            self._drain()
        finally:
            if not reaped:  # interrupted (KeyboardInterrupt in the caller): leave nothing
                _proctree.kill_and_reap(self.pid, self.pidfd)
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
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            buffer = self.fds[fd]
            if fd == self.result_r:
                buffer += chunk
                continue
            room = (OUTPUT_LIMIT if fd == self.output_r else STACK_LIMIT) - len(buffer)
            buffer += chunk[: max(room, 0)]
            if fd == self.output_r:
                self.output_dropped += max(len(chunk) - max(room, 0), 0)

    def _drain(self) -> None:
        # Other children forked meanwhile (by other threads) may hold our write ends, so EOF
        # cannot be awaited; the exited child's data is all in the pipes already.
        for fd in self.fds:
            self._read(fd)

    def _signal(self, signum: int) -> bool:
        try:
            signal.pidfd_send_signal(self.pidfd, signum)
        except ProcessLookupError:
            return False
        return True

    def _outcome(
        self,
        wall: float,
        timed_out: bool,
        dumped: bool,
        wait_status: int,
        usage: resource.struct_rusage | None,
        leaked: int,
    ) -> Outcome:
        common = common_fields(
            wall,
            usage.ru_utime + usage.ru_stime if usage else math.nan,
            usage.ru_maxrss if usage else math.nan,
            output_text(bytes(self.output), self.output_dropped),
            self.budget,
        )
        if not timed_out and frame_complete(self.result):
            return frame_outcome(self.result, leaked, common)
        status, signum, exit_code = died(wait_status, killed=timed_out, dumped=dumped)
        stack = None
        if status is Status.TIMEOUT:
            stack = self.stack.decode("utf-8", "replace") or None
        return Outcome(
            status, stack=stack, signal=signum, exit_code=exit_code, leaked=leaked, **common
        )
