"""Nothing outlives the call, by default where the platform allows: each guarded process (a
``run()`` child, a pool worker) and everything it starts live in a cgroup (v2) of their own,
and the kernel kills all of it in one write (``cgroup.kill``, Linux >= 5.14).

A process cannot leave its cgroup by forking, ``setsid``, double-forking or turning off the
subreaper and its death signal (``prctl``): only a write to another cgroup's ``cgroup.procs``
moves it, which needs write access to the cgroup tree (a scorer running as root has that, and
could as well kill its caller). Unlike a PID namespace, a cgroup changes nothing the call can
see: its pids stay the system's, so two concurrent calls never share a pid.

Where: below this process's own cgroup, in a folder of its own, ``rewardhang-<pid>``, made the
first time a group is needed (so only where that folder can be made: root, or a cgroup tree
delegated to the user). Each guarded process joins its group first thing after the fork, by a
write to a descriptor its parent opened. Killing counts the group's living members, then
writes ``cgroup.kill``; the group is removed once empty (a group whose members are still being
torn down is removed by a later call).

When this process dies without cleaning up (``SIGKILL``ed mid-call), a *keeper* does it: a
small process started once (``posix_spawn`` of a bare interpreter, detached, so it is nobody's
child) that waits on a pidfd of this process and then kills and removes the folder. A process
that already lives in a guard's group (a guard nested in a guarded call, a pool's workers)
starts none: the group around it is killed whole when its own call ends.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time

from . import _proctree

#: The prefix of every folder this module makes; a cgroup path holding one is a guard's.
PREFIX = "rewardhang-"
#: ``0`` turns cgroups off: the calls are contained as where none can be made (the subreaper).
CGROUP_ENV = "PYTEST_REWARDHANG_CGROUP"
_NAMES = itertools.count()

#: The keeper: waits for the watched process (its pidfd on fd 3) to die, then kills what is
#: left below the folder and removes it. Detached (forks, and the first process exits), in a
#: session of its own, holding none of the caller's descriptors.
_KEEPER = r"""
import os, select, signal, sys, time
for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
    signal.signal(signum, signal.SIG_IGN)
if os.fork():
    os._exit(0)
os.setsid()
os.chdir("/")
home = sys.argv[1]
poller = select.poll()
poller.register(3, select.POLLIN)
while not poller.poll():
    pass
try:
    with open(os.path.join(home, "cgroup.kill"), "w") as f:
        f.write("1")
except OSError:  # removed already
    pass
deadline = time.monotonic() + 10
for folder, _, _ in os.walk(home, topdown=False):
    while True:
        try:
            os.rmdir(folder)
            break
        except FileNotFoundError:
            break
        except OSError:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
"""

_lock = threading.Lock()
#: This process's folder once made; "" where none can be (probed once per process).
_home: list[str] = []
#: Groups killed whose members were still exiting when they were closed: removed later.
_pending: list[str] = []


def _forget() -> None:  # a forked child makes a folder of its own, if it needs one
    _home.clear()
    _pending.clear()


os.register_at_fork(after_in_child=_forget)


def _mount() -> str | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified``)."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in lines:
        # "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE ..."
        fields = line.split()
        if "-" not in fields:
            continue
        fstype = fields[fields.index("-") + 1 :][:1]
        if fstype == ["cgroup2"] and fields[3] == "/":
            return fields[4].replace("\\040", " ")
    return None


def _own() -> str | None:
    """This process's cgroup v2 path, as ``/proc/self/cgroup`` names it."""
    try:
        with open("/proc/self/cgroup", "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


def home() -> str:
    """This process's folder of groups, made on first use; "" where cgroups cannot be used."""
    if not _home:
        with _lock:
            if not _home:
                _home.append(_make_home())
    return _home[0]


def _make_home() -> str:
    if os.environ.get(CGROUP_ENV) == "0":
        return ""
    mount, own = _mount(), _own()
    if mount is None or own is None or not hasattr(os, "pidfd_open"):
        return ""
    parent = os.path.join(mount, own.lstrip("/"))
    path = os.path.join(parent, f"{PREFIX}{os.getpid()}")
    try:
        os.mkdir(path)
    except FileExistsError:  # a dead process of the same pid left it: its keeper is late
        pass
    except OSError:
        return ""
    # Nested in a guard's group: that guard could make one, and kills this folder with its own.
    nested = PREFIX in own
    usable = os.path.exists(os.path.join(path, "cgroup.kill")) and (
        nested or (_can_join(path) and _start_keeper(path))
    )
    if not usable:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return ""
    return path


def _can_join(path: str) -> bool:
    """Whether a process of ours may move into a group there (write access to our own
    cgroup's ``cgroup.procs`` is needed too): tried once, by a throwaway child."""
    probe = os.path.join(path, "probe")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        procs = os.open(os.path.join(probe, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        os.rmdir(probe)
        return False
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the throwaway child
            code = 1
            try:
                code = 0 if join(procs) else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return status == 0
    except (OSError, ChildProcessError):
        return False
    finally:
        os.close(procs)
        _remove(probe, time.monotonic() + _proctree.REAP_WAIT_S)


def _start_keeper(path: str) -> bool:
    """Start the keeper of ``path`` (see the module's docstring); False if it could not be."""
    try:
        watched = os.pidfd_open(os.getpid())
    except OSError:
        return False
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", _KEEPER, path],
            {"PATH": os.defpath},
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, 1, 2),
                (os.POSIX_SPAWN_DUP2, watched, 3),
            ],
            setsid=True,
        )
    except OSError:
        return False
    finally:
        os.close(watched)
    # The first process exits as soon as it has forked the keeper: reaped here, bounded.
    status = _proctree.reap_within(pid, None, 10.0)[0]
    return status == 0


def join(procs: int) -> bool:
    """Move the calling process into the group whose ``cgroup.procs`` is open as ``procs``."""
    try:
        os.write(procs, b"0")
    except OSError:
        return False
    return True


class Group:
    """One guarded process's cgroup, from its making to its removal."""

    def __init__(self, path: str, procs: int) -> None:
        self.path = path
        #: ``cgroup.procs`` opened for writing: the forked process joins through it.
        self.procs = procs

    @classmethod
    def make(cls) -> Group | None:
        """A new group below this process's folder; None where there can be none."""
        parent = home()
        if not parent:
            return None
        _sweep()
        path = os.path.join(parent, str(next(_NAMES)))
        try:
            os.mkdir(path)
            procs = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return cls(path, procs)

    def members(self) -> list[int]:
        """The pids in the group and every group below it (a nested guard's)."""
        found = []
        for folder, _, _ in os.walk(self.path):
            try:
                with open(os.path.join(folder, "cgroup.procs"), "rb") as f:
                    found += [int(word) for word in f.read().split()]
            except (OSError, ValueError):
                continue
        return found

    def kill(self, spare: int = 0) -> int:
        """SIGKILL everything in the group at once; how many of its living members were not
        ``spare`` (those a kill before this one reached are dead already, not counted).

        The others go to nice 19 first, as :func:`._proctree.kill_descendants` does: a hundred
        forks of a large caller tearing down at once would hold up the exit of ``spare`` (the
        guarded process), which the caller waits for.
        """
        living = 0
        for pid in self.members():
            if pid != spare and _proctree.alive(pid):
                living += 1
                _proctree.demote(pid)
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "wb") as f:
                f.write(b"1")
        except OSError:  # gone already
            pass
        return living

    def close(self, until: float) -> int:
        """Kill what is left, wait until ``until`` (monotonic) for it to finish exiting, and
        remove the group (later, if it is not empty by then). How many were left running.
        A second call does nothing."""
        if self.procs < 0:
            return 0
        os.close(self.procs)
        self.procs = -1
        leaked = self.kill()
        if not _remove(self.path, until):
            _pending.append(self.path)
        return leaked


def _remove(path: str, until: float) -> bool:
    """Remove ``path`` and the groups below it once they are empty, waiting until ``until``."""
    pause = 0.0002
    for folder, _, _ in os.walk(path, topdown=False):
        while True:
            try:
                os.rmdir(folder)
                break
            except FileNotFoundError:
                break
            except OSError:  # EBUSY: members still exiting
                wait = until - time.monotonic()
                if wait <= 0:
                    return False
                time.sleep(min(pause, wait))
                pause = min(pause * 2, 0.002)
    return True


def _sweep() -> None:
    """Remove, without waiting, the groups that were not empty yet when they were closed."""
    for path in list(_pending):
        if _remove(path, 0.0):
            with contextlib.suppress(ValueError):
                _pending.remove(path)
