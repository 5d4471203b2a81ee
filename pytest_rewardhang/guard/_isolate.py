"""A pool worker that runs each item in a process of its own, forked once the item is read.

The warm worker puts back what an item changed (see :class:`._worker._State`), which covers
what it can see: an item that patches a builtin, the guard's own modules or the worker's state
charged every item after it. Here the worker forks a child for each item, with the scorer
imported and the item unpickled; the child makes the call and hands the worker what it
returned, then ends, and whatever it changed ends with it. The worker, which ran no code of
the call's, writes the item's answer: its CPU and peak memory are the child's, as the kernel
counted them, and what it printed and left running is read and killed once it has ended.

A child that ends without handing its result over (a crash, a signal, the memory limit) takes
the worker with it, in the same way, so the caller reports the item as it does a warm
worker's death and hands out the items queued behind it again. The caller's kill at a
deadline takes the worker's whole tree, the child in it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import mmap
import os
import resource
import signal
import struct
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

from . import _inherit, _libc
from ._box import Box
from ._wire import DUMP_SIGNAL, RESULT_LIMIT, RETIRED, result_frame, result_payload, write_all
from ._worker import _Dropped, _Serve, call_item

#: What the child hands the worker before the payload: the payload's size (-1 for an OK
#: float, then carried here), output bytes dropped, whether it did what may leave a process
#: outside its subtree. Not its time: the worker measures that (the call may write this).
_HANDED = struct.Struct("=qdQ?")
_FLOAT = -1


class Isolated(_Serve):  # pragma: no cover - worker only
    """:class:`._worker._Serve`, each item in a child forked for it."""

    def __init__(
        self,
        fn: Callable[..., Any],
        task_r: int,
        result_w: int,
        output_r: int,
        subreaper: bool,
        box: Box,
        dropped: _Dropped,
        fence: mmap.mmap,
        stack_w: int,
    ) -> None:
        # Kept for the items' boxes, which enter namespaces and identities through it: the
        # warm worker's forgetting of it (see _Serve) is for items that run in the worker.
        _libc.prepare()
        self.libc = _libc.libc()
        super().__init__(fn, task_r, result_w, output_r, subreaper, box, dropped, fence, stack_w)
        #: The child running the current item; 0 between items.
        self.child = 0
        #: What each child inherits from us, put back after each item (see ._inherit).
        self.inherited = _inherit.read()
        # The caller's stack dump signal comes to the worker: the child's stack is the item's.
        faulthandler.unregister(DUMP_SIGNAL)
        signal.signal(DUMP_SIGNAL, self._forward_dump)

    def _forward_dump(self, signum: int, frame: FrameType | None) -> None:
        if self.child and os.getpid() == self.pid:
            with contextlib.suppress(OSError):  # it has just ended
                os.kill(self.child, DUMP_SIGNAL)

    def _one(self, index: int, item: Any) -> None:
        # The item's channel: the one pipe it hands its result on, which the worker relays as
        # this item's answer alone; it never holds the worker's result pipe.
        handed_r, handed_w = os.pipe()
        box = self.box.item()
        # Its time, from its fork to its hand-over, as we see it: what it hands over is the
        # call's to write, and a time it claimed (a nanosecond) would be its outcome's and set
        # the size of every later batch, by the mean item time. Read before the fork: on a
        # busy machine the child may run for a while before the fork returns here.
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            self._child(item, box, handed_w)
        os.close(handed_w)
        self.child = pid
        try:
            handed = _read_handed(handed_r, pid)
        finally:
            os.close(handed_r)
        wall = time.perf_counter() - start
        siblings = 0
        try:
            _, status, usage = os.wait4(pid, 0)
        finally:
            self.child = 0
            # Its uid given back: once reaped, what it left running is the worker's to kill
            # below, before the next item's fork hands the uid out again (in turn: not soon).
            # What it started as our child (clone(CLONE_PARENT)) is killed here, and counted.
            siblings = box.close(time.monotonic())
        if handed is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status):
            self.state.dirty = True  # what it left outside its subtree: the zygote's now
            self._leaked(True)
            _end_as(status)
        size, number, dropped, self.state.dirty = _HANDED.unpack_from(handed)
        payload = None if size == _FLOAT else bytes(handed[_HANDED.size :])
        # What it left running came to us, the subreaper, as it ended: killed and counted.
        leaked, cleared = self._leaked(True)
        leaked += siblings
        dirty, self.state.dirty = self.state.dirty, False
        # The child may have re-limited us, its parent, from outside: put back for the next
        # one, or, where that cannot be, retire once this answer is written.
        leaving = not _inherit.put_back(self.inherited)
        ready = self._ready()
        leaving = not (self._confined(dirty, ready) and cleared) or leaving
        output, drained = self._output(ready)
        used = os.times()
        result = result_frame(
            (None, number),
            payload,
            output,
            dropped + drained,
            index,
            leaked,
            wall,
            usage.ru_utime + usage.ru_stime,
            used.user + used.system + used.children_user + used.children_system,
            time.monotonic(),
            usage.ru_maxrss,
            leaving,
        )
        write_all(self.result_w, result)
        # As the warm worker does (see _Serve._one): once the answer is written.
        if leaving or self.fence[0] == index + 1:
            os._exit(RETIRED)

    def _child(self, item: Any, box: Box, handed_w: int) -> None:
        """Make the call, hand its result to the worker, end: nothing here returns."""
        code = 70
        try:
            worker, self.pid = self.pid, os.getpid()
            # The worker's memory of the fence, which an item could write to retire its worker
            # early or have the caller charge the next item, goes: only descriptors and the
            # memory of its own are the item's.
            self.fence.release()
            self.fence_map.close()
            _libc.adopt(self.libc)
            # Its box: of the worker's descriptors it keeps its own channel (the handed pipe,
            # the stack dump's, its output on 1 and 2 and their non-blocking twins) alone;
            # its own IPC namespace and uid. The worker stays out of its reach.
            box.enter((handed_w, self.stack_w, *self.dropped.fds), worker)
            faulthandler.register(DUMP_SIGNAL, file=self.stack_w, all_threads=True, chain=False)
            self.state.dirty = False
            frame = call_item(self.fn, item)
            payload = result_payload(frame)  # the value's __reduce__ is the call's code too
            if os.getpid() != self.pid:
                os._exit(0)  # a child the call forked, returning: it never answers
            if payload is None:
                head = _HANDED.pack(_FLOAT, frame[1], self.dropped.count, self.state.dirty)
                write_all(handed_w, head)
            else:
                head = _HANDED.pack(len(payload), 0.0, self.dropped.count, self.state.dirty)
                write_all(handed_w, head + payload)
            code = 0
        except BaseException:  # noqa: BLE001, S110 - nothing handed over: the worker ends too
            pass
        finally:
            os._exit(code)


def _read_handed(fd: int, pid: int) -> bytearray | None:  # pragma: no cover - worker only
    """What the child handed over, read as far as its header says; None when it is not whole.

    Not read to the pipe's end: a process the call forked and left running holds the writing
    end too, and is killed only once the child has ended. A header claiming more than a result
    can be is the call's doing: the child is killed, and the worker ends as it did.
    """
    handed = bytearray()
    want = _HANDED.size
    while len(handed) < want:
        chunk = os.read(fd, min(want - len(handed), 1 << 20))
        if not chunk:
            return None  # it ended before it handed everything over
        handed += chunk
        if want == _HANDED.size and len(handed) >= want:
            size = _HANDED.unpack_from(handed)[0]
            if size < _FLOAT or size > RESULT_LIMIT:
                os.kill(pid, signal.SIGKILL)
                return None
            want += max(size, 0)
    return handed


def _end_as(status: int) -> NoReturn:  # pragma: no cover - worker only
    """End the worker as its child ended: by the same signal, or with the same exit code."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        # No dump of the worker's own stack onto the item's output, no handler of ours; and
        # no core of ours (root's, with the caller's core limit, in its working directory):
        # the signal only says how the item ended.
        faulthandler.disable()
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(
                resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1])
            )
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's cannot be set, only sent
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)
