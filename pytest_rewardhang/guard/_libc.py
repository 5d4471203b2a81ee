"""The kernel calls that :mod:`os` lacks, through the C library (Linux): ``prctl`` for the
subreaper and the death signal, and ``unshare``/``setns`` for a PID namespace, with the probe of
whether a PID namespace can be started here and left again.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable

from ._state import STATE

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _libc() -> ctypes.CDLL | None:
    """The C library, opened once (None off Linux), its functions looked up as they are used."""
    opened = STATE.libc
    if not opened:
        handle = None
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                handle = ctypes.CDLL(None, use_errno=True)
        opened.append(handle)
    return opened[0]


#: The C library, for the calls this module does not wrap (:mod:`._confine`'s).
libc = _libc


def forget() -> None:
    """Drop the handle (and the functions looked up on it): a pool's warm worker does, before
    its first item, so that no item finds them already looked up."""
    STATE.libc.clear()


def adopt(handle: ctypes.CDLL | None) -> None:
    """Use ``handle``, its functions looked up already: an isolated item's process, whose
    worker kept it (see ._isolate), sets itself up without opening the library again."""
    STATE.libc[:] = [handle]


def prepare() -> None:
    """Resolve prctl in the caller, so a forked child never pays for (or deadlocks in) dlopen."""
    libc = _libc()
    if libc is not None:
        libc.prctl  # noqa: B018 - ctypes caches the symbol on first attribute access
        libc.unshare  # noqa: B018
        libc.setns  # noqa: B018
        libc.mount  # noqa: B018
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
    probed = STATE.pid_namespaces  # forked children inherit the answer
    if not probed:
        probed.append(os.environ.get(PID_NAMESPACE_ENV) == "1" and _probe_namespaces())
    return probed[0]


def probe_in_child(works: Callable[[], bool]) -> bool:
    """Whether ``works()`` returns True in a throwaway child: a probe whose attempt (a new
    namespace, a uid dropped) must not touch this process."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:  # pragma: no cover - the throwaway child
        code = 1
        try:
            code = 0 if works() else 1
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:  # the caller ignores SIGCHLD: the answer is lost
        return False
    return status == 0


def _probe_namespaces() -> bool:
    libc = _libc()
    if libc is None or not hasattr(os, "pidfd_open"):
        return False

    def works() -> bool:  # pragma: no cover - the probe's child
        own = open_pid_namespace()
        if new_pid_namespace() and _forks_init(True) and back_to_pid_namespace(own):
            return _forks_init(False)
        return False

    return probe_in_child(works)


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
