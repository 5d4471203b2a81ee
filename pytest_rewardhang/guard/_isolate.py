"""A pool worker that runs each item in a process of its own, forked once the item is read.

The warm worker puts back what an item changed (see :class:`._worker._State`), which covers
what it can see: an item that patches a builtin, the guard's own modules or the worker's state
charges every item after it. Here the worker forks a child for each item, with the scorer
imported and the item unpickled; the child makes the call and writes the item's answer exactly
as the warm worker does, then ends; whatever it changed ends with it. The worker only waits.

A child that ends without answering (a crash, a signal, the memory limit) takes the worker
with it, in the same way, so the caller reports the item as it does a warm worker's death and
hands out the items queued behind it again. The caller's kill at a deadline takes the
worker's whole tree, the child in it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import mmap
import os
import signal
import time
from types import FrameType
from typing import Any

from . import _contain, _reap, _walkkill
from ._wire import DUMP_SIGNAL, RETIRED
from ._worker import _Dropped, _Serve


class Isolated(_Serve):  # pragma: no cover - worker only
    """:class:`._worker._Serve`, each item in a child forked for it."""

    def __init__(
        self,
        fn: Any,
        task_r: int,
        result_w: int,
        output_r: int,
        subreaper: bool,
        cage: _contain.Cage,
        dropped: _Dropped,
        fence: mmap.mmap,
        stack_w: int,
    ) -> None:
        super().__init__(fn, task_r, result_w, output_r, subreaper, cage, dropped, fence, stack_w)
        #: Shared with each child: [0] the index (+1) of the item it answered, once its answer
        #: is written; [1] whether it did what may leave a process outside its subtree.
        self.shared = memoryview(mmap.mmap(-1, mmap.PAGESIZE)).cast("Q")
        #: The child running the current item; 0 between items.
        self.child = 0
        # The caller's stack dump signal comes to the worker: the child's stack is the item's.
        faulthandler.unregister(DUMP_SIGNAL)
        signal.signal(DUMP_SIGNAL, self._forward_dump)

    def _forward_dump(self, signum: int, frame: FrameType | None) -> None:
        if self.child and os.getpid() == self.pid:
            with contextlib.suppress(OSError):  # it has just ended
                os.kill(self.child, DUMP_SIGNAL)

    def _one(self, index: int, item: Any) -> None:
        self.shared[0] = self.shared[1] = 0
        # What the worker and the children it reaped used: the child's clock starts at zero,
        # and the caller charges a dead worker's item with its total since the last answer.
        used = os.times()
        base = used.user + used.system + used.children_user + used.children_system
        pid = os.fork()
        if pid == 0:
            self._child(index, item, base)
        self.child = pid
        try:
            _, status = os.waitpid(pid, 0)
        finally:
            self.child = 0
        self._sweep()
        if self.shared[0] != index + 1:
            _end_as(status)
        # Read once the child has ended: its answer was written before, as the warm worker's
        # is before it reads the fence (see _Serve._one).
        if self.fence[0] == index + 1:
            os._exit(RETIRED)

    def _child(self, index: int, item: Any, base: float) -> None:
        code = 70
        try:
            self.pid = os.getpid()
            # Later items are the worker's: the child never reads them.
            os.close(self.task_r)
            faulthandler.register(DUMP_SIGNAL, file=self.stack_w, all_threads=True, chain=False)
            self.state.dirty = False
            self.cpu_base = base
            self.cpu_mark = time.process_time() + base
            self._answer(index, item)
            self.shared[0] = index + 1
            code = 0
        except BaseException:  # noqa: BLE001, S110 - no answer: the worker ends as we do
            pass
        finally:
            os._exit(code)

    def _leaked(self, alone: bool) -> int:
        """In the child: kill what the call started below it, if it may have started any.

        Not the cage's strays: the worker is one. What escaped comes to the worker, the
        subreaper, and is killed once the child has ended (see :meth:`_sweep`).
        """
        self.shared[1] = self.state.dirty
        if not (self.subreaper and self.state.dirty):
            return 0
        return _walkkill.kill_descendants(os.getpid()) + _reap.reap_children()

    def _leaving(self, wall: float, alone: bool) -> bool:
        return False  # nothing the child changed outlives it

    def _sweep(self) -> None:
        """In the worker, once the child has ended: kill what it left, uncounted (its answer
        is written)."""
        if not self.subreaper:
            return
        if self.children_fd < 0 or os.pread(self.children_fd, 64, 0).strip():
            _walkkill.kill_descendants(os.getpid())
            _reap.reap_children()
        if self.shared[1]:
            self.cage.kill_strays()


def _end_as(status: int) -> None:  # pragma: no cover - worker only; never returns
    """End the worker as its child ended: by the same signal, or with the same exit code."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        # No dump of the worker's own stack onto the item's output, no handler of ours.
        faulthandler.disable()
        try:
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
            os.kill(os.getpid(), signum)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP cannot be set, only sent
            os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 70)
