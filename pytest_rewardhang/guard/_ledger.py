"""The pool's ledger: every item taken and not answered yet, and where its outcome goes.

Items come from ``map()`` calls (a :class:`Batch`, outcomes in order) and from ``submit()`` (a
:class:`~concurrent.futures.Future` each). The ledger numbers them, queues them, takes back
the ones a worker will never start (``retry``), drops the cancelled ones and hands each outcome
to whoever gave the item, once. :class:`Slots` bounds how many submitted items are pending.
Only the thread driving the loop touches a :class:`Ledger`.
"""

from __future__ import annotations

import contextlib
import pickle
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any

from ._outcome import UNPICKLABLE_ITEM, NotStarted, Outcome, Status

if TYPE_CHECKING:
    import asyncio

#: What pickling an item may raise that is the item's, not the pool's: whatever its classes'
#: ``__reduce__`` raise, ``sys.exit()`` too (the thread driving the pool would end with it).
#: A KeyboardInterrupt is the caller's, and goes on.
_REDUCE_RAISES = (Exception, SystemExit, GeneratorExit)
#: A call as the worker takes it: positional arguments, keyword arguments, or both in a list.
Item = tuple[Any, ...] | dict[str, Any] | list[Any]


class Batch:
    """One ``map()`` call's items and where their outcomes go, in order."""

    __slots__ = ("base", "items", "left", "results")

    def __init__(self, items: list[Item]) -> None:
        self.items = items
        #: Index of its first item; the ledger gives it a range when it takes the batch.
        self.base = -1
        self.results: list[Outcome | None] = [None] * len(items)
        #: Items without an outcome yet; read by waiting threads under the driver's lock.
        self.left = len(items)


class Cancel:
    """A waiting ``map()`` was interrupted: its items that have not started never will."""

    __slots__ = ("batch",)

    def __init__(self, batch: Batch) -> None:
        self.batch = batch


class Decoded:
    """An item's outcome decoded off the loop's thread (see _answers.Decoder)."""

    __slots__ = ("index", "outcome")

    def __init__(self, index: int, outcome: Outcome) -> None:
        self.index = index
        self.outcome = outcome


#: What other threads hand the loop: a batch, a cancelled batch, a decoded answer, a submit.
Entry = Batch | Cancel | Decoded | tuple[Item, Future[Outcome]]


class Ledger:
    """Every item taken and not answered yet, whoever gave it: map() calls and submit()."""

    __slots__ = (
        "budget",
        "futures",
        "items",
        "next_index",
        "queue",
        "remaining",
        "retry",
        "sinks",
        "slots",
        "suspected",
        "suspects",
        "turn",
    )

    def __init__(self, budget: float, slots: Slots, turn: threading.Condition) -> None:
        self.budget = budget
        #: Freed as each submitted item ends.
        self.slots = slots
        #: Notified as a batch gets its last outcome, so that its waiting map() sees it.
        self.turn = turn
        self.next_index = 0
        self.items: dict[int, Item] = {}
        #: Where each item's outcome goes: its map() call's batch, or its submit()'s future.
        self.sinks: dict[int, Batch | Future[Outcome]] = {}
        #: How many of the sinks are futures: only then must a batch be checked for cancelled.
        self.futures = 0
        self.queue: deque[int] = deque()
        #: Items a worker had queued and will never start: it died, retires, or was fenced for a
        #: steal. They go out one at a time, one per worker, so two hangs that waited behind a
        #: third never end up behind each other.
        self.retry: deque[int] = deque()
        #: Items that were running when the pool's zygote died: any of them may have killed
        #: it, or the item answered just before. Each runs again, alone in the pool (see
        #: Engine._dispatch_suspect), so that only the one that does it again is charged with
        #: it, and the others get answers of their own.
        self.suspects: deque[int] = deque()
        #: Every item made a suspect and not finished yet: a second time, it is charged.
        self.suspected: set[int] = set()
        self.remaining = 0

    def take(self, entry: Entry) -> None:
        """Take one entry of the inbox."""
        if type(entry) is Batch:
            n = len(entry.items)
            base = entry.base = self.next_index
            self.next_index += n
            indexes = range(base, base + n)
            self.items.update(zip(indexes, entry.items, strict=True))
            self.sinks.update(dict.fromkeys(indexes, entry))
            self.queue.extend(indexes)
            self.remaining += n
        elif type(entry) is Cancel:
            self.cancel(entry.batch)
        elif type(entry) is Decoded:
            self.finish(entry.index, entry.outcome)
        else:
            item, future = entry  # type: ignore[misc]
            index = self.next_index
            self.next_index += 1
            self.items[index] = item
            self.sinks[index] = future
            self.futures += 1
            self.queue.append(index)
            self.remaining += 1

    def cancel(self, batch: Batch) -> None:
        """Drop a batch's items that no worker has started (or been handed)."""
        if batch.base < 0:
            return
        mine = range(batch.base, batch.base + len(batch.items))
        for waiting in (self.queue, self.retry, self.suspects):
            dropped = [i for i in waiting if i in mine]
            if dropped:
                kept = [i for i in waiting if i not in mine]
                waiting.clear()
                waiting.extend(kept)
            for index in dropped:
                self.finish(index, Outcome(Status.ERROR, error="cancelled", budget=self.budget))

    def finish(self, index: int, outcome: Outcome) -> None:
        """Hand an item's outcome to whoever gave the item; only its first outcome counts."""
        sink = self.sinks.pop(index, None)
        if sink is None:
            return
        self.suspected.discard(index)
        del self.items[index]
        self.remaining -= 1
        if type(sink) is Batch:
            sink.results[index - sink.base] = outcome
            sink.left -= 1
            if not sink.left:
                with self.turn:  # under the lock, so a waiting map() cannot miss it
                    self.turn.notify_all()
            return
        self.futures -= 1
        # The future's callbacks run here (asyncio's hand the outcome to its loop).
        with contextlib.suppress(InvalidStateError):  # cancelled before it started
            sink.set_result(outcome)  # type: ignore[union-attr]
        self.slots.release()

    def end_all(self, why: str) -> None:
        """End every item not answered yet with an ERROR saying ``why``."""
        self.queue.clear()
        self.retry.clear()
        self.suspects.clear()
        self.suspected.clear()
        ended = Outcome(Status.ERROR, error=why, budget=self.budget, pool_ended=True)
        for index in list(self.sinks):
            self.finish(index, ended)

    def starts(self, index: int) -> bool:
        """Whether an item may be handed out: False (and accounted for) if it was cancelled.

        A future is never set running: one cancelled after its item is handed out is ended as
        its worker starts it, or at once if it already has (see ``Engine._check_deadlines``),
        where a running future could no longer be cancelled, and its item, handed out in a
        batch long before it starts, ran to its end (its budget, if it hangs) for nobody.
        """
        if not self.cancelled(index):
            return True
        del self.sinks[index], self.items[index]
        self.remaining -= 1
        self.futures -= 1
        self.slots.release()
        return False

    def cancelled(self, index: int) -> bool:
        """Whether the item's future was cancelled (a map() batch's item never is)."""
        sink = self.sinks.get(index)
        return sink is not None and type(sink) is not Batch and sink.cancelled()  # type: ignore[union-attr]

    def pickled(self, batch: list[int]) -> tuple[list[int], bytes] | None:
        """The items of ``batch`` that may start and pickle, and their pickle; None if none.

        Each item left out is accounted for: a cancelled future, or an ERROR outcome.
        """
        if self.futures:
            batch = [i for i in batch if self.starts(i)]
            if not batch:
                return None
        try:
            blob = pickle.dumps([self.items[i] for i in batch], protocol=pickle.HIGHEST_PROTOCOL)
        except _REDUCE_RAISES:  # find the item that will not pickle; send the rest
            batch = [i for i in batch if self._picklable(i)]
            if not batch:
                return None
            blob = pickle.dumps([self.items[i] for i in batch], protocol=pickle.HIGHEST_PROTOCOL)
        return batch, blob

    def _picklable(self, index: int) -> bool:
        try:
            pickle.dumps(self.items[index], protocol=pickle.HIGHEST_PROTOCOL)
        except _REDUCE_RAISES as exc:  # that item's outcome, not the batch's
            text = f"{type(exc).__name__}: {UNPICKLABLE_ITEM}: {exc}"
            unsent = Outcome(
                Status.ERROR, error=text, budget=self.budget, not_started=NotStarted.UNPICKLABLE
            )
            self.finish(index, unsent)
            return False
        return True


class Slots:
    """The bound on submitted items not answered yet, for threads and event loops alike.

    Whoever waits for room waits in one line, threads and coroutines alike, each on a future of
    its own: a freed slot goes to the first in line (``True``), a close to every one
    (``False``); a thread's is a :class:`concurrent.futures.Future`, a coroutine's its loop's,
    resolved through ``call_soon_threadsafe``, so no event loop is ever blocked. A release
    costs one wakeup, not one for every waiter (a request of 5,000 samples, each woken at every
    release and each looking through the list of them all, starved its event loop for
    minutes), and neither kind can keep the other waiting (coroutines served first kept a
    thread waiting for as long as more came). A slot handed to one that gave up meanwhile (a
    timed-out thread, a cancelled coroutine) goes to the next.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.free = size
        self.closed = False
        self.lock = threading.Lock()
        #: Who waits for room, first first: a coroutine's loop and future, or a thread's future
        #: (no loop). One that gave up stays until a release passes it. Nobody waits while a
        #: slot is free.
        self.waiters: deque[tuple[asyncio.AbstractEventLoop | None, Any]] = deque()

    def acquire(self, timeout: float | None) -> None:
        with self.lock:
            if self.closed:
                raise ValueError("submit() on a closed Pool")
            if self.free:
                self.free -= 1
                return
            waiter: Future[bool] = Future()
            self.waiters.append((None, waiter))
        try:
            handed = waiter.result(timeout)
        except TimeoutError:
            if waiter.cancel():  # else a slot came as it timed out: taken
                raise TimeoutError(
                    f"Pool.submit: {self.size} items were still pending after waiting "
                    f"{timeout:g} s for room (max_pending={self.size}, submit_timeout)"
                ) from None
            handed = waiter.result()
        if not handed:
            raise ValueError("submit() on a closed Pool")

    async def aacquire(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        with self.lock:
            if self.closed:
                raise ValueError("asubmit() on a closed Pool")
            if self.free:
                self.free -= 1
                return
            waiter: asyncio.Future[bool] = loop.create_future()
            self.waiters.append((loop, waiter))
        try:
            handed = await waiter
        except BaseException:
            # Cancelled as its slot came: the slot is the next waiter's.
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release()
            raise
        if not handed:
            raise ValueError("asubmit() on a closed Pool")

    def release(self, count: int = 1) -> None:
        with self.lock:
            self.free += count
            while self.free and self.waiters:
                loop, waiter = self.waiters.popleft()
                if _tell(loop, waiter, True, self.release):
                    self.free -= 1

    def close(self) -> None:
        with self.lock:
            self.closed = True
            waiters, self.waiters = self.waiters, deque()
        for loop, waiter in waiters:
            _tell(loop, waiter, False, None)


def _tell(
    loop: asyncio.AbstractEventLoop | None,
    waiter: Any,
    handed: bool,
    give_back: Callable[[], None] | None,
) -> bool:
    """Resolve one waiter with ``handed``; False if it gave up already. A coroutine's is
    resolved in its loop, where it may have been cancelled meanwhile: then its slot goes
    back (``give_back``)."""
    if loop is None:
        with contextlib.suppress(InvalidStateError):  # cancelled: it timed out
            waiter.set_result(handed)
            return True
        return False
    if waiter.done():  # cancelled while it waited
        return False

    def resolve() -> None:
        if not waiter.done():
            waiter.set_result(handed)
        elif handed and give_back is not None:
            give_back()

    try:
        loop.call_soon_threadsafe(resolve)
    except RuntimeError:  # that loop is closed: nobody waits there
        return False
    return True


def arguments(item: object) -> tuple[Any, ...] | dict[str, Any]:
    """An item as the worker takes it: a tuple of positional or a dict of keyword arguments."""
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
