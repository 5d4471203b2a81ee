"""The pool's processes: its zygote and the workers it forks; starting, killing, replacing them.

The zygote forks each worker, kills it when asked, and reports its end once it has reaped it
(see :mod:`._zygote`); the caller holds each worker's :class:`~._handle.Worker` handle. A
zygote that does not answer in time (an item stopped it, say) is taken for stuck: the caller
kills it and everything below it, accounts for its workers' items and starts another.
"""

from __future__ import annotations

import errno
import math
import os
import select
import sys
import time
from collections.abc import Callable
from typing import Any

from . import _confine, _libc, _procfs
from ._box import Confining
from ._handle import DEAD, KILLED, STARTING, Watched, Worker
from ._launch import PoolError, Zygote, import_target, warn_if_large, worker_pipes
from ._spec import SpecError, load_callable
from ._wire import (
    EXITED,
    MSG_FORKED,
    MSG_KILLED,
    MSG_REAPED,
    PIPE_ROLES,
    SPAWNED,
    WID,
    Warmup,
    confinement_of,
)

#: How long the zygote may take to acknowledge a kill (it does so before killing), and to fork
#: a worker: past these the caller takes it for stuck, kills it and everything below it itself,
#: and starts another. A late acknowledgement is judged every ``_ACK_S``: a zygote stopped (an
#: item sent it SIGSTOP) is replaced at once; one merely slow to be scheduled, on a busy
#: machine, gets up to ``BUSY_ACK_S``, so that load alone never costs innocent items.
_ACK_S = 0.05
BUSY_ACK_S = 1.0
_FORK_S = 10.0
#: How long a killed worker may take to be reported reaped before its item is accounted for
#: anyway (a process in uninterruptible sleep may take indefinitely).
_REAPED_S = 2.0
#: Zygotes replaced in a row, with no item answered in between, before the pool gives up.
_MAX_REPLACED = 3
#: A worker start that fails for want of descriptors, processes or memory is tried again
#: after this pause, doubled at each failure in a row up to START_RETRY_MAX_S.
START_RETRY_S = 0.05
START_RETRY_MAX_S = 2.0
_TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.ENOBUFS})

#: How the loop accounts for a dead worker's items: (worker, wait status, cpu, rss, leaked).
#: Handed to each call that may find a death, not kept: a bound method of the loop's, kept
#: here, would be a reference cycle, and keep a closed pool until the cyclic GC ran.
Died = Callable[[Worker, int, float, float, int], None]


class Processes:
    """The zygote and its workers, as the caller sees them; only the driving thread's."""

    def __init__(
        self,
        size: int,
        memory_mb: float | None,
        warmup: Warmup,
        watched: Watched,
        isolate: bool = False,
        confining: Confining | None = None,
    ) -> None:
        self.size = size
        self.memory_mb = memory_mb
        #: What each item asked to be confined by (a ._run.Confining): each worker's zygote
        #: says what applied.
        self.confining = confining
        #: Each item in a process of its own, forked from its worker: see Pool.
        self.isolate = isolate
        #: Scored once in every zygote, before it forks a worker: see Pool.
        self.warmup = warmup
        self.watched = watched
        self.workers: dict[int, Worker] = {}
        self.next_wid = 0
        #: Workers to ask the zygote for at the loop's next turn (see respawn).
        self.to_spawn = 0
        self.zygote: Zygote | None = None
        self.fn: Callable[..., Any] | None = None
        self.target: tuple[Any, ...] | None = None
        #: Zygotes replaced since an item was last answered.
        self.replaced = 0
        #: Stopped for good: no zygote or worker is started again.
        self.closed = False
        #: Worker starts that failed in a row for want of descriptors, processes or memory
        #: (a server's clients holding its descriptors), and when the next may be tried.
        self.failed_starts = 0
        self.start_after = 0.0

    def start(self, fn: Callable[..., Any] | str) -> None:
        """Start the zygote and ask it for every worker (their start is awaited by the loop)."""
        _libc.prepare()
        target = import_target(fn)
        if target is not None and sys.executable:
            try:
                self._start_zygote(target)
            except SpecError:
                if isinstance(fn, str):
                    raise
                # It imports here but not in a fresh interpreter (sys.path set up by a
                # framework, say): serve the object we were given after all.
                target = None
        if target is None:
            self.fn = load_callable(fn) if isinstance(fn, str) else fn
            warn_if_large()
            self._start_zygote(None)
        self.target = target
        for _ in range(self.size):
            self._spawn()

    def _start_zygote(self, target: tuple[Any, ...] | None) -> None:
        if target is not None:
            self.zygote = Zygote.start(
                target, self.memory_mb, self.warmup, self.isolate, self.confining
            )
        else:
            assert self.fn is not None
            self.zygote = Zygote.fork(
                self.fn,
                self.memory_mb,
                self.warmup,
                self.isolate,
                self.confining,
            )
        self.watched.register(self.zygote.sock.fileno(), "zygote", None, select.POLLIN)
        self.watched.register(self.zygote.pidfd, "zygote", None, select.POLLIN)

    def _spawn(self) -> None:
        assert self.zygote is not None
        wid = self.next_wid
        self.next_wid += 1
        theirs, ours = worker_pipes()
        # Ours are the worker's from here, so close() closes them whatever interrupts us.
        self.workers[wid] = worker = Worker(wid, ours)
        try:
            for role, fd in ours.items():
                if role != "fence":
                    os.set_blocking(fd, False)
            self.watched.register(ours["result_r"], "result", worker, select.POLLIN)
            # Not sent (the zygote is not reading): the fork's deadline replaces the zygote.
            self.zygote.fork_worker(wid, [theirs[role] for role in PIPE_ROLES])
        finally:
            for fd in set(theirs.values()) - set(ours.values()):
                os.close(fd)

    def respawn(self) -> None:
        """Ask the zygote for the workers owed. Deferred out of event handling: a new worker's
        pipes may reuse the fd numbers of the dead one's, which later events of the same
        poll() would then be taken for."""
        while self.to_spawn and not self.closed and time.monotonic() >= self.start_after:
            try:
                self._spawn()
            except OSError as exc:
                if exc.errno not in _TRANSIENT:
                    raise
                # Not the pool's end: what was short may be given back. Tried again after a
                # pause that doubles up to START_RETRY_MAX_S; the items wait in the queue.
                self.failed_starts += 1
                pause = min(START_RETRY_S * 2 ** min(self.failed_starts - 1, 16), START_RETRY_MAX_S)
                self.start_after = time.monotonic() + pause
                return
            self.to_spawn -= 1
            self.failed_starts = 0

    def spawn_due(self) -> float | None:
        """When the loop must wake to try a worker start again, if one failed."""
        return self.start_after if self.to_spawn and self.failed_starts else None

    def kill(self, worker: Worker, index: int, now: float) -> None:
        """Have the zygote kill ``worker``, for its item ``index``, and fork its replacement."""
        assert self.zygote is not None
        worker.killing(index, now)
        self.zygote.kill(worker.wid)
        # Ask for the replacement now: the zygote forks it while the dead one is torn down.
        self.to_spawn += 1

    # --- a zygote that does not answer ------------------------------------------------------

    def due(self, worker: Worker) -> float | None:
        """When the zygote is next to be judged for ``worker``, if it owes word of it."""
        if worker.phase is STARTING:
            return worker.requested + _FORK_S
        owed = worker.owed_since()
        if owed is not None:  # the next look: every _ACK_S (for a kill, until BUSY_ACK_S)
            looks = math.floor((time.monotonic() - owed) / _ACK_S) + 1
            if worker.killed:
                looks = min(looks, round(BUSY_ACK_S / _ACK_S))
            return owed + looks * _ACK_S
        if worker.phase is KILLED:
            return worker.kill_time + _REAPED_S
        return None

    def check(self, now: float, died: Died) -> bool:
        """Replace a zygote that does not answer in time; True if it was replaced.

        A worker killed and reported killed but not reaped in time is accounted for anyway.
        """
        for worker in list(self.workers.values()):
            owed = worker.owed_since()
            if worker.phase is STARTING:
                late = now >= worker.requested + _FORK_S
            elif owed is not None:
                waited = now - owed
                # A worker's end is reported after its orphans are reaped, which a busy zygote
                # may take long over: only a stopped one is replaced for that.
                busy = worker.killed and waited >= BUSY_ACK_S
                late = busy or (
                    waited >= _ACK_S and self.zygote is not None and self._zygote_stopped()
                )
            elif worker.phase is KILLED:
                if now >= worker.kill_time + _REAPED_S:
                    died(worker, -1, math.nan, 0.0, 0)
                continue
            else:
                continue
            if late:
                self.replace("stopped answering", died)
                return True
        return False

    def _zygote_stopped(self) -> bool:
        assert self.zygote is not None
        return _procfs.stopped(self.zygote.pid)

    def replace(self, why: str, died: Died) -> None:
        """Kill the zygote and everything below it, account for its workers' items, restart."""
        old = self.zygote
        if old is None:
            return
        self.watched.unregister(old.sock.fileno())
        self.watched.unregister(old.pidfd)
        try:
            old.close()
        finally:
            self.zygote = None
        text = (
            f"the pool's zygote {why} while this item ran, twice: the second time alone in "
            "the pool (it, or a process it started, stopped or killed the zygote), so the "
            "caller killed the zygote and its workers"
        )
        in_flight = any(w.current() is not None for w in self.workers.values())
        for worker in list(self.workers.values()):
            if not worker.killed:  # a worker killed at its deadline stays a timeout
                worker.orphaned = text  # its item runs again, alone: see Ledger.suspects
            died(worker, -1, math.nan, 0.0, 0)
        # Only a death no item can be charged with counts towards giving up; an item that
        # ran is charged with it, or runs again alone (a bounded number of times).
        self.replaced = 0 if in_flight else self.replaced + 1
        if self.replaced > _MAX_REPLACED:
            raise PoolError(f"the pool's zygote {why}, {self.replaced} times in a row")
        if self.closed:
            return
        self._start_zygote(self.target)
        self.to_spawn = self.size

    # --- what the zygote says ---------------------------------------------------------------

    def messages(self, died: Died) -> None:
        """Read the zygote's messages: a worker forked, killed, or reaped."""
        assert self.zygote is not None
        while True:
            try:
                received = self.zygote.receive()
            except PoolError:  # it died (an item killed it, say): its workers died with it
                self.replace("died", died)
                return
            if received is None:
                return
            message, fds = received
            if message[:1] == MSG_FORKED:
                wid, pid, bits = SPAWNED.unpack_from(message, 1)
                worker = self.workers.get(wid)
                if worker is None or not fds:
                    for fd in fds:
                        os.close(fd)
                    continue
                worker.forked(pid, fds[0])
                if self.confining is not None:
                    worker.confined = confinement_of(bits)
                    _confine.warn_missing(self.confining.asked, worker.confined)
                # Its end is the zygote's to report; watched here too, for a zygote that an
                # item stopped before it ended: see Worker.owed_since.
                self.watched.register(worker.pidfd, "worker", worker, select.POLLIN)
            elif message[:1] == MSG_KILLED:
                (wid,) = WID.unpack_from(message, 1)
                if wid in self.workers:
                    self.workers[wid].acknowledged()
            elif message[:1] == MSG_REAPED:
                wid, status, cpu, rss, leaked, oom_kills = EXITED.unpack_from(message, 1)
                if wid in self.workers:
                    self.workers[wid].oom_kills = oom_kills
                    died(self.workers[wid], status, cpu, rss, leaked)

    # --- the end ----------------------------------------------------------------------------

    def forget(self, worker: Worker) -> None:
        """Close the caller's ends of a dead worker's pipes; it is no longer one of ours."""
        self.workers.pop(worker.wid, None)
        worker.phase = DEAD
        for fd in {*worker.fds.values(), worker.pidfd} - {-1}:
            self.watched.unregister(fd)
            os.close(fd)
        worker.pidfd = -1

    def close(self) -> None:
        """Close the zygote (kill it and everything below it, reap it) and forget every
        worker. For good."""
        self.closed = True
        zygote, self.zygote = self.zygote, None
        try:
            if zygote is not None:
                self.watched.unregister(zygote.sock.fileno())
                self.watched.unregister(zygote.pidfd)
                zygote.close()
        finally:
            for worker in list(self.workers.values()):
                self.forget(worker)
