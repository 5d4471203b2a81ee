"""Nothing outlives the call: how the guarded processes are contained, chosen once per process
(:func:`strategy`), and what contains each one (a :class:`Cage`) from before its fork to after
its reaping.

Three mechanisms, strongest first. A PID namespace (:mod:`._pidns`, opt-in: the call sees the
namespace's pids) around each ``run()`` child, and one around all of a pool's workers, which the
kernel kills whole with its init. Else, by default where one can be made, a cgroup (v2) of its
own for each guarded process and each pool's zygote (:mod:`._cgroup`), which the kernel kills
whole in one write. Else the subreaper alone: every guarded process adopts its orphans, and the
guard finds and kills its tree through ``/proc`` (:mod:`._treekill`). Every guarded process is
a child subreaper in any case: see :class:`Containment` for what each one holds against.

The callers (``run()``'s fork, the pool's launch of its zygote, the zygote's forks of its
workers) ask the strategy for a cage and call the cage's methods; none of them asks which
mechanism it is. A cage whose group or namespace could not be made is the subreaper's.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from typing import Protocol

from . import _cgroup, _libc, _pidns, _quota, _reap, _treekill
from ._outcome import Containment
from ._pidns import Namespace
from ._state import STATE


def containment() -> Containment:
    """What this process's guarded calls are contained by (probed once): a PID namespace where
    asked for (opt-in), else a cgroup where one can be made (:mod:`._cgroup`), else the
    subreaper."""
    probed = STATE.containment
    if not probed:
        if _libc.pid_namespaces():
            probed.append(Containment.PID_NAMESPACE)
        elif _cgroup.home():
            probed.append(Containment.CGROUP)
        elif _libc.can_subreap():
            probed.append(Containment.SUBREAPER)
        else:
            probed.append(Containment.NONE)
    return probed[0]


def prepare(zygote: bool = False) -> None:
    """Probe the containment, and where it is cgroups make this process's folder now: before
    it adopts orphans (a subreaper), which the keeper this starts must not become.

    ``zygote``: this is a pool's zygote, in the group its caller made for it; it moves into a
    leaf group of its folder, so that its workers' groups may be given the memory and pids
    controllers (cgroup v2 hands them down only through groups that hold no process).
    """
    if containment() is Containment.CGROUP and _cgroup.home() and zygote:
        own = _cgroup.into_leaf()
        if own is not None:
            _quota.enable_below(own)


class Strays(Protocol):
    """A pool's zygote, as a worker's cage sees it once the worker is reaped."""

    def sweep(self) -> int:
        """Kill and reap the orphans that came to it; how many were still alive."""

    def reap_exited(self) -> None:
        """Reap, without waiting, the orphans that have exited."""


class Cage:
    """What contains one guarded process (a ``run()`` child, a pool's worker or zygote): here,
    the subreaper's, its own subtree and nothing more; found through ``/proc``, killed stopped
    first (:mod:`._treekill`), its orphans swept by whoever they re-parent to.

    The parent makes the cage before the fork, calls :meth:`forked` after it, the child
    :meth:`enter` first thing; the kill and the close come after.
    """

    def __init__(self, containment: Containment) -> None:
        #: What the call's :class:`Outcome` says contained it.
        self.containment = containment
        #: The cgroup v2 folder of the cage, where the call's limits go (:mod:`._quota`);
        #: None where it has none.
        self.folder: str | None = None

    def spawn_actions(self, fd: int) -> list[tuple[int, int, int]]:
        """``posix_spawn`` file actions that give a spawned process the means to
        :func:`._cgroup.join` its cage as ``fd``; none needed."""
        return []

    def forked(self) -> None:
        """In the parent, once the fork is done (or failed)."""

    def enter(self) -> bool:
        """In the child, first thing: move into the cage; False if it could not."""
        return True

    def kill_and_reap(
        self, pid: int, pidfd: int | None, timeout: float
    ) -> tuple[int, int, resource.struct_rusage | None]:
        """Kill the child ``pid`` and all below it, and reap it within ``timeout``: how many it
        left running, its wait status and resource usage (see :func:`._treekill.kill_and_reap`)."""
        return _treekill.kill_and_reap(pid, pidfd, timeout)

    def begin_freeze(self) -> bool:
        """Start holding everything in the cage still, ahead of :meth:`kill` (so that several
        cages freeze at once); False where nothing can be: the kill freezes the tree itself."""
        return False

    def kill(self, pid: int, pidfd: int) -> int:
        """Kill the child ``pid`` and all below it, left to reap; how many there were."""
        return _treekill.kill_tree(pid, pidfd)

    def kill_others(self, spare: int = 0) -> int:
        """Kill at once all in the cage but ``spare``, where the cage holds them all; how many."""
        return 0

    def close(self, until: float) -> int:
        """Kill what is left in the cage, awaited until ``until`` (monotonic), and remove it;
        how many were left running. A second call does nothing."""
        return 0

    def kill_strays(self) -> tuple[int, bool]:
        """In the guarded process (a pool's worker between items): kill what its item left in
        the cage outside its subtree (the ``prctl`` escape); how many, and whether the cage was
        then found clear (if not, the worker retires: its cage is then killed whole). None is
        found here."""
        return 0, True

    def close_reaped(self, strays: Strays) -> int:
        """Once a pool's worker is reaped: kill what it left running; how many. Its orphans
        came to the zygote alive: swept."""
        return strays.sweep()

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` (as ``/proc`` names it) is, or was when it exited, in the cage;
        False where the cage cannot tell (the subreaper's)."""
        return False


class _GroupCage(Cage):
    """A cgroup of the process's own (:mod:`._cgroup`): one write kills all it started,
    escaped from its subtree or not."""

    def __init__(self, group: _cgroup.Group) -> None:
        super().__init__(Containment.CGROUP)
        self.group = group
        self.folder = group.path

    def spawn_actions(self, fd: int) -> list[tuple[int, int, int]]:
        return [(os.POSIX_SPAWN_DUP2, self.group.procs, fd)]

    def enter(self) -> bool:
        return self.group.join()

    def kill_and_reap(
        self, pid: int, pidfd: int | None, timeout: float
    ) -> tuple[int, int, resource.struct_rusage | None]:
        """The group is frozen, the child killed and reaped, then the rest killed in one write
        (their emptying :meth:`close` awaits).

        The child goes first, the rest held frozen meanwhile: a hundred forks of a large
        caller tearing down beside it, sharing its memory, held its own teardown up past the
        deadline's bound on a busy machine, and it would be left unreaped.
        """
        leaked = self.group.freeze(spare=pid)
        # By its pidfd, not through the group: a call may have moved it out of it.
        _treekill.signal_child(pid, pidfd, signal.SIGKILL)
        reaped = _reap.reap_within(pid, pidfd, timeout)
        self.group.kill_all()
        return (leaked, *reaped)

    def begin_freeze(self) -> bool:
        self.group.begin_freeze()
        return True

    def kill(self, pid: int, pidfd: int) -> int:
        leaked = self.group.kill(spare=pid)  # one write kills it and all below it
        _treekill.signal_child(pid, pidfd, signal.SIGKILL)  # moved out of it, say
        return leaked

    def kill_others(self, spare: int = 0) -> int:
        return self.group.kill(spare=spare)

    def close(self, until: float) -> int:
        return self.group.close(until)

    def kill_strays(self) -> tuple[int, bool]:
        return _cgroup.kill_strays()

    def holds(self, pid: int) -> bool:
        return self.group.holds(pid)

    def close_reaped(self, strays: Strays) -> int:
        """What it left running, escaped from its subtree or not, is killed and counted here.
        Its orphans re-parented to the zygote are reaped once they have exited, not waited
        for: fifty forks tearing down took 150 ms, and replacements waited behind it."""
        leaked = self.group.close(time.monotonic())  # removed later if still exiting
        strays.reap_exited()
        return leaked


class _NamespaceCage(Cage):
    """A PID namespace of the call's own (:mod:`._pidns`), which the child is forked into."""

    def __init__(self, namespace: Namespace) -> None:
        super().__init__(Containment.PID_NAMESPACE)
        self.namespace = namespace

    def forked(self) -> None:
        self.namespace.restore()

    def enter(self) -> bool:
        self.namespace.stay()
        return True

    def close(self, until: float) -> int:
        # After the child's reaping: the init's exit awaits it.
        return self.namespace.close()


class Strategy:
    """How this process contains its guarded calls: here, by the subreaper alone."""

    def __init__(self, containment: Containment) -> None:
        self.containment = containment

    def call(self) -> Cage:
        """The cage of a ``run()`` child, made before its fork."""
        return Cage(self.containment)

    def zygote(self) -> Cage:
        """The cage of a pool's zygote, made before it is started."""
        return Cage(self.containment)

    def worker(self) -> Cage:
        """The cage of a pool's worker, made by its zygote before the fork."""
        return Cage(self.containment)

    def workers(self, watch: int) -> Namespace:
        """In a pool's zygote, the PID namespace it forks all its workers into, dying with the
        process ``watch`` is a pidfd of; :meth:`Namespace.none` where there is none."""
        return Namespace.none()


class _Cgroups(Strategy):
    def call(self) -> Cage:
        return self._group(capped=True)

    def zygote(self) -> Cage:
        # Uncapped: each of its workers' groups below it is capped.
        return self._group(capped=False)

    def worker(self) -> Cage:
        return self._group(capped=True)

    @staticmethod
    def _group(*, capped: bool) -> Cage:
        group = _cgroup.Group.make(capped=capped)
        if group is None:  # its group could not be made
            return Cage(Containment.SUBREAPER)
        return _GroupCage(group)


class _Namespaces(Strategy):
    def call(self) -> Cage:
        namespace = _pidns.start()
        return Cage(self.containment) if namespace is None else _NamespaceCage(namespace)

    def workers(self, watch: int) -> Namespace:
        # It dies with the caller even if the zygote is stopped, and nothing in it can name
        # the zygote to stop or kill it. The zygote stays outside, forking into it.
        namespace = _pidns.start(watch)
        if namespace is None:
            return Namespace.none()
        namespace.stay()
        return namespace


#: One strategy for each containment: the one in force is chosen by :func:`containment`'s probe.
_STRATEGIES: dict[Containment, Strategy] = {
    Containment.PID_NAMESPACE: _Namespaces(Containment.PID_NAMESPACE),
    Containment.CGROUP: _Cgroups(Containment.CGROUP),
    Containment.SUBREAPER: Strategy(Containment.SUBREAPER),
    Containment.NONE: Strategy(Containment.NONE),
}


def strategy() -> Strategy:
    """This process's :class:`Strategy`, for its :func:`containment` (probed once)."""
    return _STRATEGIES[containment()]
