"""Finding, killing and reaping every descendant of a process, setsid() escapees included.

Used by the caller (run's parent, the pool), the zygote, and the guarded processes themselves.

The guard's child makes itself a child subreaper (Linux), so any descendant orphaned below it is
re-parented to it instead of to init: while the child lives, its subtree is closed and can be
walked through ``/proc``. At a deadline the tree is stopped first, then the child is killed
and reaped alone, then the rest (:class:`_TreeKill`); a walk that kills as it goes
(:func:`kill_descendants`) relies on the kernel aborting any fork of a process with SIGKILL
pending, and walks again until a walk finds nothing it has not signalled and no new exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Collection, Iterator
from functools import cache, cached_property

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
        libc.unshare  # noqa: B018
        libc.setns  # noqa: B018
    pid_namespaces()  # probed once, here: every guarded process forked from us inherits it


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
        # 0: the parent is alive outside our PID namespace (a guard nested in a contained call);
        # had it died, we would have been re-parented to a reaper we can see.
        if os.getppid() not in (parent_pid, 0):  # the parent died before the prctl took effect
            os._exit(1)
    return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


_PR_GET_CHILD_SUBREAPER = 37


def can_subreap() -> bool:
    """Whether a process can become a child subreaper here (asked without becoming one)."""
    libc = _libc()
    if libc is None:
        return False
    flag = ctypes.c_int(0)
    return bool(libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0)


def die_with_parent() -> None:
    """SIGKILL when the parent (thread) dies; nothing off Linux."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# --- PID namespaces ---------------------------------------------------------------------------

_CLONE_NEWPID = 0x20000000
#: What :func:`pid_namespaces` found, once per process; forked children inherit the answer.
_namespaces: list[bool] = []
#: Opt-in for now: in a namespace the call's os.getpid() and os.getppid() are the namespace's
#: (2 and 0 for run's child), which breaks code that names processes by them from outside.
PID_NAMESPACE_ENV = "PYTEST_REWARDHANG_PID_NAMESPACE"


def pid_namespaces() -> bool:
    """Whether a thread here can start a PID namespace for its next children and come back.

    Probed once per process in a throwaway child (``unshare`` changes the thread that calls
    it), which does what :mod:`._contain` does: unshare, fork the namespace's init, return to
    its own namespace, fork again. Needs CAP_SYS_ADMIN (root, not in a locked-down container),
    and for now the opt-in ``PYTEST_REWARDHANG_PID_NAMESPACE=1`` in the environment.
    """
    if not _namespaces:
        _namespaces.append(os.environ.get(PID_NAMESPACE_ENV) == "1" and _probe_namespaces())
    return _namespaces[0]


def _probe_namespaces() -> bool:
    libc = _libc()
    if libc is None or not hasattr(os, "pidfd_open"):
        return False
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:  # pragma: no cover - the throwaway child
        code = 1
        try:
            own = open_pid_namespace()
            if new_pid_namespace() and _forks_init(True) and back_to_pid_namespace(own):
                code = 0 if _forks_init(False) else 1
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # the caller ignores SIGCHLD: the answer is lost
        return False
    return status == 0


def _forks_init(expected: bool) -> bool:  # pragma: no cover - the probe's child
    """Whether the next child is the init of a PID namespace, as ``expected``."""
    child = os.fork()
    if child == 0:
        os._exit(0 if (os.getpid() == 1) == expected else 1)
    return os.waitpid(child, 0)[1] == 0


def open_pid_namespace() -> int:
    """A descriptor of this process's PID namespace, to come back to."""
    return os.open("/proc/thread-self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)


def new_pid_namespace() -> bool:
    """The calling thread's next child starts a new PID namespace, as its init; False if refused.

    Until :func:`back_to_pid_namespace`, every child this thread forks joins that namespace, and
    the thread can start no thread (the kernel refuses a thread in another namespace).
    """
    libc = _libc()
    return libc is not None and libc.unshare(_CLONE_NEWPID) == 0


def back_to_pid_namespace(fd: int) -> bool:
    """The calling thread's children join our own PID namespace again; closes ``fd``."""
    libc = _libc()
    try:
        return libc is not None and libc.setns(fd, _CLONE_NEWPID) == 0
    finally:
        os.close(fd)


#: ``os.getpid()`` when filled, our pid as ``/proc`` names it, and how many PID namespaces below
#: ``/proc``'s we are (0 but in a guard nested in a contained call).
_self_ids = [0, 0, 0]


def _forget_self() -> None:
    _self_ids[0] = 0


os.register_at_fork(after_in_child=_forget_self)


def _where() -> tuple[int, int]:
    """Our pid as ``/proc`` names it, and our depth below its PID namespace."""
    local = os.getpid()
    if _self_ids[0] != local:
        proc, depth = local, 0
        with contextlib.suppress(OSError, ValueError):
            proc = int(os.readlink("/proc/self"))
        if proc != local:
            depth = max(len(_nspids(proc)) - 1, 0)
        _self_ids[:] = [local, proc, depth]
    return _self_ids[1], _self_ids[2]


def own_pid() -> int:
    """This process's pid as ``/proc`` names it (``os.getpid()`` is our namespace's name)."""
    return _where()[0]


def _nspids(pid: int) -> list[int]:
    """``/proc/<pid>``'s pid in each PID namespace from ``/proc``'s down to its own."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return []
    return _nspid_line(status)


def _nspid_line(status: bytes) -> list[int]:
    start = status.find(b"\nNSpid:")
    if start < 0:
        return []
    end = status.find(b"\n", start + 1)
    return [int(word) for word in status[start + 7 : end if end > 0 else None].split()]


def _to_local(pid: int) -> int | None:
    """The pid ``/proc`` calls ``pid`` as our namespace names it; None if it is outside it."""
    depth = _where()[1]
    if not depth:
        return pid
    ids = _nspids(pid)
    return ids[depth] if len(ids) > depth else None


def _to_proc(pid: int) -> int:
    """Our own or our child's pid as ``/proc`` names it."""
    own, depth = _where()
    if not depth:
        return pid
    if pid == os.getpid():
        return own
    for child in _children(own):
        ids = _nspids(child)
        if len(ids) > depth and ids[depth] == pid:
            return child
    return pid


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


def alive(pid: int) -> bool:
    """Still able to run code: not a zombie, not exiting, no SIGKILL pending.

    A nested guard's kill does not wait for its victims to finish exiting; they are not the
    outer call's leftovers.
    """
    return _state(pid)[0]


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` from the state on; None once the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The state follows the parenthesised command name, which may itself hold parentheses.
    return stat[stat.rindex(b")") + 2 :].split()


def own_threads(at_most: int = 0, within: float = 0.0) -> int | None:
    """This process's threads as the kernel counts them, a C library's own included; None
    without /proc.

    Given up to ``within`` seconds to come down to ``at_most``: a thread that Python has joined
    is still exiting in the kernel for a moment (longer on a busy machine), and counted.
    """
    until = time.monotonic() + within
    while True:
        fields = stat_fields("self")
        if fields is None:
            return None
        count = int(fields[17])
        if count <= at_most or time.monotonic() >= until:
            return count
        time.sleep(0.001)


def stopped(pid: int) -> bool:
    """Stopped by a signal (or traced): it will not run until someone continues it."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] in (b"T", b"t")


def _state(pid: int, fields: list[bytes] | None = None) -> tuple[bool, bool]:
    """:func:`alive`, and whether it is the init of a PID namespace below ours: a guard's
    (ours, or a nested guard's), killed with the rest but not counted as left running.
    ``fields``: its :func:`stat_fields`, where read already."""
    if fields is None:
        fields = stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X") or int(fields[6]) & _PF_EXITING:
        return False, False
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return False, False
    for line in status.splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & _SIGKILL_MASK:
            return False, False
    ids = _nspid_line(status)
    return True, len(ids) > _where()[1] + 1 and ids[-1] == 1


def kill_descendants(root: int, killed: list[int] | None = None) -> int:
    """SIGKILL every living descendant of ``root``; returns how many there were.

    Their pids, as ``/proc`` names them, are added to ``killed`` if given (see
    :func:`await_gone`), and the process groups only the subtree can be in are killed whole
    (see :class:`Groups`): a fork inside such a group cannot outrun the walk.

    Pids as our namespace names them. The init of a PID namespace below ours is killed but not
    counted (a guard's own).

    ``root`` must not fork meanwhile: it is stopped, or it is the caller itself. It does not
    wait for all of them to finish exiting (:func:`kill_and_reap` does, bounded): a process with
    SIGKILL pending never runs another instruction of its own, and tearing down a hundred forks
    of a large process can take the kernel longer than a caller should wait. Each victim goes
    to nice 19 first, so that teardown does not starve the exit of ``root`` that the caller
    waits for first: a fork storm of a 400 MB caller made it 0.4 s late on 2 idle cores
    (0.8-1.0 s with both busy); at nice 19, 0.03 s (0.06-0.14 s). Not SCHED_IDLE: no quicker,
    and a victim holding a lock of the address space it shares with ``root`` could wait long
    for CPU on a busy machine.

    The walk is repeated until one finds no process left to kill, no process that has exited
    since the walk before, and none still exiting: a process that exits hands its children to
    ``root``, whose list the walk may have read already, so a walk that saw an exit, or one
    that may have come between its look at a process and its read of that one's children,
    may have missed them. A chain whose every process forks the next and exits is caught this
    way, newest first. For the exits of what it killed itself (or of what had SIGKILL pending
    already) it waits at most :data:`REAP_WAIT_S` in all, rechecking every few milliseconds:
    one of those forked nothing after its kill, and a fork that the kill caught halfway is
    aborted, so what such an exit hands on was in its list of children at the walk before
    but for a fork that completed in the moment between that read and the kill.
    """
    proc_root = _to_proc(root)  # the same for every walk: root is alive throughout
    groups = Groups(proc_root)
    signalled: set[int] = set()
    exited: set[int] = set()
    counted = 0
    backoff = None  # for the exits of killed processes: made at the first wait for them
    while True:
        found = []
        moved = dying = False
        for pid, fields in _walk_stat(proc_root, exited, groups, signal.SIGKILL):
            if fields is None:
                moved |= pid not in signalled
                dying = True
            elif pid not in signalled:
                alive, init = _state(pid, fields)
                if alive:
                    found.append((pid, fields))
                    counted += not init
                else:
                    dying = True
            else:
                dying = True
        if found:
            if killed is not None:
                killed += [pid for pid, _ in found]
            for pid, _ in found:
                signalled.add(pid)
                _kill(pid)
            # After each is killed by pid, which renices it first (see above).
            for pid, fields in found:
                groups.signal(pid, signal.SIGKILL, fields)
        elif moved:
            continue
        elif not dying:
            return counted
        else:
            backoff = backoff or Backoff(time.monotonic() + REAP_WAIT_S)
            if not backoff.sleep():
                return counted


def _gone(pid: int) -> bool:
    """Finished exiting: a zombie, or reaped (a pid recycled within ms is not worth a pidfd)."""
    fields = stat_fields(pid)
    return fields is None or fields[0] in (b"Z", b"X")


def await_gone(pids: Collection[int], until: float) -> int:
    """Wait until the killed ``pids`` have finished exiting, or ``until`` (monotonic) passes.

    A process with SIGKILL pending runs no code of its own, but it still holds its memory and
    its pid until the kernel has torn it down, which for fifty forks of a large process on a
    busy machine takes tens of milliseconds. Returns how many were still exiting at ``until``.
    """
    left = list(pids)
    backoff = Backoff(until)
    while True:
        left = [pid for pid in left if not _gone(pid)]
        if not left or not backoff.sleep():
            return len(left)


def _kill(pid: int) -> None:
    """Through a pidfd, so a pid recycled since the walk is never signalled."""
    local = _to_local(pid)
    if local is None:
        return
    if local != pid:  # in a PID namespace below /proc's: its pids are not ours
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(local)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
        return
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # out of descriptors in a fork storm: by pid, as the next best
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        return
    try:
        demote(pid)
        # Another user's (a scorer that ran sudo): not ours to kill, and no reason to stop.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)


_NICEST = 19


def demote(pid: int) -> None:
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
    """``root``'s descendants, parents before children, each one's newest children first (an
    orphan joins the end of its new parent's list: the one most likely still running)."""
    frontier = [root]
    while frontier:
        for child in reversed(list(_children(frontier.pop()))):
            yield child
            frontier.append(child)


def _walk_stat(
    root: int, exited: set[int], groups: Groups, signum: int
) -> Iterator[tuple[int, list[bytes] | None]]:
    """:func:`_walk` from ``root``: each descendant, with its :func:`stat_fields`, but those in
    ``exited``; pids as ``/proc`` names them.

    One that has exited is added to ``exited`` and yielded with None, once, and its group is
    sent ``signum`` through ``groups``: a zombie's group may hold the one it forked.
    """
    for pid in _walk(root):
        if pid in exited:
            continue
        fields = stat_fields(pid)
        if fields is None or fields[0] in (b"Z", b"X"):
            exited.add(pid)
            if fields is not None:
                groups.signal(pid, signum, fields)
            yield pid, None
        else:
            yield pid, fields


class Groups:
    """The process groups below ``root`` that nothing but its descendants can be in, each sent
    a signal once.

    A signal to a process group reaches every member at once, one inside a fork included: the
    kernel hands a group signal that comes during a fork to the new process as well. So a chain
    of processes that each fork the next and exit, faster than a walk of ``/proc`` follows it,
    is stopped or killed whole through its group; a signal to each pid the walk finds never
    catches up with it.

    A group lives inside one session, and every member of a session descends from the process
    that made it (``setsid``). So where ``root`` made its own session (every guarded process
    calls ``setsid``), every group of a process below it is one of that session's or of one made
    below it, and holds nothing but ``root``'s descendants; elsewhere none is used. Nor where
    ``root`` is a PID namespace's init (it adopts every orphan of its namespace, its descendant
    or not), nor where a PID namespace lies between ``/proc`` and us (their numbers are not
    ours). Never ``root``'s own group (killed during the walk, ``root`` would hand its orphans to
    init; its killer signals it last) nor the killer's. A group that empties between the read
    of its member's ``stat`` and the signal could only have its number taken again once the
    kernel has gone round every pid; a process reaped during the read shows -1, skipped.
    """

    def __init__(self, root: int) -> None:
        """``root`` as ``/proc`` names it."""
        self.root = root
        #: Groups signalled, by signal.
        self.sent: dict[int, set[int]] = {}

    @cached_property
    def skip(self) -> set[int] | None:
        """The groups never signalled; None where no group is (see the class). Read at the
        first signal: most kills (a worker's cleanup after each item) find nothing to signal."""
        if _where()[1]:
            return None
        fields = stat_fields(self.root)
        if fields is None or int(fields[3]) != self.root or _nspids(self.root)[-1:] == [1]:
            return None
        return {int(fields[2]), os.getpgrp()}

    def signal(self, pid: int, signum: int, fields: list[bytes] | None = None) -> None:
        """Send ``signum`` to the group of ``pid`` (``fields``, its :func:`stat_fields`, if
        read already) where nothing outside the subtree can be in it, once per group."""
        skip = self.skip
        if skip is None:
            return
        if fields is None:
            fields = stat_fields(pid)
            if fields is None:
                return
        group = int(fields[2])
        sent = self.sent.setdefault(signum, set())
        if group <= 0 or group in skip or group in sent:
            return
        sent.add(group)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)


#: How long a kill waits for its SIGSTOP to take effect before it kills anyway.
STOP_WAIT_S = 0.04
#: How long :func:`kill_and_reap` waits by default, in all, for the killed child (and what it
#: killed below it) to finish exiting; past it the child is left for :func:`sweep_unreaped`
#: (a process in uninterruptible sleep may never exit; a 3 GiB one takes the kernel tens of
#: milliseconds to tear down).
REAP_WAIT_S = 0.05


class Backoff:
    """The pauses of a poll loop: 0.2 ms, doubling up to 2 ms, none past ``until``
    (monotonic)."""

    def __init__(self, until: float) -> None:
        self.until = until
        self.pause = 0.0002

    def sleep(self) -> bool:
        """Sleep the next pause (cut short at ``until``); False, at once, once it has passed."""
        wait = self.until - time.monotonic()
        if wait <= 0:
            return False
        time.sleep(min(self.pause, wait))
        self.pause = min(self.pause * 2, 0.002)
        return True


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
        self.groups = Groups(_to_proc(pid))  # its root: the child, as /proc names it
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
            everything = child_stopped and self._stop_descendants(until)
        finally:  # interrupted, too: nothing is left stopped
            if everything:
                signal_child(pid, pidfd, signal.SIGKILL)
            else:
                self._kill_walking(child_stopped)

    def _stop_descendants(self, until: float) -> bool:
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
            for pid, fields in _walk_stat(self.groups.root, exited, self.groups, signal.SIGSTOP):
                if fields is None:
                    settled = False
                    continue
                if pid not in self.held:
                    self.groups.signal(pid, signal.SIGSTOP, fields)
                    self.held[pid] = _hold(pid)
                    if _state(pid, fields)[1]:
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
    local = _to_local(pid)
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
    :func:`stat_fields`: none is inside a fork."""
    if fields[0] not in (b"T", b"t"):
        return False
    if int(fields[17]) == 1:
        return True
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        state = stat_fields(f"{pid}/task/{tid}")
        if state is not None and state[0] not in (b"T", b"t", b"Z", b"X"):
            return False
    return True


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


#: Killed children that had not finished exiting within :data:`REAP_WAIT_S`; reaped by the
#: next :func:`sweep_unreaped` (every run() and kill makes one), or by init when we exit.
_unreaped: set[int] = set()


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
            _unreaped.add(pid)
            return -1, None
        if pidfd is None:
            time.sleep(min(left, 0.001))
        else:
            select.select([pidfd], [], [], left)


def sweep_unreaped() -> None:
    """Reap, without waiting, the killed children that were slow to exit."""
    for pid in list(_unreaped):
        try:
            found, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            found = pid
        if found:
            _unreaped.discard(pid)


def kill_and_reap(
    pid: int, pidfd: int | None, timeout: float = REAP_WAIT_S
) -> tuple[int, int, resource.struct_rusage | None]:
    """:func:`kill_tree`, then :func:`reap_within`: descendants it had, wait status, usage.

    The descendants it killed are awaited too (:func:`await_gone`), so that none is left
    exiting when the caller goes on. Bounded: waits ``timeout`` in all, at most (the kill's
    wait for the stop is part of it; the walk through ``/proc`` is not a wait).
    """
    until = time.monotonic() + timeout
    sweep_unreaped()
    killed: list[int] = []
    kill = _TreeKill(pid, pidfd, killed)
    try:
        # Where the others are stopped, the child exits alone before they are killed.
        reaped = reap_within(pid, pidfd, max(0.0, until - time.monotonic()))
    finally:
        kill.rest()
    await_gone(killed, until)
    return (kill.leaked, *reaped)


def reap_exited(spare: Collection[int] = ()) -> int:
    """Reap, without waiting, the children of this process but ``spare`` that have exited;
    how many others are left (killed and still exiting, where every one was killed)."""
    left = 0
    for child in _children(own_pid()):
        pid = _to_local(child)
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
        for child in _children(own_pid()):
            pid = _to_local(child)
            if pid is not None and pid not in spare:
                alive, init = _state(child)
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
