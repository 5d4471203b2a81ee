"""The call's memory and process limits, covering every process it starts: ``memory.max`` and
``pids.max`` of a cgroup of the call's own, where the kernel has the controllers.

``RLIMIT_AS`` (:func:`._child.limit_memory`) bounds one process: a call whose children each
stay below ``memory_mb`` held all of them together, and nothing bounded its forks. Here the
kernel bounds them together: the memory charged to the call's group (its processes' memory,
and what they write to tmpfs) and the number of its tasks (processes and threads).

Where: in the call's own cgroup v2 group (:mod:`._cgroup`) where its folder has the memory and
pids controllers (enabled there at its first limited call); else, on a hybrid hierarchy whose
controllers are still mounted as cgroup v1 ones, in a group of the call's own in each v1
hierarchy (``memory.limit_in_bytes``, ``pids.max``), below this process's own, which the child
joins beside its v2 group, by a write to a descriptor its parent opened. Nowhere when cgroups
are turned off (``PYTEST_REWARDHANG_CGROUP=0``) or none can be made.

The memory limit is ``memory_mb`` plus what the call may copy of its caller's memory (the
caller's resident size when the call is made: a forked call shares it, and each page it writes
to is copied and charged to it, as a garbage collection does to every object), plus
:data:`HEADROOM_MB` for the files it reads: what a call never held before it held it is bounded
by ``memory_mb``, and the one process that outgrows ``memory_mb`` meets its own ``RLIMIT_AS``
first (a ``MemoryError`` with its traceback).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from . import _cgroup
from ._outcome import Confinement
from ._state import STATE

#: How many tasks (processes and threads) a call may have at once by default.
MAX_PROCESSES = 1024
#: What the group may hold past ``memory_mb`` and the caller's size (see the module's docstring).
HEADROOM_MB = 32
#: Each limit's file and the file counting the OOM kills, in cgroup v2 and v1.
_V2 = {"memory": ("memory.max", "memory.events"), "pids": ("pids.max", "")}
_V1 = {"memory": ("memory.limit_in_bytes", "memory.oom_control"), "pids": ("pids.max", "")}
#: Writes a limit's file; False if it cannot.
_write = _cgroup.put


def _v1_home(controller: str) -> str | None:
    """The folder of this process's own group in the v1 hierarchy of ``controller``; found
    once per process, when the groups a dead guard left there are removed."""
    homes = STATE.v1_homes
    if controller not in homes:
        home = homes[controller] = _find_v1_home(controller)
        if home is not None:
            _remove_abandoned(home)
    return homes[controller]


def _remove_abandoned(home: str) -> None:
    """Remove the v1 groups of guards that died mid-call (SIGKILLed): their processes were
    killed with their v2 group (by its keeper), their folders were left."""
    _remove_made(home, lambda maker: not _alive(maker), 0.0)


def remove_left_by(maker: int, until: float) -> None:
    """Remove the v1 groups that ``maker`` (a pool's zygote, reaped now) made below this
    process's own and left: a worker's, whose last process was still exiting when the zygote
    closed it, and which the zygote meant to remove at its next call. Waits until ``until``
    (monotonic) for them to empty."""
    if _cgroup.enabled():
        for home in filter(None, map(_v1_home, _V1)):
            _remove_made(home, maker.__eq__, until)


def _remove_made(home: str, left: Callable[[int], bool], until: float) -> None:
    """Remove the guards' groups in ``home`` whose maker's pid ``left`` picks, once empty (by
    ``until``, monotonic; later calls of this process remove what is not by then)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(home):
            maker = name[len(_cgroup.PREFIX) :].partition("-")[0]
            if name.startswith(_cgroup.PREFIX) and maker.isdigit() and left(int(maker)):
                path = os.path.join(home, name)
                if not _cgroup.remove(path, until):
                    STATE.v1_pending.append(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's
        return True
    return True


def _find_v1_home(controller: str) -> str | None:
    mount = own = None
    for line in _cgroup.lines("/proc/self/mountinfo"):
        fields = line.split()
        if "-" not in fields:
            continue
        tail = fields[fields.index("-") + 1 :]
        if tail[:1] == ["cgroup"] and controller in tail[-1].split(","):
            mount = fields[4].replace("\\040", " ")
    for line in _cgroup.lines("/proc/self/cgroup"):
        number, controllers, path = [*line.split(":", 2), "", ""][:3]
        if number != "0" and controller in controllers.split(","):
            own = path
    if mount is None or own is None:
        return None
    return os.path.join(mount, own.lstrip("/"))


@dataclass
class Quota:
    """The limits of one call, from before its fork to their removal after its reaping."""

    #: What applied (:attr:`Confinement.MEMORY_MAX`, :attr:`Confinement.PIDS_MAX`).
    applied: frozenset[Confinement] = frozenset()
    #: The groups whose files count the call's OOM kills.
    counters: list[str] = field(default_factory=list)
    #: The v1 groups made for the call, and their ``cgroup.procs`` opened for writing.
    groups: list[str] = field(default_factory=list)
    procs: list[int] = field(default_factory=list)
    #: An eventfd the kernel signals at the call's first OOM kill (v1 groups): the caller
    #: ends the call then, as cgroup v2 does itself (``memory.oom.group``); None elsewhere.
    alarm: int | None = None

    @classmethod
    def make(cls, memory_mb: float | None, max_processes: int | None, group: str | None) -> Quota:
        """The limits asked for, in ``group`` (the call's v2 group) where it has the
        controllers, else in v1 groups of their own; those the kernel has no room for are not
        in :attr:`applied`."""
        quota = cls()
        wanted = {}
        if memory_mb is not None:
            shared = _resident_bytes()
            wanted["memory"] = b"%d" % (((int(memory_mb) + HEADROOM_MB) << 20) + shared)
        if max_processes is not None:
            wanted["pids"] = b"%d" % max_processes
        if not wanted or not _cgroup.enabled():
            return quota
        _sweep()
        applied = set()
        for controller, value in wanted.items():
            if quota._limit(controller, value, group):
                applied.add(
                    Confinement.MEMORY_MAX if controller == "memory" else Confinement.PIDS_MAX
                )
        quota.applied = frozenset(applied)
        return quota

    def _limit(self, controller: str, value: bytes, group: str | None) -> bool:
        limit, counter = _V2[controller]
        if group is not None:
            folder = os.path.dirname(group)
            enable_below(folder)
            # A failed attempt costs each call its system calls and an exception.
            if (folder, controller) not in STATE.absent_v2:
                path = os.path.join(group, limit)
                if _write(path, value):
                    if controller == "memory":
                        # The whole call goes at once: a call whose child is killed is not an
                        # answer.
                        _write(os.path.join(group, "memory.oom.group"), b"1")
                        self.counters.append(os.path.join(group, counter))
                    return True
                if not os.path.exists(path):  # the folder does not hand the controller down
                    STATE.absent_v2.add((folder, controller))
        home = _v1_home(controller)
        if home is None:
            return False
        limit, counter = _V1[controller]
        path = os.path.join(home, f"{_cgroup.PREFIX}{os.getpid()}-{next(STATE.names)}")
        try:
            os.mkdir(path)
        except OSError:
            return False
        if not _write(os.path.join(path, limit), value):
            _cgroup.remove(path, 0.0)
            return False
        try:
            procs = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            _cgroup.remove(path, 0.0)
            return False
        self.groups.append(path)
        self.procs.append(procs)
        if counter:
            self.counters.append(os.path.join(path, counter))
            self.alarm = _oom_alarm(path, counter)
        return True

    def join(self) -> bool:
        """In the child, before the call: move into the v1 groups."""
        return all(_cgroup.join(procs) for procs in self.procs)

    def oom_kills(self) -> int:
        """How many of the call's processes the kernel's OOM killer ended at its limit."""
        kills = 0
        for path in self.counters:
            for line in _cgroup.lines(path):
                name, _, count = line.partition(" ")
                if name == "oom_kill" and count.isdigit():
                    kills += int(count)
        return kills

    def close(self, until: float) -> None:
        """Remove the v1 groups once the call's processes have exited (later if they have not
        by ``until``, monotonic). A second call does nothing."""
        for procs in self.procs:
            os.close(procs)
        self.procs.clear()
        if self.alarm is not None:
            os.close(self.alarm)
            self.alarm = None
        for path in self.groups:
            if not _cgroup.remove(path, until):
                STATE.v1_pending.append(path)
        self.groups.clear()


#: The v2 folders whose groups have been given the controllers (or could not be).


def enable_below(home: str) -> None:
    """Give the groups in this process's v2 folder the memory and pids controllers, once,
    where its parent passes them down to it (else the limits are sought in v1)."""
    if home in STATE.controllers_enabled:
        return
    STATE.controllers_enabled.add(home)
    offered = " ".join(_cgroup.lines(os.path.join(home, "cgroup.controllers"))).split()
    wanted = " ".join(f"+{name}" for name in ("memory", "pids") if name in offered)
    if wanted:
        _write(os.path.join(home, "cgroup.subtree_control"), wanted.encode())


def _resident_bytes() -> int:
    """This process's resident size (``/proc/self/statm``), what a call forked from it shares."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _oom_alarm(path: str, counter: str) -> int | None:
    """An eventfd signalled when the OOM killer strikes in the v1 group ``path`` (its
    ``cgroup.event_control`` notification); None if it cannot be had."""
    alarm = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    try:
        watched = os.open(os.path.join(path, counter), os.O_RDONLY | os.O_CLOEXEC)
        try:  # the registration holds the file: our descriptor of it may go
            if _write(os.path.join(path, "cgroup.event_control"), b"%d %d" % (alarm, watched)):
                return alarm
        finally:
            os.close(watched)
    except OSError:
        pass
    os.close(alarm)
    return None


def _sweep() -> None:
    pending = STATE.v1_pending
    for path in list(pending):
        if _cgroup.remove(path, 0.0):
            with contextlib.suppress(ValueError):
                pending.remove(path)
