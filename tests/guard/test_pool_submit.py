"""Pool.submit and Pool.asubmit from many threads and coroutines: real processes, real hangs."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.guard import NotStarted, Outcome, Pool, PoolError, Status
from tests.conftest import assert_dead, children
from tests.guard._bounds import BUDGET, LONG

pytestmark = [pytest.mark.timeout(60)]


# --- scorers: module level, so the zygote imports them by name --------------------------------


def score(log: str, item: str, action: str = "ok") -> str:
    """Log one line per call (to count how often each item ran), then act."""
    with open(log, "a") as f:
        f.write(f"{item} {os.getpid()}\n")
    if action == "hang":
        return str(sum(range(10**13)))
    if action == "sleep":
        time.sleep(3600)
    return item.upper()


def busy(seconds: float) -> tuple[int, float, float]:
    """Spend ``seconds`` of CPU; the worker's pid and when it started and ended (monotonic,
    one clock for every process on the machine)."""
    start = time.monotonic()
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return os.getpid(), start, time.monotonic()


def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def add(x: int, y: int = 0, *, z: int = 0) -> int:
    return x + 10 * y + 100 * z


def named_self(self: int) -> int:
    return self


def returns_a_lambda() -> Any:
    return lambda: 1


async def async_score(x: int, hang: bool = False) -> int:
    await asyncio.sleep(0.001)
    if hang:
        await asyncio.sleep(3600)
    return 2 * x


# --- helpers ----------------------------------------------------------------------------------


def calls(log: Path) -> Counter[str]:
    """How often each item ran, from the scorer's log."""
    if not log.exists():
        return Counter()
    return Counter(line.split()[0] for line in log.read_text().splitlines())


def started(log: Path, *items: str) -> None:
    """Wait (bounded) until every one of ``items`` has started."""
    deadline = time.monotonic() + LONG
    while not set(items) <= set(calls(log)):
        assert time.monotonic() < deadline, f"not all of {items} started: {calls(log)}"
        time.sleep(0.01)


def results(futures: list[Future[Outcome]]) -> list[Outcome]:
    return [future.result(timeout=LONG) for future in futures]


# --- submit -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
def test_submit_takes_positional_keyword_and_both() -> None:
    with Pool(add, workers=2, budget=BUDGET) as pool:
        futures = [pool.submit(1), pool.submit(1, 2), pool.submit(x=1, z=3), pool.submit(1, 2, z=3)]
        assert [o.value for o in results(futures)] == [1, 21, 301, 321]
        # map still takes tuples and dicts, beside submit
        assert [o.value for o in pool.map([(1, 1), {"x": 2, "z": 1}])] == [11, 102]
    with Pool(named_self, workers=1, budget=BUDGET) as pool:
        assert pool.submit(self=7).result(timeout=LONG).value == 7  # a scorer keyword "self"


@pytest.mark.usefixtures("no_leaks")
def test_sixteen_threads_with_hangs_every_item_once(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    with Pool(score, workers=2, budget=BUDGET) as pool:
        futures: dict[str, Future[Outcome]] = {}
        lock = threading.Lock()

        def submitter(t: int) -> None:
            for i in range(12):
                name = f"t{t}i{i}"
                # four hangs in all, spread over threads and positions
                action = "hang" if (t % 4 == 0 and i == t // 4 + 3) else "ok"
                future = pool.submit(str(log), name, action)
                with lock:
                    futures[name] = future

        threads = [threading.Thread(target=submitter, args=(t,)) for t in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(LONG)
        assert len(futures) == 16 * 12
        outcomes = {name: future.result(timeout=LONG) for name, future in futures.items()}
    hangs = {name for name, o in outcomes.items() if o.status is Status.TIMEOUT}
    assert hangs == {"t0i3", "t4i4", "t8i5", "t12i6"}
    for name, outcome in outcomes.items():
        if name not in hangs:
            assert outcome.status is Status.OK, outcome.describe()
            assert outcome.value == name.upper()
    ran = calls(log)
    assert set(ran) == set(outcomes), "an item was lost"
    assert max(ran.values()) == 1, f"run twice: {[n for n, c in ran.items() if c > 1]}"


@pytest.mark.usefixtures("no_leaks")
def test_eight_concurrent_calls_use_both_workers() -> None:
    """8 threads, one 0.1 s CPU call each, 2 workers: about 0.4 s, not 0.8."""
    with Pool(busy, workers=2, budget=10.0) as pool:
        pool.map([(0.001,)] * 4)  # both workers warm
        barrier = threading.Barrier(8)
        got: list[Outcome | None] = [None] * 8

        def one(i: int) -> None:
            barrier.wait()
            got[i] = pool.submit(0.1).result(timeout=LONG)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        start = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(LONG)
        elapsed = time.monotonic() - start
    outcomes = [o for o in got if o is not None]
    assert len(outcomes) == 8
    assert all(o.status is Status.OK for o in outcomes)
    spans = [o.value for o in outcomes]
    assert len({pid for pid, _, _ in spans}) == 2, "both workers took items"
    # Serialised, the calls would take at least the sum of their own wall times (however slow
    # a busy machine makes each); on two workers, about half. Load slows both alike.
    assert elapsed < 0.8 * sum(end - begin for _, begin, end in spans)
    overlapping = sum(
        1
        for pid_a, begin_a, end_a in spans
        for pid_b, begin_b, end_b in spans
        if pid_a < pid_b and begin_a < end_b and begin_b < end_a
    )
    assert overlapping >= 3, "the two workers ran items at the same time"


@pytest.mark.usefixtures("no_leaks")
def test_map_and_submit_at_once_from_different_threads(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    with Pool(score, workers=2, budget=BUDGET) as pool:
        mapped: dict[int, list[Outcome]] = {}

        def mapper(m: int) -> None:
            items: list[tuple[str, ...]] = [(str(log), f"m{m}i{i}") for i in range(100)]
            items[50] = (str(log), f"m{m}i50", "hang")
            mapped[m] = pool.map(items)

        mappers = [threading.Thread(target=mapper, args=(m,)) for m in range(2)]
        for thread in mappers:
            thread.start()
        futures = [pool.submit(str(log), f"s{i}") for i in range(100)]
        submitted = results(futures)
        for thread in mappers:
            thread.join(LONG)
        assert [o.value for o in submitted] == [f"S{i}" for i in range(100)]
        for m in range(2):
            statuses = [o.status for o in mapped[m]]
            assert statuses == [Status.OK] * 50 + [Status.TIMEOUT] + [Status.OK] * 49
            assert mapped[m][0].value == f"M{m}I0"
        # map from the main thread, now that a driver thread drives
        assert [o.value for o in pool.map([(str(log), "last")])] == ["LAST"]
    assert max(calls(log).values()) == 1


@pytest.mark.usefixtures("no_leaks")
def test_unpicklable_arguments_and_results_are_error_outcomes() -> None:
    with Pool(add, workers=1, budget=BUDGET) as pool:
        bad = pool.submit(lambda: 1)  # a lambda cannot be pickled
        lock = pool.submit(1, y=threading.Lock())
        good = pool.submit(1, 2)
        outcome = bad.result(timeout=LONG)
        assert outcome.status is Status.ERROR
        assert outcome.error is not None
        assert "could not be pickled" in outcome.error
        assert outcome.not_started is NotStarted.UNPICKLABLE
        assert lock.result(timeout=LONG).status is Status.ERROR
        assert good.result(timeout=LONG).value == 21
        # every item of a map unpicklable: each an ERROR, and map returns
        outs = pool.map([(lambda: 1,), (lambda: 2,)])
        assert [o.status for o in outs] == [Status.ERROR, Status.ERROR]
    with Pool(returns_a_lambda, workers=1, budget=BUDGET) as pool:
        outcome = pool.submit().result(timeout=LONG)
        assert outcome.status is Status.ERROR, outcome.describe()
        assert pool.submit().result(timeout=LONG).status is Status.ERROR  # and it goes on


@pytest.mark.usefixtures("no_leaks")
def test_async_scorers_through_submit_and_asubmit() -> None:
    with Pool(async_score, workers=2, budget=BUDGET) as pool:
        futures = [pool.submit(i) for i in range(10)] + [pool.submit(99, hang=True)]
        outcomes = results(futures)
        assert [o.value for o in outcomes[:10]] == [2 * i for i in range(10)]
        assert outcomes[10].status is Status.TIMEOUT

        async def main() -> list[Outcome]:
            return list(await asyncio.gather(*(pool.asubmit(i) for i in range(10))))

        assert [o.value for o in asyncio.run(main())] == [2 * i for i in range(10)]


# --- asyncio ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("max_pending", [1024, 4])
def test_64_tasks_asubmit_while_the_loop_keeps_ticking(tmp_path: Path, max_pending: int) -> None:
    """The loop never blocks: a ticker keeps its 10 ms beat while 64 tasks wait on the pool,
    four of them on hangs, and (with max_pending=4) most of them for room in the queue."""
    log = tmp_path / "calls"
    with Pool(score, workers=2, budget=BUDGET, max_pending=max_pending) as pool:

        async def main() -> tuple[list[Outcome], float, int]:
            stop = asyncio.Event()
            gaps: list[float] = []

            async def ticker() -> None:
                last = time.monotonic()
                while not stop.is_set():
                    await asyncio.sleep(0.01)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now

            ticking = asyncio.create_task(ticker())
            await asyncio.sleep(0.05)
            tasks = [
                pool.asubmit(str(log), f"a{i}", "hang" if i % 16 == 5 else "ok") for i in range(64)
            ]
            outcomes = await asyncio.gather(*tasks)
            stop.set()
            await ticking
            return list(outcomes), max(gaps), len(gaps)

        outcomes, worst_gap, ticks = asyncio.run(main())
    statuses = [o.status for o in outcomes]
    assert statuses.count(Status.TIMEOUT) == 4
    assert statuses.count(Status.OK) == 60
    assert [o.value for o in outcomes[:5]] == [f"A{i}" for i in range(5)]
    # Four hangs on two workers hold the pool for about 1 s; a blocked loop would not tick
    # for at least one budget. A generous bound for a busy machine, well under the budget.
    assert ticks >= 20
    assert worst_gap < 0.4
    assert max(calls(log).values()) == 1


def plus_one(x: int) -> int:
    return x + 1


@pytest.mark.usefixtures("no_leaks")
def test_thousands_of_tasks_waiting_for_room_each_cost_one_wakeup(tmp_path: Path) -> None:
    # Every freed slot woke every waiting task, and each looked through the list of them all:
    # a reward server's request of 5,000 samples starved its event loop for minutes (2,000
    # took 15 s), past its own deadline. Now a slot goes to the first in line.
    with Pool(plus_one, workers=2, budget=LONG, max_pending=8) as pool:

        async def main() -> tuple[list[Outcome], float, float]:
            async def one(i: int) -> Outcome:
                if i % 3 == 0:  # some give up their place in line: no slot is lost with them
                    with contextlib.suppress(TimeoutError):
                        return await asyncio.wait_for(pool.asubmit(i), 0.001)
                    return Outcome(Status.ERROR, error="gave up", budget=LONG)
                return await pool.asubmit(i)

            last, worst = time.monotonic(), 0.0

            async def ticker() -> None:
                nonlocal last, worst
                while True:
                    await asyncio.sleep(0.01)
                    worst, last = max(worst, time.monotonic() - last), time.monotonic()

            ticking = asyncio.create_task(ticker())
            start = time.monotonic()
            outcomes = await asyncio.gather(*(one(i) for i in range(6000)))
            took = time.monotonic() - start
            ticking.cancel()
            return list(outcomes), took, worst

        outcomes, took, worst_gap = asyncio.run(main())
        (after,) = pool.map([(1,)])  # every slot came back: the pool still takes work
    assert took < LONG, f"6,000 tasks took {took:.1f} s"
    assert worst_gap < LONG / 3, f"the event loop stalled {worst_gap:.1f} s"
    assert all(o.value == i + 1 for i, o in enumerate(outcomes) if i % 3), "a wrong answer"
    assert after.value == 2
    slots = pool._engine.slots
    assert (slots.free, len(slots.waiters)) == (8, 0)


@pytest.mark.usefixtures("no_leaks")
def test_cancelled_items_waiting_to_go_out_again_hold_up_no_other(tmp_path: Path) -> None:
    # Two hangs run; the items queued behind them are taken back for the idle replacement
    # workers, two more hangs among them. Cancelled there, a hang was dropped as it went out
    # again, but its worker still counted it as its retry: no worker took another, and the
    # items behind waited for ever, their slots with them.
    log = tmp_path / "calls"
    with Pool(score, workers=2, budget=LONG, max_pending=64) as pool:
        before = [pool.submit(str(log), f"a{i}") for i in range(10)]
        hangs = [pool.submit(str(log), f"h{i}", "hang") for i in range(4)]
        after = [pool.submit(str(log), f"b{i}") for i in range(20)]
        retry = pool._engine.ledger.retry  # the state under test: taken back, to go out again
        deadline = time.monotonic() + LONG
        while not retry and time.monotonic() < deadline:
            time.sleep(0.01)
        assert retry, "nothing was taken back: the case under test never came about"
        for hang in hangs:
            hang.cancel()
        outs = [future.result(timeout=LONG / 3) for future in before + after]
    assert [o.value for o in outs] == [f"A{i}" for i in range(10)] + [f"B{i}" for i in range(20)]
    assert sum(calls(log)[f"h{i}"] for i in range(4)) <= 2  # the two that ran, ended


@pytest.mark.usefixtures("no_leaks")
def test_threads_waiting_for_room_are_served_while_coroutines_keep_coming() -> None:
    # Coroutines were handed the freed slots first: a thread in submit() waited until no
    # coroutine was left waiting, for as long as they kept coming.
    with Pool(nap, workers=2, budget=LONG, max_pending=4) as pool:
        supplying = threading.Event()
        supplying.set()
        served_while_supplied: list[bool] = []

        async def supply() -> None:
            async def one() -> None:
                await pool.asubmit(0.02)

            until = time.monotonic() + LONG
            tasks: set[asyncio.Task[None]] = set()
            while time.monotonic() < until and len(served_while_supplied) < 3:
                while len(tasks) < 50:  # always some waiting for room
                    task = asyncio.ensure_future(one())
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                await asyncio.sleep(0.005)
            supplying.clear()
            await asyncio.gather(*tasks)

        def thread() -> None:
            future = pool.submit(0.02)  # waits for room in line
            served_while_supplied.append(supplying.is_set())
            future.result(timeout=LONG)

        coroutines = threading.Thread(target=asyncio.run, args=(supply(),))
        coroutines.start()
        time.sleep(0.5)
        threads = [threading.Thread(target=thread) for _ in range(3)]
        for t in threads:
            t.start()
        for t in (*threads, coroutines):
            t.join(LONG * 2)
    assert served_while_supplied == [True, True, True]


@pytest.mark.usefixtures("no_leaks")
def test_cancelling_a_task_ends_its_item_whether_started_or_not(tmp_path: Path) -> None:
    # Submitted items go out in batches, and each future was set running as its batch went
    # out, long before its item started: a cancel then came too late, and every cancelled hang
    # held its worker to its deadline, the items behind it waiting (20 hangs: 9 s at a 1 s
    # budget). The item that runs is ended too: nobody waits for what it would say.
    log = tmp_path / "calls"
    with Pool(score, workers=1, budget=LONG) as pool:

        async def main() -> tuple[Outcome, float]:
            first = asyncio.ensure_future(pool.asubmit(str(log), "first", "sleep"))
            later = [
                asyncio.ensure_future(pool.asubmit(str(log), f"c{i}", "hang")) for i in range(5)
            ]
            await asyncio.sleep(0.2)
            # The queued ones first: cancelled after the running one, one of them could start in
            # its worker's replacement before its own cancel came (a busy machine did that).
            for task in (*later, first):
                task.cancel()
            await asyncio.gather(first, *later, return_exceptions=True)
            start = time.monotonic()
            after = await pool.asubmit(str(log), "after")
            return after, time.monotonic() - start

        after, took = asyncio.run(main())
    assert after.value == "AFTER", after.describe()
    assert took < LONG / 3, "the next item waited for a cancelled one's deadline"
    ran = calls(log)
    assert (ran["first"], ran["after"]) == (1, 1)
    assert sum(ran[f"c{i}"] for i in range(5)) == 0


# --- the bounded queue ------------------------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
def test_a_full_queue_blocks_submit_then_lets_it_through() -> None:
    with Pool(nap, workers=1, budget=5.0, max_pending=2) as pool:
        first, second = pool.submit(1.0), pool.submit(0.0)
        third: list[Future[Outcome]] = []
        submitted = threading.Event()

        def submitter() -> None:
            third.append(pool.submit(0.0))
            submitted.set()

        thread = threading.Thread(target=submitter)
        thread.start()
        # The first item sleeps 1 s: until then both slots are taken.
        assert not submitted.wait(0.3), "submit did not wait for room"
        assert first.result(timeout=LONG).status is Status.OK
        assert submitted.wait(LONG)
        thread.join(LONG)
        assert second.result(timeout=LONG).status is Status.OK
        assert third[0].result(timeout=LONG).status is Status.OK


@pytest.mark.usefixtures("no_leaks")
def test_submit_timeout_on_a_full_queue_says_so() -> None:
    with Pool(nap, workers=1, budget=5.0, max_pending=1, submit_timeout=0.1) as pool:
        first = pool.submit(1.0)
        with pytest.raises(TimeoutError, match="max_pending=1"):
            pool.submit(0.0)
        assert first.result(timeout=LONG).status is Status.OK
        assert pool.submit(0.0).result(timeout=LONG).status is Status.OK


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"max_pending": 0}, "max_pending must be a positive int"),
        ({"max_pending": 1.5}, "max_pending must be a positive int"),
        ({"submit_timeout": -1}, "submit_timeout must be >= 0"),
        ({"workers": True}, "workers must be a positive int, not True"),
        ({"workers": 0}, "workers must be a positive int, not 0"),
        ({"max_pending": True}, "max_pending must be a positive int, not True"),
        ({"submit_timeout": math.nan}, "submit_timeout must be >= 0 seconds or None, not nan"),
        ({"submit_timeout": math.inf}, "submit_timeout must be >= 0 seconds or None, not inf"),
        ({"submit_timeout": 1e12}, "submit_timeout must be at most 1e[+]09 seconds"),
    ],
)
def test_bad_queue_options_are_one_clear_line(options: dict[str, Any], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        Pool(add, **options)


# --- closing ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_leaks")
def test_items_start_in_order_on_the_emptiest_worker(tmp_path: Path) -> None:
    # Worker A runs a hang; an item queued behind it would wait for A's deadline. The next
    # item goes to idle B, and the one after it waits behind the hang: items start in the
    # order they came, not a later one first because the first worker up was handed two.
    log = tmp_path / "calls"
    with Pool(score, workers=2, budget=2.0) as pool:
        pool.map([(str(log), f"warm{i}") for i in range(4)])  # both workers up
        log.unlink()
        futures = [pool.submit(str(log), "h0", "sleep")]
        started(log, "h0")
        futures += [pool.submit(str(log), "h1", "sleep"), pool.submit(str(log), "w0")]
        outcomes = results(futures)
    assert [o.status for o in outcomes] == [Status.TIMEOUT, Status.TIMEOUT, Status.OK]
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["h0", "h1", "w0"]


@pytest.mark.usefixtures("no_leaks")
def test_close_from_another_thread_ends_every_pending_future(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    pool = Pool(score, workers=2, budget=20.0, max_pending=8)
    launched = children()
    futures = [pool.submit(str(log), f"h{i}", "sleep") for i in range(2)]
    futures += [pool.submit(str(log), f"w{i}") for i in range(6)]  # the queue is full now
    blocked: list[BaseException] = []
    mapped: list[list[Outcome]] = []

    def waits_for_room() -> None:
        try:
            pool.submit(str(log), "late")
        except ValueError as exc:
            blocked.append(exc)

    def maps() -> None:
        mapped.append(pool.map([(str(log), f"m{i}") for i in range(3)]))

    threads = [threading.Thread(target=waits_for_room), threading.Thread(target=maps)]
    for thread in threads:
        thread.start()
    started(log, "h0", "h1")  # the rest wait behind them: nothing frees a slot
    time.sleep(0.5)  # both threads are blocked in the pool by now (if not, see the ends)
    closer = threading.Thread(target=pool.close)
    start = time.monotonic()
    closer.start()
    closer.join(LONG)
    outcomes = results(futures)
    for thread in threads:
        thread.join(LONG)
    assert time.monotonic() - start < 10, "close() waited for the sleeping items"
    assert pool.closed
    for outcome in outcomes[:2]:
        assert outcome.status is Status.ERROR
        assert outcome.error is not None
        assert "closed" in outcome.error
    assert all(o.status in (Status.OK, Status.ERROR) for o in outcomes)
    assert len(blocked) == 1
    assert "closed" in str(blocked[0])
    assert len(mapped) == 1
    assert len(mapped[0]) == 3
    assert all(o.status in (Status.OK, Status.ERROR) for o in mapped[0])
    assert_dead(list(launched))
    with pytest.raises(ValueError, match="closed"):
        pool.submit(str(log), "x")

    async def after() -> None:
        await pool.asubmit(str(log), "x")

    with pytest.raises(ValueError, match="closed"):
        asyncio.run(after())
    pool.close()  # idempotent


@pytest.mark.usefixtures("no_leaks")
def test_garbage_collection_closes_a_pool_with_its_driver_thread() -> None:
    pool = Pool(nap, workers=2, budget=BUDGET)
    assert pool.submit(0.0).result(timeout=LONG).status is Status.OK
    driver = pool._engine.driver
    assert driver is not None
    assert driver.daemon
    processes = list(children())
    del pool
    gc.collect()
    driver.join(LONG)
    assert not driver.is_alive()
    assert_dead(processes)


def test_interpreter_exit_with_pending_futures_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "naps.py").write_text("import time\n\ndef nap(s):\n    time.sleep(s)\n")
    script = tmp_path / "exits.py"
    script.write_text(
        "from naps import nap\n"
        "from pytest_rewardhang.guard import Pool\n"
        "pool = Pool(nap, workers=2, budget=60.0)\n"
        "futures = [pool.submit(3600.0) for _ in range(5)]\n"
        "print(pool._engine.zygote.pid, *[w.pid for w in pool._engine.workers.values()])\n"
        # exits here, futures pending: the driver thread is a daemon; the pool closes at exit
    )
    root = str(Path(__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": f"{root}:{tmp_path}"}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=LONG, env=env
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 20
    assert_dead([int(p) for p in done.stdout.split()])


# --- interrupts -------------------------------------------------------------------------------


@pytest.mark.slow  # interrupts while others wait out their deadlines: the slow tier
@pytest.mark.usefixtures("no_leaks")
def test_ctrl_c_while_waiting_on_a_future_leaves_the_pool_to_the_others(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    main = threading.main_thread().ident
    assert main is not None
    done = threading.Event()

    def interrupt() -> None:
        while not done.wait(0.3):
            signal.pthread_kill(main, signal.SIGINT)

    def on_sigint(signum: int, frame: object) -> None:
        if not done.is_set():
            raise KeyboardInterrupt

    # Long enough for the 0.3 s interrupts to come while items hang; every hung item after
    # them costs the test its budget.
    with Pool(score, workers=2, budget=1.0) as pool:
        others = [pool.submit(str(log), f"o{i}") for i in range(20)]
        hung = pool.submit(str(log), "hung", "sleep")
        previous = signal.signal(signal.SIGINT, on_sigint)
        timer = threading.Thread(target=interrupt)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                hung.result(timeout=LONG)
            # and a map waiting while the driver thread drives: interrupted, not closed
            with pytest.raises(KeyboardInterrupt):
                pool.map([(str(log), "m0", "sleep"), (str(log), "m1", "sleep")] * 4)
        finally:
            done.set()
            timer.join()
            signal.signal(signal.SIGINT, previous)
        assert not pool.closed
        assert hung.result(timeout=LONG).status is Status.TIMEOUT
        assert all(o.status is Status.OK for o in results(others))
        assert pool.submit(str(log), "after").result(timeout=LONG).value == "AFTER"
        assert [o.value for o in pool.map([(str(log), "mapped")])] == ["MAPPED"]


def test_a_forked_child_cannot_submit_to_its_parents_pool() -> None:
    with Pool(add, workers=1, budget=BUDGET) as pool:
        assert pool.submit(1).result(timeout=LONG).value == 1
        child = os.fork()
        if child == 0:  # pragma: no cover - the child
            code = 1
            try:
                pool.submit(1)
            except PoolError:
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.WIFEXITED(status)
        assert os.WEXITSTATUS(status) == 0
        assert pool.submit(2).result(timeout=LONG).value == 2


# --- reentry ----------------------------------------------------------------------------------


@pytest.mark.timeout(60, method="thread")  # a frozen pool holds the loop: no signal would land
@pytest.mark.usefixtures("no_leaks")
def test_work_from_a_done_callback_is_refused_and_the_pool_goes_on() -> None:
    # A done-callback runs in the thread that drives the pool: a submit().result() or a map()
    # there waited on the loop that had to answer it, and the pool froze.
    refused: list[BaseException] = []

    def reenter(done: Future[Outcome]) -> None:
        for call in (lambda: pool.submit(2).result(timeout=LONG), lambda: pool.map([(3,)])):
            try:
                call()
            except PoolError as exc:
                refused.append(exc)

    with Pool(add, workers=1, budget=BUDGET) as pool:
        first = pool.submit(1)
        first.add_done_callback(reenter)
        assert first.result(timeout=LONG).value == 1
        assert pool.submit(4).result(timeout=LONG).value == 4  # the pool still answers
        assert [o.value for o in pool.map([(5,)])] == [5]
    assert [str(exc) for exc in refused] == [
        f"{call}() from the thread that drives this Pool (a future's done-callback, or a signal "
        "handler while map() runs) would wait on itself: call it from another thread"
        for call in ("submit", "map")
    ]


@pytest.mark.timeout(60, method="thread")
@pytest.mark.usefixtures("no_leaks")
def test_work_from_a_signal_handler_during_map_is_refused() -> None:
    # map() drives the pool on this thread: a handler that lands in it and scores there would
    # wait on itself. Refused, the handler's error ends that map() as any handler's error does.
    refused: list[BaseException] = []

    def handler(signum: int, frame: object) -> None:
        try:
            pool.submit(2).result(timeout=LONG)
        except PoolError as exc:
            refused.append(exc)
            raise

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        with Pool(nap, workers=1, budget=5.0) as pool:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(PoolError, match=r"^submit\(\) from the thread that drives"):
                pool.map([(1.0,)])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(refused) == 1
