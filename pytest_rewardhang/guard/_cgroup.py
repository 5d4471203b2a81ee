"""Nothing outlives the call, by default where the platform allows: each guarded process (a
``run()`` child, a pool worker) and everything it starts live in a cgroup (v2) of their own,
and the kernel kills all of it in one write (``cgroup.kill``, Linux >= 5.14).

A process cannot leave its cgroup by forking, ``setsid``, double-forking or turning off the
subreaper and its death signal (``prctl``): only a write to another cgroup's ``cgroup.procs``
moves it, which needs write access to the cgroup tree (a scorer running as root has that, and
could as well kill its caller). Unlike a PID namespace, a cgroup changes nothing the call can
see: its pids stay the system's, so two concurrent calls never share a pid.

Where: below this process's own cgroup, in a folder of its own, ``rewardhang-<pid>-<random>``,
made the first time a group is needed (so only where that folder can be made: root, or a cgroup
tree delegated to the user). Each guarded process joins its group first thing after the fork
(a pool's zygote first thing after its start), by a write to a descriptor its parent opened.
What a call may build below its group is capped (``cgroup.max.descendants`` and
``cgroup.max.depth``), so the walks below stay short and within ``PATH_MAX``. Killing freezes
the group (bounded: a task in a vfork wait never freezes), counts its living members, then
writes ``cgroup.kill``; the group is removed once empty (a group whose members are still being
torn down is removed by a later call).

When this process dies without cleaning up (``SIGKILL``ed mid-call), a *keeper* does it: a
small process (``posix_spawn`` of a bare interpreter, detached, so it is nobody's child) that
waits on a pidfd of this process and then kills and removes the folder. It is started with the
first group and checked at every later one: started again if a call killed it, continued if a
call stopped it (a call that does that and whose caller is then killed during the same call
is not covered). A process that already lives in a guard's group (a guard nested in a guarded
call, a pool's zygote and workers) starts none: the group around it is killed whole when its
own call (or its pool) ends, and by that guard's keeper.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
from collections.abc import Callable

from . import _backoff, _procfs, _reap, _walkkill
from ._state import STATE

#: The prefix of every folder this module makes; a cgroup path holding one is a guard's.
PREFIX = "rewardhang-"
#: ``0`` turns cgroups off: the calls are contained as where none can be made (the subreaper).
CGROUP_ENV = "PYTEST_REWARDHANG_CGROUP"
#: What a call may build below its group: room for a few guards nested in it (each adds its
#: folder and a group per call or worker), none for a flood of folders that the kill's walk
#: would have to read. Eight levels of 255-byte names stay well within PATH_MAX.
_MAX_DESCENDANTS = b"256"
_MAX_DEPTH = b"8"
#: How long a kill waits for the group to freeze before it counts and kills anyway.
FREEZE_WAIT_S = 0.02

#: The keeper: forks the keeper proper, whose pid the first process writes to fd 1 before it
#: exits; the keeper waits for the watched process (its pidfd on fd 3) to die, then kills what
#: is left below the folder and removes it. In a session of its own, holding none of the
#: caller's descriptors. Folders are removed through descriptors: a call may have named them
#: deeper than PATH_MAX allows a path to reach.
_KEEPER = r"""
import os, select, signal, sys, time
for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
    signal.signal(signum, signal.SIG_IGN)
keeper = os.fork()
if keeper:
    os.write(1, b"%d" % keeper)
    os._exit(0)
os.setsid()
os.chdir("/")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 1)
os.closerange(4, 1 << 20)
home = sys.argv[1]
poller = select.poll()
poller.register(3, select.POLLIN)
while not poller.poll():
    pass
try:
    with open(os.path.join(home, "cgroup.kill"), "w") as f:
        f.write("1")
except OSError:
    pass
# cgroup.kill passes over a process whose main thread has exited while others run (its state
# reads as a zombie): such a member is sent SIGKILL by its pidfd, which reaches all its
# threads, once the pidfd is taken and the pid is still listed (not reused elsewhere).
def members(fd):
    try:
        with open("cgroup.procs", opener=lambda name, flags: os.open(name, flags, dir_fd=fd)) as f:
            return f.read().split()
    except OSError:
        return []
for _, _, _, fd in os.fwalk(home):
    for pid in members(fd):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rpartition(b")")[2].split()[:1] != [b"Z"]:
                    continue
            pidfd = os.pidfd_open(int(pid))
        except OSError:
            continue
        try:
            if pid in members(fd):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        os.close(pidfd)
deadline = time.monotonic() + 10
def rmdir(name, dir_fd=None):
    while True:
        try:
            os.rmdir(name, dir_fd=dir_fd)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
for _, folders, _, fd in os.fwalk(home, topdown=False):
    for folder in folders:
        rmdir(folder, fd)
rmdir(home)
"""


def lines(path: str) -> list[str]:
    """The lines of a small file (``/proc``'s, a cgroup's); none if it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def _mount() -> str | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified``)."""
    for line in lines("/proc/self/mountinfo"):
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
    for line in lines("/proc/self/cgroup"):
        if line.startswith("0::"):
            return line[3:]
    return None


def put(path: str, value: bytes) -> bool:
    """Write ``value`` to a cgroup's file, through a bare descriptor (a Python file object
    takes twice the system calls: run() makes several of these a call); False if it cannot."""
    try:  # as open(path, "wb") opens it
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    except OSError:
        return False
    try:
        return os.write(fd, value) == len(value)
    except OSError:
        return False
    finally:
        os.close(fd)


def home() -> str:
    """This process's folder of groups, made on first use; "" where cgroups cannot be used."""
    state = STATE
    if not state.cgroup_home:
        with state.cgroup_lock:
            if not state.cgroup_home:
                state.cgroup_home.append(_make_home())
    return state.cgroup_home[0]


def enabled() -> bool:
    """Whether cgroups may be used at all (``PYTEST_REWARDHANG_CGROUP=0`` turns them off)."""
    return os.environ.get(CGROUP_ENV) != "0"


def _make_home() -> str:
    if not enabled():
        return ""
    mount, own = _mount(), _own()
    if mount is None or own is None or not hasattr(os, "pidfd_open"):
        return ""
    # Named by pid and at random: a folder a dead process of the same pid left (its keeper
    # late, or gone) is never taken for ours.
    name = f"{PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
    path = os.path.join(mount, own.lstrip("/"), name)
    try:
        os.mkdir(path)
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
        remove(probe, time.monotonic() + _reap.REAP_WAIT_S)


def _start_keeper(path: str) -> bool:
    """Start the keeper of ``path`` (see the module's docstring); False if it could not be."""
    try:
        watched = os.pidfd_open(os.getpid())
    except OSError:
        return False
    said, say = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-c", _KEEPER, path],
            {"PATH": os.defpath},
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, say, 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, watched, 3),
            ],
            setsid=True,
        )
    except OSError:
        os.close(said)
        return False
    finally:
        os.close(watched)
        os.close(say)
    try:
        # The first process exits as soon as it has forked the keeper: reaped here, bounded.
        if _reap.reap_within(pid, None, 10.0)[0] != 0:
            return False
        keeper = int(os.read(said, 32) or b"0")
        started = _started(keeper) if keeper else None
    except (OSError, ValueError):
        return False
    finally:
        os.close(said)
    if started is None:
        return False
    STATE.keeper[:] = [(keeper, started)]
    return True


def _started(pid: int) -> bytes | None:
    """When ``pid`` started (``/proc/PID/stat``'s field 22), which tells it from a later
    process of the same pid; None once it has exited."""
    fields = _procfs.stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return None
    return fields[19]


def _start_time(pid: int) -> bytes | None:
    """When ``pid`` started, whatever its state (one whose main thread has exited reads as a
    zombie, and another such at its pid later must not pass for it); None once it is gone."""
    fields = _procfs.stat_fields(pid)
    return fields[19] if fields is not None else None


def _check_keeper() -> None:
    """Start the keeper again if a call killed it; continue it if a call stopped it."""
    if not STATE.keeper:
        return
    pid, started = STATE.keeper[0]
    fields = _procfs.stat_fields(pid)
    # Another process at its pid, or exited, or on its way: a call's kill() returns with the
    # SIGKILL only pending, and on a busy machine the keeper may not have run since to die of
    # it; once it has, it is exiting for a while before it reads as a zombie.
    if fields is None or fields[19] != started or not _procfs.state(pid, fields)[0]:
        with STATE.cgroup_lock:
            if STATE.keeper == [(pid, started)]:
                STATE.keeper.clear()
                _start_keeper(STATE.cgroup_home[0])
    else:
        # Continued whatever its state reads: a call's SIGSTOP, sent just before it returned,
        # may not show in the state yet (the caller then lost its keeper for good, now and
        # then on a busy machine), and a SIGCONT discards a stop still pending.
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)


def join(procs: int) -> bool:
    """Move the calling process into the group whose ``cgroup.procs`` is open as ``procs``."""
    try:
        os.write(procs, b"0")
    except OSError:
        return False
    return True


def into_leaf() -> str | None:
    """In a pool's zygote, its folder made (nested in the group its caller made for it): move
    into a leaf group of the folder, so that neither the group it leaves nor the folder holds a
    process, and both may hand the memory and pids controllers down to its workers' groups
    (cgroup v2's "no internal processes" rule). The group it left; None if it could not move
    (its workers' limits are then sought in v1)."""
    folder = home()
    leaf = os.path.join(folder, "zygote")
    try:
        os.mkdir(leaf)
        procs = os.open(os.path.join(leaf, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not join(procs):
            return None
    finally:
        os.close(procs)
    return os.path.dirname(folder)


#: The most looks through its group a worker takes between two items (see :func:`kill_strays`).
_STRAY_LOOKS = 64


def kill_strays() -> tuple[int, bool]:
    """In a guarded process (a pool worker) between items: SIGKILL every other process of its
    group, which its item left outside its subtree (the ``prctl`` escape); how many, and
    whether a look then listed nobody but those.

    It looks again until a look lists nobody but the processes it has killed (which can start
    no other: a fork fails with SIGKILL pending), at most :data:`_STRAY_LOOKS` times: a chain
    whose every process forks the next and exits is gone from one look's list by the time it
    is signalled, and one found exited on its own may have just forked. One that outruns every
    look is not chased further: the worker retires, and its group is killed whole when it is
    reaped. A process killed is known by its pid and its start time: a pid reused meanwhile
    (a stray that reaps the one it was killed as, and forks into its pid) is a new one. Each
    listed process is signalled, whatever its main thread's state: one whose main thread has
    exited while others run looks a zombie. Each is signalled through a pidfd taken before it
    is checked to be in the group still, so a pid reused by a process elsewhere never is.
    """
    if not STATE.joined:
        return 0, True
    group, me = STATE.joined[0], os.getpid()
    killed: dict[int, bytes | None] = {}
    for _ in range(_STRAY_LOOKS):
        found = [
            (pid, started)
            for pid in group.members()
            if pid != me and killed.get(pid, b"") != (started := _start_time(pid))
        ]
        if not found:
            return len(killed), True
        killed.update((pid, started) for pid, started in found if group.kill_member(pid))
    return len(killed), False


def _below(line: str, where: str) -> bool:
    """Whether a ``/proc/PID/cgroup`` line names the group ``where`` or one below it."""
    return line == where or line.startswith(where + "/")


class Group:
    """One guarded process's cgroup, from its making to its removal."""

    def __init__(self, path: str, procs: int) -> None:
        self.path = path
        #: ``cgroup.procs`` opened for writing: the forked process joins through it.
        self.procs = procs
        #: Whether :meth:`kill_all` has been.
        self.killed = False

    @classmethod
    def make(cls, *, capped: bool = True) -> Group | None:
        """A new group below this process's folder; None where there can be none.

        ``capped``: what may be built below it is limited (a guarded call's group). A pool's
        zygote has an uncapped one: each of its workers' groups below it is capped.
        """
        parent = home()
        if not parent:
            return None
        _check_keeper()
        _sweep()
        path = os.path.join(parent, str(next(STATE.names)))
        try:
            os.mkdir(path)
            caps = (("descendants", _MAX_DESCENDANTS), ("depth", _MAX_DEPTH)) if capped else ()
            for limit, value in caps:
                if not put(os.path.join(path, f"cgroup.max.{limit}"), value):
                    raise OSError(f"cgroup.max.{limit} could not be set")
            procs = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return cls(path, procs)

    def join(self) -> bool:
        """Move the calling process (just forked) into the group, and remember it as its own."""
        if not join(self.procs):
            return False
        STATE.joined[:] = [self]
        return True

    def members(self) -> list[int]:
        """The pids in the group and every group below it (a nested guard's, or the call's)."""
        found = []
        with contextlib.suppress(OSError):
            for _, _, _, fd in os.fwalk(self.path):
                try:
                    with open("cgroup.procs", "rb", opener=_at(fd)) as f:
                        found += [int(word) for word in f.read().split()]
                except (OSError, ValueError):
                    continue
        return found

    def _write(self, name: str, value: bytes) -> bool:
        return put(os.path.join(self.path, name), value)  # False: gone already

    def _await_frozen(self, timeout: float) -> None:
        """Wait until every member is frozen, or ``timeout`` seconds."""
        backoff = _backoff.Backoff(time.monotonic() + timeout)
        while True:
            try:
                with open(os.path.join(self.path, "cgroup.events"), "rb") as f:
                    if b"frozen 1" in f.read():
                        return
            except OSError:
                return
            if not backoff.sleep():
                return

    def begin_freeze(self) -> bool:
        """Start freezing the group without waiting for it (:meth:`freeze` waits), so that
        several groups freeze at once; False if it is gone."""
        return self._write("cgroup.freeze", b"1")

    def freeze(self, spare: int = 0) -> int:
        """Freeze the group, so that nothing in it runs (or forks) any more; how many of its
        living members were not ``spare`` (those a kill before this one reached are dead
        already, not counted). Bounded: a task in a vfork wait never freezes.

        The others go to nice 19 for their teardown, as :func:`._walkkill.kill_descendants`
        does: a hundred forks of a large caller tearing down at once would hold up the exit of
        ``spare`` (the guarded process), which the caller waits for.
        """
        if not self.members():
            return 0
        if self.begin_freeze():
            self._await_frozen(FREEZE_WAIT_S)
        living = 0
        for pid in self.members():  # again, frozen: what forked meanwhile is there too
            if pid != spare and _procfs.alive(pid):
                living += 1
                _walkkill.demote(pid)
        return living

    def kill_all(self) -> None:
        """SIGKILL everything in the group at once. Nothing can join it after that: a process
        with SIGKILL pending forks nothing. ``cgroup.kill`` passes over a process whose main
        thread has exited while its other threads run on (it signals the exited one, and none
        of the others acts on it): such a member, the only kind listed whose state reads as a
        zombie, is sent SIGKILL by its pid as well, which reaches all its threads."""
        self._write("cgroup.kill", b"1")
        for pid in self.members():
            if (_procfs.stat_fields(pid) or [b""])[0] == b"Z":
                self.kill_member(pid)
        self.killed = True

    @functools.cached_property
    def where(self) -> str:
        """The group as ``/proc/PID/cgroup`` names it: read once, when a kill first needs it
        (a look may check a thousand members; most groups are never killed)."""
        return "0::/" + os.path.relpath(self.path, _mount() or "/")

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` (as ``/proc`` names it) is in the group or one below it, or was
        when it exited (a zombie's group reads as it was, ``(deleted)`` once removed)."""
        return any(
            _below(line.removesuffix(" (deleted)"), self.where)
            for line in lines(f"/proc/{pid}/cgroup")
        )

    def kill_member(self, pid: int) -> bool:
        """SIGKILL ``pid`` (all its threads) if it is still in the group (or one below it);
        whether it was."""
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return False
        try:
            if not any(_below(line, self.where) for line in lines(f"/proc/{pid}/cgroup")):
                return False
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            return True
        except OSError:
            return False
        finally:
            os.close(pidfd)

    def kill(self, spare: int = 0) -> int:
        """:meth:`freeze`, then :meth:`kill_all`; how many it counted."""
        living = self.freeze(spare)
        self.kill_all()
        return living

    def close(self, until: float) -> int:
        """Kill what is left, wait until ``until`` (monotonic) for it to finish exiting, and
        remove the group (later, if it is not empty by then). How many were left running.
        A second call does nothing."""
        if self.procs < 0:
            return 0
        os.close(self.procs)
        self.procs = -1
        if not self.killed:
            # Most calls leave their group empty: then it goes in one rmdir, which the kernel
            # refuses (EBUSY) while any process or group is in it; else it is killed below.
            try:
                os.rmdir(self.path)
            except OSError:
                pass
            else:
                return 0
        # Once struck, counted already: what is left is dying (and one that has just taken
        # its SIGKILL off its pending set would look alive for a moment).
        leaked = 0 if self.killed else self.kill()
        if not remove(self.path, until):
            STATE.cgroups_pending.append(self.path)
        return leaked


def _at(dir_fd: int) -> Callable[[str, int], int]:
    """An ``open()`` opener relative to ``dir_fd``."""
    return lambda name, flags: os.open(name, flags, dir_fd=dir_fd)


def rmdir_when_empty(name: str, dir_fd: int | None, until: float) -> bool:
    """Remove one folder once it is empty, waiting until ``until``; False if it is not."""
    backoff = _backoff.Backoff(until)
    while True:
        try:
            os.rmdir(name, dir_fd=dir_fd)
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY: members still exiting
            if not backoff.sleep():
                return False


def remove(path: str, until: float) -> bool:
    """Remove ``path`` and the groups below it once they are empty, waiting until ``until``
    (monotonic); False if some are not empty by then. A group a nested guard made below another
    holds the one above it (``rmdir`` refuses a folder with a folder in it)."""
    with contextlib.suppress(OSError):
        for _, folders, _, fd in os.fwalk(path, topdown=False):
            for folder in folders:
                if not rmdir_when_empty(folder, fd, until):
                    return False
    return rmdir_when_empty(path, None, until)


def _sweep() -> None:
    """Remove, without waiting, the groups that were not empty yet when they were closed."""
    pending = STATE.cgroups_pending
    for path in list(pending):
        if remove(path, 0.0):
            with contextlib.suppress(ValueError):
                pending.remove(path)
