"""Reaping the guard's children: one that has exited, one killed within a bound (else left
for a later sweep), and every child of this process but some (a subreaper's strays).
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import time
from collections.abc import Collection

from . import _procfs
from ._state import STATE

#: How long :func:`._treekill.kill_and_reap` waits by default, in all, for the killed child (and
#: what it killed below it) to finish exiting; past it the child is left for :func:`sweep_unreaped`
#: (a process in uninterruptible sleep may never exit; a 3 GiB one takes the kernel tens of
#: milliseconds to tear down).
REAP_WAIT_S = 0.05


def reap(pid: int) -> tuple[int, resource.struct_rusage | None]:
    """Wait for the child ``pid`` to end: its wait status and resource usage.

    For a child known to have exited (its pidfd readable); see :func:`reap_within` otherwise.
    ``(-1, None)`` when it cannot be reaped: the caller reaps children itself, or ignores SIGCHLD.
    """
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return -1, None
    return status, usage


def reap_within(
    pid: int, pidfd: int | None, timeout: float
) -> tuple[int, resource.struct_rusage | None]:
    """Reap the child ``pid`` if it ends within ``timeout`` seconds; else leave it for later.

    ``(-1, None)`` when it could not be reaped in time (it is swept later) or at all.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            found, status, usage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            return -1, None
        if found:
            return status, usage
        left = deadline - time.monotonic()
        if left <= 0:
            STATE.unreaped.add(pid)
            return -1, None
        if pidfd is None:
            time.sleep(min(left, 0.001))
        else:
            select.select([pidfd], [], [], left)


def sweep_unreaped() -> None:
    """Reap, without waiting, the killed children that were slow to exit."""
    for pid in list(STATE.unreaped):
        try:
            found, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            found = pid
        if found:
            STATE.unreaped.discard(pid)


def reap_exited(spare: Collection[int] = ()) -> int:
    """Reap, without waiting, the children of this process but ``spare`` that have exited;
    how many others are left (killed and still exiting, where every one was killed)."""
    left = 0
    for child in _procfs.children(_procfs.own_pid()):
        pid = _procfs.to_local(child)
        if pid is None or pid in spare:
            continue
        try:
            found, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        left += not found
    return left


def reap_children(spare: Collection[int] = ()) -> int:
    """Kill and reap every child of this process but ``spare``; how many were still alive.

    The orphans of each one re-parent to this process (a subreaper) before it is reaped, so
    they are found in the next round; when no child is left, no descendant is. A PID
    namespace's init is reaped last: its exit waits until every process of its namespace is
    reaped, and those whose parent is outside it are our children too.
    """
    killed = 0
    while True:
        strays = []
        for child in _procfs.children(_procfs.own_pid()):
            pid = _procfs.to_local(child)
            if pid is not None and pid not in spare:
                alive, init = _procfs.state(child)
                strays.append((init, pid, alive))
        if not strays:
            return killed
        strays.sort()
        for init, pid, alive in strays:
            # A zombie, or one killed already (by kill_descendants, say), is not counted again.
            killed += alive and not init
            # Once killed it cannot fork; its children come to us for the next round. By pid:
            # an unreaped child's pid cannot be recycled.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for _, pid, _ in strays:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
