"""A warm pool of guarded workers: scoring with an exact per-item deadline, from any thread.

Workers are forked from a zygote (see :mod:`._zygote`) that imported the scorer in a fresh
interpreter, so their cost does not depend on the caller's size or threads (how each comes to
exist, from the zygote or from the caller, is :mod:`._launch`'s). Each worker answers
every item before it starts the next one, which lets the caller know at all times which item a
worker is running and since when. Here: the public :class:`Pool`. How an item goes through it
(drawn as CPython's ``concurrent/futures/process.py`` draws its own)::

    any thread            |  the thread that drives the loop       |  processes
                          |                                        |
    map()    --> Batch  --+-> inbox --> Ledger                     |
    submit() --> Future --+   (and a     queue, retry              |
    asubmit() awaits one  |   wake-up)     |   ^                   |
                          |                |   | taken back        |
                          |      Schedule: who gets how many       |
                          |                v   |                   |
                          |              Engine --- task frames ---+--> worker
                          |              poll() <-- answers -------+--- worker
    Batch.results,     <--+-- finish <-- deadlines: fence, dump,   |      ^
    Future.set_result     |              kill; deaths              |      | fork, kill,
                          |                |   ^                   |      | reap
                          |              Processes --- requests ---+--> zygote
                          |                    <------ reports ----+---

An item is queued, handed to a worker (its frame written into the worker's task pipe; its
deadline starts when the worker starts it, once the item before it answered), and ends in one
of these ways: answered; killed at its deadline (TIMEOUT); its worker died under it; its
future cancelled (dropped before it starts, or killed as at a deadline, for nobody); the pool
closed (ERROR). An item a worker held but never started (queued behind a hang, or after a
fenced item) goes to ``retry`` and out again.

- :mod:`._driver`: which thread drives the loop, the inbox the others hand work through,
  closing from any thread;
- :mod:`._engine`: the loop: ``poll()``, deadlines, stack dumps, kills, steals;
- :mod:`._ledger`: items to their batches and futures, cancelling, finishing, retries;
- :mod:`._schedule`: the scheduling policy, a pure object: handing out, taking back;
- :mod:`._handle`: the caller's handle on one worker, and the phases it goes through;
- :mod:`._processes`: the zygote and its workers: starting, killing, replacing them;
- :mod:`._answers`: what the workers say (answers, output as it comes, deaths) and the
  outcomes it makes of their items.
"""

from __future__ import annotations

import pickle
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from . import _limits
from ._box import Confining
from ._driver import said
from ._engine import Engine
from ._interrupts import hold, release
from ._ledger import Item, arguments
from ._outcome import Outcome
from ._quota import MAX_PROCESSES
from ._run import _check_limits
from ._wire import Warmup

#: Items submitted and not answered yet, by default, per worker: room enough that trainers'
#: bursts never wait, small enough that a runaway producer is held back.
_PENDING_PER_WORKER = 256


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
    item starts never runs it; cancelled after, it ends it (its worker is replaced). A
    submitted future is never ``running()``: it goes from pending to done. A value or
    exception that is not plain data comes back only with ``objects=True``, as for
    :func:`~pytest_rewardhang.guard.run`.

    ``warmup``, one item (a tuple of positional or a dict of keyword arguments), is scored once
    in the zygote before it forks any worker, so that what the scorer does on its first call
    only (lazy imports, caches) every worker starts with, including each one that replaces a
    worker killed at a deadline. A warm-up that raises, leaves a thread running, or does not
    return while the pool starts, stops the pool from starting with :class:`PoolError`.

    ``isolate=True`` runs each item in a process of its own, forked from its warm worker (the
    scorer imported, the warm-up done) once the item is read: nothing an item changes
    (builtins, modules, the guard's own code, signal handlers, limits, the environment,
    threads) reaches a later item or the code that reports it, at the cost of a fork per item.
    An isolated item that dies takes its worker with it, and is reported as in the warm mode.

    ``max_processes``, ``network`` and ``unprivileged`` confine each item as they do a
    :func:`~pytest_rewardhang.guard.run` call, and ``memory_mb`` bounds all of an item's
    processes together too, wherever the kernel permits (``Outcome.confined`` says what
    applied): through its worker's own cgroup, made once per worker, so that the limits cover
    the item's processes with its worker's; its temporary folder (and ``/dev/shm``, as root)
    is emptied after each item that left anything there.
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
        isolate: bool = False,
        max_processes: int | None = MAX_PROCESSES,
        network: bool = True,
        unprivileged: bool = False,
    ) -> None:
        _limits.function(fn, spec=True)
        Pool.check_limits(
            budget,
            memory_mb,
            max_processes,
            workers=workers,
            objects=objects,
            isolate=isolate,
            network=network,
            unprivileged=unprivileged,
        )
        warm = _warmup(warmup)
        if max_pending is None:
            max_pending = _PENDING_PER_WORKER * workers
        _limits.count("max_pending", max_pending)
        _limits.wait("submit_timeout", submit_timeout)
        self.budget = float(budget)
        self.workers = workers
        self.max_pending = max_pending
        self.submit_timeout = submit_timeout
        # An interrupt lands only while the pool waits for its processes (see ._interrupts);
        # one that comes as the signals are let in again, at the end, finds the finalizer set.
        held = hold()
        try:
            confining = Confining(memory_mb, max_processes, network, unprivileged)
            engine = Engine(
                workers,
                float(budget),
                memory_mb,
                max_pending,
                warm,
                objects,
                isolate,
                confining,
            )
            self._engine = engine
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

        Cancelling the awaiting task cancels the item: it never starts, or it is ended.
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

    @property
    def ready(self) -> bool:
        """Whether the pool takes work now: open, and its last worker start did not fail for
        want of descriptors, processes or memory (it is tried again, after a pause that
        doubles up to 2 s, and items wait for it meanwhile). From any thread."""
        return not self._engine.closing and not self._engine.processes.failed_starts

    @staticmethod
    def check_limits(
        budget: object,
        memory_mb: object = None,
        max_processes: object = MAX_PROCESSES,
        *,
        workers: object = 1,
        objects: object = False,
        isolate: object = False,
        network: object = True,
        unprivileged: object = False,
    ) -> None:
        """The one-line :class:`ValueError` that ``Pool(...)`` raises for a nonsense value of
        these options, for code that makes its pool later (the adapters)."""
        _check_limits(
            budget,
            memory_mb,
            max_processes,
            objects=objects,
            isolate=isolate,
            network=network,
            unprivileged=unprivileged,
        )
        _limits.count("workers", workers)

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
    warm = arguments(warmup)
    try:  # it travels to the zygote pickled
        pickle.dumps(warm, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - whatever pickling raises, said in one line
        raise ValueError(f"warmup cannot be pickled: {said(exc)}") from None
    return warm
