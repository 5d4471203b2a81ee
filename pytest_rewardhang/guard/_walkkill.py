"""The kill that walks: SIGKILL every descendant of a process that cannot fork meanwhile, as
the walk through ``/proc`` finds them, and their process groups where only the subtree can be
in them (:class:`Groups`).

It relies on the kernel aborting any fork of a process with SIGKILL pending, and walks again
until a walk finds nothing it has not signalled and no new exit. Used where the root is the
caller itself (a guarded process, a worker, a namespace's init's parent) and by the tree kill's
fallback (:mod:`._treekill`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Collection, Iterator
from functools import cached_property

from . import _procfs
from ._backoff import Backoff
from ._reap import REAP_WAIT_S


def kill_descendants(root: int, killed: list[int] | None = None) -> int:
    """SIGKILL every living descendant of ``root``; returns how many there were.

    Their pids, as ``/proc`` names them, are added to ``killed`` if given (see
    :func:`await_gone`), and the process groups only the subtree can be in are killed whole
    (see :class:`Groups`): a fork inside such a group cannot outrun the walk.

    Pids as our namespace names them. The init of a PID namespace below ours is killed but not
    counted (a guard's own).

    ``root`` must not fork meanwhile: it is stopped, or it is the caller itself. It does not
    wait for all of them to finish exiting (:func:`._treekill.kill_and_reap` does, bounded): a
    process with SIGKILL pending never runs another instruction of its own, and tearing down a
    hundred forks of a large process can take the kernel longer than a caller should wait. Each
    victim goes to nice 19 first, so that teardown does not starve the exit of ``root`` that the
    caller waits for first: a fork storm of a 400 MB caller made it 0.4 s late on 2 idle cores
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
    proc_root = _procfs.to_proc(root)  # the same for every walk: root is alive throughout
    groups = Groups(proc_root)
    signalled: set[int] = set()
    exited: set[int] = set()
    counted = 0
    backoff = None  # for the exits of killed processes: made at the first wait for them
    while True:
        found = []
        moved = dying = False
        for pid, fields in walk_stat(proc_root, exited, groups, signal.SIGKILL):
            if fields is None:
                moved |= pid not in signalled
                dying = True
            elif pid not in signalled:
                alive, init = _procfs.state(pid, fields)
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
    fields = _procfs.stat_fields(pid)
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
    local = _procfs.to_local(pid)
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


def walk_stat(
    root: int, exited: set[int], groups: Groups, signum: int
) -> Iterator[tuple[int, list[bytes] | None]]:
    """:func:`._procfs.walk` from ``root``: each descendant, with its
    :func:`._procfs.stat_fields`, but those in ``exited``; pids as ``/proc`` names them.

    One that has exited is added to ``exited`` and yielded with None, once, and its group is
    sent ``signum`` through ``groups``: a zombie's group may hold the one it forked.
    """
    for pid in _procfs.walk(root):
        if pid in exited:
            continue
        fields = _procfs.stat_fields(pid)
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
        if _procfs.where()[1]:
            return None
        fields = _procfs.stat_fields(self.root)
        if fields is None or int(fields[3]) != self.root or _procfs.nspids(self.root)[-1:] == [1]:
            return None
        return {int(fields[2]), os.getpgrp()}

    def signal(self, pid: int, signum: int, fields: list[bytes] | None = None) -> None:
        """Send ``signum`` to the group of ``pid`` (``fields``, its :func:`._procfs.stat_fields`, if
        read already) where nothing outside the subtree can be in it, once per group."""
        skip = self.skip
        if skip is None:
            return
        if fields is None:
            fields = _procfs.stat_fields(pid)
            if fields is None:
                return
        group = int(fields[2])
        sent = self.sent.setdefault(signum, set())
        if group <= 0 or group in skip or group in sent:
            return
        sent.add(group)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)
