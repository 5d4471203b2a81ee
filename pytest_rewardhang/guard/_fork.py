"""The caller's side of one forked ``run()`` call: wait, dump the stack, kill, reap, decode.

The parent starts no thread and installs no signal handler: it waits in ``poll()`` on the
child's pidfd and on three pipes (result, output, stack) with the time left as the timeout, so
it wakes exactly at the deadline, drains a large result while the child writes it, and works
from any thread and from many threads at once. The child's side is :mod:`._child`.

Every wait is bounded (see :func:`._treekill.kill_tree` for the kill), and a
``KeyboardInterrupt`` may strike anywhere (a 1 kHz SIGINT storm does): the call's state lives
on a :class:`_Call`, each resource is recorded by the same C call that creates it (so no
interrupt can fall between the two), the two short sections that create and release them run
with the asynchronous signals blocked in the calling thread, and the release runs in a
``finally`` and is idempotent. The interrupt then propagates, after the cleanup.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import resource
import select
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

from . import _confine, _contain, _libc, _reap
from ._box import Box, Confining
from ._child import run_child
from ._decode import died, output_text, run_answer, stack_text
from ._interrupts import MASKED, sigmask
from ._outcome import Outcome, Status, answered, common_fields
from ._wire import (
    CHUNK,
    DUMP_SIGNAL,
    HEADER,
    OUTPUT_LIMIT,
    RESULT_LIMIT,
    STACK_LIMIT,
    dump_lead,
    frame_complete,
)

#: Blocked while a call's resources are created or released (see ._interrupts).
_block: Callable[[int, Iterable[int]], set[int]] = sigmask or (lambda how, mask: set())
#: poll() takes milliseconds as a C int: any finite budget works, waiting in slices.
_POLL_MAX_MS = 1 << 30
#: Without a pidfd the child's exit is noticed by polling this often.
_NO_PIDFD_TICK_MS = 5
#: Reads of one pipe per wakeup, so a flood of output cannot keep the caller past the deadline.
_READS_PER_WAKEUP = 4
#: The most of the result pipe the caller holds: one frame's header and a result at its bound.
_RESULT_ROOM = HEADER.size + RESULT_LIMIT
#: How long past the deadline a killed call's processes may take to finish exiting before run()
#: returns without them: within the 0.1 s it promises.
_SETTLED_S = 0.09
#: What a caller that woke late still gives the killed child to exit, before leaving it to the
#: next sweep: not the bound's to pay for.
_MIN_REAP_S = 0.01


def _keep(box: list[Any], fn: Callable[..., Any], *args: Any) -> None:
    """``box.append(fn(*args))`` in one C call: no interrupt can fall between the two.

    (A KeyboardInterrupt is raised at the end of a ``CALL``: after ``pid = os.fork()`` returns
    but before the name is bound, the pid would be lost and the child left running.)
    """
    box.extend(itertools.starmap(fn, (args,)))


def _close_once(closed: dict[str, None], key: str, fd: int) -> None:
    """Close ``fd`` and record ``key`` as closed, in one C call; a second call does nothing.

    Keyed by role, not number: a closed descriptor's number is soon reused (by the pidfd).
    """
    if key not in closed:
        closed.update(zip((key,), map(os.close, (fd,)), strict=True))


@cache
def missing_features() -> tuple[str, ...]:
    """What the platform lacks of what the fork guard uses, probed once; warns once if any."""
    missing = []
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        missing.append(
            "pidfd_open (Linux >= 5.3): the child is watched by polling, signalled by pid"
        )
    if not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children"):
        missing.append(
            "/proc/PID/task/TID/children: descendants the call leaves running are not found "
            "(only its process group is killed)"
        )
    if not _libc.can_subreap():
        missing.append(
            "PR_SET_CHILD_SUBREAPER (Linux): orphaned descendants of the call are not found "
            "(only its process group is killed)"
        )
    if missing:
        warnings.warn(
            "pytest_rewardhang.guard: this platform lacks " + "; ".join(missing),
            RuntimeWarning,
            stacklevel=4,
        )
    return tuple(missing)


def run_forked(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    budget: float,
    memory_mb: float | None,
    objects: bool = False,
    confinement: Confining | None = None,
) -> Outcome:
    _libc.prepare()
    missing_features()
    _reap.sweep_unreaped()
    call = _Call(budget, objects, confinement or Confining(memory_mb))
    try:
        call.start(fn, args, kwargs, memory_mb)
        return call.wait()
    finally:
        # Blocked inline first: an interrupt pending now strikes at the end of this call,
        # not at the entry of finish(), which the inner ``finally`` then still runs.
        try:
            if call.mask:
                _block(signal.SIG_BLOCK, MASKED)
        finally:
            call.finish()


class _Call:
    """One forked call, from its pipes to its reaping; each resource recorded as it is made."""

    def __init__(self, budget: float, objects: bool, confining: Confining) -> None:
        self.budget = budget
        self.objects = objects
        self.confining = confining
        #: All the child may hold (:mod:`._box`): where the platform allows, a cgroup of its
        #: own (or, opt-in, a PID namespace), its limits, folders, namespaces and identity.
        self.box = Box()
        #: The OOM killer struck in the call's group: the call is ended at once.
        self.over_memory = False
        self.mask: list[set[int]] = []  # the caller's signal mask, once blocked
        self.pipes: list[tuple[int, int]] = []  # result, output, stack: (read, write)
        self.forked: list[int] = []  # the child's pid
        self.pidfds: list[int] = []
        self.closed: dict[str, None] = {}
        self.reaped: list[tuple[int, int, resource.struct_rusage | None]] = []
        self.parent_pid = os.getpid()
        self.start_time = 0.0
        self.result = bytearray()
        self.output = bytearray()
        self.output_dropped = 0
        self.stack = bytearray()

    # --- the two short masked sections ----------------------------------------------------
    #
    # A KeyboardInterrupt is raised only at a function's entry, a loop's back edge or the end
    # of a call: so a ``pthread_sigmask`` call written inline has taken effect before any
    # interrupt can strike after it, and the releasing code below it in a ``finally`` then runs
    # with SIGINT blocked (in a caller whose other threads block it too, or have none).

    def _unblock(self) -> None:
        if self.mask:
            _block(signal.SIG_SETMASK, self.mask[0])

    def start(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        memory_mb: float | None,
    ) -> None:
        try:
            if sigmask is not None:
                _keep(self.mask, sigmask, signal.SIG_BLOCK, MASKED)
            for _ in range(3):
                _keep(self.pipes, os.pipe2, os.O_CLOEXEC)
            self.box = Box.make(_contain.strategy().call(), self.confining)
            self.start_time = time.perf_counter()
            try:
                _keep(self.forked, os.fork)
            finally:
                if self.forked[:1] != [0]:
                    self.box.forked()
            if self.forked[0] == 0:  # pragma: no cover - the child; reports through the pipes
                (_, result_w), (_, output_w), (_, stack_w) = self.pipes
                # Never a call left uncontained or unconfined: a crash, if it cannot be boxed.
                self.box.enter((result_w, output_w, stack_w), self.parent_pid)
                self._unblock()
                run_child(fn, args, kwargs, memory_mb, self.parent_pid, result_w, output_w, stack_w)
            for i, (_, write) in enumerate(self.pipes):
                _close_once(self.closed, f"w{i}", write)
            for read, _ in self.pipes:
                os.set_blocking(read, False)
            # ENOSYS before Linux 5.3, ESRCH once auto-reaped: then watched by polling.
            with contextlib.suppress(AttributeError, OSError):
                _keep(self.pidfds, os.pidfd_open, self.forked[0])
        except BaseException:
            if os.getpid() != self.parent_pid:  # pragma: no cover - interrupted in the child
                os._exit(70)
            raise
        self._unblock()

    def finish(self) -> None:
        """Kill what still runs, reap it (bounded), close every descriptor. Idempotent."""
        try:
            if self.mask:
                _block(signal.SIG_BLOCK, MASKED)
        finally:
            try:
                self._release()
            finally:
                self._unblock()

    def _release(self) -> None:
        if self.forked and self.forked[0] > 0 and not self.reaped:
            # Interrupted, or an error in the caller: leave nothing running.
            self.reaped.append(self._kill_and_reap(_reap.REAP_WAIT_S))
        self.box.close(time.monotonic() + _reap.REAP_WAIT_S)
        for i, (read, write) in enumerate(self.pipes):
            _close_once(self.closed, f"r{i}", read)
            _close_once(self.closed, f"w{i}", write)
        for pidfd in self.pidfds:
            _close_once(self.closed, "pidfd", pidfd)

    # --- the wait -------------------------------------------------------------------------

    def _pidfd(self) -> int | None:
        return self.pidfds[0] if self.pidfds else None

    def _kill_and_reap(self, timeout: float) -> tuple[int, int, resource.struct_rusage | None]:
        """Kill the child and all below it, and reap it within ``timeout``: the child first,
        the rest held still meanwhile (see :meth:`._contain.Cage.kill_and_reap`)."""
        return self.box.cage.kill_and_reap(self.forked[0], self._pidfd(), timeout)

    def wait(self) -> Outcome:
        pid = self.forked[0]
        dumped = timed_out = False
        leaked = 0
        deadline = self.start_time + self.budget
        exited = self._wait_until(deadline - dump_lead(self.budget))
        if not exited and not self.over_memory and not frame_complete(self.result):
            dumped = self._signal(DUMP_SIGNAL)
            exited = self._wait_until(deadline)
        wall = time.perf_counter() - self.start_time
        timed_out = not exited and not frame_complete(self.result)
        try:
            if self.mask:
                _block(signal.SIG_BLOCK, MASKED)
        finally:
            try:
                if exited:
                    settle = _reap.REAP_WAIT_S
                    until = time.monotonic() + settle
                    reaped = (0, *_reap.reap_within(pid, self._pidfd(), settle))
                else:
                    # What it takes the kernel to tear the child and its descendants down is
                    # awaited up to _SETTLED_S past the deadline, so none is left exiting.
                    settle = max(deadline + _SETTLED_S - time.perf_counter(), _MIN_REAP_S)
                    until = time.monotonic() + settle
                    reaped = self._kill_and_reap(settle)
                self.reaped.append(reaped)
            finally:
                self._unblock()
        leaked, wait_status, usage = self.reaped[0]
        oom_kills = self.box.oom_kills()  # read before the cage's group goes
        # What escaped the child's subtree: its orphans.
        leaked += self.box.close(until)
        self._drain()
        outcome = self._outcome(wall, timed_out, dumped, wait_status, usage, leaked)
        if oom_kills and outcome.status is not Status.MEMORY:
            return out_of_memory(outcome, oom_kills, self.confining.memory_mb)
        return outcome

    def _exited(self) -> bool:
        """Without a pidfd: whether the child has ended (or was reaped by someone else)."""
        try:
            found = os.waitid(os.P_PID, self.forked[0], os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # the caller ignores SIGCHLD: the kernel reaped it
            return True
        return found is not None

    def _wait_until(self, deadline: float) -> bool:
        """Drain the pipes until the child exits (True) or the deadline passes (False); or
        the OOM killer struck in the call's group (False, :attr:`over_memory`)."""
        poller = select.poll()
        watched = {read for read, _ in self.pipes}
        for read in watched:
            poller.register(read, select.POLLIN)
        pidfd = self._pidfd()
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        alarm = self.box.quota.alarm
        if alarm is not None:
            poller.register(alarm, select.POLLIN)
        while True:
            if pidfd is None and self._exited():
                return True
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            timeout = min(math.ceil(left * 1000), _POLL_MAX_MS)
            if pidfd is None:
                timeout = min(timeout, _NO_PIDFD_TICK_MS)
            for fd, _ in poller.poll(timeout):
                if fd == pidfd:
                    return True
                if fd == alarm:
                    self.over_memory = True
                    return False
                if not self._read(fd, _READS_PER_WAKEUP):
                    poller.unregister(fd)
                    watched.discard(fd)
            if watched and frame_complete(self.result):
                # The call has answered, its output flushed before: what is in the pipes is
                # read by _drain. Its exit is left to the pidfd, which wakes us once: the three
                # pipes' hang-ups woke us once each (five sleeps a call, a bare fork's two).
                for fd in watched:
                    poller.unregister(fd)
                watched.clear()

    def _buffer(self, fd: int) -> bytearray:
        result, output, _ = (read for read, _ in self.pipes)
        return self.result if fd == result else self.output if fd == output else self.stack

    def _read(self, fd: int, reads: int) -> bool:
        """Read what is there, at most ``reads`` chunks; False at EOF."""
        buffer = self._buffer(fd)
        output_r = self.pipes[1][0]
        for _ in range(reads):
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            if buffer is self.result:  # what a frame may hold at most; the rest is dropped
                buffer += chunk[: max(_RESULT_ROOM - len(buffer), 0)]
                continue
            room = (OUTPUT_LIMIT if fd == output_r else STACK_LIMIT) - len(buffer)
            buffer += chunk[: max(room, 0)]
            if fd == output_r:
                self.output_dropped += max(len(chunk) - max(room, 0), 0)
        return True

    def _drain(self) -> None:
        # Other children forked meanwhile (by other threads) may hold our write ends, so EOF
        # cannot be awaited; the exited child's data is all in the pipes already. Bounded: a
        # result being written is read whole, output and stack at most a pipe's worth more.
        self._read(self.pipes[0][0], 1 << 16)
        for read, _ in self.pipes[1:]:
            self._read(read, _READS_PER_WAKEUP)

    def _signal(self, signum: int) -> bool:
        pidfd = self._pidfd()
        try:
            if pidfd is None:
                if self._exited():
                    return False
                os.kill(self.forked[0], signum)
            else:
                signal.pidfd_send_signal(pidfd, signum)
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
            self.output_dropped,
            self.budget,
            _contain.containment(),
        )
        common["containment"] = self.box.cage.containment  # the subreaper's, where it failed
        common["confined"] = confined = self.box.applied
        _confine.warn_missing(self.confining.asked, confined)
        if not timed_out and frame_complete(self.result):
            answer, child_leaked = run_answer(self.result, objects=self.objects)
            return answered(answer, leaked + child_leaked, common)
        status, signum, exit_code = died(wait_status, killed=timed_out, dumped=dumped)
        stack = None
        if status is Status.TIMEOUT:
            stack = stack_text(self.stack)
        return Outcome(
            status, stack=stack, signal=signum, exit_code=exit_code, leaked=leaked, **common
        )


def out_of_memory(outcome: Outcome, kills: int, memory_mb: float | None) -> Outcome:
    """A call some of whose processes the kernel's OOM killer ended at its memory limit: over
    ``memory_mb``, whatever it answered (the answer of a call whose helpers were killed is not
    its answer)."""
    error = (
        f"MemoryError: the kernel's OOM killer ended {kills} of the call's processes at its "
        f"memory limit (memory_mb={memory_mb}, for all its processes together)"
    )
    return dataclasses.replace(
        outcome,
        status=Status.MEMORY,
        value=None,
        error=error,
        exception=None,
        signal=None,
        exit_code=None,
        stack=None,
    )
