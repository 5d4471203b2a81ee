"""One box per guarded process: everything it may hold, made before its fork, entered by the
child in one fixed order, and ended by its parent in one order.

Every kind of guarded process holds a :class:`Box`, and none of them branches on what the box
holds: a ``run()`` child (its caller makes the box), a pool's zygote (its caller), a pool's
worker (its zygote) and an isolated item (its worker). What a box may hold:

============  =====================================================================
the cage      what contains its processes: a cgroup of its own, a PID namespace, or
              the subreaper's (:mod:`._contain`)
its limits    memory and processes over all its processes (:mod:`._quota`)
its plan      its temporary folders, its mount, IPC and network namespaces, its
              identity (:mod:`._confine`)
its channel   the descriptors it keeps: nothing else of its parent's survives
============  =====================================================================

:meth:`Box.enter`, in the child, is the one place that sets a guarded process up, in this order:

1. **groups**: into its cgroup and its limits' groups, through the descriptors its parent
   opened for it (which step 2 closes); and no core dumps (a crash is an outcome: its core,
   as large as the process, would be left in the caller's working directory);
2. **descriptors**: every descriptor but its channel's and 0 to 2 closed (``close_range``): no
   other pool's pipes, no other thread's ``run()`` pipes, no socket, file or listener of the
   trainer's;
3. the scorer's import, where a worker imports it (``load``): it may need what the next steps
   take away (root's files, the network);
4. **namespaces**: mount (a private ``/dev/shm``), IPC, network;
5. **identity**: no groups, a uid of its own (``unprivileged=True``), no new privileges; the
   death signal, which a uid change clears, armed again.

A step that fails ends the child (``70``, reported as a crash): nothing runs half-boxed.
:meth:`Box.close`, in the parent once the process is reaped, is the one place that ends it: what
is left in the cage killed and awaited, its groups removed, its folders removed, its uid given
back; a process it started as its parent's child (``clone(CLONE_PARENT)``) killed and reaped
by that parent.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from . import _confine, _contain, _libc, _procfs, _quota, _reap
from ._outcome import Confinement, Containment

#: Exit code of a child that could not enter its box (the caller sees a crash).
UNBOXED = 70


class Confining:
    """What a call asked to be confined by (see :class:`Confinement`): its limits, whether it
    may use the network, whether a root caller's call runs under an identity of its own."""

    def __init__(
        self,
        memory_mb: float | None,
        max_processes: int | None = _quota.MAX_PROCESSES,
        network: bool = True,
        unprivileged: bool = False,
    ) -> None:
        self.memory_mb = memory_mb
        self.max_processes = max_processes
        self.network = network
        self.unprivileged = unprivileged
        asked = {Confinement.PRIVATE_TMP, Confinement.PRIVATE_SHM, Confinement.PRIVATE_IPC}
        if memory_mb is not None:
            asked.add(Confinement.MEMORY_MAX)
        if max_processes is not None:
            asked.add(Confinement.PIDS_MAX)
        if not network:
            asked.add(Confinement.NO_NETWORK)
        if unprivileged:
            asked |= {Confinement.UNPRIVILEGED, Confinement.SEALED}
        #: Everything asked for: what did not apply is warned about once.
        self.asked = frozenset(asked)


def _fd_end() -> int:
    """One past the highest descriptor a process may hold: ``close_range`` closes up to it in
    one call (a kernel without it, one ``close`` each up to the hard limit)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard >= 1 << 31:
        return (1 << 31) - 1
    return max(hard, 1 << 16)


def close_all_but(keep: Iterable[int]) -> None:  # pragma: no cover - child only
    """Close every descriptor but 0, 1, 2 and ``keep``.

    The objects of the parent's that owned the closed numbers (a socket, a file) would close
    them again when collected, by then someone else's: the cyclic collector leaves every object
    there is now alone from here on (``gc.freeze``; the call's own objects are collected as
    ever), and none of them is freed otherwise, as the child never returns into its parent's
    frames.
    """
    gc.freeze()
    low = 3
    for fd in sorted(set(keep)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, _fd_end())


def _no_core() -> None:  # pragma: no cover - child only
    """No core dump of this process or its children: the soft limit 0 (the hard one as it was,
    for a scorer that wants one to raise it)."""
    with contextlib.suppress(OSError, ValueError):
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


class Box:
    """Everything one guarded process may hold (see the module's docstring)."""

    def __init__(
        self,
        cage: _contain.Cage | None = None,
        quota: _quota.Quota | None = None,
        plan: _confine.Plan | None = None,
    ) -> None:
        #: What contains its processes.
        self.cage = cage or _contain.Cage(Containment.NONE)
        #: Its memory and process limits.
        self.quota = quota or _quota.Quota()
        #: Its folders, namespaces and identity.
        self.plan = plan or _confine.Plan(frozenset(), None)
        #: :meth:`close` has been.
        self.closed = False

    @classmethod
    def make(
        cls,
        cage: _contain.Cage,
        confining: Confining | None,
        *,
        beside: int = 0,
        apart: bool = False,
    ) -> Box:
        """The box of a process to fork, in ``cage``, confined as ``confining`` asks (nothing
        more than the cage where it is None). ``beside``: tasks of its own beyond what its
        items may start (an isolating worker, one). ``apart``: an isolating worker's, whose
        items each enter an IPC namespace and an identity of their own (see :meth:`item`)."""
        if confining is None:
            return cls(cage)
        tasks = confining.max_processes
        if tasks is not None:
            tasks += beside
        quota = _quota.Quota.make(confining.memory_mb, tasks, cage.folder)
        plan = _confine.Plan.make(
            confining.memory_mb, confining.network, confining.unprivileged, apart
        )
        return cls(cage, quota, plan)

    def item(self) -> Box:
        """In an isolating worker, before an item's fork: the item's box, in its worker's cage
        and limits (the worker's to end), with an IPC namespace and an identity of its own."""
        return Box(plan=self.plan.item())

    @property
    def applied(self) -> frozenset[Confinement]:
        """What confines the process (see :class:`Confinement`)."""
        return self.quota.applied | self.plan.applied

    def forked(self) -> None:
        """In the parent, once the fork is done (or failed)."""
        self.cage.forked()

    def enter(
        self,
        keep: Iterable[int],
        parent: int | None = None,
        load: Callable[[], Any] | None = None,
    ) -> Any:  # pragma: no cover - child only
        """In the child, first thing: steps 1 to 5 of the module's docstring; what ``load``
        returned (None without one). ``keep``: its channel's descriptors. ``parent``: the pid
        it dies with, its death signal armed again after a change of uid. Ends the child where
        a step fails."""
        if not (self.cage.enter() and self.quota.join()):
            os._exit(UNBOXED)
        _no_core()
        close_all_but(keep)
        loaded = None if load is None else load()
        if not self.plan.enter():
            os._exit(UNBOXED)
        if parent is not None and self.plan.uid is not None:
            _libc.die_with_parent()
            if os.getppid() not in (parent, 0):  # it died before the death signal was armed
                os._exit(UNBOXED)
        return loaded

    def oom_kills(self) -> int:
        """How many of its processes the kernel's OOM killer ended at its limit; read before
        :meth:`close`."""
        return self.quota.oom_kills()

    def close(self, until: float, strays: _contain.Strays | None = None) -> int:
        """Once the process is reaped: kill what is left in its cage (awaited until ``until``,
        monotonic), remove its groups and folders, give its uid back; how many were left
        running. ``strays``: the zygote, to which a reaped worker's orphans came. A second call
        does nothing."""
        leaked = self.cage.close(until) if strays is None else self.cage.close_reaped(strays)
        if not self.closed:
            leaked += self._siblings(until)
        self.closed = True
        self.quota.close(until)
        self.plan.close()
        return leaked

    def _siblings(self, until: float) -> int:
        """Kill and reap the closing thread's children that are the process's own: a guarded
        process may start one as its parent's child (``clone(CLONE_PARENT)``, any uid may),
        outside its subtree from its first instruction, which nobody else reaps (the caller
        would keep a zombie a call) or, but in a group, kills. Known by its cage (a zombie's
        group reads as it was) or, for one that has a uid of its own, by its uid; a child
        of the parent's own has neither. Before the uid is given back; how many were alive.
        The thread that forked the process closes it: a sibling is that thread's child."""
        try:
            listed = _procfs.read_small("/proc/thread-self/children").split()
        except OSError:
            return 0
        uid = self.plan.uid
        alive = 0
        for word in listed:
            child = int(word)
            if not (self.cage.holds(child) or (uid is not None and _procfs.real_uid(child) == uid)):
                continue
            pid = _procfs.to_local(child)
            if pid is None:
                continue
            alive += _procfs.alive(child)
            # An unreaped child's pid is not handed out again: by pid, as _reap does.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _reap.reap_within(pid, None, max(until - time.monotonic(), 0.0))
        return alive
