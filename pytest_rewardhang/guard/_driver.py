"""Which thread drives the pool's loop, how the others hand it work, and closing from any one.

The loop runs in whichever thread holds the turn (``driving``): ``map()`` drives it in its
caller while no other thread does; the first ``submit()`` starts one daemon driver thread,
which drives it from then on. The others append to ``inbox`` and write the ``wake`` eventfd,
which the loop polls with its pipes; ``map()`` callers then wait on ``turn`` for their batch.
:meth:`Driver.close` works from any thread: the driving one stops everything at its next turn,
or the closing thread takes the turn and does it itself.
"""

from __future__ import annotations

import os
import select
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from ._handle import Watched
from ._interrupts import hold, release
from ._launch import PoolError
from ._ledger import Batch, Cancel, Decoded, Entry, Item, Ledger, Slots, arguments
from ._outcome import Outcome

#: The status of an item the pool could not finish, because it was closed or failed.
CLOSED = "the pool was closed before this item finished"


class Driver:
    """The threads' side of the pool; the loop itself is the subclass's (``_drive``, ``_stop``)."""

    def __init__(self, budget: float, max_pending: int) -> None:
        #: A child forked by the caller inherits this object; only the owner drives the pool.
        self.owner = os.getpid()
        # Only the thread that holds the turn (``driving``) touches the ledger and the loop;
        # the others append to ``inbox`` and write ``wake``, which the loop polls with the rest.
        # Reentrant: a Pool collected in the driver thread, inside a ``with lock``, closes it.
        self.lock = threading.RLock()
        #: Waited on by threads whose batch another thread drives, or for the turn to be free.
        #: The ledger notifies it as a batch ends: a condition, not a method of the driver, as
        #: a reference cycle would keep a closed pool (and its scorer) until the cyclic GC ran.
        self.turn = threading.Condition(self.lock)
        self.driving = False
        self.driving_thread = 0
        #: The driving thread is in (or about to enter) poll(): only then is it woken.
        self.idle = False
        self.driver: threading.Thread | None = None
        self.inbox: deque[Entry] = deque()
        #: Closed to new work (close() was called, or the pool failed); ``closed`` once stopped.
        self.closing = False
        self.closed = False
        self.failure: str | None = None
        self.slots = Slots(max_pending)
        self.ledger = Ledger(budget, self.slots, self.turn)
        #: The descriptors the loop polls, and whose each is.
        self.watched = Watched()
        self.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.watched.register(self.wake, "wake", None, select.POLLIN)

    # --- what the subclass does: the loop ---------------------------------------------------

    def _drive(self, batch: Batch | None) -> None:
        """Run the loop until ``batch`` is done, or (``None``) until the pool closes."""
        raise NotImplementedError

    def _close_processes(self) -> None:
        """Close every process of the pool: kill, reap, remove (once)."""
        raise NotImplementedError

    # --- taking work ------------------------------------------------------------------------

    def map(self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]) -> list[Outcome]:
        """One outcome per item, in order; this thread drives the loop if nobody does."""
        if os.getpid() != self.owner:
            raise PoolError("this Pool belongs to the process that forked this one; make a new one")
        if self.closing:
            raise ValueError("map() on a closed Pool")
        # A tuple of arguments, the usual item, is taken as it is without a call.
        batch = Batch([item if type(item) is tuple else arguments(item) for item in items])
        if not batch.left:
            return []
        me = threading.get_ident()
        self._refuse_the_driver("map", me)
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
                self._shutdown(f"{CLOSED}: {said(exc)} in the thread driving it")
            else:
                # Interrupted while another thread drives: nothing of the pool is half done
                # here, so it goes on for the others; this call's items that have not started
                # never will.
                with self.lock:
                    if not self.closing:
                        self.inbox.append(Cancel(batch))
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
        self._refuse_the_driver("submit", threading.get_ident())
        if not acquired:
            self.slots.acquire(timeout)
        future: Future[Outcome] = Future()
        future.add_done_callback(self._woken_by_cancel)
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

    def _woken_by_cancel(self, future: Future[Outcome]) -> None:
        """A submitted future's done-callback: cancelled, it wakes the loop, which ends its
        item if a worker has started it."""
        if future.cancelled():
            with self.lock:
                if self.driving and self.idle:
                    self._poke()

    def _refuse_the_driver(self, call: str, me: int) -> None:
        """No work from the thread that drives the loop: a future's done-callback runs there,
        and so does a signal handler while ``map()`` drives on the main thread. Waiting there
        on any item (its own or one queued behind) would wait on the loop that must answer it,
        for ever; refused, whatever the call meant to do with it."""
        if self.driving_thread == me:
            raise PoolError(
                f"{call}() from the thread that drives this Pool (a future's done-callback, or "
                "a signal handler while map() runs) would wait on itself: call it from another "
                "thread"
            )

    def hand_in(self, decoded: Decoded) -> None:
        """From another thread: an outcome for the loop to finish its item with."""
        with self.lock:
            self.inbox.append(decoded)
            if self.driving and self.idle:
                self._poke()

    def take_inbox(self) -> None:
        """Into the ledger with what other threads handed in (by the driving thread)."""
        inbox = self.inbox
        take = self.ledger.take
        while inbox:
            take(inbox.popleft())

    # --- the turn ---------------------------------------------------------------------------

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
            self.failure = f"{CLOSED}: the pool failed: {said(exc)}"
            self._shutdown(self.failure)
        finally:
            self._leave()

    def _wait(self) -> None:
        """Wait (with ``lock`` held) for a batch to finish or the turn to be free."""
        self.turn.wait()

    def _leave(self) -> None:
        with self.lock:
            self.driving = False
            self.driving_thread = 0
            self.turn.notify_all()

    # --- close ------------------------------------------------------------------------------

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
            self._shutdown(self.failure or CLOSED)
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
                self._close_processes()
            finally:
                with self.lock:
                    # Nothing is appended to the inbox, nor the eventfd written, from here on.
                    if self.wake >= 0:
                        self.watched.unregister(self.wake)
                        os.close(self.wake)
                        self.wake = -1
                self.take_inbox()
                self.ledger.end_all(why)
        finally:
            release(held)


def said(exc: BaseException) -> str:
    """An exception in one line: its type, and its message if it has one."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
