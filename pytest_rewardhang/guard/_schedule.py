"""Who gets which items: the pool's scheduling policy, a pure object.

It looks at the workers (what each holds, whether it takes work, since when its item runs)
and says which get items and how many, how long results may gather, and whose queued items an
idle worker takes back; the loop does the sending, the fencing and the taking. No I/O and no
clock in here (the time comes in as ``now``), so that it is tested in-process, without a
process or a hang.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

#: Roughly how much work one task frame carries: big enough to amortise the pipe round trip,
#: small enough that the last items spread over all workers. What waits behind a hang does not
#: wait for its deadline: an idle worker takes it back after STEAL_AFTER_S. Each wake of the
#: caller costs ~100 µs of its CPU (the loop, the sends, the sleep), taken from the workers on
#: two cores: at 2 ms a batch that was half the caller's share of a 45 µs item; at 10 ms and
#: 5 ms of gathering, a ~1 ms item still cost the caller a wake every one or two items (10% of
#: the item's time, on a loaded VM).
BATCH_S = 0.03
#: Longest the caller lets results gather while every worker has a batch queued (bounded by
#: the next deadline, and by half the time before a worker runs dry): how late a future's
#: result may be handed over while the pool is saturated.
GATHER_S = 0.01
MAX_BATCH = 256
#: When a worker has run dry while another's item has run this long (and ten times the mean
#: item) with more items queued behind it, those items are taken back for the idle one: else
#: a second hang waits a whole budget behind the first while a worker idles.
STEAL_AFTER_S = 0.05


class Seen(Protocol):
    """A worker as the policy sees it (the loop's :class:`~._handle.Worker` is one)."""

    @property
    def serving(self) -> bool:
        """Whether it takes work: started, and not draining, retiring or being killed."""

    @property
    def held(self) -> int:
        """Items handed to it and not answered yet."""

    @property
    def retrying(self) -> bool:
        """Whether it holds an item handed out again (at most one at a time)."""

    @property
    def writing(self) -> bool:
        """Whether part of what it was handed is still waiting to go into its pipe."""

    def current(self) -> tuple[int, float] | None:
        """The item it runs and when that started, if it runs one."""


W = TypeVar("W", bound=Seen)


class Schedule:
    """The pool's policy over ``size`` workers; it keeps the mean item's time, nothing else."""

    __slots__ = ("mean_item_s", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        #: A moving mean of the items' wall times; None until an item is answered.
        self.mean_item_s: float | None = None

    def timed(self, wall: float) -> None:
        """An item was answered after ``wall`` seconds (finite and not negative: the caller
        checks a worker's word before it comes here)."""
        mean = self.mean_item_s
        self.mean_item_s = wall if mean is None else 0.8 * mean + 0.2 * wall

    # --- handing out ------------------------------------------------------------------------

    @staticmethod
    def serving(workers: Iterable[W]) -> list[W]:
        """The workers that take work, in the pool's order."""
        return [w for w in workers if w.serving]

    @staticmethod
    def retries(serving: Sequence[W], retries: int) -> list[W]:
        """Who gets one of ``retries`` items handed out again: one each, to those without one,
        so that two hangs that waited behind a third never end up behind each other."""
        return [w for w in serving if not w.retrying][:retries]

    def batches(self, serving: Sequence[W], queued: int) -> tuple[int, list[tuple[W, int]]]:
        """How many of the ``queued`` items each serving worker gets, in the order to send
        them, and the batch size it was worked out with."""
        per_batch = 1  # until an item has been timed
        mean = self.mean_item_s
        if mean is not None:
            # Compared before dividing: a mean of 5e-324 (three forged times) overflowed.
            per_batch = MAX_BATCH if mean * MAX_BATCH <= BATCH_S else max(1, int(BATCH_S / mean))
        # The last items spread over all workers instead of queueing behind one.
        per_batch = max(1, min(per_batch, queued // self.size))
        # Up to two batches in flight (two items for slow ones), so a worker finds its next item
        # waiting instead of idling for a round trip through the caller; what waits behind a
        # hang goes back to the queue at the kill, its deadline not started. Not while a worker
        # is starting, though: the first one up would take the items meant for the others.
        in_flight = max(per_batch, 2) if len(serving) == self.size else per_batch
        # The emptiest first: a worker that runs dry gets the next item before another
        # queues it behind the one it runs (which may be a hang).
        assignments = []
        for worker in sorted(serving, key=_held):
            if queued and worker.held < in_flight:
                take = min(per_batch, queued)
                queued -= take
                assignments.append((worker, take))
        return per_batch, assignments

    def gather(self, serving: Sequence[Seen], per_batch: int) -> float:
        """Once batches are sent: how long results may gather before any worker runs dry."""
        if per_batch == 1 or len(serving) < self.size or any(w.writing for w in serving):
            return 0.0
        assert self.mean_item_s is not None
        queued = min(w.held for w in serving) - 1
        return min(GATHER_S, queued * self.mean_item_s / 2)

    # --- taking back ------------------------------------------------------------------------

    @property
    def steal_after(self) -> float:
        """How long an item runs before an idle worker takes back what waits behind it."""
        return max(STEAL_AFTER_S, 10 * (self.mean_item_s or 0.0))

    @staticmethod
    def idle(workers: Iterable[Seen], queued: int, retries: int) -> bool:
        """Whether a worker has run dry with nothing left to hand it but what others hold."""
        return not queued and not retries and any(w.serving and not w.held for w in workers)

    @staticmethod
    def holds_back(worker: Seen) -> bool:
        """Whether items wait in ``worker`` behind the one it runs, which could be taken back."""
        return worker.held > 1 and worker.current() is not None and worker.serving

    def steal_from(self, workers: Iterable[W], now: float) -> Iterator[W]:
        """The workers whose queued items an idle worker may take back at ``now``, in order:
        each runs an item that started ``steal_after`` ago or more, with more queued behind."""
        after = self.steal_after
        for worker in workers:
            current = worker.current()
            if current is not None and self.holds_back(worker) and now >= current[1] + after:
                yield worker


def _held(worker: Seen) -> int:
    return worker.held
