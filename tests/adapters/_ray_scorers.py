"""The scorer and the actor classes that tests/adapters/test_ray.py runs inside Ray.

Nothing here imports Ray at module level: the test applies ``ray.remote`` to the plain classes,
so this module imports (and the tests skip, saying why) where the ``ray`` extra is missing.
Every actor builds one warm ``Pool`` in ``__init__`` (itself, or through an adapter), for the
life of its process, and reports where it runs and the pids of everything below it (the pool's
zygote and workers), read from ``/proc``, so the test can check that they are gone once the
actor is.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

from pytest_rewardhang.adapters.generic import PooledScorer
from pytest_rewardhang.guard import Pool

#: The marker that makes :func:`compute_score` hang in one C call that never returns.
HANG = "HANG"


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the response is the truth; on ``HANG``, stuck in C for hours, as a
    degenerate response makes a real scorer."""
    if HANG in solution_str:
        return float(sum(range(10**13)))
    return float(solution_str.strip() == ground_truth.strip())


async def acompute_score(solution_str: str, ground_truth: str) -> float:
    """The same scorer as ``async def``, as verl's reward loop and TRL allow."""
    await asyncio.sleep(0)
    return compute_score(solution_str, ground_truth)


#: The spec the actors give their pool: a path, which the zygote imports in a fresh interpreter.
SCORER = f"{Path(__file__).resolve()}:compute_score"
ASYNC_SCORER = f"{Path(__file__).resolve()}:acompute_score"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from ``/proc`` (each thread's ``children`` list)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(p) for p in f.read().split()]
            except FileNotFoundError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def _where() -> dict[str, Any]:
    import ray  # only ever called inside a Ray actor

    return {
        "node": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
        "pool_pids": descendants(os.getpid()),
    }


Scored = list[tuple[str, Any, float]]


def _plain(outcomes: list[Any]) -> Scored:
    """Status, value and wall time of each outcome: what a trainer keeps."""
    return [(out.status.value, out.value, out.wall_s) for out in outcomes]


class ThreadedScorer:
    """A threaded actor (``max_concurrency > 1``): each call runs in a thread of its own, and
    their ``map`` calls share the workers of the one pool of this process."""

    def __init__(self, scorer: str = SCORER, workers: int = 1, budget: float = 1.0) -> None:
        self.pool = Pool(scorer, workers=workers, budget=budget)

    def where(self) -> dict[str, Any]:
        return _where()

    def score(self, batch: list[tuple[str, str]]) -> tuple[tuple[int, int], Scored]:
        """Which process and thread ran the call, and one ``(status, value, wall_s)`` per
        item."""
        return (os.getpid(), threading.get_ident()), _plain(self.pool.map(batch))


class AsyncScorer:
    """An async actor (``async def`` methods, one event loop): each item is awaited with
    ``Pool.asubmit``, so a hung item never blocks the loop, and :meth:`ping` answers while it
    waits."""

    def __init__(self, scorer: str = SCORER, workers: int = 1, budget: float = 1.0) -> None:
        self.pool = Pool(scorer, workers=workers, budget=budget)
        self.scoring = 0

    async def where(self) -> dict[str, Any]:
        return _where()

    async def score(self, batch: list[tuple[str, str]]) -> tuple[float, float, Scored]:
        """When it started and ended (``time.monotonic()``, one clock for the whole machine)
        and one ``(status, value, wall_s)`` per item."""
        started = time.monotonic()
        self.scoring += 1
        try:
            outcomes = await asyncio.gather(*(self.pool.asubmit(*item) for item in batch))
        finally:
            self.scoring -= 1
        return started, time.monotonic(), _plain(list(outcomes))

    async def ping(self) -> tuple[float, int]:
        """When the loop answered, and how many :meth:`score` calls were under way then."""
        return time.monotonic(), self.scoring


class AdapterScorer:
    """An async actor scoring through an adapter (the generic ``PooledScorer``), made in
    ``__init__``: a hung sample scores the adapter's ``default``."""

    def __init__(self, scorer: str = SCORER, workers: int = 1, budget: float = 1.0) -> None:
        self.math = PooledScorer(scorer, budget=budget, workers=workers, default=-1.0)
        self.math.score_sync("0", "0")  # the adapter's pool starts now, not on the first call

    async def where(self) -> dict[str, Any]:
        return _where()

    async def score(self, batch: list[tuple[str, str]]) -> list[float]:
        return list(await asyncio.gather(*(self.math.score(*item) for item in batch)))
