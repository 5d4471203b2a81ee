"""64 concurrent submitters through one 2-worker guarded Pool, against trainers' own patterns.

Run: .venv/bin/pip install -q -e '.[bench]' && .venv/bin/python benchmarks/bench_concurrent.py

64 submitters, as threads and then as asyncio tasks, score the items of
``pool_scorers`` (``fast``, ~45 µs, and ``symbolic``, a sympy check of ~5 ms) through one peer
at a time; 1% of the items hang inside one C call (``sum(range(10**13))``). The peers are the
guarded ``Pool(workers=2)`` (``submit(...).result()`` from threads, ``await asubmit(...)``
from tasks; its zygote warmed with one item, ``warmup=``, as the peers' workers are warmed with
their first calls) and three patterns rebuilt here from the trainers' source, each with 2 workers:

- AReaL's ``AsyncRewardWrapper`` (inclusionAI/AReaL ``areal/api/reward_api.py``, at
  4aef98d8): one class-wide ``ProcessPoolExecutor`` (default start method, fork on Linux; line
  95), each call ``run_in_executor`` + ``asyncio.wait_for(timeout)`` (lines 150-157), retried
  up to ``max_retries=3`` times on timeout (lines 79, 159-170), then ``0``. Threads reach it
  through one event-loop thread (``run_coroutine_threadsafe``), as a threaded trainer would.
- verl's math_verify wrapper (verl-project/verl ``verl/utils/reward_score/math_verify.py``, at
  1dda039b): one module-wide spawn ``ProcessPoolExecutor`` (line 38; 4 workers there), each call
  ``submit`` + ``future.result(timeout)``, ``timeout_score`` on timeout (lines 57-67). Tasks
  reach it as verl's reward loop does: ``loop.run_in_executor(None, compute_score)``
  (``verl/experimental/reward_loop/reward_manager/naive.py`` line 75), on the loop's default
  thread pool (``min(32, CPUs + 4)`` threads). Its timeout counts from the submission, so an
  item that waits in the queue past it is lost, and still run by a worker later.
- NeMo Gym's math verifier (NVIDIA-NeMo/Gym ``resources_servers/math_with_judge/app.py``, at
  07d6b0d0): an ``asyncio.Semaphore`` of ``library_verifier_max_concurrency`` (32 by default,
  kept; lines 51, 164, 245), a fork ``multiprocessing.Process`` per call (lines 249-256), polled
  with ``is_alive()`` every 50 ms; at the deadline ``terminate()``, up to 1 s more of polling,
  then ``kill()`` (lines 264-300). Threads use the same with ``threading.Semaphore`` and
  ``time.sleep``.

What happens to a hang: a ``ProcessPoolExecutor`` cannot stop a running call, so the worker
stays busy with the hang for good (a timeout only stops the waiting), and once both workers hold
one every later call waits its whole timeout. Those runs stop taking new items after a cap;
their items/s is what got done by then, and the benchmark then counts their workers still
burning CPU on a hang, lets the peer shut down as its trainer does (AReaL:
``shutdown(wait=False, cancel_futures=True)``, line 112; verl: never), counts the processes still
alive and kills them. Every process the benchmark starts carries a tag in its environment (the
benchmark re-executes itself with it) so that nothing is left behind, even past the total bound
(``--bound``), at which a watchdog kills all of them and exits.

Per peer: items/s without hangs (the faster of two runs), items/s with 1% hangs (answered, and
scored: come back with their value), the good items that came back as timeouts, and the time
one hang costs a worker beyond its budget, measured directly: rounds of ``[hang, item]``
against rounds of ``[item]`` through one worker (one semaphore slot for the fork-per-call
peer), a new item every call; for the Pool also without ``warmup``, whose replacement worker
then pays the scorer's first call in a new process. Timings are wall clock; run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime
import functools
import itertools
import multiprocessing
import multiprocessing.connection
import os
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _procs  # noqa: E402
import pool_scorers  # noqa: E402 - found through the line above, as every peer's workers find it
from _procs import machine  # noqa: E402

from pytest_rewardhang.guard import Pool  # noqa: E402

WORKERS = 2
SUBMITTERS = 64
HANG_EVERY = 100  # 1% of items
TARGET_LATE_S = 0.05
#: NeMo Gym's default ``library_verifier_max_concurrency``.
NEMO_SLOTS = 32
#: NeMo Gym's polling step and its grace between ``terminate()`` and ``kill()``.
NEMO_POLL_S = 0.05
NEMO_GRACE_S = 1.0
#: AReaL's default ``max_retries``.
AREAL_RETRIES = 3
TAG_VAR = "BENCH_CONCURRENT_TAG"
OK, TIMEOUT, ERROR = "ok", "timeout", "error"
Item = tuple[str, str]
Scorer = Callable[[str, str], float]


@dataclass(frozen=True)
class Plan:
    budget: float
    #: Items per run without hangs, per scorer, and the seconds after which a run stops
    #: taking new items (rates are per item either way).
    clean: dict[str, int]
    clean_cap_s: float
    #: Runs without hangs per row, the fastest kept: load only ever slows a run down.
    clean_runs: int
    hung: dict[str, int]
    hung_cap_s: float
    #: ``[hang, item]`` rounds of the direct measurement.
    rounds: int
    bound_s: float


FULL = Plan(
    budget=1.0,
    clean={"fast": 20_000, "symbolic": 2_000},
    clean_cap_s=8.0,
    clean_runs=2,
    hung={"fast": 2_000, "symbolic": 1_000},
    hung_cap_s=20.0,
    rounds=5,
    bound_s=1200.0,
)
QUICK = Plan(
    budget=0.5,
    clean={"fast": 1_000, "symbolic": 200},
    clean_cap_s=1.5,
    clean_runs=1,
    hung={"fast": 200, "symbolic": 200},
    hung_cap_s=3.0,
    rounds=1,
    bound_s=300.0,
)


# --- the peers ------------------------------------------------------------------------------


class Peer(Protocol):
    label: str

    def call(self, item: Item) -> str: ...

    async def acall(self, item: Item) -> str: ...

    def busy_workers(self) -> int | None:
        """Workers still running a call after every submitter is done; None: none kept."""
        ...

    def close(self) -> None:
        """Shut down as the trainer does, which may leave processes behind."""
        ...


class GuardPool:
    """The guarded pool, its zygote warmed with one item (``warmup``) unless ``warmup`` is None:
    sympy's first call in a process imports 16 modules, which a replacement worker would pay."""

    label = "`guard.Pool`"

    def __init__(
        self, name: str, budget: float, warmup: Item | None, workers: int = WORKERS
    ) -> None:
        self.pool = Pool(
            f"{HERE / 'pool_scorers.py'}:{name}", workers=workers, budget=budget, warmup=warmup
        )

    def call(self, item: Item) -> str:
        return self.pool.submit(*item).result().status.value

    async def acall(self, item: Item) -> str:
        return (await self.pool.asubmit(*item)).status.value

    def busy_workers(self) -> int | None:
        return None

    def close(self) -> None:
        self.pool.close()


class _Executor:
    """What both ``ProcessPoolExecutor`` peers share: warm workers, and finding busy ones."""

    executor: concurrent.futures.ProcessPoolExecutor

    def warm(self, fn: Scorer, item: Item) -> None:
        for future in [self.executor.submit(fn, *item) for _ in range(4 * WORKERS)]:
            future.result(timeout=60)

    def busy_workers(self) -> int | None:
        """Workers that burn CPU now: the calls they run were given up on long ago."""
        pids = [p.pid for p in self.executor._processes.values() if p.pid is not None]
        before = [_cpu_s(pid) for pid in pids]
        time.sleep(1.0)  # an idle worker uses no CPU; a busy one, even on a loaded machine, some
        return sum(_cpu_s(pid) - b > 0.05 for pid, b in zip(pids, before, strict=True))


class ArealWrapper(_Executor):
    """AReaL's ``AsyncRewardWrapper``: ``run_in_executor`` + ``wait_for``, retried on timeout."""

    label = "AReaL `AsyncRewardWrapper`"

    def __init__(self, fn: Scorer, budget: float) -> None:
        self.fn, self.budget = fn, budget
        self.executor = concurrent.futures.ProcessPoolExecutor(max_workers=WORKERS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def acall(self, item: Item) -> str:
        loop = asyncio.get_running_loop()
        for _attempt in range(AREAL_RETRIES + 1):
            future = loop.run_in_executor(self.executor, functools.partial(self.fn, *item))
            try:
                await asyncio.wait_for(future, timeout=self.budget)
                return OK
            except TimeoutError:
                continue  # theirs logs, retries, and after the last attempt returns 0
            except BrokenProcessPool:
                return ERROR  # theirs recreates the executor; no item here breaks it
            except Exception:
                return ERROR
        return TIMEOUT

    def call(self, item: Item) -> str:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.acall(item), self._loop).result()

    def close(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()
        self.executor.shutdown(wait=False, cancel_futures=True)


class VerlMathVerify(_Executor):
    """verl's math_verify ``compute_score``: a spawn executor and ``future.result(timeout)``."""

    label = "verl math_verify"

    def __init__(self, fn: Scorer, budget: float) -> None:
        self.fn, self.budget = fn, budget
        context = multiprocessing.get_context("spawn")
        self.executor = concurrent.futures.ProcessPoolExecutor(WORKERS, mp_context=context)

    def call(self, item: Item) -> str:
        try:
            self.executor.submit(self.fn, *item).result(timeout=self.budget)
            return OK
        except concurrent.futures.TimeoutError:
            return TIMEOUT  # theirs returns timeout_score; the worker keeps running the call
        except Exception:
            return ERROR

    async def acall(self, item: Item) -> str:
        # verl's reward loop: a sync compute_score on the loop's default executor.
        return await asyncio.get_running_loop().run_in_executor(None, self.call, item)

    def close(self) -> None:
        pass  # theirs is module-wide and never shut down


def _nemo_child(fn: Scorer, item: Item, result: multiprocessing.connection.Connection) -> None:
    result.send(fn(*item))
    result.close()


class NemoGymFork:
    """NeMo Gym's math verifier: a fork per call, polled every 50 ms, behind a semaphore."""

    label = "NeMo Gym fork per call"

    def __init__(self, fn: Scorer, budget: float, slots: int = NEMO_SLOTS) -> None:
        self.fn, self.budget = fn, budget
        self.context = multiprocessing.get_context("fork")
        self.slots = slots
        self.tsem = threading.Semaphore(slots)
        self.asems: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}

    def _start(self, item: Item) -> tuple[Any, multiprocessing.connection.Connection]:
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(target=_nemo_child, args=(self.fn, item, writer))
        process.start()
        writer.close()
        return process, reader

    @staticmethod
    def _finish(process: Any, reader: multiprocessing.connection.Connection) -> str:
        process.join(timeout=0)
        try:
            if process.exitcode != 0 or not reader.poll():
                return ERROR
            reader.recv()
            return OK
        except EOFError:
            return ERROR
        finally:
            reader.close()

    def call(self, item: Item) -> str:
        with self.tsem:
            process, reader = self._start(item)
            deadline = time.monotonic() + self.budget
            while process.is_alive():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    process.terminate()
                    grace = time.monotonic() + NEMO_GRACE_S
                    while process.is_alive() and time.monotonic() < grace:
                        time.sleep(NEMO_POLL_S)
                    if process.is_alive():
                        process.kill()
                    while process.is_alive():
                        time.sleep(NEMO_POLL_S)
                    process.join(timeout=0)
                    reader.close()
                    return TIMEOUT
                time.sleep(min(NEMO_POLL_S, remaining))
            return self._finish(process, reader)

    async def acall(self, item: Item) -> str:
        loop = asyncio.get_running_loop()
        semaphore = self.asems.setdefault(loop, asyncio.Semaphore(self.slots))  # one per run
        async with semaphore:
            process, reader = self._start(item)
            deadline = loop.time() + self.budget
            while process.is_alive():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    process.terminate()
                    grace = loop.time() + NEMO_GRACE_S
                    while process.is_alive() and loop.time() < grace:
                        await asyncio.sleep(NEMO_POLL_S)
                    if process.is_alive():
                        process.kill()
                    while process.is_alive():
                        await asyncio.sleep(NEMO_POLL_S)
                    process.join(timeout=0)
                    reader.close()
                    return TIMEOUT
                await asyncio.sleep(min(NEMO_POLL_S, remaining))
            return self._finish(process, reader)

    def busy_workers(self) -> int | None:
        return None

    def close(self) -> None:
        self.asems.clear()


PEERS = ("pool", "areal", "verl", "nemo")


def make_peer(kind: str, name: str, budget: float) -> Peer:
    fn: Scorer = getattr(pool_scorers, name)
    warm = pool_scorers.fast_items(2)[1] if name == "fast" else pool_scorers.symbolic_items(2)[1]
    peer: Peer
    if kind == "pool":
        peer = GuardPool(name, budget, warm)
    elif kind == "nemo":
        peer = NemoGymFork(fn, budget)
    else:
        executor = ArealWrapper(fn, budget) if kind == "areal" else VerlMathVerify(fn, budget)
        executor.warm(fn, warm)
        peer = executor
    for _ in range(2 * WORKERS):
        peer.call(warm)
    return peer


# --- driving 64 submitters -------------------------------------------------------------------


@dataclass
class Run:
    items: int
    seconds: float
    statuses: list[str | None] = field(default_factory=list)
    hangs: int = 0
    capped: bool = False

    @property
    def done(self) -> int:
        return sum(s is not None for s in self.statuses)

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    @property
    def scored_rate(self) -> float:
        """Items that came back with their value, per second."""
        return self.statuses.count(OK) / self.seconds

    @property
    def timeouts(self) -> int:
        return self.statuses.count(TIMEOUT)

    def innocent_lost(self, items: Sequence[Item]) -> int:
        """Items that do not hang but did not come back with their value."""
        return sum(
            s is not None and s != OK and item[0] != "HANG"
            for s, item in zip(self.statuses, items, strict=False)
        )


def drive_threads(peer: Peer, items: Sequence[Item], cap_s: float) -> Run:
    statuses: list[str | None] = [None] * len(items)
    counter = itertools.count()
    gate = threading.Barrier(SUBMITTERS + 1)
    stop_at = [0.0]

    def submitter() -> None:
        gate.wait()
        while time.perf_counter() < stop_at[0]:
            i = next(counter)
            if i >= len(items):
                return
            statuses[i] = peer.call(items[i])

    threads = [threading.Thread(target=submitter, daemon=True) for _ in range(SUBMITTERS)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    stop_at[0] = start + cap_s
    gate.wait()
    for thread in threads:
        thread.join()
    return _run(items, statuses, start)


def drive_tasks(peer: Peer, items: Sequence[Item], cap_s: float) -> Run:
    statuses: list[str | None] = [None] * len(items)
    counter = itertools.count()

    async def submitter(stop_at: float) -> None:
        while time.perf_counter() < stop_at:
            i = next(counter)
            if i >= len(items):
                return
            statuses[i] = await peer.acall(items[i])

    async def everyone() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(submitter(start + cap_s) for _ in range(SUBMITTERS)))
        return start

    start = asyncio.run(everyone())
    return _run(items, statuses, start)


def _run(items: Sequence[Item], statuses: list[str | None], start: float) -> Run:
    seconds = time.perf_counter() - start
    done = [item for item, s in zip(items, statuses, strict=True) if s is not None]
    hangs = sum(item[0] == "HANG" for item in done)
    return Run(len(items), seconds, statuses, hangs, capped=len(done) < len(items))


DRIVERS: dict[str, Callable[[Peer, Sequence[Item], float], Run]] = {
    "threads": drive_threads,
    "asyncio": drive_tasks,
}


# --- a hang's cost, directly -----------------------------------------------------------------


def hang_cost(kind: str, name: str, plan: Plan, warm: bool = True) -> float:
    """Seconds beyond the budget one hang costs one worker: ``[hang, item]`` rounds against
    ``[item]`` rounds, one after the other, through one worker (or one semaphore slot); the
    Pool's zygote warmed with an item of its own, or (``warm=False``) not."""
    fn: Scorer = getattr(pool_scorers, name)
    make = pool_scorers.fast_items if name == "fast" else pool_scorers.symbolic_items
    # A new item every call: a warm worker must not answer from sympy's cache what a fresh
    # one (after a kill) has to work out; the warm-up item is none of them either.
    *measured, warmup = make(6 + 2 * plan.rounds)
    items = iter(measured)
    peer: GuardPool | NemoGymFork
    if kind == "pool":
        peer = GuardPool(name, plan.budget, warmup if warm else None, workers=1)
    else:
        peer = NemoGymFork(fn, plan.budget, slots=1)
    try:
        for _ in range(5):
            peer.call(next(items))
        start = time.perf_counter()
        for _ in range(plan.rounds):
            peer.call(next(items))
        plain = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(plan.rounds):
            assert peer.call(("HANG", "0")) == TIMEOUT
            peer.call(next(items))
        hung = time.perf_counter() - start
    finally:
        peer.close()
    return (hung - plain) / plan.rounds - plan.budget


# --- processes -------------------------------------------------------------------------------


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _is_resource_tracker(pid: int) -> bool:
    # multiprocessing's spawn bookkeeping process: it ends with the benchmark, and a later
    # spawn executor would need it, so it is neither counted nor killed between rows.
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"resource_tracker" in f.read()
    except OSError:
        return False


def leftovers(tag: str) -> int:
    live, _zombies = _procs.tagged(TAG_VAR, tag)
    me = os.getpid()
    return sum(p.pid != me and not _is_resource_tracker(p.pid) for p in live)


def kill_leftovers(tag: str, everything: bool = False) -> None:
    me = os.getpid()
    _procs.kill_tagged(
        TAG_VAR,
        tag,
        lambda p: p.pid != me and (everything or not _is_resource_tracker(p.pid)),
    )


def watchdog(tag: str, bound_s: float) -> None:
    """Past the total bound: kill everything the benchmark started, say so, and exit."""

    def expire() -> None:
        print(f"\nstopped: the benchmark passed its bound of {bound_s:g} s", flush=True)
        kill_leftovers(tag, everything=True)
        os._exit(3)

    timer = threading.Timer(bound_s, expire)
    timer.daemon = True
    timer.start()


# --- the run ---------------------------------------------------------------------------------


@dataclass
class Row:
    scorer: str
    style: str
    peer: str
    clean: Run
    hung: Run
    hung_items: Sequence[Item]
    busy: int | None
    left: int


def measure(
    kind: str, name: str, style: str, plan: Plan, tag: str, make: Callable[..., list[Item]]
) -> Row:
    if "sympy" in sys.modules:  # workers forked from here would inherit its answers
        sys.modules["sympy"].core.cache.clear_cache()
    peer = make_peer(kind, name, plan.budget)
    drive = DRIVERS[style]
    try:
        clean = min(
            (drive(peer, make(plan.clean[name]), plan.clean_cap_s) for _ in range(plan.clean_runs)),
            key=lambda run: -run.rate,
        )
        hung_items = make(plan.hung[name], HANG_EVERY)
        hung = drive(peer, hung_items, plan.hung_cap_s)
        busy = peer.busy_workers()
    finally:
        peer.close()
    time.sleep(0.5)  # let whatever the peer's own shutdown stops end first
    left = leftovers(tag)
    kill_leftovers(tag)
    return Row(name, style, peer.label, clean, hung, hung_items, busy, left)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of about two minutes")
    parser.add_argument("--peers", default=",".join(PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--bound", type=float, help="seconds after which everything is killed")
    args = parser.parse_args()
    tag = os.environ.get(TAG_VAR)
    if not tag:  # again with the tag in the environment, which every process started inherits
        env = {**os.environ, TAG_VAR: uuid.uuid4().hex}
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)  # noqa: S606
    plan = QUICK if args.quick else FULL
    peers = [p for p in args.peers.split(",") if p in PEERS]
    watchdog(tag, args.bound or plan.bound_s)
    command = [os.path.relpath(sys.executable), os.path.relpath(sys.argv[0]), *sys.argv[1:]]
    print("$ " + shlex.join(command), flush=True)
    load = os.getloadavg()
    began = time.perf_counter()
    rows: list[Row] = []
    #: (scorer, peer kind, whether the Pool had a warm-up item) -> seconds beyond the budget.
    costs: dict[tuple[str, str, bool], float] = {}
    try:
        for name, make in (
            ("fast", pool_scorers.fast_items),
            ("symbolic", pool_scorers.symbolic_items),
        ):
            getattr(pool_scorers, name)(*make(1)[0])  # imports sympy, as a trainer would have
            for style in DRIVERS:
                for kind in peers:
                    rows.append(measure(kind, name, style, plan, tag, make))
                    print(f"  measured {name} / {style} / {kind}", file=sys.stderr, flush=True)
            for kind, warm in (("pool", True), ("pool", False), ("nemo", True)):
                if kind in peers:
                    costs[(name, kind, warm)] = hang_cost(kind, name, plan, warm)
                    kill_leftovers(tag)
    finally:
        kill_leftovers(tag, everything=True)
    report(rows, costs, plan)
    print()
    print(
        f"{machine()}; {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; "
        f"{SUBMITTERS} submitters, {WORKERS} workers per peer ({NEMO_SLOTS} semaphore slots "
        f"for NeMo Gym), budget {plan.budget:g} s; load average {load[0]:.2f} / {load[1]:.2f} "
        f"(1 / 5 min) at start, {os.getloadavg()[0]:.2f} / {os.getloadavg()[1]:.2f} at end; "
        f"took {time.perf_counter() - began:.0f} s"
    )
    return 0


def derived_cost(row: Row, budget: float) -> float | None:
    """Worker-seconds beyond the budget per hang, from a 64-submitter run: its wall time less
    what its other items take at the clean rate, times the workers, per hang. Only where the
    other items take under a quarter of the run, so that the clean rate's noise stays small."""
    if row.hung.capped or not row.hung.hangs:
        return None
    others = (row.hung.done - row.hung.hangs) / row.clean.rate
    if others > row.hung.seconds / 4:
        return None
    return (row.hung.seconds - others) * WORKERS / row.hung.hangs - budget


def report(rows: list[Row], costs: dict[tuple[str, str, bool], float], plan: Plan) -> None:
    print()
    print(
        "| scorer | submitters | peer | items/s, no hangs | 1% hangs: answered/s "
        "| 1% hangs: scored/s | hangs / timeouts / good items lost | workers still on a hang "
        "| left running |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | --- | --- | --- |")
    for row in rows:
        clean, hung = row.clean, row.hung
        capped = f" (stopped at {plan.hung_cap_s:g} s: {hung.done:,} of {hung.items:,})"
        busy = "-" if row.busy is None else f"{row.busy} of {WORKERS}"
        print(
            f"| {row.scorer} | {SUBMITTERS} {row.style} | {row.peer} | {clean.rate:,.0f} "
            f"| {hung.rate:,.0f}{capped if hung.capped else ''} | {hung.scored_rate:,.0f} "
            f"| {hung.hangs} / {hung.timeouts} / {hung.innocent_lost(row.hung_items)} "
            f"| {busy} | {row.left} |"
        )
    print()
    print("| scorer | peer | what one hang costs a worker, beyond the budget |")
    print("| --- | --- | ---: |")
    for (name, kind, warm), cost in costs.items():
        label = NemoGymFork.label if kind == "nemo" else GuardPool.label
        how = "measured directly" if warm else "without `warmup`, measured directly"
        print(f"| {name} | {label}, {how} | {cost * 1000:+.0f} ms |")
        if not warm:
            continue
        for row in rows:
            derived = derived_cost(row, plan.budget)
            if (row.scorer, row.peer) == (name, label) and derived is not None:
                print(
                    f"| {name} | {label}, {SUBMITTERS} {row.style} run (derived) "
                    f"| {derived * 1000:+.0f} ms |"
                )
    for label in (ArealWrapper.label, VerlMathVerify.label):
        runs = [row for row in rows if row.peer == label]
        if runs:
            stuck = sum(row.busy or 0 for row in runs)
            print(
                f"| any | {label} | never freed ({stuck} workers still on a hang "
                f"after its {len(runs)} runs) |"
            )
    print()
    checks: list[tuple[str, bool]] = []
    pools = {(r.scorer, r.style): r for r in rows if r.peer == GuardPool.label}
    for row in rows:
        mine = pools.get((row.scorer, row.style))
        if row.peer == GuardPool.label or mine is None:
            continue
        for what, a, b in (
            ("no hangs", mine.clean.rate, row.clean.rate),
            ("1% hangs, scored", mine.hung.scored_rate, row.hung.scored_rate),
        ):
            ratio = f"{a / b:.2f}x" if b else "only the Pool scored any"
            checks.append(
                (
                    f"Pool ahead of {row.peer}, {row.scorer}, {row.style}, {what}: "
                    f"{a:,.0f} against {b:,.0f} items/s ({ratio})",
                    a > b,
                )
            )
    for (name, kind, warm), cost in costs.items():
        if kind == "pool" and warm:
            checks.append(
                (
                    f"a hang costs the Pool at most budget + 50 ms of one worker, {name}: "
                    f"budget {cost * 1000:+.0f} ms",
                    cost <= TARGET_LATE_S,
                )
            )
    for text, passed in checks:
        print(f"- {'PASS' if passed else 'FAIL'}: {text}")
    print()
    print(
        "Answered: items that came back, timeouts included; scored: those that came back with "
        "their value. Good items lost: items that do not hang but came back as timeouts. Hang "
        f"runs of peers that never free a worker stop taking items after {plan.hung_cap_s:g} s. "
        '"Workers still on a hang": those burning CPU once every submitter was done. "Left '
        'running": processes still alive 0.5 s after the peer shut down as its trainer does '
        "(verl never shuts its executor down: it lives as long as the trainer), killed by the "
        "benchmark before the next row."
    )


if __name__ == "__main__":
    sys.exit(main())
