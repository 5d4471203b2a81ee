"""The pool's loop: handing out work, per-item deadlines, kills, answers, deaths, respawns.

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
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ._answers import after, answer_outcome, death_outcome, decode_aside
from ._contain import containment
from ._driver import CLOSED, Driver
from ._handle import DEAD, NEXT, STARTING, Worker
from ._interrupts import hold, let_in, release
from ._launch import START_TIMEOUT_S, PoolError, Zygote
from ._ledger import Batch
from ._outcome import Mechanism, ok_outcome
from ._processes import Processes
from ._schedule import Schedule
from ._wire import (
    CHUNK,
    DUMP_SIGNAL,
    RETIRED,
    STACK_LIMIT,
    Warmup,
    dump_lead,
    read_bounded,
    result_frames,
    task_header,
)

_FOREVER_S = 1e9
#: An answer's pickle over this many bytes is decoded beside the loop, not in it: see
#: _answers.decode_aside.
_ASIDE_OVER = 256 * 1024
#: poll()'s longest timeout, in ms (a C int); any budget works.
_MAX_POLL_MS = 1 << 30
#: An item's output waits in its 1 MiB pipe for the worker, which reads it when the item ends;
#: once an item has run this long, the caller reads it too, as it comes. Else C code or a
#: subprocess writing more than the pipe holds to fd 1 (which must stay blocking for them)
#: waited in write() until the deadline, and was reported a hang.
_DRAIN_AFTER_S = 0.05

_FORK = Mechanism.FORK

#: Every engine alive in this process, for the descriptors a closure's zygote must not keep.
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
_ENGINES_LOCK = threading.Lock()


class Engine(Driver):
    """Everything the pool owns. Holds no reference to the :class:`Pool`, so GC can close it."""

    def __init__(
        self,
        workers: int,
        budget: float,
        memory_mb: float | None,
        max_pending: int,
        warmup: Warmup = None,
    ) -> None:
        super().__init__(budget, max_pending)
        self.budget = budget
        #: When, before an item's deadline, its stack is dumped: fixed per pool, read per poll.
        self.dump_lead = dump_lead(budget)
        #: Unpickle results that are not plain data: see _wire.decode.
        self.objects = False
        self.size = workers
        self.processes = Processes(workers, memory_mb, warmup, self.watched, _inherited)
        #: The workers by id: the processes' own dict, never replaced.
        self.workers = self.processes.workers
        self.fruitless_deaths = 0
        #: Who gets which items, and whose are taken back: see _schedule.
        self.schedule = Schedule(workers)
        with _ENGINES_LOCK:
            _ENGINES.add(self)

    @property
    def zygote(self) -> Zygote | None:
        """The zygote the workers are forked from, while there is one."""
        return self.processes.zygote

    def start(self, fn: Callable[..., Any] | str) -> None:
        self.processes.start(fn)
        self._wait_ready()

    def _descriptors(self) -> list[int]:
        """The caller-side descriptors this pool holds now (read from other threads too)."""
        found = [self.wake, *self.processes.descriptors()]
        return [fd for fd in found if fd >= 0]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while any(w.phase is STARTING for w in self.workers.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolError(f"workers did not start within {START_TIMEOUT_S:g} s")
            with let_in():
                events = self.watched.poller.poll(min(math.ceil(left * 1000), _MAX_POLL_MS))
            self._handle(events)
            self.processes.check(time.monotonic(), self._on_death)
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
        if not ledger.queue and not ledger.retry:
            return 0.0
        schedule = self.schedule
        serving = schedule.serving(self.workers.values())
        if not serving:
            return 0.0
        for worker in schedule.retries(serving, len(ledger.retry)):
            index = ledger.retry.popleft()
            worker.retries.add(index)
            self._send(worker, [index])
        if not ledger.queue:
            return 0.0
        per_batch, assignments = schedule.batches(serving, len(ledger.queue))
        for worker, take in assignments:
            self._send(worker, [ledger.queue.popleft() for _ in range(take)])
        return schedule.gather(serving, per_batch)

    def _send(self, worker: Worker, batch: list[int]) -> None:
        pickled = self.ledger.pickled(batch)
        if pickled is not None:
            batch, blob = pickled
            worker.send(self.watched, batch, task_header(batch, len(blob)), blob)

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
        if earliest == math.inf:
            return None
        return min(_MAX_POLL_MS, max(0, math.ceil((earliest - time.monotonic()) * 1000)))

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        if self.processes.check(now, self._on_death):
            return
        for worker in list(self.workers.values()):
            current = worker.current()
            if current is None or worker.killed:
                continue
            index, start = current
            if worker.drained is None and now >= start + _DRAIN_AFTER_S:
                self._drain(worker, current)
                if worker.current() != current or worker.phase is DEAD or worker.killed:
                    continue
            if now < start + self.budget - self.dump_lead:
                continue
            if now >= start + self.budget:
                # Before looking for its answer: see FENCE. From here the worker either
                # answered already (and we see it) or starts nothing after this item.
                worker.fence(index)
            self._read_results(worker)  # it may have answered since the poll returned
            if worker.current() != current or worker.phase is DEAD:
                continue
            if worker.dumped != index:
                worker.dumped = index
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(worker.pidfd, DUMP_SIGNAL)
            if now >= start + self.budget:
                self.processes.kill(worker, index, now)
                # Fenced: what waits behind it never starts. It goes to the replacement now,
                # not when the zygote reports this one's end, after the kernel tore it down.
                self._take_back(worker, keep=1)
        if self._idle():
            self._steal(now)

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
            self._read_results(worker)
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
                self._read_results(worker)
            elif kind == "output":
                assert worker is not None
                self._drain(worker, worker.current())
            elif kind == "task":
                assert worker is not None
                worker.write(self.watched)
            elif kind == "worker":
                assert worker is not None
                self.watched.unregister(fd)
                worker.gone_at = time.monotonic()
            elif kind == "zygote" and self.zygote is not None:
                self.processes.messages(self._on_death)
            elif kind == "wake":
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(fd)

    def _read_results(self, worker: Worker) -> None:
        worker.receive()
        frames, consumed = result_frames(worker.inbuf)
        for fields, at in frames:
            if worker.lost is not None:
                break  # what it sent made no sense: nothing more from it is believed
            self._answered(worker, fields, worker.inbuf, at)
        if consumed:
            del worker.inbuf[:consumed]

    def _drain(self, worker: Worker, current: tuple[int, float] | None) -> None:
        """Read what ``worker``'s long item wrote to its output so far: see _DRAIN_AFTER_S.

        Its answers first: what is in the pipe after the item's answer is the next item's,
        for the worker to read. (Only a caller held up between the two reads, while the worker
        answers and starts the next item, takes the first output of that item for this one's.)
        """
        self._read_results(worker)
        if current is None or worker.current() != current or worker.phase is DEAD:
            return  # it answered, with what was read of its output here
        fd = worker.fds["output_r"]
        if worker.drained is None:
            worker.drained = (b"", 0)
            self.watched.register(fd, "output", worker, select.POLLIN)
        try:
            chunk = os.read(fd, CHUNK)  # one read a wake: a flood never holds up the loop
        except BlockingIOError:
            return
        if not chunk:  # no writer left: it is dying, and poll() would report that forever
            self.watched.unregister(fd)
            return
        worker.drained = after(worker.drained, chunk, 0)

    def _answered(
        self, worker: Worker, fields: tuple[Any, ...], buffer: bytearray, at: int
    ) -> None:
        (
            _,
            size,
            output_size,
            dropped,
            index,
            leaked,
            wall,
            cpu,
            cpu_total,
            end,
            rss,
            leaving,
            number,
        ) = fields
        sent = worker.sent
        if not sent or sent[0][0] != index or sent[0][1] is None:
            # Not the item it is running: something in the call wrote on the result pipe.
            # The worker goes; the item it was running is its own, a crash, never the batch.
            worker.lost = (
                "the worker's result pipe carried something other than this item's answer "
                "(the call wrote on the worker's pipe), so the worker was killed"
            )
            current = worker.current()
            if current is not None and not worker.killed:
                self.processes.kill(worker, current[0], time.monotonic())
            return
        sent.popleft()
        drained = worker.take_drained(self.watched)
        if worker.retries:
            worker.retries.discard(index)
        if leaving:  # it retires now: nothing it holds will start
            self._take_back(worker, keep=0)
        elif index == worker.fenced:
            # It may have read the fence after this answer, and retired without a word.
            worker.after_fence = sent[0][0] if sent else NEXT
        self.processes.replaced = 0
        # The worker's clock, but the call may have forged the frame: a time to come (or NaN)
        # would put the next item's deadline out of reach.
        now = time.monotonic()
        worker.last_end = end if end <= now else now
        worker.cpu_base = cpu_total
        if worker.dumped == index:  # the dump came just before it finished: drop it
            read_bounded(worker.fds["stack_r"], STACK_LIMIT)
            worker.dumped = None
        self.fruitless_deaths = 0
        self.schedule.timed(wall)
        if not (size or output_size or dropped or leaked or drained):
            # The common case, an OK float carried in the frame itself: a fast scorer's
            # whole answer comes to this one call (see ok_outcome).
            outcome = ok_outcome(number, wall, cpu, rss / 1024, self.budget, _FORK, containment())
        elif size > _ASIDE_OVER and not self.objects:
            data = bytes(buffer[at : at + output_size + size])
            decode_aside(index, fields, data, drained, self.budget, self.hand_in)
            return
        else:
            outcome = answer_outcome(fields, buffer, at, drained, self.budget, self.objects)
        self.ledger.finish(index, outcome)

    def _on_death(self, worker: Worker, status: int, cpu: float, rss: float, leaked: int) -> None:
        """Account for a dead worker's items: the running one ends, the rest go back."""
        self._read_results(worker)
        now = time.monotonic()
        current = worker.current()
        back = [entry[0] for entry in worker.sent]
        # It left between items on its own: fenced (the item after the fenced one never
        # started), or its state could not be put back (its answer said so, and what it held
        # went back then). Any other item that exits with that code, exited itself.
        retired = status >= 0 and os.WIFEXITED(status) and os.WEXITSTATUS(status) == RETIRED
        if current is not None and self.ledger.remaining:
            index = current[0]
            back.pop(0)
            if not worker.never_started(index, retired):
                drained = worker.take_drained(self.watched)
                outcome = death_outcome(
                    worker, current, now, status, cpu, rss, leaked, drained, self.budget
                )
                self.ledger.finish(index, outcome)
            else:
                # Killed for an item that answered at the deadline, or retired after one: the
                # fence kept this one from starting. It goes out again.
                back.insert(0, index)
        elif not worker.killed and not retired:
            self.fruitless_deaths += 1
        self.ledger.retry.extendleft(reversed(back))
        self.processes.forget(worker)
        if self.processes.stopped:
            return
        if self.fruitless_deaths > 4 * self.size:
            raise PoolError("workers keep dying before they take an item")
        if not worker.killed or self.zygote is None:  # else requested at the kill
            self.processes.to_spawn += 1

    def _stop(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.processes.stop()


def _inherited() -> list[int]:
    """Every pool's caller-side descriptors, which a zygote forked from the caller closes."""
    with _ENGINES_LOCK:
        engines = list(_ENGINES)
    return [fd for engine in engines for fd in engine._descriptors()]
