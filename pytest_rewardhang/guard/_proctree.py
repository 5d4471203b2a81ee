"""Finding, killing and reaping every descendant of a process, setsid() escapees included.

Used by the caller (run's parent, the pool), the zygote, and the guarded processes themselves.

The guard's child makes itself a child subreaper (Linux), so any descendant orphaned below it is
re-parented to it instead of to init: while the child lives, its subtree is closed and can be
walked through ``/proc``. Killing is race-free without freezing the tree first: once a process
has a pending SIGKILL the kernel aborts any fork it has not finished, so a walk that finds no
process it has not already signalled has found them all.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
from collections.abc import Collection, Iterator
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


def become_subreaper(parent_pid: int | None) -> bool:
    """Adopt orphaned descendants, and die with ``parent_pid`` if given. False off Linux.

    Called in a new process: a death signal follows the *thread* that forked it, so only a
    process forked by its parent's main thread gets one.
    """
    libc = _libc()
    if libc is None:
        return False
    if parent_pid is not None:
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


_PF_EXITING = 0x4
_SIGKILL_MASK = 1 << (signal.SIGKILL - 1)


def _alive(pid: int) -> bool:
    """Still able to run code: not a zombie, not exiting, no SIGKILL pending.

    A nested guard's kill does not wait for its victims to finish exiting; they are not the
    outer call's leftovers.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # The state follows the parenthesised command name, which may itself hold parentheses.
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X") or int(fields[6]) & _PF_EXITING:
        return False
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & _SIGKILL_MASK:
            return False
    return True


def kill_descendants(root: int) -> int:
    """SIGKILL every living descendant of ``root``; returns how many there were.

    ``root`` must not fork meanwhile: it is stopped, or it is the caller itself. It does not
    wait for them to finish exiting: a process with SIGKILL pending never runs another
    instruction of its own, and tearing down a hundred forks of a large process takes the
    kernel longer than a caller should wait. Each victim goes to nice 19 first, so that
    teardown does not starve the exit of ``root`` that the caller does wait for: a fork storm
    of a 400 MB caller made it 0.4 s late on 2 idle cores (0.8-1.0 s with both busy); at nice
    19, 0.03 s (0.06-0.14 s). Not SCHED_IDLE: no quicker, and a victim holding a lock of the
    address space it shares with ``root`` could wait long for CPU on a busy machine.
    """
    signalled: set[int] = set()
    while True:
        found = [pid for pid in _walk(root) if pid not in signalled and _alive(pid)]
        if not found:
            return len(signalled)
        for pid in found:
            signalled.add(pid)
            _kill(pid)


def _kill(pid: int) -> None:
    """Through a pidfd, so a pid recycled since the walk is never signalled."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # out of descriptors in a fork storm: by pid, as the next best
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return
    try:
        _demote(pid)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)


_NICEST = 19


def _demote(pid: int) -> None:
    # Per thread: any of them may be the one that tears the address space down. The walk lists
    # parents first, so the victim's parent is ``root`` or has SIGKILL pending, and does not
    # reap it and free its pid for reuse before this (unless that parent ignores SIGCHLD and
    # the victim exits on its own just now: then a recycled pid would run at nice 19).
    if not sys.platform.startswith("linux"):
        return
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, int(tid), _NICEST)


def _walk(root: int) -> Iterator[int]:
    frontier = [root]
    while frontier:
        for child in _children(frontier.pop()):
            yield child
            frontier.append(child)


def kill_tree(pid: int, pidfd: int) -> int:
    """Freeze the child ``pid``, kill its descendants and its group, then the child itself.

    ``pid`` must be a child of the calling process (``waitid`` on its pidfd sees it stop).
    Returns how many descendants there were; 0 if the child was already gone.
    """
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
    except ProcessLookupError:
        return 0
    # Until the stop takes effect the child could still finish a fork.
    with contextlib.suppress(ChildProcessError):
        os.waitid(os.P_PIDFD, pidfd, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
    leaked = kill_descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    return leaked


def reap(pid: int) -> tuple[int, resource.struct_rusage | None]:
    """Wait for the child ``pid`` to end: its wait status and resource usage.

    ``(-1, None)`` when it cannot be reaped: the caller reaps children itself, or ignores SIGCHLD.
    """
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return -1, None
    return status, usage


def kill_and_reap(pid: int, pidfd: int) -> tuple[int, int, resource.struct_rusage | None]:
    """:func:`kill_tree`, then :func:`reap`: how many descendants it had, wait status, usage."""
    leaked = kill_tree(pid, pidfd)
    return (leaked, *reap(pid))


def reap_children(spare: Collection[int] = ()) -> int:
    """Kill and reap every child of this process but ``spare``; how many were still alive.

    The orphans of each one re-parent to this process (a subreaper) before it is reaped, so
    they are found in the next round; when no child is left, no descendant is.
    """
    killed = 0
    while True:
        strays = [pid for pid in _children(os.getpid()) if pid not in spare]
        if not strays:
            return killed
        for pid in strays:
            # A zombie, or one killed already (by kill_descendants, say), is not counted again.
            killed += _alive(pid)
            # Once killed it cannot fork; its children come to us for the next round. By pid:
            # an unreaped child's pid cannot be recycled.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
