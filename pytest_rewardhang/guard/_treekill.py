"""The subreaper's kill of a tree: stop the child and everything below it first, then kill
the child and reap it alone, then the rest (:class:`_TreeKill`).

The guard's child makes itself a child subreaper (Linux), so any descendant orphaned below it is
re-parented to it instead of to init: while the child lives, its subtree is closed and can be
walked through ``/proc``. Where the stop does not take effect in time, the kill falls back to
the walk that kills as it goes (:func:`._walkkill.kill_descendants`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time

from . import _procfs, _reap
from ._backoff import Backoff
from ._walkkill import Groups, await_gone, demote, kill_descendants, walk_stat

#: How long a kill waits for its SIGSTOP to take effect before it kills anyway.
STOP_WAIT_S = 0.04


def signal_child(pid: int, pidfd: int | None, signum: int) -> bool:
    """Signal the child through its pidfd, or by pid when there is none; False if it is gone."""
    try:
        if pidfd is None:
            os.kill(pid, signum)  # an unreaped child's pid cannot be recycled
        else:
            signal.pidfd_send_signal(pidfd, signum)
    except ProcessLookupError:
        return False
    return True


def _waitid(pid: int, pidfd: int | None, options: int) -> bool:
    """Whether ``waitid`` reports the child in a state ``options`` asks for, without waiting."""
    try:
        if pidfd is None:
            found = os.waitid(os.P_PID, pid, options | os.WNOHANG | os.WNOWAIT)
        else:
            found = os.waitid(os.P_PIDFD, pidfd, options | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already (SIGCHLD ignored), or not our child
        return True
    return found is not None


def _await_stop(pid: int, pidfd: int | None, timeout: float) -> bool:
    """Poll, for at most ``timeout`` seconds, until the child is stopped or dead."""
    backoff = Backoff(time.monotonic() + timeout)
    while not _waitid(pid, pidfd, os.WSTOPPED | os.WEXITED):
        if not backoff.sleep():
            return False
    return True


def kill_tree(pid: int, pidfd: int | None, killed: list[int] | None = None) -> int:
    """Kill the child ``pid``, all its descendants and its process group.

    ``pid`` must be a child of the calling process; ``pidfd`` is its pidfd, or None where there
    is none (then it is signalled by pid, which cannot be recycled before it is reaped).
    Returns how many descendants there were (their pids go to ``killed`` if given); 0 if the
    child was already gone. Waits for at most :data:`STOP_WAIT_S` (see :class:`_TreeKill`).
    """
    kill = _TreeKill(pid, pidfd, killed)
    kill.rest()
    return kill.leaked


class _TreeKill:
    """Stop the child and everything below it, kill the child, and (:meth:`rest`) the others.

    The descendants are found by walking ``/proc`` from the child, and the walk is complete only
    if nothing in the subtree can fork meanwhile and an orphan re-parents to the child (a
    subreaper), which it does only while the child lives. So the child and then each process
    the walk finds gets SIGSTOP, through a pidfd kept for the kill, and so does its process
    group where only the subtree can be in it (:class:`Groups`: a chain that forks and exits
    faster than the walk follows it is stopped whole); a process still running when its
    parent's children were read could have forked after, so the walk is repeated until one
    finds nothing new and every process it went through had been seen stopped (all its
    threads: a thread still inside ``fork`` completes it) before it began. Then nothing
    in the subtree can run: the child is killed and reaped alone, and only then the others
    (its death can wake one of them: see :meth:`rest`, which kills before it reads anything).
    Killed while the child lived, a hundred forks of a large caller tore down beside it,
    sharing its memory, and held its exit past the deadline's bound on a busy machine.

    But a stop may never take effect: a thread in a vfork wait (its vfork child blocked, say,
    opening a FIFO) or in uninterruptible sleep does not join a group stop, so waiting for the
    stop without a bound froze the caller. Past :data:`STOP_WAIT_S` the kill falls back to
    walking the subtree and killing it while the child lives (orphans still come to it), then
    the child. That stays race-free enough: with SIGSTOP pending no thread can *start* a fork
    (any thread returning to user space stops), a thread stuck in vfork or D state forks
    nothing, and only a fork already inside the kernel can still complete. SIGKILL makes the
    kernel abort any fork the child has not finished, and a second walk and ``killpg`` catch
    a process that such an in-flight fork attached just before. What is left is a child
    created by a fork that was inside the kernel at the kill, that ran ``setsid`` within
    microseconds, before the second walk, while the child's exit had already handed it to
    init: a PID namespace (where the platform allows one) closes that too. A process outside
    the subtree that continues or kills one inside during the walk is not guarded against.
    """

    def __init__(self, pid: int, pidfd: int | None, killed: list[int] | None = None) -> None:
        """Stop the tree and kill the child (in the fallback, everything): see the class.

        The descendants' pids, as ``/proc`` names them, go to ``killed`` if given, once they
        are killed.
        """
        self.pid, self.pidfd, self.killed = pid, pidfd, killed
        #: Stopped descendants, as /proc names them: how to signal each (see :func:`_hold`).
        self.held: dict[int, tuple[int | None, int | None]] = {}
        self.groups = Groups(_procfs.to_proc(pid))  # its root: the child, as /proc names it
        self.leaked = 0  # counted by the walk that saw every descendant stopped, or killed
        if not signal_child(pid, pidfd, signal.SIGSTOP):
            return
        # Its process group too (it leads one: see ._child): forks that kept the group stop
        # burning the CPU the walk needs. Fifty busy ones left the walk 1/26 of a core on 2.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGSTOP)
        until = time.monotonic() + STOP_WAIT_S
        child_stopped = everything = False
        try:
            child_stopped = _await_stop(pid, pidfd, STOP_WAIT_S)
            everything = child_stopped and self._freeze_descendants(until)
        finally:  # interrupted, too: nothing is left stopped
            if everything:
                signal_child(pid, pidfd, signal.SIGKILL)
            else:
                self._kill_walking(child_stopped)

    def _freeze_descendants(self, until: float) -> bool:
        """SIGSTOP the child's descendants until a walk sees all stopped; False at ``until``.

        A walk reads a process's children after it has looked at the process: once it was
        seen stopped, they are all it will ever have. So a walk that saw every process it
        went through stopped, and no process that had just exited (its children re-parent to
        the child, whose children the walk may have read already), has found them all; the
        processes it saw are what the call left running (:attr:`leaked`), namespace inits
        aside. A walk sees a process before it stops it, so it takes two at least; a walk of a
        hundred processes on a busy machine takes tens of milliseconds (the first read of a new
        process's ``/proc`` is slow), and the deadline's bound includes them.
        """
        exited: set[int] = set()
        inits: set[int] = set()  # namespace inits below ours: killed, not counted
        backoff = Backoff(until)
        while True:
            settled = True
            present = 0
            for pid, fields in walk_stat(self.groups.root, exited, self.groups, signal.SIGSTOP):
                if fields is None:
                    settled = False
                    continue
                if pid not in self.held:
                    self.groups.signal(pid, signal.SIGSTOP, fields)
                    self.held[pid] = _hold(pid)
                    if _procfs.state(pid, fields)[1]:
                        inits.add(pid)
                settled &= _all_stopped(pid, fields)  # else running, or exiting (killed)
                present += pid not in inits
            if settled:
                self.leaked = present
                return True
            if not backoff.sleep():
                return False

    def rest(self) -> None:
        """Kill the others: the stopped descendants, their groups and the child's group.

        Nothing is read first: once the child has died, a descendant whose parent it was can
        be running again (a parent-death signal of SIGCONT, or the SIGCONT the kernel sends a
        stopped process group that the death leaves orphaned), under init.
        """
        try:
            if self.killed is not None:
                self.killed += self.held
            for local, pidfd in self.held.values():
                if local is not None:
                    _signal(local, pidfd, signal.SIGKILL)
            for group in self.groups.sent.get(signal.SIGSTOP, ()):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            # Reniced only now, for their teardown: at nice 0 they reached the stop sooner (it
            # takes each one a turn on a CPU), and nothing is read before the kill.
            for pid, (local, _) in self.held.items():
                if local == pid:
                    demote(pid)
        finally:
            for _, pidfd in self.held.values():
                if pidfd is not None:
                    os.close(pidfd)
            self.held.clear()

    def _kill_walking(self, child_stopped: bool) -> None:
        """The fallback: kill the subtree by walking it while the child lives, then the child.

        What was stopped is killed on the way (SIGKILL ends a stopped process too); the pidfds
        kept for it are closed here, so that :meth:`rest` has nothing left to kill.
        """
        pid, pidfd, killed = self.pid, self.pidfd, self.killed
        self.leaked = kill_descendants(pid, killed=killed)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        signal_child(pid, pidfd, signal.SIGKILL)
        for _, held in self.held.values():  # to rest() nothing is left to kill
            if held is not None:
                os.close(held)
        self.held.clear()
        if not child_stopped:
            self.leaked += kill_descendants(pid, killed=killed)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def _hold(pid: int) -> tuple[int | None, int | None]:
    """SIGSTOP ``pid`` (as /proc names it): its pid as our namespace names it and a pidfd of it,
    to kill it by later; ``(None, None)`` once it is gone. The pidfd is None when out of
    descriptors: then it is killed by pid, which a stopped process keeps."""
    local = _procfs.to_local(pid)
    if local is None:
        return None, None
    pidfd = None
    try:
        pidfd = os.pidfd_open(local)
    except ProcessLookupError:
        return None, None
    except OSError:
        pass
    _signal(local, pidfd, signal.SIGSTOP)
    return local, pidfd


def _signal(local: int, pidfd: int | None, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # see _kill
        if pidfd is None:
            os.kill(local, signum)
        else:
            signal.pidfd_send_signal(pidfd, signum)


def _all_stopped(pid: int, fields: list[bytes]) -> bool:
    """Every thread of ``pid`` stopped (or traced, or exited), ``fields`` its
    :func:`._procfs.stat_fields`: none is inside a fork."""
    if fields[0] not in (b"T", b"t"):
        return False
    if int(fields[17]) == 1:
        return True
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        state = _procfs.stat_fields(f"{pid}/task/{tid}")
        if state is not None and state[0] not in (b"T", b"t", b"Z", b"X"):
            return False
    return True


def kill_and_reap(
    pid: int, pidfd: int | None, timeout: float = _reap.REAP_WAIT_S
) -> tuple[int, int, resource.struct_rusage | None]:
    """:func:`kill_tree`, then :func:`._reap.reap_within`: descendants it had, wait status, usage.

    The descendants it killed are awaited too (:func:`await_gone`), so that none is left
    exiting when the caller goes on. Bounded: waits ``timeout`` in all, at most (the kill's
    wait for the stop is part of it; the walk through ``/proc`` is not a wait).
    """
    until = time.monotonic() + timeout
    _reap.sweep_unreaped()
    killed: list[int] = []
    kill = _TreeKill(pid, pidfd, killed)
    try:
        # Where the others are stopped, the child exits alone before they are killed.
        reaped = _reap.reap_within(pid, pidfd, max(0.0, until - time.monotonic()))
    finally:
        kill.rest()
    await_gone(killed, until)
    return (kill.leaked, *reaped)
