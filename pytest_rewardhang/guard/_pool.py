"""A warm pool of guarded workers: batch scoring with an exact per-item deadline, in the caller.

Workers are forked from a zygote (see :mod:`._zygote`) that imported the scorer in a fresh
interpreter, so their cost does not depend on the caller's size or threads (how each comes to
exist, from the zygote or from the caller, is :mod:`._launch`'s). Each worker answers
every item before it starts the next one, which lets the caller know at all times which item a
worker is running and since when; the caller waits in ``poll()`` on the workers' result pipes
with the earliest deadline as its timeout. It starts no thread and installs no signal handler.
Here: handing out batches, the per-item deadlines, accounting for deaths, respawning, closing.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import resource
import select
import signal
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from . import _proctree
from ._launch import (
    START_TIMEOUT_S,
    PoolError,
    Zygote,
    fork_here,
    import_target,
    warn_if_large,
    worker_pipes,
)
from ._outcome import Outcome, Status
from ._run import _check_limits
from ._spec import SpecError, load_callable
from ._wire import (
    CHUNK,
    DUMP_LEAD_S,
    DUMP_SIGNAL,
    EXITED,
    MSG_FORKED,
    MSG_REAPED,
    OUTPUT_LIMIT,
    PIPE_ROLES,
    SPAWNED,
    STACK_LIMIT,
    common_fields,
    died,
    outcome_from_frame,
    output_text,
    read_bounded,
    result_frames,
    task_header,
    unpickle_failed,
)

#: Roughly how much work one task frame carries: big enough to amortise the pipe round trip,
#: small enough that few items wait behind a hang and the last items spread over all workers.
_BATCH_S = 0.002
#: Longest the caller lets results gather while every worker has a batch queued.
_GATHER_S = 0.001
_FOREVER_S = 1e9
_MAX_BATCH = 256

_OK = Status.OK


class _Worker:
    __slots__ = (
        "batches",
        "cpu_base",
        "dumped",
        "fds",
        "inbuf",
        "kill_for",
        "kill_time",
        "last_end",
        "pid",
        "pidfd",
        "queued",
        "ready",
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
        #: Items in flight that a dead worker had queued: at most one per worker.
        self.retries: set[int] = set()
        self.dumped: int | None = None
        self.kill_for: int | None = None
        self.kill_time = 0.0

    def current(self) -> tuple[int, float] | None:
        """The item running now and the time it started, if one is."""
        if not self.sent or self.sent[0][1] is None:
            return None
        return self.sent[0][0], max(self.last_end, self.sent[0][1])


class _Engine:
    """Everything the pool owns. Holds no reference to the :class:`Pool`, so GC can close it."""

    def __init__(self, workers: int, budget: float, memory_mb: float | None) -> None:
        self.budget = budget
        self.memory_mb = memory_mb
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
        # Per map() call:
        self.results: list[Outcome | None] = []
        self.items: list[tuple[Any, ...] | dict[str, Any]] = []
        self.queue: deque[int] = deque()
        #: Items a dead worker had queued behind its last one. They go out one at a time, one
        #: per worker, so two hangs that waited behind a third never end up behind each other.
        self.retry: deque[int] = deque()
        self.remaining = 0

    def start(self, fn: Callable[..., Any] | str) -> None:
        _proctree.prepare()
        target = import_target(fn)
        if target is not None and sys.executable:
            try:
                self.zygote = Zygote.start(target, self.memory_mb)
            except SpecError:
                if isinstance(fn, str):
                    raise
                # It imports here but not in a fresh interpreter (sys.path set up by a
                # framework, say): serve the object we were given after all.
                target = None
            else:
                self._register(self.zygote.sock.fileno(), "zygote", None, select.POLLIN)
                self._register(self.zygote.pidfd, "zygote", None, select.POLLIN)
        if target is None:
            self.fn = load_callable(fn) if isinstance(fn, str) else fn
            warn_if_large()
        for _ in range(self.size):
            self._spawn()
        self._wait_ready()

    # --- processes ---------------------------------------------------------------------------

    def _spawn(self) -> None:
        wid = self.next_wid
        self.next_wid += 1
        theirs, ours = worker_pipes()
        worker = _Worker(wid, ours)
        try:
            if self.zygote is not None:
                self.zygote.fork(wid, [theirs[role] for role in PIPE_ROLES])
            else:
                assert self.fn is not None
                inherited = [fd for w in self.workers.values() for fd in w.fds.values()]
                inherited += [fd for fd in ours.values() if fd != theirs["output_r"]]
                worker.pid, worker.pidfd = fork_here(self.fn, theirs, self.memory_mb, inherited)
                worker.ready = True
        except BaseException:
            for fd in {*theirs.values(), *ours.values()}:
                os.close(fd)
            raise
        for role, fd in theirs.items():
            if role != "output_r":
                os.close(fd)
        for fd in ours.values():
            os.set_blocking(fd, False)
        self.workers[wid] = worker
        self._register(ours["result_r"], "result", worker, select.POLLIN)
        if worker.pidfd >= 0:
            self._register(worker.pidfd, "pidfd", worker, select.POLLIN)

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
            self._handle(self.poller.poll(math.ceil(left * 1000)))
            self._respawn()

    def _respawn(self) -> None:
        # Deferred out of event handling: a new worker's pipes may reuse the fd numbers of the
        # dead one's, which later events of the same poll() would then be taken for.
        while self.to_spawn and not self.closed:
            self.to_spawn -= 1
            self._spawn()

    # --- map ---------------------------------------------------------------------------------

    def map(self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]) -> list[Outcome]:
        if self.closed:
            raise ValueError("map() on a closed Pool")
        if os.getpid() != self.owner:
            raise PoolError("this Pool belongs to the process that forked this one; make a new one")
        self.items = [_arguments(item) for item in items]
        self.results = [None] * len(self.items)
        self.queue = deque(range(len(self.items)))
        self.retry = deque()
        self.remaining = len(self.queue)
        try:
            while self.remaining:
                self._respawn()
                gather = self._dispatch()
                if gather > 0:
                    # Every worker has work queued past the current item: let results gather
                    # instead of waking for each one. Bounded by the next deadline, so no
                    # deadline is passed late.
                    timeout = self._poll_timeout()
                    time.sleep(min(gather, _FOREVER_S if timeout is None else timeout / 1000))
                self._handle(self.poller.poll(self._poll_timeout()))
                self._check_deadlines()
        except BaseException:
            # KeyboardInterrupt, or the pool itself failed: leave nothing running.
            self.close()
            raise
        results, self.results, self.items = self.results, [], []
        return results  # type: ignore[return-value]

    def _dispatch(self) -> float:
        """Hand out batches; how long results may gather before any worker runs dry."""
        if not self.queue and not self.retry:
            return 0.0
        ready = [w for w in self.workers.values() if w.ready and w.kill_for is None]
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
        try:
            blob = pickle.dumps([self.items[i] for i in batch], protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - find the item that will not pickle; send the rest
            batch = [i for i in batch if self._picklable(i)]
            if not batch:
                return
            blob = pickle.dumps([self.items[i] for i in batch], protocol=pickle.HIGHEST_PROTOCOL)
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
            text = f"{type(exc).__name__}: the item could not be pickled: {exc}"
            self.results[index] = Outcome(Status.ERROR, error=text, budget=self.budget)
            self.remaining -= 1
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
        for worker in self.workers.values():
            current = worker.current()
            if current is None or worker.kill_for is not None:
                continue
            index, start = current
            due = start + self.budget
            if worker.dumped != index:
                due -= DUMP_LEAD_S
            earliest = min(earliest, due)
        if earliest == math.inf:
            return None
        return max(0, math.ceil((earliest - time.monotonic()) * 1000))

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for worker in list(self.workers.values()):
            current = worker.current()
            if current is None or worker.kill_for is not None:
                continue
            index, start = current
            if now < start + self.budget - DUMP_LEAD_S:
                continue
            self._read_results(worker)  # it may have answered since the poll returned
            if worker.current() != current:
                continue
            if worker.dumped != index:
                worker.dumped = index
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(worker.pidfd, DUMP_SIGNAL)
            if now >= start + self.budget:
                self._kill(worker, index, now)

    def _kill(self, worker: _Worker, index: int, now: float) -> None:
        worker.kill_for = index
        worker.kill_time = now
        if self.zygote is not None:
            self.zygote.kill(worker.wid)
            # Ask for the replacement now: the zygote forks it while the dead one is torn down.
            self.to_spawn += 1
            return
        self._reaped(worker, *_proctree.kill_and_reap(worker.pid, worker.pidfd))

    def _reaped(
        self, worker: _Worker, leaked: int, status: int, usage: resource.struct_rusage | None
    ) -> None:
        """Account for a worker forked here, now reaped, as for one the zygote reports."""
        if usage is None:
            self._on_death(worker, status, math.nan, 0.0, leaked)
        else:
            cpu = usage.ru_utime + usage.ru_stime
            self._on_death(worker, status, cpu, usage.ru_maxrss, leaked)

    # --- events ------------------------------------------------------------------------------

    def _handle(self, events: list[tuple[int, int]]) -> None:
        for fd, _ in events:
            kind, worker = self.by_fd.get(fd, ("gone", None))
            if kind == "result":
                assert worker is not None
                self._read_results(worker)
            elif kind == "task":
                assert worker is not None
                self._write(worker)
            elif kind == "pidfd":
                assert worker is not None
                if worker.wid in self.workers:
                    self._reaped(worker, 0, *_proctree.reap(worker.pid))
            elif kind == "zygote":
                self._zygote_messages()

    def _zygote_messages(self) -> None:
        assert self.zygote is not None
        while (received := self.zygote.receive()) is not None:
            message, fds = received
            if message[:1] == MSG_FORKED:
                wid, pid = SPAWNED.unpack_from(message, 1)
                worker = self.workers.get(wid)
                if worker is None or not fds:
                    for fd in fds:
                        os.close(fd)
                    continue
                worker.pid, worker.pidfd, worker.ready = pid, fds[0], True
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
            self._answered(worker, fields, worker.inbuf, at)
        if consumed:
            del worker.inbuf[:consumed]

    def _answered(
        self, worker: _Worker, fields: tuple[Any, ...], buffer: bytearray, at: int
    ) -> None:
        size, output_size, dropped, index, leaked, wall, cpu, cpu_total, end, rss = fields
        entry = worker.sent.popleft()
        assert entry[0] == index, "a worker answered out of order"
        worker.retries.discard(index)
        worker.last_end = end
        worker.cpu_base = cpu_total
        if worker.dumped == index:  # the dump came just before it finished: drop it
            read_bounded(worker.fds["stack_r"], STACK_LIMIT)
            worker.dumped = None
        self.fruitless_deaths = 0
        self.mean_item_s = wall if self.mean_item_s is None else 0.8 * self.mean_item_s + 0.2 * wall
        payload = buffer[at + output_size : at + output_size + size]
        try:
            status, value, error, exception = pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - e.g. a class that only exists in the worker
            status, value, error, exception = None, None, None, exc
        if status == "ok" and not output_size and not leaked:
            # The common case, built positionally: keyword plumbing costs more than the
            # scorer itself when it runs for 50 µs.
            outcome = Outcome(
                _OK, value, None, None, wall, cpu, rss / 1024, None, None, None, "", 0, self.budget
            )
        else:
            output = output_text(bytes(buffer[at : at + output_size]), dropped)
            common = common_fields(wall, cpu, rss, output, self.budget)
            if status is None:
                outcome = unpickle_failed(exception, leaked, common)
            else:
                outcome = outcome_from_frame(status, value, error, exception, leaked, common)
        if self.results[index] is None:
            self.remaining -= 1
        self.results[index] = outcome

    def _on_death(self, worker: _Worker, status: int, cpu: float, rss: float, leaked: int) -> None:
        """Account for a dead worker's items: the running one ends, the rest go back."""
        self._read_results(worker)
        now = time.monotonic()
        current = worker.current()
        back = [entry[0] for entry in worker.sent]
        if current is not None and self.remaining:
            index, start = current
            back.pop(0)
            if worker.kill_for is None or worker.kill_for == index:
                killed = worker.kill_for == index
                wall = (worker.kill_time if killed else now) - start
                ended, signum, exit_code = died(
                    status, killed=killed, dumped=worker.dumped == index
                )
                stack = None
                if ended is Status.TIMEOUT:
                    dump, _ = read_bounded(worker.fds["stack_r"], STACK_LIMIT)
                    stack = dump.decode("utf-8", "replace") or None
                output = output_text(*read_bounded(worker.fds["output_r"], OUTPUT_LIMIT))
                outcome: Outcome | None = Outcome(
                    ended,
                    stack=stack,
                    signal=signum,
                    exit_code=exit_code,
                    leaked=leaked,
                    **common_fields(wall, cpu - worker.cpu_base, rss, output, self.budget),
                )
            else:
                # Killed for an item that answered at the deadline; this one had just begun.
                outcome = None
                back.insert(0, index)
            if outcome is not None:
                self.results[index] = outcome
                self.remaining -= 1
        elif worker.kill_for is None:
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
        if self.closed:
            return
        self.closed = True
        if os.getpid() != self.owner:
            return  # the processes are the owner's to stop; our copies of the fds die with us
        try:
            if self.zygote is not None:
                self.zygote.stop()
            else:
                for worker in list(self.workers.values()):
                    if worker.pidfd >= 0:
                        _proctree.kill_and_reap(worker.pid, worker.pidfd)
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
    warning when the caller is large. ``budget`` and ``memory_mb`` mean what they mean for
    :func:`~pytest_rewardhang.guard.run`, per item; each item's deadline starts when a worker
    starts it. One :meth:`map` runs at a time; calls from several threads take turns.
    """

    def __init__(
        self,
        fn: Callable[..., Any] | str,
        workers: int = 2,
        budget: float = 2.0,
        memory_mb: float | None = None,
    ) -> None:
        _check_limits(budget, memory_mb)
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, not {workers!r}")
        self.budget = float(budget)
        self.workers = workers
        self._lock = threading.Lock()
        engine = self._engine = _Engine(workers, float(budget), memory_mb)
        try:
            engine.start(fn)
        except BaseException:
            engine.close()
            raise
        self._finalizer = weakref.finalize(self, engine.close)

    def map(self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]) -> list[Outcome]:
        """One :class:`Outcome` per item, in order: tuples are positional, dicts keyword."""
        with self._lock:
            return self._engine.map(items)

    def close(self) -> None:
        """Kill every worker and the zygote; leaves no process, zombie or descriptor."""
        with self._lock:
            self._finalizer()

    @property
    def closed(self) -> bool:
        return self._engine.closed

    def __enter__(self) -> Pool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


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
