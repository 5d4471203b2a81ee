"""Everything the guard remembers for the life of a process, in one object: :data:`STATE`.

No module of the guard keeps state of its own between calls: what one finds out or makes once
per process (the machine's probes, its folder of cgroups and the keeper watching it, the uids
it hands out, the children it could not reap yet) is an attribute here, so that one place says
what a process holds and what a fork does to it.

A forked process (a ``run()`` child, a pool's worker, an isolated item) starts from a copy of
its parent's. :meth:`ProcessState.forked`, run in every such child, is the one place that says
which parts are the parent's alone and go: what names the parent (its pid, its cgroup folder
and keeper, the group it joined, its held signal masks, the children and groups it has yet to
end) and what a thread of the parent's may have held locked at the fork. The rest stays: the
machine's answers are the child's too, and what was said once is not said again.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import ctypes

    from ._outcome import Confinement, Containment


class JoinedGroup(Protocol):
    """A guarded process's own cgroup, as it looks for strays (:class:`._cgroup.Group`)."""

    def members(self) -> list[int]: ...

    def kill_member(self, pid: int) -> bool: ...


class UidBlock(Protocol):
    """The uids a process hands out (:class:`._confine.Uids`)."""

    def take(self) -> int | None: ...

    def give(self, uid: int) -> None: ...


class ProcessState:
    """What the guard remembers for the life of one process (see the module's docstring).

    One-element lists hold what is found once: empty until then.
    """

    def __init__(self) -> None:
        # --- the machine, probed once: a forked child inherits the answers ------------------
        #: What contains this process's guarded calls (:func:`._contain.containment`).
        self.containment: list[Containment] = []
        #: Whether a thread here can start a PID namespace (:func:`._libc.pid_namespaces`).
        self.pid_namespaces: list[bool] = []
        #: What the kernel permits here: each namespace, the change of user (:mod:`._confine`).
        self.permitted: dict[Confinement, bool] = {}
        #: The v2 folders whose groups had no file of a controller, and which (:mod:`._quota`):
        #: the v1 hierarchy holds that limit for every later call.
        self.absent_v2: set[tuple[str, str]] = set()
        #: The v2 folders below which the memory and pids controllers were enabled.
        self.controllers_enabled: set[str] = set()
        #: The guard's handle on the C library, its functions looked up as used (:mod:`._libc`).
        self.libc: list[ctypes.CDLL | None] = []
        #: The numbers in the names of the groups this process makes: each name is made once.
        self.names = itertools.count()

        # --- said once per process ---------------------------------------------------------
        #: The warnings and notes said (the fallbacks of ``run``, a zygote's notes).
        self.said: set[str] = set()
        #: The confinements asked for that could not apply, warned about.
        self.unconfined_warned: set[Confinement] = set()

        # --- what a guarded process or a zygote keeps of its own start ----------------------
        #: A guarded process's stdio objects it replaced, kept unfinalized (:mod:`._child`).
        self.replaced_stdio: list[tuple[object, object, object]] = []
        #: The temporary folder a pool's caller made for this zygote (:mod:`._zygote`).
        self.zygote_tmpdir: list[str] = []

        self._own()

    def _own(self) -> None:
        """What is this process's alone: made anew in each forked child."""
        #: ``os.getpid()`` when filled, our pid as ``/proc`` names it, and how many PID
        #: namespaces below ``/proc``'s we are (:func:`._procfs.where`).
        self.ids = [0, 0, 0]
        #: The main thread's signal masks before each hold still in force (:mod:`._interrupts`).
        #: A child forked inside a hold never returns through its release.
        self.held_masks: list[set[int]] = []
        #: Guards the making of the cgroup folder and the keeper's restart.
        self.cgroup_lock = threading.Lock()
        #: This process's folder of cgroups once made; "" where none can be (:mod:`._cgroup`).
        self.cgroup_home: list[str] = []
        #: The keeper's pid and start time, once started. Not a pidfd: a guarded call leaves
        #: no descriptor behind, its first one included.
        self.keeper: list[tuple[int, bytes]] = []
        #: The group this guarded process joined, once it has.
        self.joined: list[JoinedGroup] = []
        #: Killed children not reaped within the bound: the next sweep reaps them (:mod:`._reap`).
        self.unreaped: set[int] = set()
        #: Cgroup v2 groups killed whose members were still exiting when closed: removed by a
        #: later call.
        self.cgroups_pending: list[str] = []
        #: Their v1 twins (memory and pids limits).
        self.v1_pending: list[str] = []
        #: This process's v1 hierarchies: controller to its folder.
        self.v1_homes: dict[str, str | None] = {}
        #: The uids this process hands out (:func:`._confine.uids`), made when first needed.
        self.uids: UidBlock | None = None

    def say_once(self, what: str) -> bool:
        """Whether ``what`` is new to :attr:`said` (and now said)."""
        if what in self.said:
            return False
        self.said.add(what)
        return True

    def forked(self) -> None:
        """In a forked child: what names its parent goes (its children to reap and its groups
        to remove are its parent's), and the locks a thread of the parent's may have held."""
        self._own()


#: This process's (see :class:`ProcessState`).
STATE = ProcessState()
os.register_at_fork(after_in_child=STATE.forked)
