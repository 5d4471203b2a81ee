"""A warm pool of guarded workers: scoring with an exact per-item deadline, from any thread.

Workers are forked from a zygote (see :mod:`._zygote`) that imported the scorer in a fresh
interpreter, so their cost does not depend on the caller's size or threads (how each comes to
exist, from the zygote or from the caller, is :mod:`._launch`'s). Each worker answers
every item before it starts the next one, which lets the caller know at all times which item a
worker is running and since when; one loop waits in ``poll()`` on the workers' result pipes
with the earliest deadline as its timeout. That loop runs in whichever thread is driving:
``map()`` drives it in its caller while no other thread uses the pool; the first ``submit()``
starts one daemon driver thread, which drives it from then on, and the others hand it work
through a queue and an eventfd in the same ``poll()``. It installs no signal handler.
Here: handing out work, the per-item deadlines, accounting for deaths, respawning, closing.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import select
import signal
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, InvalidStateError
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

from . import _libc, _procfs
from ._contain import containment
from ._decode import died, item_answer, output_text, stack_text
from ._interrupts import hold, let_in, release
from ._launch import (
    START_TIMEOUT_S,
    PoolError,
    Zygote,
    import_target,
    warn_if_large,
    worker_pipes,
)
from ._outcome import (
    UNPICKLABLE_ITEM,
    Answer,
    Mechanism,
    NotStarted,
    Outcome,
    Status,
    answered,
    common_fields,
    ok_outcome,
)
from ._run import _check_limits
from ._spec import SpecError, load_callable
from ._wire import (
    CHUNK,
    DUMP_SIGNAL,
    EXITED,
    FENCE,
    MSG_FORKED,
    MSG_KILLED,
    MSG_REAPED,
    OUTPUT_LIMIT,
    PIPE_ROLES,
    RETIRED,
    SPAWNED,
    STACK_LIMIT,
    WID,
    ResultFields,
    Warmup,
    dump_lead,
    read_bounded,
    result_frames,
    task_header,
)

#: Roughly how much work one task frame carries: big enough to amortise the pipe round trip,
#: small enough that the last items spread over all workers. What waits behind a hang does not
#: wait for its deadline: an idle worker takes it back after _STEAL_AFTER_S. Each wake of the
#: caller costs ~100 µs of its CPU (the loop, the sends, the sleep), taken from the workers on
#: two cores: at 2 ms a batch that was half the caller's share of a 45 µs item.
_BATCH_S = 0.01
#: Longest the caller lets results gather while every worker has a batch queued.
_GATHER_S = 0.005
_FOREVER_S = 1e9
_MAX_BATCH = 256
#: An answer's pickle over this many bytes is decoded beside the loop, not in it: see
#: _Engine._decode_aside.
_ASIDE_OVER = 256 * 1024
#: poll()'s longest timeout, in ms (a C int); any budget works.
_MAX_POLL_MS = 1 << 30
#: How long the zygote may take to acknowledge a kill (it does so before killing), and to fork
#: a worker: past these the caller takes it for stuck, kills it and everything below it itself,
#: and starts another. A late acknowledgement is judged every ``_ACK_S``: a zygote stopped (an
#: item sent it SIGSTOP) is replaced at once; one merely slow to be scheduled, on a busy
#: machine, gets up to ``_BUSY_ACK_S``, so that load alone never costs innocent items.
_ACK_S = 0.05
_BUSY_ACK_S = 1.0
_FORK_S = 10.0
#: How long a killed worker may take to be reported reaped before its item is accounted for
#: anyway (a process in uninterruptible sleep may take indefinitely).
_REAPED_S = 2.0
#: Zygotes replaced in a row, with no item answered in between, before the pool gives up.
_MAX_REPLACED = 3
#: When a worker has run dry while another's item has run this long (and ten times the mean
#: item) with more items queued behind it, those items are taken back for the idle one: else
#: a second hang waits a whole budget behind the first while a worker idles.
_STEAL_AFTER_S = 0.05
#: An item's output waits in its 1 MiB pipe for the worker, which reads it when the item ends;
#: once an item has run this long, the caller reads it too, as it comes. Else C code or a
#: subprocess writing more than the pipe holds to fd 1 (which must stay blocking for them)
#: waited in write() until the deadline, and was reported a hang.
_DRAIN_AFTER_S = 0.05
#: ``_Worker.after_fence`` of a worker whose fenced item answered with nothing queued behind.
_NEXT = -1

_OK = Status.OK
_FORK = Mechanism.FORK
#: Items submitted and not answered yet, by default, per worker: room enough that trainers'
#: bursts never wait, small enough that a runaway producer is held back.
_PENDING_PER_WORKER = 256
#: The status of an item the pool could not finish, because it was closed or failed.
_CLOSED = "the pool was closed before this item finished"


class _Worker:
    __slots__ = (
        "acked",
        "after_fence",
        "batches",
        "cpu_base",
        "drained",
        "draining",
        "dumped",
        "fds",
        "fenced",
        "gone_at",
        "inbuf",
        "kill_for",
        "kill_time",
        "last_end",
        "lost",
        "pid",
        "pidfd",
        "queued",
        "ready",
        "requested",
        "retries",
        "sent",
        "unsent",
        "wid",
        "written",
    )

    def __init__(self, wid: int, fds: dict[str, int]) -> None:
        self.wid = wid
        #: The caller's ends: task_w, result_r, output_r, stack_r.
        self.fds = fds
        self.pid = 0
        self.pidfd = -1
        self.ready = False
        #: Items handed to this worker and not answered yet, oldest first: [index, sent at].
        #: ``sent at`` stays None until the whole frame holding the item is in the pipe.
        self.sent: deque[list[Any]] = deque()
        self.batches: deque[tuple[int, list[list[Any]]]] = deque()
        self.unsent = bytearray()
        self.queued = 0
        self.written = 0
        self.inbuf = bytearray()
        self.last_end = 0.0
        self.cpu_base = 0.0
        #: Items handed out again (see _Engine.retry) in flight here: at most one per worker.
        self.retries: set[int] = set()
        self.dumped: int | None = None
        self.kill_for: int | None = None
        self.kill_time = 0.0
        #: The zygote said it killed this worker (it has not necessarily reaped it yet).
        self.acked = False
        #: When its pidfd said it had ended, the zygote not having said so yet.
        self.gone_at: float | None = None
        #: When the zygote was asked for this worker.
        self.requested = time.monotonic()
        #: Why this worker's current item ended, when not by its own doing or a timeout.
        self.lost: str | None = None
        #: Fenced after its current item (the items behind it were taken back), or retiring
        #: after its last answer: it gets no more work.
        self.draining = False
        #: The last item the fence was written for (see FENCE); and the item handed to it next,
        #: once that one answered anyway (_NEXT until there is one): if the worker then
        #: retires, that item never started.
        self.fenced: int | None = None
        self.after_fence: int | None = None
        #: While the caller reads the current item's output as it comes (see _DRAIN_AFTER_S):
        #: the bytes it kept so far (up to OUTPUT_LIMIT) and how many more it dropped.
        self.drained: tuple[bytes, int] | None = None

    def current(self) -> tuple[int, float] | None:
        """The item running now and the time it started, if one is."""
        if not self.sent or self.sent[0][1] is None:
            return None
        return self.sent[0][0], max(self.last_end, self.sent[0][1])


Item = tuple[Any, ...] | dict[str, Any] | list[Any]


class _Batch:
    """One ``map()`` call's items and where their outcomes go, in order."""

    __slots__ = ("base", "items", "left", "results")

    def __init__(self, items: list[Item]) -> None:
        self.items = items
        #: Index of its first item; the engine gives it a range when it takes the batch.
        self.base = -1
        self.results: list[Outcome | None] = [None] * len(items)
        #: Items without an outcome yet; read by waiting threads under ``lock``.
        self.left = len(items)


class _Cancel:
    """A waiting ``map()`` was interrupted: its items that have not started never will."""

    __slots__ = ("batch",)

    def __init__(self, batch: _Batch) -> None:
        self.batch = batch


class _Decoded:
    """An item's outcome decoded off the loop's thread (see _Engine._decode_aside)."""

    __slots__ = ("index", "outcome")

    def __init__(self, index: int, outcome: Outcome) -> None:
        self.index = index
        self.outcome = outcome


class _Slots:
    """The bound on submitted items not answered yet, for threads and event loops alike.

    A thread waits on a condition; a coroutine on an asyncio future that a freed slot resolves
    through its loop's ``call_soon_threadsafe``, so no event loop is ever blocked. Every waiting
    coroutine is woken and tries again (no slot is handed to one that was cancelled meanwhile).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.free = size
        self.closed = False
        self.cond = threading.Condition(threading.Lock())
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def acquire(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while not self.free and not self.closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(
                        f"Pool.submit: {self.size} items were still pending after waiting "
                        f"{timeout:g} s for room (max_pending={self.size}, submit_timeout)"
                    )
                self.cond.wait(left)
            if self.closed:
                raise ValueError("submit() on a closed Pool")
            self.free -= 1

    async def aacquire(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        while True:
            with self.cond:
                if self.closed:
                    raise ValueError("asubmit() on a closed Pool")
                if self.free:
                    self.free -= 1
                    return
                waiter = loop.create_future()
                self.waiters.append((loop, waiter))
            try:
                await waiter
            finally:
                with self.cond, contextlib.suppress(ValueError):
                    self.waiters.remove((loop, waiter))

    def release(self, count: int = 1) -> None:
        with self.cond:
            self.free += count
            self.cond.notify(count)
            waiters, self.waiters = self.waiters, []
        _wake_all(waiters)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            waiters, self.waiters = self.waiters, []
        _wake_all(waiters)


def _wake_all(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]) -> None:
    for loop, waiter in waiters:
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there
            loop.call_soon_threadsafe(_set_none, waiter)


def _set_none(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


#: Every engine alive in this process, for the descriptors a closure's zygote must not keep.
_ENGINES: weakref.WeakSet[_Engine] = weakref.WeakSet()
_ENGINES_LOCK = threading.Lock()


class _Engine:
    """Everything the pool owns. Holds no reference to the :class:`Pool`, so GC can close it."""

    def __init__(
        self,
        workers: int,
        budget: float,
        memory_mb: float | None,
        max_pending: int,
        warmup: Warmup = None,
    ) -> None:
        self.budget = budget
        #: Scored once in every zygote, before it forks a worker: see Pool.
        self.warmup = warmup
        #: When, before an item's deadline, its stack is dumped: fixed per pool, read per poll.
        self.dump_lead = dump_lead(budget)
        self.memory_mb = memory_mb
        #: Unpickle results that are not plain data: see _decode.decode.
        self.objects = False
        self.size = workers
        self.closed = False
        #: A child forked by the caller inherits this object; only the owner drives the pool.
        self.owner = os.getpid()
        self.workers: dict[int, _Worker] = {}
        self.by_fd: dict[int, tuple[str, _Worker | None]] = {}
        self.poller = select.poll()
        self.next_wid = 0
        self.to_spawn = 0
        self.fruitless_deaths = 0
        self.mean_item_s: float | None = None
        self.zygote: Zygote | None = None
        self.fn: Callable[..., Any] | None = None
        self.target: tuple[Any, ...] | None = None
        self.replaced = 0
        # Every item taken and not answered yet, whoever gave it: map() calls and submit().
        self.next_index = 0
        self.items: dict[int, Item] = {}
        #: Where each item's outcome goes: its map() call's batch, or its submit()'s future.
        self.sinks: dict[int, _Batch | Future[Outcome]] = {}
        #: How many of the sinks are futures: only then must a batch be checked for cancelled.
        self.futures = 0
        self.queue: deque[int] = deque()
        #: Items a worker had queued and will never start: it died, retires, or was fenced for a
        #: steal. They go out one at a time, one per worker, so two hangs that waited behind a
        #: third never end up behind each other.
        self.retry: deque[int] = deque()
        self.remaining = 0
        # Threads. Only the thread that holds the turn (``driving``) touches anything above;
        # the others append to ``inbox`` and write ``wake``, which the loop polls with the rest.
        # Reentrant: a Pool collected in the driver thread, inside a ``with lock``, closes it.
        self.lock = threading.RLock()
        self.turn = threading.Condition(self.lock)
        #: Threads in ``turn.wait()``: only then is there anybody to notify.
        self.waiting = 0
        self.driving = False
        self.driving_thread = 0
        #: The driving thread is in (or about to enter) poll(): only then is it woken.
        self.idle = False
        self.driver: threading.Thread | None = None
        self.inbox: deque[_Batch | _Cancel | _Decoded | tuple[Item, Future[Outcome]]] = deque()
        #: Closed to new work (close() was called, or the pool failed); ``closed`` once stopped.
        self.closing = False
        self.failure: str | None = None
        self.slots = _Slots(max_pending)
        self.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        with _ENGINES_LOCK:
            _ENGINES.add(self)
        self._register(self.wake, "wake", None, select.POLLIN)

    def start(self, fn: Callable[..., Any] | str) -> None:
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
        self._wait_ready()

    def _start_zygote(self, target: tuple[Any, ...] | None) -> None:
        if target is not None:
            self.zygote = Zygote.start(target, self.memory_mb, self.warmup)
        else:
            assert self.fn is not None
            # Every pool's descriptors, not only this one's: an item of this pool could set
            # another's caller-side pipes blocking (the flag is the caller's file's too), and
            # that pool's loop would then wait in a read.
            with _ENGINES_LOCK:
                engines = list(_ENGINES)
            inherited = [fd for engine in engines for fd in engine._descriptors()]
            self.zygote = Zygote.fork(self.fn, self.memory_mb, self.warmup, inherited)
        self._register(self.zygote.sock.fileno(), "zygote", None, select.POLLIN)
        self._register(self.zygote.pidfd, "zygote", None, select.POLLIN)

    def _descriptors(self) -> list[int]:
        """The caller-side descriptors this pool holds now (read from other threads too)."""
        found = [self.wake] if self.wake >= 0 else []
        for worker in self.workers.copy().values():  # one C call: safe from another thread
            found.extend(worker.fds.values())
        zygote = self.zygote
        if zygote is not None:
            found += [zygote.sock.fileno(), zygote.pidfd]
        return [fd for fd in found if fd >= 0]

    # --- processes ---------------------------------------------------------------------------

    def _spawn(self) -> None:
        assert self.zygote is not None
        wid = self.next_wid
        self.next_wid += 1
        theirs, ours = worker_pipes()
        # Ours are the worker's from here, so close() closes them whatever interrupts us.
        self.workers[wid] = worker = _Worker(wid, ours)
        try:
            for role, fd in ours.items():
                if role != "fence":
                    os.set_blocking(fd, False)
            self._register(ours["result_r"], "result", worker, select.POLLIN)
            # Not sent (the zygote is not reading): the fork's deadline replaces the zygote.
            self.zygote.fork_worker(wid, [theirs[role] for role in PIPE_ROLES])
        finally:
            for fd in set(theirs.values()) - set(ours.values()):
                os.close(fd)

    def _register(self, fd: int, kind: str, worker: _Worker | None, events: int) -> None:
        self.by_fd[fd] = (kind, worker)
        self.poller.register(fd, events)

    def _unregister(self, fd: int) -> None:
        if self.by_fd.pop(fd, None) is not None:
            self.poller.unregister(fd)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(w.ready for w in self.workers.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolError(f"workers did not start within {START_TIMEOUT_S:g} s")
            with let_in():
                events = self.poller.poll(min(math.ceil(left * 1000), _MAX_POLL_MS))
            self._handle(events)
            self._check_zygote(time.monotonic())
            self._respawn()

    def _respawn(self) -> None:
        # Deferred out of event handling: a new worker's pipes may reuse the fd numbers of the
        # dead one's, which later events of the same poll() would then be taken for.
        while self.to_spawn and not self.closed:
            self.to_spawn -= 1
            self._spawn()

    # --- taking work ------------------------------------------------------------------------

    def map(self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]) -> list[Outcome]:
        if os.getpid() != self.owner:
            raise PoolError("this Pool belongs to the process that forked this one; make a new one")
        if self.closing:
            raise ValueError("map() on a closed Pool")
        # A tuple of arguments, the usual item, is taken as it is without a call.
        batch = _Batch([item if type(item) is tuple else _arguments(item) for item in items])
        if not batch.left:
            return []
        me = threading.get_ident()
        if self.driving_thread == me:
            raise RuntimeError("map() from inside the pool's own loop (a future's callback)")
        try:
            with self.lock:
                if self.closing:
                    raise ValueError("map() on a closed Pool")
                self.inbox.append(batch)
                if self.driving and self.idle:
                    self._poke()
                while batch.left and self.driving:
                    self._wait()  # another thread drives, for this batch too
                if batch.left:
                    # Nobody drives (any more): this thread does, as map() always did, serving
                    # what other threads hand in meanwhile too. The thread is set first, as
                    # that is what says, if an interrupt lands in between, who holds the turn.
                    self.driving_thread = me
                    self.driving = True
            if batch.left:
                self._drive(batch)
        except BaseException as exc:
            if self.driving_thread == me:
                # KeyboardInterrupt, or the pool itself failed, while this thread drove: leave
                # nothing running. The pool is closed: map() raises what interrupted it, and a
                # later call says the pool is closed.
                self._shutdown(f"{_CLOSED}: {_said(exc)} in the thread driving it")
            else:
                # Interrupted while another thread drives: nothing of the pool is half done
                # here, so it goes on for the others; this call's items that have not started
                # never will.
                with self.lock:
                    if not self.closing:
                        self.inbox.append(_Cancel(batch))
                        self._poke()
            raise
        finally:
            if self.driving_thread == me:
                self._leave()
        return batch.results  # type: ignore[return-value]

    def submit(
        self, item: Item, timeout: float | None, *, acquired: bool = False
    ) -> Future[Outcome]:
        """Queue one item from any thread; its future gets its outcome."""
        if os.getpid() != self.owner:
            raise PoolError("this Pool belongs to the process that forked this one; make a new one")
        if not acquired:
            # From the loop's own thread (a future's callback) a full queue would never drain.
            inside = self.driving_thread == threading.get_ident()
            self.slots.acquire(0.0 if inside else timeout)
        future: Future[Outcome] = Future()
        with self.lock:
            if self.closing:
                self.slots.release()
                raise ValueError("submit() on a closed Pool")
            self.inbox.append((item, future))
            if self.driver is None:
                self.driver = threading.Thread(
                    target=self._serve, name="rewardhang-pool-driver", daemon=True
                )
                self.driver.start()
            if self.idle:
                self._poke()
        return future

    def _poke(self) -> None:
        """Wake the loop; with ``lock`` held, so that the eventfd is still open."""
        if self.wake >= 0:
            os.eventfd_write(self.wake, 1)

    def _serve(self) -> None:
        """The driver thread: drive the loop from when the turn is free until the pool closes."""
        with self.lock:
            while self.driving and not self.closing:
                self._wait()
            if self.closing:
                return
            self.driving_thread = threading.get_ident()
            self.driving = True
        try:
            self._drive(None)
        except BaseException as exc:  # noqa: BLE001 - the pool failed: say so in every outcome
            self.failure = f"{_CLOSED}: the pool failed: {_said(exc)}"
            self._shutdown(self.failure)
        finally:
            self._leave()

    def _wait(self) -> None:
        """Wait (with ``lock`` held) for a batch to finish or the turn to be free."""
        self.waiting += 1
        try:
            self.turn.wait()
        finally:
            self.waiting -= 1

    def _leave(self) -> None:
        with self.lock:
            self.driving = False
            self.driving_thread = 0
            if self.waiting:
                self.turn.notify_all()

    # --- the loop ----------------------------------------------------------------------------

    def _drive(self, batch: _Batch | None) -> None:
        """The one loop: until ``batch`` is done, or (the driver thread's) until closed.

        An interrupt lands only while it waits, when everything it made is recorded: see
        ._interrupts.
        """
        held = hold()
        try:
            self._turns(batch)
        finally:
            release(held)

    def _turns(self, batch: _Batch | None) -> None:
        while True:
            if self.inbox:
                self._take_inbox()
            if self.closing:
                self._shutdown(self.failure or _CLOSED)
                return
            if batch is not None and not batch.left:
                return
            self._respawn()
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
                and (self.queue or self.retry)
                and not any(w.sent for w in self.workers.values())
            ):
                timeout = 0  # what was handed out could not be pickled: hand out more
            # Others wake the loop only while it waits in poll(): a syscall saved per item
            # while it is busy. Set before the last look at the inbox, so none is missed.
            self.idle = True
            if self.inbox or self.closing:
                timeout = 0
            with let_in():
                events = self.poller.poll(timeout)
            self.idle = False
            self._handle(events)
            self._check_deadlines()

    def _take_inbox(self) -> None:
        inbox = self.inbox
        while inbox:
            entry = inbox.popleft()
            if type(entry) is _Batch:
                n = len(entry.items)
                base = entry.base = self.next_index
                self.next_index += n
                indexes = range(base, base + n)
                self.items.update(zip(indexes, entry.items, strict=True))
                self.sinks.update(dict.fromkeys(indexes, entry))
                self.queue.extend(indexes)
                self.remaining += n
            elif type(entry) is _Cancel:
                self._cancel(entry.batch)
            elif type(entry) is _Decoded:
                self._finish(entry.index, entry.outcome)
            else:
                item, future = entry  # type: ignore[misc]
                index = self.next_index
                self.next_index += 1
                self.items[index] = item
                self.sinks[index] = future
                self.futures += 1
                self.queue.append(index)
                self.remaining += 1

    def _cancel(self, batch: _Batch) -> None:
        """Drop a batch's items that no worker has started (or been handed)."""
        if batch.base < 0:
            return
        mine = range(batch.base, batch.base + len(batch.items))
        for waiting in (self.queue, self.retry):
            dropped = [i for i in waiting if i in mine]
            if dropped:
                kept = [i for i in waiting if i not in mine]
                waiting.clear()
                waiting.extend(kept)
            for index in dropped:
                self._finish(index, Outcome(Status.ERROR, error="cancelled", budget=self.budget))

    def _finish(self, index: int, outcome: Outcome) -> None:
        """Hand an item's outcome to whoever gave the item; only its first outcome counts."""
        sink = self.sinks.pop(index, None)
        if sink is None:
            return
        del self.items[index]
        self.remaining -= 1
        if type(sink) is _Batch:
            sink.results[index - sink.base] = outcome
            sink.left -= 1
            if not sink.left:
                with self.lock:  # under the lock, so a waiting map() cannot miss it
                    if self.waiting:
                        self.turn.notify_all()
            return
        self.futures -= 1
        # The future's callbacks run here (asyncio's hand the outcome to its loop).
        with contextlib.suppress(InvalidStateError):  # cancelled before it started
            sink.set_result(outcome)  # type: ignore[union-attr]
        self.slots.release()

    def _starts(self, index: int) -> bool:
        """Whether a submitted item may start: False (and accounted for) if it was cancelled."""
        sink = self.sinks[index]
        if type(sink) is _Batch or sink.running():  # type: ignore[union-attr]
            return True
        if sink.set_running_or_notify_cancel():  # type: ignore[union-attr]
            return True
        del self.sinks[index], self.items[index]
        self.remaining -= 1
        self.futures -= 1
        self.slots.release()
        return False

    def _dispatch(self) -> float:
        """Hand out batches; how long results may gather before any worker runs dry."""
        if not self.queue and not self.retry:
            return 0.0
        ready = [
            w for w in self.workers.values() if w.ready and w.kill_for is None and not w.draining
        ]
        if not ready:
            return 0.0
        for worker in ready:
            if self.retry and not worker.retries:
                index = self.retry.popleft()
                worker.retries.add(index)
                self._send(worker, [index])
        if not self.queue:
            return 0.0
        per_batch = 1  # until an item has been timed
        if self.mean_item_s is not None and self.mean_item_s > 0:
            per_batch = max(1, min(_MAX_BATCH, int(_BATCH_S / self.mean_item_s)))
        # The last items spread over all workers instead of queueing behind one.
        per_batch = max(1, min(per_batch, len(self.queue) // self.size))
        # Up to two batches in flight (two items for slow ones), so a worker finds its next item
        # waiting instead of idling for a round trip through the caller; what waits behind a
        # hang goes back to the queue at the kill, its deadline not started. Not while a worker
        # is starting, though: the first one up would take the items meant for the others.
        in_flight = max(per_batch, 2) if len(ready) == self.size else per_batch
        # The emptiest first: a worker that runs dry gets the next item before another
        # queues it behind the one it runs (which may be a hang).
        ready.sort(key=_sent_count)
        for worker in ready:
            if self.queue and len(worker.sent) < in_flight:
                take = min(per_batch, len(self.queue))
                batch = [self.queue.popleft() for _ in range(take)]
                self._send(worker, batch)
        if per_batch == 1 or len(ready) < self.size or any(w.unsent for w in ready):
            return 0.0
        assert self.mean_item_s is not None
        queued = min(len(w.sent) for w in ready) - 1
        return min(_GATHER_S, queued * self.mean_item_s / 2)

    def _send(self, worker: _Worker, batch: list[int]) -> None:
        if self.futures:
            batch = [i for i in batch if self._starts(i)]
            if not batch:
                return
        try:
            blob = pickle.dumps([self.items[i] for i in batch], protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - find the item that will not pickle; send the rest
            batch = [i for i in batch if self._picklable(i)]
            if not batch:
                return
            blob = pickle.dumps([self.items[i] for i in batch], protocol=pickle.HIGHEST_PROTOCOL)
        if worker.after_fence == _NEXT:
            worker.after_fence = batch[0]
        header = task_header(batch, len(blob))
        entries = [[i, None] for i in batch]
        worker.sent.extend(entries)
        worker.queued += len(header) + len(blob)
        worker.batches.append((worker.queued, entries))
        if worker.unsent:
            worker.unsent += header
            worker.unsent += blob
            return  # the pipe is full; POLLOUT brings us back
        self._write(worker, [header, blob])

    def _picklable(self, index: int) -> bool:
        try:
            pickle.dumps(self.items[index], protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - that item's outcome, not the batch's
            text = f"{type(exc).__name__}: {UNPICKLABLE_ITEM}: {exc}"
            unsent = Outcome(
                Status.ERROR, error=text, budget=self.budget, not_started=NotStarted.UNPICKLABLE
            )
            self._finish(index, unsent)
            return False
        return True

    def _write(self, worker: _Worker, parts: list[bytes] | None = None) -> None:
        """Write ``parts`` (or what is left over from before); keep what does not fit."""
        fd = worker.fds["task_w"]
        try:
            written = os.writev(fd, parts) if parts is not None else os.write(fd, worker.unsent)
        except BlockingIOError:
            written = 0
        except BrokenPipeError:  # it died; its death is reported separately
            worker.unsent.clear()
            return
        if parts is not None:
            worker.unsent += b"".join(parts)[written:] if written < sum(map(len, parts)) else b""
        else:
            del worker.unsent[:written]
        worker.written += written
        now = time.monotonic()
        while worker.batches and worker.batches[0][0] <= worker.written:
            for entry in worker.batches.popleft()[1]:
                entry[1] = now
        if worker.unsent:
            self.by_fd[fd] = ("task", worker)
            with contextlib.suppress(KeyError):
                self.poller.unregister(fd)
            self.poller.register(fd, select.POLLOUT)
        elif fd in self.by_fd:
            self._unregister(fd)

    def _poll_timeout(self) -> int | None:
        earliest = math.inf
        steal = self._idle()
        for worker in self.workers.values():
            if not worker.ready:
                earliest = min(earliest, worker.requested + _FORK_S)
                continue
            owed = self._owed_since(worker)
            if owed is not None:  # the next look: every _ACK_S (for a kill, until _BUSY_ACK_S)
                looks = math.floor((time.monotonic() - owed) / _ACK_S) + 1
                if worker.kill_for is not None:
                    looks = min(looks, round(_BUSY_ACK_S / _ACK_S))
                earliest = min(earliest, owed + looks * _ACK_S)
                continue
            if worker.kill_for is not None:
                earliest = min(earliest, worker.kill_time + _REAPED_S)
                continue
            current = worker.current()
            if current is None:
                continue
            index, start = current
            due = start + self.budget
            if worker.dumped != index:
                due -= self.dump_lead
            if steal and self._holds_back(worker):
                due = min(due, start + self._steal_after())
            if worker.drained is None:
                due = min(due, start + _DRAIN_AFTER_S)
            earliest = min(earliest, due)
        if earliest == math.inf:
            return None
        return min(_MAX_POLL_MS, max(0, math.ceil((earliest - time.monotonic()) * 1000)))

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        if self._check_zygote(now):
            return
        for worker in list(self.workers.values()):
            current = worker.current()
            if current is None or worker.kill_for is not None:
                continue
            index, start = current
            if worker.drained is None and now >= start + _DRAIN_AFTER_S:
                self._drain(worker, current)
                if (
                    worker.current() != current
                    or worker.wid not in self.workers
                    or worker.kill_for is not None
                ):
                    continue
            if now < start + self.budget - self.dump_lead:
                continue
            if now >= start + self.budget:
                # Before looking for its answer: see FENCE. From here the worker either
                # answered already (and we see it) or starts nothing after this item.
                self._fence(worker, index)
            self._read_results(worker)  # it may have answered since the poll returned
            if worker.current() != current or worker.wid not in self.workers:
                continue
            if worker.dumped != index:
                worker.dumped = index
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(worker.pidfd, DUMP_SIGNAL)
            if now >= start + self.budget:
                self._kill(worker, index, now)
                # Fenced: what waits behind it never starts. It goes to the replacement now,
                # not when the zygote reports this one's end, after the kernel tore it down.
                self._take_back(worker, keep=1)
        if self._idle():
            self._steal(now)

    def _steal_after(self) -> float:
        return max(_STEAL_AFTER_S, 10 * (self.mean_item_s or 0.0))

    def _idle(self) -> bool:
        """Whether a worker has run dry with nothing left to hand it but what others hold."""
        return (
            not self.queue
            and not self.retry
            and any(
                w.ready and w.kill_for is None and not w.draining and not w.sent
                for w in self.workers.values()
            )
        )

    @staticmethod
    def _holds_back(worker: _Worker) -> bool:
        """Whether items wait in ``worker`` behind the one it runs, which could be taken back."""
        return (
            len(worker.sent) > 1
            and worker.current() is not None
            and worker.kill_for is None
            and not worker.draining
        )

    def _steal(self, now: float) -> None:
        """Take back the items queued behind a long item, for a worker that has run dry."""
        after = self._steal_after()
        for worker in list(self.workers.values()):
            current = worker.current()
            if current is None or not self._holds_back(worker) or now < current[1] + after:
                continue
            index = current[0]
            # As at a deadline (see FENCE): fenced before we look for the answer, the worker
            # either answered already or starts nothing after this item.
            self._fence(worker, index)
            self._read_results(worker)
            if worker.current() != current or worker.wid not in self.workers:
                continue  # it answered: what it does next, it may have started
            self._take_back(worker, keep=1)
            return

    @staticmethod
    def _fence(worker: _Worker, index: int) -> None:
        os.pwrite(worker.fds["fence"], FENCE.pack(index + 1), 0)
        worker.fenced = index

    def _take_back(self, worker: _Worker, keep: int) -> None:
        """Give ``worker`` no more work; what it holds past its first ``keep`` items goes back."""
        worker.draining = True
        kept = [worker.sent.popleft() for _ in range(min(keep, len(worker.sent)))]
        self.retry.extend(entry[0] for entry in worker.sent)
        worker.sent.clear()
        worker.sent.extend(kept)
        # Bytes of those items not yet in the pipe need not go: it will never read them.
        worker.batches.clear()
        worker.unsent.clear()
        self._unregister(worker.fds["task_w"])

    def _kill(self, worker: _Worker, index: int, now: float) -> None:
        assert self.zygote is not None
        worker.kill_for = index
        worker.kill_time = now
        self.zygote.kill(worker.wid)
        # Ask for the replacement now: the zygote forks it while the dead one is torn down.
        self.to_spawn += 1

    def _check_zygote(self, now: float) -> bool:
        """Replace a zygote that does not answer in time; True if it was replaced.

        A worker killed and reported killed but not reaped in time is accounted for anyway.
        """
        for worker in list(self.workers.values()):
            owed = self._owed_since(worker)
            if not worker.ready:
                late = now >= worker.requested + _FORK_S
            elif owed is not None:
                waited = now - owed
                # A worker's end is reported after its orphans are reaped, which a busy zygote
                # may take long over: only a stopped one is replaced for that.
                busy = worker.kill_for is not None and waited >= _BUSY_ACK_S
                late = busy or (
                    waited >= _ACK_S and self.zygote is not None and self._zygote_stopped()
                )
            elif worker.kill_for is not None:  # acknowledged
                if now >= worker.kill_time + _REAPED_S:
                    self._on_death(worker, -1, math.nan, 0.0, 0)
                continue
            else:
                continue
            if late:
                self._replace_zygote("stopped answering")
                return True
        return False

    @staticmethod
    def _owed_since(worker: _Worker) -> float | None:
        """Since when the zygote owes word of ``worker``: of its kill, or of its end."""
        if worker.kill_for is not None:
            return None if worker.acked else worker.kill_time
        # An item may stop the zygote and then end its worker: without this, the item waited
        # for its deadline and was reported a timeout.
        return worker.gone_at

    def _zygote_stopped(self) -> bool:
        assert self.zygote is not None
        return _procfs.stopped(self.zygote.pid)

    def _replace_zygote(self, why: str) -> None:
        """Kill the zygote and everything below it, account for its workers' items, restart."""
        old = self.zygote
        if old is None:
            return
        self._unregister(old.sock.fileno())
        self._unregister(old.pidfd)
        try:
            old.stop()
        finally:
            old.close()
            self.zygote = None
        text = (
            f"the pool's zygote {why} (an item stopped or killed it, this one or one running "
            "beside it), so the caller killed it and every worker; this item was not run again"
        )
        for worker in list(self.workers.values()):
            if worker.kill_for is None:  # a worker killed at its deadline stays a timeout
                worker.lost = text
            self._on_death(worker, -1, math.nan, 0.0, 0)
        self.replaced += 1
        if self.replaced > _MAX_REPLACED:
            raise PoolError(f"the pool's zygote {why}, {self.replaced} times in a row")
        if self.closed:
            return
        self._start_zygote(self.target)
        self.to_spawn = self.size

    # --- events ------------------------------------------------------------------------------

    def _handle(self, events: list[tuple[int, int]]) -> None:
        # As registered when poll() returned: handling one event may close a descriptor and
        # reuse its number (a zygote message reaps a worker, the next one brings a new worker's
        # pidfd), and a later event of the same poll() is the old descriptor's, not the new one's.
        registered = [(fd, self.by_fd.get(fd)) for fd, _ in events]
        for fd, entry in registered:
            if entry is None or self.by_fd.get(fd) is not entry:
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
                self._write(worker)
            elif kind == "worker":
                assert worker is not None
                self._unregister(fd)
                worker.gone_at = time.monotonic()
            elif kind == "zygote" and self.zygote is not None:
                self._zygote_messages()
            elif kind == "wake":
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(fd)

    def _zygote_messages(self) -> None:
        assert self.zygote is not None
        while True:
            try:
                received = self.zygote.receive()
            except PoolError:  # it died (an item killed it, say): its workers died with it
                self._replace_zygote("died")
                return
            if received is None:
                return
            message, fds = received
            if message[:1] == MSG_FORKED:
                wid, pid = SPAWNED.unpack_from(message, 1)
                worker = self.workers.get(wid)
                if worker is None or not fds:
                    for fd in fds:
                        os.close(fd)
                    continue
                worker.pid, worker.pidfd, worker.ready = pid, fds[0], True
                # Its end is the zygote's to report; watched here too, for a zygote that an
                # item stopped before it ended: see _owed_since.
                self._register(worker.pidfd, "worker", worker, select.POLLIN)
            elif message[:1] == MSG_KILLED:
                (wid,) = WID.unpack_from(message, 1)
                if wid in self.workers:
                    self.workers[wid].acked = True
            elif message[:1] == MSG_REAPED:
                wid, status, cpu, rss, leaked = EXITED.unpack_from(message, 1)
                if wid in self.workers:
                    self._on_death(self.workers[wid], status, cpu, rss, leaked)

    def _read_results(self, worker: _Worker) -> None:
        fd = worker.fds["result_r"]
        while True:
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                break
            worker.inbuf += chunk
            if len(chunk) < CHUNK:
                break
        frames, consumed = result_frames(worker.inbuf)
        for fields, at in frames:
            if worker.lost is not None:
                break  # what it sent made no sense: nothing more from it is believed
            self._answered(worker, fields, worker.inbuf, at)
        if consumed:
            del worker.inbuf[:consumed]

    def _drain(self, worker: _Worker, current: tuple[int, float] | None) -> None:
        """Read what ``worker``'s long item wrote to its output so far: see _DRAIN_AFTER_S.

        Its answers first: what is in the pipe after the item's answer is the next item's,
        for the worker to read. (Only a caller held up between the two reads, while the worker
        answers and starts the next item, takes the first output of that item for this one's.)
        """
        self._read_results(worker)
        if current is None or worker.current() != current or worker.wid not in self.workers:
            return  # it answered, with what was read of its output here
        fd = worker.fds["output_r"]
        if worker.drained is None:
            worker.drained = (b"", 0)
            self._register(fd, "output", worker, select.POLLIN)
        try:
            chunk = os.read(fd, CHUNK)  # one read a wake: a flood never holds up the loop
        except BlockingIOError:
            return
        if not chunk:  # no writer left: it is dying, and poll() would report that forever
            self._unregister(fd)
            return
        worker.drained = _after(worker.drained, chunk, 0)

    def _drained(self, worker: _Worker) -> tuple[bytes, int] | None:
        """What the caller read of the item that ended (see _drain), if it read as it came."""
        drained = worker.drained
        if drained is not None:
            self._unregister(worker.fds["output_r"])
            worker.drained = None
        return drained

    def _answered(self, worker: _Worker, fields: ResultFields, buffer: bytearray, at: int) -> None:
        index = fields.item_index
        sent = worker.sent
        if not sent or sent[0][0] != index or sent[0][1] is None:
            # Not the item it is running: something in the call wrote on the result pipe.
            # The worker goes; the item it was running is its own, a crash, never the batch.
            worker.lost = (
                "the worker's result pipe carried something other than this item's answer "
                "(the call wrote on the worker's pipe), so the worker was killed"
            )
            current = worker.current()
            if current is not None and worker.kill_for is None:
                self._kill(worker, current[0], time.monotonic())
            return
        sent.popleft()
        drained = self._drained(worker)
        if worker.retries:
            worker.retries.discard(index)
        if fields.leaving:  # it retires now: nothing it holds will start
            self._take_back(worker, keep=0)
        elif index == worker.fenced:
            # It may have read the fence after this answer, and retired without a word.
            worker.after_fence = sent[0][0] if sent else _NEXT
        self.replaced = 0
        # The worker's clock, but the call may have forged the frame: a time to come (or NaN)
        # would put the next item's deadline out of reach.
        now = time.monotonic()
        end = fields.end
        worker.last_end = end if end <= now else now
        worker.cpu_base = fields.cpu_total
        if worker.dumped == index:  # the dump came just before it finished: drop it
            read_bounded(worker.fds["stack_r"], STACK_LIMIT)
            worker.dumped = None
        self.fruitless_deaths = 0
        mean = self.mean_item_s
        wall = fields.wall
        self.mean_item_s = wall if mean is None else 0.8 * mean + 0.2 * wall
        size = fields.size
        if not (size or fields.output_size or fields.dropped or fields.leaked or drained):
            # The common case, an OK float carried in the frame itself: a fast scorer's
            # whole answer comes to this one call (see ok_outcome).
            rss_mb = fields.rss_kib / 1024
            outcome = ok_outcome(
                fields.number, wall, fields.cpu, rss_mb, self.budget, _FORK, containment()
            )
        elif size > _ASIDE_OVER and not self.objects:
            data = bytes(buffer[at : at + fields.output_size + size])
            self._decode_aside(index, fields, data, drained)
            return
        else:
            outcome = self._outcome(fields, buffer, at, drained)
        self._finish(index, outcome)

    def _decode_aside(
        self,
        index: int,
        fields: ResultFields,
        data: bytes,
        drained: tuple[bytes, int] | None,
    ) -> None:
        """Decode a large answer on a thread of its own, and hand its outcome to the loop.

        Plain data is checked opcode by opcode before it is built (_decode._check_keys), at about
        half a second a megabyte: on the loop's thread, a 15 MB list put the other items'
        deadlines 6 s off. Beside it, the loop has the GIL back every switch interval.
        """

        def decode_it() -> None:
            try:
                outcome = self._outcome(fields, data, 0, drained)
            except BaseException as exc:  # noqa: BLE001 - never a silent loss of the item
                error = f"{_said(exc)} in decoding the answer"
                outcome = Outcome(Status.ERROR, error=error, budget=self.budget)
            with self.lock:
                self.inbox.append(_Decoded(index, outcome))
                if self.driving and self.idle:
                    self._poke()

        threading.Thread(target=decode_it, name="rewardhang-decode", daemon=True).start()

    def _outcome(
        self,
        fields: ResultFields,
        buffer: bytes | bytearray,
        at: int,
        drained: tuple[bytes, int] | None,
    ) -> Outcome:
        """The outcome of an answer that is not a bare OK float: see RESULT."""
        size, output_end = fields.size, at + fields.output_size
        output, dropped = _after(drained, bytes(buffer[at:output_end]), fields.dropped)
        common = common_fields(
            fields.wall,
            fields.cpu,
            fields.rss_kib,
            output_text(output, dropped),
            dropped,
            self.budget,
            containment(),
        )
        if not size:  # an OK float, with output or leftovers
            return answered(Answer(_OK, fields.number), fields.leaked, common)
        answer = item_answer(buffer[output_end : output_end + size], objects=self.objects)
        return answered(answer, fields.leaked, common)

    def _on_death(self, worker: _Worker, status: int, cpu: float, rss: float, leaked: int) -> None:
        """Account for a dead worker's items: the running one ends, the rest go back."""
        self._read_results(worker)
        now = time.monotonic()
        current = worker.current()
        back = [entry[0] for entry in worker.sent]
        # It left between items on its own: fenced (the item after the fenced one never
        # started), or its state could not be put back (its answer said so, and what it held
        # went back then). Any other item that exits with that code, exited itself.
        retired = status >= 0 and os.WIFEXITED(status) and os.WEXITSTATUS(status) == RETIRED
        if current is not None and self.remaining:
            index, start = current
            back.pop(0)
            unstarted = worker.lost is None and (
                (retired and index == worker.after_fence)
                or (worker.kill_for is not None and worker.kill_for != index)
            )
            if not unstarted:
                killed = worker.kill_for == index
                wall = (worker.kill_time if killed else now) - start
                ended, signum, exit_code = died(
                    status, killed=killed, dumped=worker.dumped == index
                )
                if worker.lost is not None:
                    ended = Status.CRASHED
                stack = None
                if ended is Status.TIMEOUT:
                    stack = stack_text(read_bounded(worker.fds["stack_r"], STACK_LIMIT)[0])
                output, dropped = _after(
                    self._drained(worker), *read_bounded(worker.fds["output_r"], OUTPUT_LIMIT)
                )
                common = common_fields(
                    wall,
                    cpu - worker.cpu_base,
                    rss,
                    output_text(output, dropped),
                    dropped,
                    self.budget,
                    containment(),
                )
                self._finish(
                    index,
                    Outcome(
                        ended,
                        error=worker.lost,
                        stack=stack,
                        signal=signum,
                        exit_code=exit_code,
                        leaked=leaked,
                        **common,
                    ),
                )
            else:
                # Killed for an item that answered at the deadline, or retired after one: the
                # fence kept this one from starting. It goes out again.
                back.insert(0, index)
        elif worker.kill_for is None and not retired:
            self.fruitless_deaths += 1
        self.retry.extendleft(reversed(back))
        self._forget(worker)
        if self.closed:
            return
        if self.fruitless_deaths > 4 * self.size:
            raise PoolError("workers keep dying before they take an item")
        if worker.kill_for is None or self.zygote is None:  # else requested at the kill
            self.to_spawn += 1

    def _forget(self, worker: _Worker) -> None:
        self.workers.pop(worker.wid, None)
        for fd in {*worker.fds.values(), worker.pidfd} - {-1}:
            self._unregister(fd)
            os.close(fd)
        worker.pidfd = -1

    # --- close -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close from any thread: the driving thread stops everything, or this one does."""
        if os.getpid() != self.owner:
            # The processes are the owner's to stop; our copies of the fds die with us. No lock
            # either: a thread that held one at the fork does not exist here.
            self.closing = self.closed = True
            return
        me = threading.get_ident()
        with self.lock:
            if self.closed:
                return
            self.closing = True
            if self.driving and self.driving_thread == me:
                # From inside the loop (GC, or a future's callback, ran this): it stops at
                # its next turn, which is soon, as the loop never blocks on anything else.
                self._poke()
                return
            if self.driving:
                self._poke()
                while self.driving:
                    self._wait()
                if self.closed:
                    return
            self.driving_thread = me
            self.driving = True
        try:
            self._shutdown(self.failure or _CLOSED)
        finally:
            self._leave()

    def _shutdown(self, why: str) -> None:
        """Stop every process, and end every item not answered with an ERROR saying ``why``.

        Only by the thread driving the loop. No future or map() is left waiting for ever.
        A Ctrl-C (or any signal whose handler raises) waits until it is all done: it is
        bounded (the caller kills the zygote's tree itself, waits at most ~1 s for it to exit)
        and cannot be left half done.
        """
        held = hold()
        try:
            with self.lock:
                self.closing = True
            self.slots.close()
            try:
                self._stop()
            finally:
                with self.lock:
                    # Nothing is appended to the inbox, nor the eventfd written, from here on.
                    if self.wake >= 0:
                        self._unregister(self.wake)
                        os.close(self.wake)
                        self.wake = -1
                self._take_inbox()
                self.queue.clear()
                self.retry.clear()
                ended = Outcome(Status.ERROR, error=why, budget=self.budget)
                for index in list(self.sinks):
                    self._finish(index, ended)
        finally:
            release(held)

    def _stop(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.zygote is not None:
                self.zygote.stop()
        finally:
            for worker in list(self.workers.values()):
                self._forget(worker)
            self._forget_zygote()

    def _forget_zygote(self) -> None:
        if self.zygote is not None:
            self._unregister(self.zygote.sock.fileno())
            self._unregister(self.zygote.pidfd)
            self.zygote.close()
            self.zygote = None


class Pool:
    """Warm guarded workers scoring many items, each under its own exact deadline.

    ``fn`` is a module-level function or a ``"pkg.mod:func"`` / ``"path/file.py:func"`` spec,
    imported once in a fresh zygote process that the workers are forked from (a picklable
    callable object of an importable class is pickled there). Any other callable
    (a lambda, a closure, a bound method) is served by workers forked from the caller, with a
    warning when the caller is large. ``async def`` scorers are awaited in the workers.
    ``budget`` and ``memory_mb`` mean what they mean for :func:`~pytest_rewardhang.guard.run`,
    per item; each item's deadline starts when a worker starts it, never while it waits.

    Work comes in three ways, from any number of threads and event loops at once, all sharing
    the same workers: :meth:`map` (a batch, outcomes in order), :meth:`submit` (one item, a
    :class:`concurrent.futures.Future`) and :meth:`asubmit` (one item, awaited without blocking
    the event loop). At most ``max_pending`` submitted items (default ``256 * workers``) wait
    or run at a time: past that :meth:`submit` blocks its thread, up to ``submit_timeout``
    seconds (then :class:`TimeoutError`), and :meth:`asubmit` awaits. :meth:`close` (from any
    thread, or when the pool is collected or the interpreter exits) ends every item not
    answered yet with an ERROR outcome; none is left waiting. A future cancelled before its
    item starts never runs it. A value or exception that is not plain data comes back only
    with ``objects=True``, as for :func:`~pytest_rewardhang.guard.run`.

    ``warmup``, one item (a tuple of positional or a dict of keyword arguments), is scored once
    in the zygote before it forks any worker, so that what the scorer does on its first call
    only (lazy imports, caches) every worker starts with, including each one that replaces a
    worker killed at a deadline. A warm-up that raises, leaves a thread running, or does not
    return while the pool starts, stops the pool from starting with :class:`PoolError`.
    """

    def __init__(
        self,
        fn: Callable[..., Any] | str,
        workers: int = 2,
        budget: float = 2.0,
        memory_mb: float | None = None,
        objects: bool = False,
        max_pending: int | None = None,
        submit_timeout: float | None = None,
        warmup: tuple[Any, ...] | Mapping[str, Any] | None = None,
    ) -> None:
        _check_limits(budget, memory_mb)
        warm = _warmup(warmup)
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, not {workers!r}")
        if max_pending is None:
            max_pending = _PENDING_PER_WORKER * workers
        if not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be a positive int, not {max_pending!r}")
        if submit_timeout is not None and not submit_timeout >= 0:
            raise ValueError(f"submit_timeout must be >= 0 seconds or None, not {submit_timeout!r}")
        self.budget = float(budget)
        self.workers = workers
        self.max_pending = max_pending
        self.submit_timeout = submit_timeout
        # An interrupt lands only while the pool waits for its processes (see ._interrupts);
        # one that comes as the signals are let in again, at the end, finds the finalizer set.
        held = hold()
        try:
            engine = self._engine = _Engine(workers, float(budget), memory_mb, max_pending, warm)
            engine.objects = objects
            try:
                engine.start(fn)
            except BaseException:
                engine.close()
                raise
            self._finalizer = weakref.finalize(self, engine.close)
        finally:
            release(held)

    def map(self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]) -> list[Outcome]:
        """One :class:`Outcome` per item, in order: tuples are positional, dicts keyword."""
        return self._engine.map(items)

    def submit(self, /, *args: Any, **kwargs: Any) -> Future[Outcome]:
        """Score ``fn(*args, **kwargs)`` in a worker; the future's result is its :class:`Outcome`.

        Never raises for the item itself (an unpicklable argument, a hang, a crash: all are
        outcomes). Blocks while ``max_pending`` items are pending; raises :class:`ValueError`
        on a closed pool.
        """
        return self._engine.submit(_call(args, kwargs), self.submit_timeout)

    async def asubmit(self, /, *args: Any, **kwargs: Any) -> Outcome:
        """:meth:`submit`, awaited: the event loop never blocks, not even on a full queue.

        Cancelling the awaiting task cancels the item if no worker has started it.
        """
        import asyncio

        engine = self._engine
        await engine.slots.aacquire()
        try:
            future = engine.submit(_call(args, kwargs), None, acquired=True)
        except BaseException:
            engine.slots.release()
            raise
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Kill every worker and the zygote; leaves no process, zombie or descriptor.

        Items not answered yet end with an ERROR outcome. From any thread; idempotent.
        """
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._engine.closing

    @staticmethod
    def check_warmup(warmup: object) -> tuple[Any, ...] | dict[str, Any] | None:
        """``warmup`` as a pool takes it: a tuple, a dict of keyword arguments, or None; else
        the one-line :class:`ValueError` that ``Pool(warmup=...)`` raises (also for one that
        cannot be pickled)."""
        return _warmup(warmup)

    def __enter__(self) -> Pool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _after(drained: tuple[bytes, int] | None, output: bytes, dropped: int) -> tuple[bytes, int]:
    """An item's ``output`` and ``dropped`` bytes, after what the caller read of it first."""
    if drained is None:
        return output, dropped
    early, early_dropped = drained
    room = OUTPUT_LIMIT - len(early)
    return early + output[:room], early_dropped + dropped + max(len(output) - room, 0)


def _sent_count(worker: _Worker) -> int:
    return len(worker.sent)


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Item:
    """One submitted call as the worker takes it: a tuple, a dict, or both in a list."""
    if not kwargs:
        return args
    if not args:
        return kwargs
    return [args, kwargs]


def _warmup(warmup: object) -> Warmup:
    """The ``warmup`` option as the zygote takes it, or a one-line :class:`ValueError`."""
    if warmup is None:
        return None
    if not isinstance(warmup, tuple | Mapping):
        raise ValueError(
            "warmup must be a tuple of positional arguments or a dict of keyword arguments, "
            f"not {type(warmup).__name__}"
        )
    warm = _arguments(warmup)
    try:  # it travels to the zygote pickled
        pickle.dumps(warm, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - whatever pickling raises, said in one line
        raise ValueError(f"warmup cannot be pickled: {_said(exc)}") from None
    return warm


def _arguments(item: object) -> tuple[Any, ...] | dict[str, Any]:
    if type(item) is tuple or type(item) is dict:  # the usual case, without an ABC check
        return item
    if isinstance(item, Mapping):
        return dict(item)
    if isinstance(item, tuple | list):
        return tuple(item)
    raise TypeError(
        "each item is a tuple of positional arguments or a dict of keyword arguments, "
        f"not {type(item).__name__}"
    )
