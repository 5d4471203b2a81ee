"""A pool worker, in its own process: warm, it scores item after item until its task pipe closes.

A worker reads batches of pickled items from its task pipe and answers each item with one result
frame on its result pipe *before* it starts the next item, so the caller always knows which item
is running and since when: a crash or a kill loses exactly the current item and nothing else.
"""

from __future__ import annotations

import fcntl
import io
import os
import pickle
import resource
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable
from typing import Any

from . import _proctree
from ._child import call, setup_child
from ._outcome import Status
from ._wire import (
    CHUNK,
    OUTPUT_LIMIT,
    pickle_frame,
    read_bounded,
    result_frame,
    task_frame,
    write_all,
)

_FIONREAD_BUF = bytes(4)
_NO_KWARGS: dict[str, Any] = {}


class _Unreadable:
    """Stands in for an item whose batch the worker could not unpickle."""

    def __init__(self, text: str) -> None:
        self.text = text


def serve(
    fn: Callable[..., Any],
    fds: dict[str, int],
    memory_mb: float | None,
    subreaper: bool,
) -> None:  # pragma: no cover - runs only in a worker; never returns
    code = 70
    try:
        setup_child(fds["output_w"], fds["stack_w"], memory_mb)
        writers = _never_blocking_stdio()
        _Serve(fn, fds["task_r"], fds["result_w"], fds["output_r"], subreaper, writers).loop()
        code = 0
    except BaseException:  # noqa: BLE001, S110 - the caller sees the exit and reports the item
        pass
    finally:
        os._exit(code)


class _DroppingPipe(io.RawIOBase):  # pragma: no cover - worker only
    """The output pipe for ``sys.stdout``/``sys.stderr``: what does not fit is dropped, counted.

    Nobody reads a worker's output pipe while an item runs (the worker reads it after the item),
    so a scorer that printed more than the pipe holds blocked in ``print`` until its deadline
    and was reported as a hang. The pipe is opened a second time, non-blocking, so fds 1 and 2
    stay blocking for C code and subprocesses, and everything written keeps its order.
    """

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.target = fd
        self.pipe = _identity(fd)
        self.fd = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.target  # what callers hand on, e.g. to a subprocess, is the blocking fd

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        if _identity(self.target) != self.pipe:
            # The call pointed fd 1 (or 2) elsewhere, to capture or silence output with
            # os.dup2: prints follow it there, as they would on a plain file over that fd.
            write_all(self.target, view)
            return size
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except BlockingIOError:
            self.dropped += len(view)
        except OSError:  # the call closed our descriptor; the blocking one still works
            write_all(self.target, view)
        return size


def _identity(fd: int) -> tuple[int, int]:  # pragma: no cover - worker only
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


def _never_blocking_stdio() -> list[_DroppingPipe]:  # pragma: no cover - worker only
    try:
        writers = [_DroppingPipe(1), _DroppingPipe(2)]
    except OSError:  # no /proc: prints that overflow the pipe wait for the deadline, as before
        return []
    sys.stdout, sys.stderr = (
        io.TextIOWrapper(io.BufferedWriter(w), line_buffering=True, errors="backslashreplace")
        for w in writers
    )
    return writers


class _Serve:  # pragma: no cover - worker only
    def __init__(
        self,
        fn: Callable[..., Any],
        task_r: int,
        result_w: int,
        output_r: int,
        subreaper: bool,
        writers: list[_DroppingPipe],
    ) -> None:
        self.fn = fn
        self.writers = writers
        self.task_r = task_r
        self.result_w = result_w
        self.output_r = output_r
        os.set_blocking(output_r, False)
        self.subreaper = subreaper
        self.children_fd = -1
        if subreaper:
            try:
                pid = os.getpid()
                self.children_fd = os.open(f"/proc/{pid}/task/{pid}/children", os.O_RDONLY)
            except OSError:
                self.children_fd = -1
        self.buffer = bytearray()
        self.items = 0
        self.cpu_mark = 0.0
        self.max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def loop(self) -> None:
        while True:
            batch = self._read_batch()
            if batch is None:
                return
            indexes, items = batch
            # One CPU clock read per item: each item's end is the next one's start.
            self.cpu_mark = time.process_time()
            for index, item in zip(indexes, items, strict=False):
                self._one(index, item)

    def _read_batch(self) -> tuple[list[int], list[Any]] | None:
        while (frame := task_frame(self.buffer)) is None:
            chunk = os.read(self.task_r, CHUNK)
            if not chunk:
                return None  # the pool closed our task pipe: leave quietly
            self.buffer += chunk
        indexes, payload, end = frame
        try:
            items: list[Any] = pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - e.g. a class the worker cannot import
            text = f"{type(exc).__name__}: the items could not be unpickled in the worker: {exc}"
            items = [_Unreadable(text)] * len(indexes)
        del self.buffer[:end]
        return indexes, items

    def _one(self, index: int, item: Any) -> None:
        # process_time() reads the same CPU accounting as getrusage() without building a
        # struct: at 50 µs an item, the guard's own microseconds are what throughput is made of.
        cpu_before = self.cpu_mark
        start = time.perf_counter()
        if type(item) is tuple:
            frame = call(self.fn, item, _NO_KWARGS)
        elif type(item) is dict:
            frame = call(self.fn, (), item)
        else:
            frame = (Status.ERROR.value, None, item.text, None)
        wall = time.perf_counter() - start
        leaked = self._leaked()
        output, dropped = self._output()
        for writer in self.writers:
            dropped += writer.dropped
            writer.dropped = 0
        cpu_total = self.cpu_mark = time.process_time()
        # The peak only grows during an item that allocates, which takes time: a quick item
        # cannot have moved it far since the last look.
        self.items += 1
        if wall > 0.001 or not self.items % 64:
            self.max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        payload = pickle_frame(frame)
        result = result_frame(
            payload,
            output,
            dropped,
            index,
            leaked,
            wall,
            cpu_total - cpu_before,
            cpu_total,
            time.monotonic(),
            self.max_rss,
        )
        write_all(self.result_w, result)

    def _leaked(self) -> int:
        """Kill what the item left running; cheap when it started nothing."""
        if not self.subreaper:
            return 0
        # Orphans re-parent to the main thread, so its children list sees every leftover
        # unless another thread forked one; then the full walk is needed.
        if (
            self.children_fd >= 0
            and threading.active_count() == 1
            and not os.pread(self.children_fd, 64, 0).strip()
        ):
            return 0
        return _proctree.kill_descendants(os.getpid()) + _proctree.reap_children()

    def _output(self) -> tuple[bytes, int]:
        waiting = struct.unpack("i", fcntl.ioctl(self.output_r, termios.FIONREAD, _FIONREAD_BUF))
        if not waiting[0]:
            return b"", 0
        return read_bounded(self.output_r, OUTPUT_LIMIT)
