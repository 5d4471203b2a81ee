"""Finding and killing every descendant of a process, setsid() escapees included.

The guard's child makes itself a child subreaper (Linux), so any descendant orphaned below it is
re-parented to it instead of to init: while the child lives, its subtree is closed and can be
walked through ``/proc``. Killing is race-free without freezing the tree first: once a process
has a pending SIGKILL the kernel aborts any fork it has not finished, so a walk that finds no
process it has not already signalled has found them all.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from functools import cache

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def prepare() -> None:
    """Resolve prctl in the caller, so a forked child never pays for (or deadlocks in) dlopen."""
    libc = _libc()
    if libc is not None:
        libc.prctl  # noqa: B018 - ctypes caches the symbol on first attribute access


def become_subreaper(parent_pid: int) -> bool:
    """In the child: adopt orphaned descendants, and die with the parent. False off Linux."""
    libc = _libc()
    if libc is None:
        return False
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(1)
    return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def _children(pid: int) -> Iterator[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                data = f.read()
        except OSError:
            continue
        for word in data.split():
            yield int(word)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # The state follows the parenthesised command name, which may itself hold parentheses.
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")


def kill_descendants(root: int, grace: float = 1.0) -> int:
    """SIGKILL every living descendant of ``root`` and wait until they are gone.

    Returns how many there were. ``root`` must not fork meanwhile: it is stopped, or it is the
    caller itself. The wait (through pidfds, so a recycled pid is never signalled) is bounded by
    ``grace`` for processes stuck in uninterruptible sleep, which no signal can hurry.
    """
    signalled: set[int] = set()
    pidfds: list[int] = []
    try:
        while True:
            found = [pid for pid in _walk(root) if pid not in signalled and _alive(pid)]
            if not found:
                break
            for pid in found:
                signalled.add(pid)
                try:
                    pidfd = os.pidfd_open(pid)
                except ProcessLookupError:
                    continue
                except OSError:  # out of descriptors in a fork storm: signal by pid instead
                    _kill(pid)
                    continue
                pidfds.append(pidfd)
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        _wait_exited(pidfds, grace)
    finally:
        for pidfd in pidfds:
            os.close(pidfd)
    return len(signalled)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _wait_exited(pidfds: list[int], grace: float) -> None:
    """A pidfd turns readable when its process has exited, parent or not."""
    poller = select.poll()
    for pidfd in pidfds:
        poller.register(pidfd, select.POLLIN)
    left = len(pidfds)
    deadline = time.monotonic() + grace
    while left:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            return
        for pidfd, _ in poller.poll(math.ceil(timeout * 1000)):
            poller.unregister(pidfd)
            left -= 1


def _walk(root: int) -> Iterator[int]:
    frontier = [root]
    while frontier:
        for child in _children(frontier.pop()):
            yield child
            frontier.append(child)
