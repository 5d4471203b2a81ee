"""Async scorers under the guard: awaited in the child, under the same deadline.

verl and TRL accept ``async def`` reward functions, slime and verifiers require them; a
coroutine must never have to cross a pipe, and a hang inside one (in C, or a sync call
blocking its loop) is killed like any other.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pytest_rewardhang.guard import Pool, Status, guarded, run
from tests.guard._bounds import LONG


async def double(x: int) -> int:
    await asyncio.sleep(0.01)
    return 2 * x


async def c_hang(x: int) -> int:
    return sum(range(10**13))  # one C call: no await point, no signal gets in


async def blocks_its_loop(x: int) -> int:
    time.sleep(3600)  # a sync call on the loop: nothing else on it runs either
    return x


class AsyncCallable:
    async def __call__(self, x: int) -> int:
        return x + 1


async def leaves_a_task(x: int) -> int:
    async def forever() -> None:
        await asyncio.sleep(3600)

    asyncio.get_running_loop().create_task(forever())
    return x


def test_async_function_value_comes_back() -> None:
    out = run(double, (21,), budget=LONG)
    assert out.status is Status.OK, out.describe()
    assert out.value == 42


def test_async_call_method_value_comes_back() -> None:
    out = run(AsyncCallable(), (1,), budget=LONG)
    assert out.status is Status.OK, out.describe()
    assert out.value == 2


def test_c_hang_inside_a_coroutine_is_killed() -> None:
    start = time.monotonic()
    out = run(c_hang, (1,), budget=0.3)
    assert out.status is Status.TIMEOUT
    assert time.monotonic() - start < LONG
    assert out.stack is not None
    assert "c_hang" in out.stack


def test_sync_call_blocking_the_loop_is_a_timeout() -> None:
    out = run(blocks_its_loop, (1,), budget=0.3)
    assert out.status is Status.TIMEOUT


def test_a_task_left_behind_does_not_hold_the_call() -> None:
    out = run(leaves_a_task, (5,), budget=LONG)
    assert out.status is Status.OK, out.describe()
    assert out.value == 5


def test_pool_awaits_async_scorers_and_kills_their_hangs() -> None:
    with Pool(double, 2, budget=LONG) as pool:
        assert [o.value for o in pool.map([(i,) for i in range(6)])] == [0, 2, 4, 6, 8, 10]
    with Pool(c_hang, 2, budget=0.3) as pool:
        assert {o.status for o in pool.map([(1,), (2,), (3,)])} == {Status.TIMEOUT}


def test_guarded_async_scorer_stays_awaitable_and_frees_the_loop() -> None:
    scorer: Any = guarded(0.3, default=-1.0)(c_hang)

    async def main() -> tuple[object, int]:
        task = asyncio.ensure_future(scorer(1))
        ticks = 0
        while not task.done():
            await asyncio.sleep(0.01)
            ticks += 1
        return task.result(), ticks

    value, ticks = asyncio.run(asyncio.wait_for(main(), LONG))
    assert value == -1.0
    assert ticks > 0  # the loop ran while the guarded call was out
