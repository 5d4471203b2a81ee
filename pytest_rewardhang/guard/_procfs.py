"""Reading ``/proc``: a process's ``stat`` and ``status``, its children, the walk of its
descendants, and the translation of pids between ``/proc``'s PID namespace and ours.

Used by the kills (:mod:`._walkkill`, :mod:`._treekill`), the reaping (:mod:`._reap`), the
cgroups and the guarded processes themselves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

from ._state import STATE


def where() -> tuple[int, int]:
    """Our pid as ``/proc`` names it, and our depth below its PID namespace."""
    local = os.getpid()
    ids = STATE.ids
    if ids[0] != local:
        proc, depth = local, 0
        with contextlib.suppress(OSError, ValueError):
            proc = int(os.readlink("/proc/self"))
        if proc != local:
            depth = max(len(nspids(proc)) - 1, 0)
        ids[:] = [local, proc, depth]
    return ids[1], ids[2]


def own_pid() -> int:
    """This process's pid as ``/proc`` names it (``os.getpid()`` is our namespace's name)."""
    return where()[0]


def nspids(pid: int) -> list[int]:
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


def to_local(pid: int) -> int | None:
    """The pid ``/proc`` calls ``pid`` as our namespace names it; None if it is outside it."""
    depth = where()[1]
    if not depth:
        return pid
    ids = nspids(pid)
    return ids[depth] if len(ids) > depth else None


def to_proc(pid: int) -> int:
    """Our own or our child's pid as ``/proc`` names it."""
    own, depth = where()
    if not depth:
        return pid
    if pid == os.getpid():
        return own
    for child in children(own):
        ids = nspids(child)
        if len(ids) > depth and ids[depth] == pid:
            return child
    return pid


def children(pid: int) -> Iterator[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tasks:
        try:
            data = read_small(f"/proc/{pid}/task/{tid}/children")
        except OSError:
            continue
        for word in data.split():
            yield int(word)


_PF_EXITING = 0x4
_SIGKILL_MASK = 1 << (signal.SIGKILL - 1)


def real_uid(pid: int) -> int | None:
    """``pid``'s real uid (a zombie's too), as its ``status`` says; None once it is gone.
    Not its folder's owner: that is root's for a process that changed its uid."""
    try:
        status = read_small(f"/proc/{pid}/status")
    except OSError:
        return None
    start = status.find(b"\nUid:")
    if start < 0:
        return None
    return int(status[start + 5 :].split(None, 1)[0])


def alive(pid: int) -> bool:
    """Still able to run code: not a zombie, not exiting, no SIGKILL pending.

    A nested guard's kill does not wait for its victims to finish exiting; they are not the
    outer call's leftovers.
    """
    return state(pid)[0]


#: What one read of a small ``/proc`` file asks for: a ``stat`` line is well under it.
_SMALL = 4096


def read_small(path: str) -> bytes:
    """The whole of a small ``/proc`` file, through a bare descriptor: a Python file object
    takes twice the system calls (and builds the objects around them). Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = b""
        while chunk := os.read(fd, _SMALL):
            data += chunk
        return data
    finally:
        os.close(fd)


def _read_stat(path: str) -> bytes:
    """A ``stat`` file in one read: the kernel renders its one line whole at the first read,
    so a read of more than the line can hold is the whole of it. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, _SMALL)
    finally:
        os.close(fd)


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` from the state on; None once the pid is gone."""
    try:
        stat = _read_stat(f"/proc/{pid}/stat")
    except OSError:
        return None
    if b")" not in stat:
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
        # The task folder's link count is two plus the threads: one stat() where the stat
        # file's rendering of fifty fields costs five times as much.
        try:
            count = os.stat("/proc/self/task").st_nlink - 2
        except OSError:
            return None
        if count <= at_most or time.monotonic() >= until:
            return count
        time.sleep(0.001)


def own_fds() -> int:
    """How many descriptors this process has open; raises OSError without /proc.

    Linux 6.2 on gives the count as the size of the ``fd`` folder, in one stat() where a
    listing is three times the cost; before, the size is 0, and the folder is listed.
    """
    size = os.stat("/proc/self/fd").st_size
    if size:
        return size
    return len(os.listdir("/proc/self/fd")) - 1  # the listing's own descriptor


def stopped(pid: int) -> bool:
    """Stopped by a signal (or traced): it will not run until someone continues it."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] in (b"T", b"t")


def state(pid: int, fields: list[bytes] | None = None) -> tuple[bool, bool]:
    """:func:`alive`, and whether it is the init of a PID namespace below ours: a guard's
    (ours, or a nested guard's), killed with the rest but not counted as left running.

    ``fields``: its :func:`stat_fields`, where a walk read them already. They stand: a process
    the walk saw alive is killed, and its group signalled, even if it has exited since (a
    hopping chain's next process is in that group); read again, such a process would be let
    go, and a chain could outrun the walk. Else the pending signals are read before the
    flags, in the order a kill moves a process through them: a SIGKILL sent to one of its
    threads (``tgkill``) leaves that thread's pending set as it is taken, before the flags
    say exiting (a ``kill()``'s stays in the shared set until the process is reaped).
    """
    if fields is None:
        status = _status(pid)
        fields = None if status is None else stat_fields(pid)
    else:
        status = None if _dead(fields) else _status(pid)
    if status is None or fields is None or _dead(fields):
        return False, False
    for line in status.splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & _SIGKILL_MASK:
            return False, False
    ids = _nspid_line(status)
    return True, len(ids) > where()[1] + 1 and ids[-1] == 1


def _status(pid: int) -> bytes | None:
    """``/proc/PID/status``; None once the pid is gone."""
    try:
        return read_small(f"/proc/{pid}/status")
    except OSError:
        return None


def _dead(fields: list[bytes]) -> bool:
    """A zombie, or exiting: it will never run code of its own again."""
    return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & _PF_EXITING)


def walk(root: int) -> Iterator[int]:
    """``root``'s descendants, parents before children, each one's newest children first (an
    orphan joins the end of its new parent's list: the one most likely still running)."""
    frontier = [root]
    while frontier:
        for child in reversed(list(children(frontier.pop()))):
            yield child
            frontier.append(child)
