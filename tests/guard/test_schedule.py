"""The pool's scheduling policy, in-process: workers are plain objects, no process, no sleep.

As pytest-xdist tests its LoadScheduling: the policy is handed workers in given states and
says who gets what, how long results may gather, and whose queued items are taken back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pytest_rewardhang.guard._schedule import (
    BATCH_S,
    GATHER_S,
    MAX_BATCH,
    STEAL_AFTER_S,
    Schedule,
)


@dataclass
class Fake:
    """A worker as the policy sees it."""

    name: str
    serving: bool = True
    held: int = 0
    retrying: bool = False
    writing: bool = False
    #: When its current item started, if it runs one.
    started: float | None = None
    items: list[int] = field(default_factory=list)

    def current(self) -> tuple[int, float] | None:
        return None if self.started is None else (0, self.started)


def timed(size: int, mean: float | None) -> Schedule:
    schedule = Schedule(size)
    schedule.mean_item_s = mean
    return schedule


def names(assignments: list[tuple[Fake, int]]) -> list[tuple[str, int]]:
    return [(worker.name, take) for worker, take in assignments]


# --- the mean item ----------------------------------------------------------------------------


def test_the_first_answer_is_the_mean_and_later_ones_move_it_a_fifth_of_the_way() -> None:
    schedule = Schedule(2)
    assert schedule.mean_item_s is None
    schedule.timed(1.0)
    assert schedule.mean_item_s == 1.0
    schedule.timed(2.0)
    assert schedule.mean_item_s == pytest.approx(1.2)


# --- handing out ------------------------------------------------------------------------------


def test_only_serving_workers_take_work_in_the_pools_order() -> None:
    a, b, c = Fake("a"), Fake("b", serving=False), Fake("c")
    assert Schedule.serving([a, b, c]) == [a, c]


def test_until_an_item_is_timed_each_worker_gets_one_item_and_holds_two() -> None:
    a, b = Fake("a"), Fake("b")
    per_batch, assignments = timed(2, None).batches([a, b], queued=10)
    assert per_batch == 1
    assert names(assignments) == [("a", 1), ("b", 1)]
    # One item already queued behind the running one: room for one more (two in flight).
    a.held, b.held = 1, 2
    assert names(timed(2, None).batches([a, b], queued=10)[1]) == [("a", 1)]


def test_a_batch_carries_about_batch_s_of_work() -> None:
    mean = BATCH_S / 10
    per_batch, assignments = timed(2, mean).batches([Fake("a"), Fake("b")], queued=1000)
    assert per_batch == 10
    assert names(assignments) == [("a", 10), ("b", 10)]


def test_a_batch_is_at_most_max_batch_items() -> None:
    per_batch, _ = timed(1, BATCH_S / (10 * MAX_BATCH)).batches([Fake("a")], queued=10**6)
    assert per_batch == MAX_BATCH


def test_the_last_items_spread_over_every_worker() -> None:
    workers = [Fake("a"), Fake("b"), Fake("c")]
    per_batch, assignments = timed(3, BATCH_S / 100).batches(workers, queued=7)
    assert per_batch == 2  # 7 // 3, not 100
    assert names(assignments) == [("a", 2), ("b", 2), ("c", 2)]


def test_the_queue_runs_out_before_the_workers_do() -> None:
    workers = [Fake("a"), Fake("b"), Fake("c")]
    assert names(timed(3, None).batches(workers, queued=2)[1]) == [("a", 1), ("b", 1)]
    assert timed(3, None).batches(workers, queued=0)[1] == []


def test_the_emptiest_worker_is_served_first() -> None:
    busy, empty = Fake("busy", held=1), Fake("empty")
    assert names(timed(2, None).batches([busy, empty], queued=1)[1]) == [("empty", 1)]


def test_while_a_worker_starts_the_first_ones_up_hold_one_batch_only() -> None:
    # Of two workers only one serves: it gets one item, not the two meant for both.
    up = Fake("up")
    assert names(timed(2, None).batches([up], queued=10)[1]) == [("up", 1)]
    up.held = 1
    assert timed(2, None).batches([up], queued=10)[1] == []


def test_retried_items_go_one_each_to_workers_that_hold_none() -> None:
    a, b, c = Fake("a", retrying=True), Fake("b"), Fake("c")
    assert Schedule.retries([a, b, c], retries=5) == [b, c]
    assert Schedule.retries([a, b, c], retries=1) == [b]
    assert Schedule.retries([a, b, c], retries=0) == []


def test_results_gather_only_while_every_worker_has_a_batch_queued() -> None:
    mean = 0.0001
    full = [Fake("a", held=20), Fake("b", held=30)]
    assert timed(2, mean).gather(full, per_batch=10) == min(GATHER_S, 19 * mean / 2)
    # Untimed (one item a batch), a worker still starting, a pipe still full: no gathering.
    assert timed(2, mean).gather(full, per_batch=1) == 0.0
    assert timed(2, mean).gather(full[:1], per_batch=10) == 0.0
    writing = [Fake("a", held=20, writing=True), Fake("b", held=30)]
    assert timed(2, mean).gather(writing, per_batch=10) == 0.0
    # Never longer than GATHER_S, however much is queued.
    assert timed(2, 1.0).gather(full, per_batch=10) == GATHER_S


# --- taking back ------------------------------------------------------------------------------


def test_a_worker_is_idle_only_when_nothing_is_left_to_hand_out() -> None:
    dry, busy = Fake("dry"), Fake("busy", held=3, started=0.0)
    assert Schedule.idle([dry, busy], queued=0, retries=0)
    assert not Schedule.idle([dry, busy], queued=1, retries=0)
    assert not Schedule.idle([dry, busy], queued=0, retries=1)
    assert not Schedule.idle([busy], queued=0, retries=0)
    # A worker that runs dry because it drains, retires or is being killed takes nothing.
    assert not Schedule.idle([Fake("draining", serving=False), busy], queued=0, retries=0)


def test_only_items_queued_behind_a_running_one_of_a_serving_worker_are_held_back() -> None:
    assert Schedule.holds_back(Fake("a", held=2, started=0.0))
    assert not Schedule.holds_back(Fake("a", held=1, started=0.0))  # only the one it runs
    assert not Schedule.holds_back(Fake("a", held=2))  # none started yet: still in the pipe
    assert not Schedule.holds_back(Fake("a", held=2, started=0.0, serving=False))


def test_steal_after_is_the_floor_or_ten_mean_items() -> None:
    assert timed(2, None).steal_after == STEAL_AFTER_S
    assert timed(2, STEAL_AFTER_S / 100).steal_after == STEAL_AFTER_S
    assert timed(2, 1.0).steal_after == 10.0


def test_items_are_taken_back_only_from_behind_an_item_that_ran_steal_after() -> None:
    schedule = timed(3, None)
    young = Fake("young", held=3, started=1.0)
    old = Fake("old", held=3, started=0.0)
    lone = Fake("lone", held=1, started=0.0)  # nothing behind it
    workers = [young, lone, old]
    assert list(schedule.steal_from(workers, now=STEAL_AFTER_S)) == [old]
    assert list(schedule.steal_from(workers, now=0.0)) == []
    # In the pool's order, each one past its time.
    assert list(schedule.steal_from(workers, now=1.0 + STEAL_AFTER_S)) == [young, old]
