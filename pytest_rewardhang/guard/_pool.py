"""A warm pool of guarded workers: batch scoring with an exact per-item deadline.

Workers are forked from a zygote (see :mod:`._zygote`) that imported the scorer in a fresh
interpreter, so their cost does not depend on the caller's size or threads. Each worker answers
every item before it starts the next one, which lets the caller know at all times which item a
worker is running and since when; the caller waits in ``poll()`` on the workers' result pipes
with the earliest deadline as its timeout. It starts no thread and installs no signal handler.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import functools
import math
import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
import types
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from . import _proctree
from ._fork import (
    DUMP_LEAD_S,
    DUMP_SIGNAL,
    kill_tree,
    outcome_from_frame,
    output_text,
    read_bounded,
    unpickle_failed,
)
from ._outcome import Mechanism, Outcome, Status
from ._run import _check_limits
from ._spec import SpecError, is_file_target, load_callable, split_spec
from ._worker import PIPE_ROLES, RESULT, TASK, serve
from ._zygote import EXITED, SOCKET_FD, SPAWNED, WID
from ._zygote import main as zygote_main

#: A caller this large pays ~55 ms per GiB for every worker it forks itself.
LARGE_CALLER_BYTES = 1 << 30
#: Roughly how much work one task frame carries: big enough to amortise the pipe round trip,
#: small enough that few items wait behind a hang and the last items spread over all workers.
_BATCH_S = 0.002
#: Longest the caller lets results gather while every worker has a batch queued.
_GATHER_S = 0.001
_FOREVER_S = 1e9
_MAX_BATCH = 256
_START_TIMEOUT_S = 120.0
_CLOSE_TIMEOUT_S = 10.0
_PIPE_SIZE = 1 << 20
_CHUNK = 1 << 20
_STACK_LIMIT = 1 << 20
_SIGNALS_TO_RESET = (
    signal.SIGCHLD,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGPIPE,
    signal.SIGALRM,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_ZYGOTE_CODE = "import sys; sys.path.insert(0, {root!r}); from {module} import main; main()"


_OK = Status.OK
_SUBREAPER = _proctree._PR_SET_CHILD_SUBREAPER


class PoolError(RuntimeError):
    """The pool itself failed (its zygote died, or workers die before they can take an item)."""


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
        self.sock: socket.socket | None = None
        self.zygote_pid = 0
        self.zygote_pidfd = -1
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
        target = _import_target(fn)
        if target is not None and sys.executable:
            try:
                self._start_zygote(target)
            except SpecError:
                if isinstance(fn, str):
                    raise
                # It imports here but not in a fresh interpreter (sys.path set up by a
                # framework, say): serve the object we were given after all.
                self._stop_zygote()
                self._forget_zygote()
                target = None
        if target is None:
            self.fn = load_callable(fn) if isinstance(fn, str) else fn
            _warn_if_large()
        for _ in range(self.size):
            self._spawn()
        self._wait_ready()

    # --- processes ---------------------------------------------------------------------------

    def _start_zygote(self, target: tuple[Any, ...]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        # Where the top package can be imported from, and the zygote's module, derived rather
        # than spelled: neither depends on where this file sits in the package.
        top = sys.modules[__name__.partition(".")[0]]
        root = str(Path(top.__file__ or "").resolve().parent.parent)
        code = _ZYGOTE_CODE.format(root=root, module=zygote_main.__module__)
        argv = [sys.executable, "-c", code]
        try:
            self.zygote_pid = os.posix_spawn(
                sys.executable,
                argv,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), SOCKET_FD),
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                ],
                setsid=True,
                setsigmask=(),
                setsigdef=_SIGNALS_TO_RESET,
            )
        finally:
            theirs.close()
        self.zygote_pidfd = os.pidfd_open(self.zygote_pid)
        config = {"path": list(sys.path), "target": target, "memory_mb": self.memory_mb}
        ours.sendall(pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL))
        self._register(ours.fileno(), "zygote", None, select.POLLIN)
        self._register(self.zygote_pidfd, "zygote", None, select.POLLIN)
        reply = self._await_zygote_reply()
        if reply[:1] == b"E":
            raise SpecError(reply[1:].decode("utf-8", "replace"))
        os.set_blocking(ours.fileno(), False)

    def _await_zygote_reply(self) -> bytes:
        assert self.sock is not None
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        if not poller.poll(_START_TIMEOUT_S * 1000):
            raise PoolError(f"the pool's zygote did not start within {_START_TIMEOUT_S:g} s")
        reply = self.sock.recv(1 << 16)
        if not reply:
            raise PoolError("the pool's zygote exited while importing the scorer")
        return reply

    def _spawn(self) -> None:
        wid = self.next_wid
        self.next_wid += 1
        pairs = {
            "task": os.pipe2(os.O_CLOEXEC),
            "result": os.pipe2(os.O_CLOEXEC),
            "output": os.pipe2(os.O_CLOEXEC),
            "stack": os.pipe2(os.O_CLOEXEC),
        }
        for role in ("output", "task"):  # room for an item's output, and for whole batches
            with contextlib.suppress(OSError):
                fcntl.fcntl(pairs[role][1], fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        theirs = {
            "task_r": pairs["task"][0],
            "result_w": pairs["result"][1],
            "output_w": pairs["output"][1],
            "output_r": pairs["output"][0],
            "stack_w": pairs["stack"][1],
        }
        ours = {
            "task_w": pairs["task"][1],
            "result_r": pairs["result"][0],
            "output_r": pairs["output"][0],
            "stack_r": pairs["stack"][0],
        }
        worker = _Worker(wid, ours)
        try:
            if self.sock is not None:
                socket.send_fds(self.sock, [b"F" + WID.pack(wid)], [theirs[r] for r in PIPE_ROLES])
            else:
                self._fork_here(worker, theirs)
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

    def _fork_here(self, worker: _Worker, theirs: dict[str, int]) -> None:
        """Fork a worker from the caller: for callables a fresh interpreter cannot import."""
        assert self.fn is not None
        parent = os.getpid()
        # A death signal follows the forking *thread*; only the main thread lives as long.
        main_thread = threading.current_thread() is threading.main_thread()
        others = [fd for w in self.workers.values() for fd in w.fds.values()]
        others += [fd for fd in worker.fds.values() if fd != theirs["output_r"]]
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the worker
            try:
                for fd in others:
                    os.close(fd)
                os.setsid()
                if main_thread:
                    subreaper = _proctree.become_subreaper(parent)
                else:
                    libc = _proctree._libc()
                    subreaper = libc is not None and libc.prctl(_SUBREAPER, 1, 0, 0, 0) == 0
                serve(self.fn, theirs, self.memory_mb, subreaper)
            finally:
                os._exit(70)
        worker.pid = pid
        worker.pidfd = os.pidfd_open(pid)
        worker.ready = True

    def _register(self, fd: int, kind: str, worker: _Worker | None, events: int) -> None:
        self.by_fd[fd] = (kind, worker)
        self.poller.register(fd, events)

    def _unregister(self, fd: int) -> None:
        if self.by_fd.pop(fd, None) is not None:
            self.poller.unregister(fd)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not all(w.ready for w in self.workers.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolError(f"workers did not start within {_START_TIMEOUT_S:g} s")
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
        indexes = array.array("Q", batch)
        if sys.byteorder != "big":
            indexes.byteswap()
        header = TASK.pack(len(blob), len(batch)) + indexes.tobytes()
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
        if self.sock is not None:
            self.sock.send(b"K" + WID.pack(worker.wid))
            # Ask for the replacement now: the zygote forks it while the dead one is torn down.
            self.to_spawn += 1
            return
        leaked = kill_tree(worker.pid, worker.pidfd)
        self._reap_here(worker, leaked)

    def _reap_here(self, worker: _Worker, leaked: int) -> None:
        try:
            _, status, usage = os.wait4(worker.pid, 0)
        except ChildProcessError:  # the caller reaps children itself, or ignores SIGCHLD
            self._on_death(worker, -1, math.nan, 0.0, leaked)
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
                    self._reap_here(worker, 0)
            elif kind == "zygote":
                self._zygote_messages()

    def _zygote_messages(self) -> None:
        assert self.sock is not None
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.sock, 256, 1)
            except BlockingIOError:
                return
            except ConnectionError:
                message, fds = b"", []
            if not message:
                raise PoolError("the pool's zygote died; its workers died with it")
            if message[:1] == b"P":
                wid, pid = SPAWNED.unpack_from(message, 1)
                worker = self.workers.get(wid)
                if worker is None or not fds:
                    for fd in fds:
                        os.close(fd)
                    continue
                worker.pid, worker.pidfd, worker.ready = pid, fds[0], True
            elif message[:1] == b"X":
                wid, status, cpu, rss, leaked = EXITED.unpack_from(message, 1)
                if wid in self.workers:
                    self._on_death(self.workers[wid], status, cpu, rss, leaked)

    def _read_results(self, worker: _Worker) -> None:
        fd = worker.fds["result_r"]
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                break
            worker.inbuf += chunk
            if len(chunk) < _CHUNK:
                break
        buffer = worker.inbuf
        offset = 0
        while len(buffer) - offset >= RESULT.size:
            fields = RESULT.unpack_from(buffer, offset)
            end = offset + RESULT.size + fields[1] + fields[0]
            if len(buffer) < end:
                break
            self._answered(worker, fields, buffer, offset + RESULT.size)
            offset = end
        if offset:
            del buffer[:offset]

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
            read_bounded(worker.fds["stack_r"], _STACK_LIMIT)
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
            common: dict[str, Any] = {
                "wall_s": wall,
                "cpu_s": cpu,
                "max_rss_mb": rss / 1024,
                "output": output_text(bytes(buffer[at : at + output_size]), dropped),
                "budget": self.budget,
                "mechanism": Mechanism.FORK,
            }
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
            output, dropped = read_bounded(worker.fds["output_r"], 64 * 1024)
            common: dict[str, Any] = {
                "cpu_s": cpu - worker.cpu_base,
                "max_rss_mb": rss / 1024,
                "output": output_text(output, dropped),
                "budget": self.budget,
                "mechanism": Mechanism.FORK,
                "leaked": leaked,
            }
            if worker.kill_for == index:
                stack, _ = read_bounded(worker.fds["stack_r"], _STACK_LIMIT)
                outcome: Outcome | None = Outcome(
                    Status.TIMEOUT,
                    wall_s=worker.kill_time - start,
                    stack=stack.decode("utf-8", "replace") or None,
                    **common,
                )
            elif worker.kill_for is not None:
                # Killed for an item that answered at the deadline; this one had just begun.
                outcome = None
                back.insert(0, index)
            else:
                signum = exit_code = None
                if status >= 0 and os.WIFSIGNALED(status):
                    signum = os.WTERMSIG(status)
                elif status >= 0 and os.WIFEXITED(status):
                    exit_code = os.WEXITSTATUS(status)
                outcome = Outcome(
                    Status.CRASHED, wall_s=now - start, signal=signum, exit_code=exit_code, **common
                )
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
        if worker.kill_for is None or self.sock is None:  # else requested at the kill
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
            if self.sock is not None:
                self._stop_zygote()
            else:
                for worker in list(self.workers.values()):
                    if worker.pidfd >= 0:
                        leaked = kill_tree(worker.pid, worker.pidfd)
                        with contextlib.suppress(ChildProcessError):
                            os.wait4(worker.pid, 0)
                        del leaked
        finally:
            for worker in list(self.workers.values()):
                self._forget(worker)
            self._forget_zygote()

    def _forget_zygote(self) -> None:
        if self.sock is not None:
            self._unregister(self.sock.fileno())
            self.sock.close()
            self.sock = None
        if self.zygote_pidfd >= 0:
            self._unregister(self.zygote_pidfd)
            os.close(self.zygote_pidfd)
            self.zygote_pidfd = -1

    def _stop_zygote(self) -> None:
        assert self.sock is not None
        with contextlib.suppress(OSError):
            self.sock.send(b"Q")
        if self.zygote_pid and self.zygote_pidfd < 0:  # spawned, but pidfd_open failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.zygote_pid, signal.SIGKILL)
        if self.zygote_pidfd < 0:
            with contextlib.suppress(ChildProcessError):
                if self.zygote_pid:
                    os.waitpid(self.zygote_pid, 0)
            return
        poller = select.poll()
        poller.register(self.zygote_pidfd, select.POLLIN)
        if not poller.poll(_CLOSE_TIMEOUT_S * 1000):
            # It killed every worker it could first; the rest die with it (PDEATHSIG).
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.zygote_pidfd, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.zygote_pid, 0)


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


def _import_target(fn: Callable[..., Any] | str) -> tuple[Any, ...] | None:
    """What a fresh interpreter imports to get ``fn``, or None when it cannot."""
    if isinstance(fn, str):
        target, attr = split_spec(fn)
        if is_file_target(target) and not Path(target).is_absolute():
            target = str(Path.cwd() / target)
        return ("spec", f"{target}:{attr}")
    if not isinstance(fn, _PLAIN_CALLABLES) and _importable(type(fn)):
        # A callable object of an importable class travels pickled; unpickling it in the
        # zygote may import what it wraps there, once for every worker.
        try:
            return ("pickle", pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 - not picklable: served from the caller instead
            return None
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or "<" in qualname:
        return None
    # A module loaded from a file under a made-up name (verl loads a custom reward file as
    # "custom_module", without registering it) is found by its path instead.
    path = getattr(fn, "__globals__", {}).get("__file__")
    path = path if isinstance(path, str) and path.endswith(".py") else ""
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is fn or (found is None and path):
        return ("function", module, qualname, path)
    return None  # that name holds something else (a wrapper, a rebinding): serve fn itself


_PLAIN_CALLABLES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    functools.partial,
    type,
)


def _importable(cls: type) -> bool:
    return cls.__module__ != "__main__" and "<" not in cls.__qualname__


def _warn_if_large() -> None:
    try:
        with open("/proc/self/statm", "rb") as f:
            resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return
    if resident > LARGE_CALLER_BYTES:
        warnings.warn(
            f"Pool: the scorer cannot be imported by name (a lambda, closure or method), so its "
            f"workers are forked from this {resident / (1 << 30):.1f} GiB process: every worker "
            f"start costs ~55 ms per GiB and may copy locks held by other threads. Pass a "
            f"module-level function or a 'pkg.mod:func' spec to fork them from a clean zygote.",
            RuntimeWarning,
            stacklevel=4,
        )
