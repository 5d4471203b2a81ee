"""What the box tests run inside each kind of guarded process: what it holds, what it can do to
the others. Standard library only, so a test pool's zygote imports no pytest to serve them."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import time
from pathlib import Path
from typing import Any

from pytest_rewardhang.guard._confine import UID_BASE

#: A SysV key no other test uses.
SHM_KEY = 0x52574847  # "RWHG"
_IPC_CREAT = 0o1000
_IPC_RMID = 0


def descriptors(pid: int | None = None) -> list[tuple[int, str, int, int]]:
    """Every descriptor of ``pid`` (this process by default): its number, what it names, and
    the device and inode of what it is open on."""
    where = f"/proc/{'self' if pid is None else pid}/fd"
    found = []
    for name in os.listdir(where):
        path = f"{where}/{name}"
        try:
            target = os.readlink(path)
            status = os.stat(path)
        except OSError:  # the listing's own descriptor, closed by now
            continue
        found.append((int(name), target, status.st_dev, status.st_ino))
    return found


def _attempts(pid: int) -> dict[str, Any]:
    """Each way a process may act on another, by plain calls: signal it, read or write its
    memory and ``/proc`` files, re-limit it, trace it."""
    libc = ctypes.CDLL(None, use_errno=True)
    ptrace_seize = 0x4206

    def trace() -> None:
        if libc.ptrace(ptrace_seize, pid, None, None) != 0:
            raise PermissionError(ctypes.get_errno(), "ptrace")

    return {
        "signal": lambda: os.kill(pid, signal.SIGSTOP),
        "memory": lambda: os.close(os.open(f"/proc/{pid}/mem", os.O_RDWR)),
        "environ": lambda: Path(f"/proc/{pid}/environ").read_bytes(),
        "timerslack": lambda: Path(f"/proc/{pid}/timerslack_ns").write_text("500000000"),
        "oom_score_adj": lambda: Path(f"/proc/{pid}/oom_score_adj").write_text("1000"),
        "prlimit": lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3)),
        "ptrace": trace,
    }


def act_on(pids: list[int]) -> dict[str, str]:
    """Try every attempt on every process of ``pids`` but this one: what each came to, as
    ``"<pid> <attempt>": "done"`` or the error's name."""
    came = {"uid": str(os.getuid())}
    for pid in pids:
        if pid == os.getpid():
            continue
        for name, attempt in _attempts(pid).items():
            try:
                attempt()
                came[f"{pid} {name}"] = "done"
            except OSError as exc:
                came[f"{pid} {name}"] = type(exc).__name__
    return came


def wait_beside(until: str, pidfile: str = "") -> int:
    """Wait until ``until`` exists (bounded: 30 s), where every uid may read it and none may
    write: a guarded process the others try to act on. Its pid, also written to ``pidfile``
    if given (a root call's, which may write the test's folder)."""
    if pidfile:
        Path(pidfile + ".tmp").write_text(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
    end = time.monotonic() + 30
    while not os.path.exists(until) and time.monotonic() < end:
        time.sleep(0.01)
    return os.getpid()


def guarded_children(parent: int) -> dict[int, int]:
    """The children of ``parent`` that run under a uid of their own (``unprivileged=True``),
    by pid, with their uids: how a test finds the guarded processes it started, which can
    tell it nothing themselves (they may write nowhere it can read)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = int(fields["Uid"].split()[0])
        if int(fields["PPid"]) == parent and uid >= UID_BASE:
            found[int(name)] = uid
    return found


def shared_memory(size: int) -> int:
    """Make a SysV shared memory segment of ``size`` bytes under :data:`SHM_KEY`, touch every
    page of it and leave it there; its id. Or, with ``size`` 0, look for one: its id, -1 if
    there is none."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    if not size:
        return int(libc.shmget(SHM_KEY, 0, 0))
    shmid = int(libc.shmget(SHM_KEY, size, _IPC_CREAT | 0o666))
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    address = libc.shmat(shmid, None, 0)
    ctypes.memset(address, 1, size)
    return shmid


def remove_shared_memory() -> None:
    """Remove what :func:`shared_memory` made here, if a test's own namespace holds it."""
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(SHM_KEY, 0, 0)
    if shmid >= 0:
        with contextlib.suppress(OSError):
            libc.shmctl(shmid, _IPC_RMID, None)


Key = tuple[Any, ...]


def key(pid: int | str, fd: int, target: str, dev: int, ino: int) -> Key:
    """What a descriptor is open on: its file's device and inode; for an anonymous inode (a
    pidfd, an eventfd: all one inode), what its ``fdinfo`` says it is (its process, its id)."""
    if not target.startswith("anon_inode:"):
        return (dev, ino)
    try:
        info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines()
    except OSError:
        return (target,)
    told = [line for line in info if not line.startswith(("pos:", "flags:", "mnt_id:", "ino:"))]
    return (target, *told)


def held(pid: int | None = None) -> list[tuple[int, str, Key]]:
    """In the guarded process (or of ``pid``): each descriptor, what it names, and its key."""
    where: int | str = "self" if pid is None else pid
    return [
        (fd, target, key(where, fd, target, dev, ino)) for fd, target, dev, ino in descriptors(pid)
    ]


def fence_mapped() -> bool:
    return "rewardhang-fence" in Path("/proc/self/maps").read_text()


def item(what: str, *args: Any) -> Any:
    """One pool serving both: ``item("act_on", pids)``, ``item("wait_beside", pidfile, until)``."""
    chosen: Any = {"act_on": act_on, "wait_beside": wait_beside}[what]
    return chosen(*args)
