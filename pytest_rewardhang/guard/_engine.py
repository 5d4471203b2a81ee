"""The pool's loop: handing out work, per-item deadlines, stack dumps, kills, steals.

One loop waits in ``poll()`` on the workers' result pipes (and the zygote's socket, and the
driver's eventfd) with the earliest deadline as its timeout; whichever thread holds the turn
runs it (see :mod:`._driver`). It installs no signal handler.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from ._answers import Answers
from ._box import Confining
from ._driver import CLOSED, Driver
from ._handle import DEAD, NOT_STARTED, STARTING, Worker
from ._interrupts import hold, let_in, release
from ._launch import START_TIMEOUT_S, PoolError, Zygote
from ._ledger import Batch
from ._processes import BUSY_ACK_S, Processes
from ._schedule import Schedule
from ._wire import DUMP_SIGNAL, Warmup, dump_lead, task_header

_FOREVER_S = 1e9
#: poll()'s longest timeout, in ms (a C int); any budget works.
_MAX_POLL_MS = 1 << 30
#: An item's output waits in its 1 MiB pipe for the worker, which reads it when the item ends;
#: once an item has run this long, the caller reads it too, as it comes. Else C code or a
#: subprocess writing more than the pipe holds to fd 1 (which must stay blocking for them)
#: waited in write() until the deadline, and was reported a hang.
_DRAIN_AFTER_S = 0.05
#: How long after a suspect ran alone the next one starts: see Engine._dispatch_suspect.
_SETTLE_S = 0.1


class Engine(Driver):
    """Everything the pool owns. Holds no reference to the :class:`Pool`, so GC can close it."""

    def __init__(
        self,
        workers: int,
        budget: float,
        memory_mb: float | None,
        max_pending: int,
        warmup: Warmup = None,
        objects: bool = False,
        isolate: bool = False,
        confining: Confining | None = None,
    ) -> None:
        super().__init__(budget, max_pending)
        self.budget = budget
        #: When, before an item's deadline, its stack is dumped: fixed per pool, read per poll.
        self.dump_lead = dump_lead(budget)
        self.size = workers
        self.processes = Processes(workers, memory_mb, warmup, self.watched, isolate, confining)
        #: The workers by id: the processes' own dict, never replaced.
        self.workers = self.processes.workers
        #: Who gets which items, and whose are taken back: see _schedule.
        self.schedule = Schedule(workers)
        #: The worker running a suspect alone, and when the next may go: see _dispatch_suspect.
        self.alone: Worker | None = None
        self.settled = 0.0
        self.answers = answers = Answers(
            workers,
            budget,
            objects,
            self.ledger,
            self.schedule,
            self.processes,
            self.watched,
            self.hand_in,
        )
        #: Accounts for a worker's death, reported or presumed: see Processes.check.
        self._died = answers.died

    @property
    def zygote(self) -> Zygote | None:
        """The zygote the workers are forked from, while there is one."""
        return self.processes.zygote

    def start(self, fn: Callable[..., Any] | str) -> None:
        self.processes.start(fn)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while any(w.phase is STARTING for w in self.workers.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolError(f"workers did not start within {START_TIMEOUT_S:g} s")
            with let_in():
                events = self.watched.poller.poll(min(math.ceil(left * 1000), _MAX_POLL_MS))
            self._handle(events)
            self.processes.check(time.monotonic(), self._died)
            self.processes.respawn()

    # --- the loop ----------------------------------------------------------------------------

    def _drive(self, batch: Batch | None) -> None:
        """The one loop: until ``batch`` is done, or (the driver thread's) until closed.

        An interrupt lands only while it waits, when everything it made is recorded: see
        ._interrupts.
        """
        held = hold()
        try:
            self._turns(batch)
        finally:
            release(held)

    def _turns(self, batch: Batch | None) -> None:
        while True:
            if self.inbox:
                self.take_inbox()
            if self.closing:
                self._shutdown(self.failure or CLOSED)
                return
            if batch is not None and not batch.left:
                return
            self.processes.respawn()
            gather = self._dispatch()
            if batch is not None and not batch.left:
                return  # the last items could not be pickled: nothing left to wait for
            if gather > 0:
                # Every worker has work queued past the current item: let results gather
                # instead of waking for each one. Bounded by the next deadline, so no
                # deadline is passed late.
                timeout = self._poll_timeout()
                with let_in():
                    time.sleep(min(gather, _FOREVER_S if timeout is None else timeout / 1000))
            timeout = self._poll_timeout()
            if (
                timeout is None
                and (self.ledger.queue or self.ledger.retry)
                and not any(w.sent for w in self.workers.values())
            ):
                timeout = 0  # what was handed out could not be pickled: hand out more
            # Others wake the loop only while it waits in poll(): a syscall saved per item
            # while it is busy. Set before the last look at the inbox, so none is missed.
            self.idle = True
            if self.inbox or self.closing:
                timeout = 0
            with let_in():
                events = self.watched.poller.poll(timeout)
            self.idle = False
            self._handle(events)
            self._check_deadlines()

    def _dispatch(self) -> float:
        """Hand out batches; how long results may gather before any worker runs dry."""
        ledger = self.ledger
        alone = self.alone
        if alone is not None and (not alone.sent or alone.phase is DEAD):
            self.alone = None
            self.settled = time.monotonic() + _SETTLE_S
        if ledger.suspects or self.alone is not None:
            self._dispatch_suspect()
            return 0.0
        if not ledger.queue and not ledger.retry:
            return 0.0
        schedule = self.schedule
        serving = schedule.serving(self.workers.values())
        if not serving:
            return 0.0
        for worker in schedule.retries(serving, len(ledger.retry)):
            index = ledger.retry.popleft()
            # Only once it is sent: one dropped instead (cancelled meanwhile) would keep the
            # worker "retrying" until an answer that never comes, and the retries behind it,
            # none of which goes to a worker already retrying, would wait for good.
            if self._send(worker, [index]):
                worker.retries.add(index)
        if not ledger.queue:
            return 0.0
        per_batch, assignments = schedule.batches(serving, len(ledger.queue))
        for worker, take in assignments:
            self._send(worker, [ledger.queue.popleft() for _ in range(take)])
        return schedule.gather(serving, per_batch)

    def _dispatch_suspect(self) -> None:
        """The next suspect, alone in the pool once nothing else runs: see Ledger.suspects.

        Not until ``_SETTLE_S`` after the last one ended: one that kills the zygote and then
        answers at once would else have the next charged with it.
        """
        if any(w.sent for w in self.workers.values()) or time.monotonic() < self.settled:
            return
        serving = self.schedule.serving(self.workers.values())
        if serving and self.ledger.suspects:
            self.alone = serving[0]
            self._send(serving[0], [self.ledger.suspects.popleft()])

    def _send(self, worker: Worker, batch: list[int]) -> bool:
        """Hand ``batch`` to ``worker``, less what was cancelled or will not pickle; whether
        anything was sent."""
        pickled = self.ledger.pickled(batch)
        if pickled is None:
            return False
        batch, blob = pickled
        worker.send(self.watched, batch, task_header(batch, len(blob)), blob)
        return True

    def _poll_timeout(self) -> int | None:
        earliest = math.inf
        schedule = self.schedule
        steal = self._idle()
        for worker in self.workers.values():
            due = self.processes.due(worker)
            if due is not None:
                earliest = min(earliest, due)
                continue
            current = worker.current()
            if current is None:
                continue
            index, start = current
            due = start + self.budget
            if worker.dumped != index:
                due -= self.dump_lead
            if steal and schedule.holds_back(worker):
                due = min(due, start + schedule.steal_after)
            if worker.drained is None:
                due = min(due, start + _DRAIN_AFTER_S)
            earliest = min(earliest, due)
        if self.ledger.suspects and self.settled > time.monotonic():
            earliest = min(earliest, self.settled)
        retry = self.processes.spawn_due()
        if retry is not None:
            earliest = min(earliest, retry)
        if earliest == math.inf:
            return None
        return min(_MAX_POLL_MS, max(0, math.ceil((earliest - time.monotonic()) * 1000)))

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        if self.processes.check(now, self._died):
            return
        for worker in list(self.workers.values()):
            current = worker.current()
            if current is None or worker.killed:
                continue
            index, start = current
            # One its pidfd says has ended is not running at its deadline: its item ended as
            # it did, which the zygote's word of it tells (a crash seen only after the deadline
            # on a busy machine was reported a timeout). Asked now: the last poll() may have
            # returned before the death, the loop's thread then waiting for the interpreter
            # lock past the deadline. A zygote that has not told of it BUSY_ACK_S after we saw
            # it (see Processes.check) has it killed for its item, as before.
            if now >= start + self.budget - self.dump_lead and self._ended(worker):
                assert worker.gone_at is not None
                if now < worker.gone_at + BUSY_ACK_S:
                    continue
            if self.ledger.futures and self.ledger.cancelled(index):
                # Nobody waits for it, and a hang would hold the worker to its deadline
                # (submitted items go out in batches, long before they start): its deadline
                # has passed, and its stack is nobody's to dump.
                start, worker.dumped = -math.inf, index
            if worker.drained is None and now >= start + _DRAIN_AFTER_S:
                self.answers.drain(worker, current)
                if worker.current() != current or worker.phase is DEAD or worker.killed:
                    continue
            if now < start + self.budget - self.dump_lead:
                continue
            if now >= start + self.budget:
                # Before looking for its answer: see FENCE. From here the worker either
                # answered already (and we see it) or starts nothing after this item.
                worker.fence(index)
            self.answers.read(worker)  # it may have answered since the poll returned
            if worker.current() != current or worker.phase is DEAD:
                continue
            if worker.dumped != index:
                worker.dumped = index
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(worker.pidfd, DUMP_SIGNAL)
            if now >= start + self.budget:
                # Its frame still in the pipe: the worker stopped reading its tasks (an item
                # put another file there), and this item never started. It runs elsewhere.
                unread = worker.never_read(worker.sent[0])
                self.processes.kill(worker, NOT_STARTED if unread else index, now)
                # Fenced: what waits behind it never starts. It goes to the replacement now,
                # not when the zygote reports this one's end, after the kernel tore it down.
                self._take_back(worker, keep=1)
        if self._idle():
            self._steal(now)

    def _ended(self, worker: Worker) -> bool:
        """Whether ``worker``'s pidfd says it has ended, asked now if it has not said so."""
        if worker.gone_at is None:
            if worker.pidfd < 0:
                return False
            ready = select.poll()
            ready.register(worker.pidfd, select.POLLIN)
            if not ready.poll(0):
                return False
            self._gone(worker)
        return True

    def _gone(self, worker: Worker) -> None:
        """Its pidfd said it ended: when (``gone_at``); the zygote's word of it comes next."""
        self.watched.unregister(worker.pidfd)
        worker.gone_at = time.monotonic()

    def _idle(self) -> bool:
        """Whether a worker has run dry with nothing left to hand it but what others hold."""
        ledger = self.ledger
        return self.schedule.idle(self.workers.values(), len(ledger.queue), len(ledger.retry))

    def _steal(self, now: float) -> None:
        """Take back the items queued behind a long item, for a worker that has run dry."""
        for worker in self.schedule.steal_from(list(self.workers.values()), now):
            current = worker.current()
            assert current is not None
            index = current[0]
            # As at a deadline (see FENCE): fenced before we look for the answer, the worker
            # either answered already or starts nothing after this item.
            worker.fence(index)
            self.answers.read(worker)
            if worker.current() != current or worker.phase is DEAD:
                continue  # it answered: what it does next, it may have started
            self._take_back(worker, keep=1)
            return

    def _take_back(self, worker: Worker, keep: int) -> None:
        """Give ``worker`` no more work; what it holds past its first ``keep`` items goes back."""
        self.ledger.retry.extend(worker.take_back(self.watched, keep))

    # --- events ------------------------------------------------------------------------------

    def _handle(self, events: list[tuple[int, int]]) -> None:
        # As registered when poll() returned: handling one event may close a descriptor and
        # reuse its number (a zygote message reaps a worker, the next one brings a new worker's
        # pidfd), and a later event of the same poll() is the old descriptor's, not the new one's.
        registered = [(fd, self.watched.by_fd.get(fd)) for fd, _ in events]
        for fd, entry in registered:
            if entry is None or self.watched.by_fd.get(fd) is not entry:
                continue
            kind, worker = entry
            if kind == "result":
                assert worker is not None
                self.answers.read(worker)
            elif kind == "output":
                assert worker is not None
                self.answers.drain(worker, worker.current())
            elif kind == "task":
                assert worker is not None
                worker.write(self.watched)
            elif kind == "worker":
                assert worker is not None
                self._gone(worker)
            elif kind == "zygote" and self.zygote is not None:
                self.processes.messages(self._died)
            elif kind == "wake":
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(fd)

    def _close_processes(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.answers.close()
        self.processes.close()
