"""A PID namespace around what a guarded call starts: the kernel kills all of it with the
namespace's init.

:func:`start` gives the calling thread's next children a new PID namespace and forks its init:
a copy of the caller that only waits. ``run()`` then forks the guarded process into it (pid 2 of
the namespace, so the call keeps ordinary signal semantics: an init ignores every signal it has
no handler for) and takes its own namespace back (:meth:`Namespace.restore`): only that thread,
for two forks, can start no thread meanwhile (the kernel refuses a thread in another PID
namespace). A pool's zygote starts one namespace for all its workers and stays outside it.

What the call starts gets a pid of the namespace; its orphans re-parent to the guarded process
(a subreaper) or, once that is gone, to the init. When the init dies, the kernel SIGKILLs every
process in the namespace and no fork into it succeeds any more: no ``setsid``, double fork, or
``prctl`` turning off the subreaper and the death signal gets a process out, and nothing inside
can name a process outside (a scorer cannot stop or kill its zygote). The init dies when the
guard kills it, after each ``run()`` (:meth:`Namespace.close`, which counts what was left) and
when a pool's zygote shuts down; with its parent thread (its death signal); and when the process
that started the guard dies (a pidfd it polls): run's caller, a pool's caller.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal

from . import _libc, _reap, _walkkill


class Namespace:
    """A PID namespace started by this thread, and its init (our child); or, :meth:`none`,
    no namespace, of which every method does nothing."""

    def __init__(self, own: int, init: int) -> None:
        #: A descriptor of our own namespace until :meth:`restore`; -1 after.
        self.own = own
        self.init = init

    @classmethod
    def none(cls) -> Namespace:
        """No namespace: the calls live in ours."""
        return cls(-1, 0)

    def restore(self) -> None:
        """This thread's next children join our own namespace again."""
        own, self.own = self.own, -1
        if own >= 0 and not _libc.back_to_pid_namespace(own):  # pragma: no cover
            # Never seen: setns back to one's own namespace needs what unshare needed. Every
            # later fork of this thread would fail (ENOMEM) once the init is gone.
            raise OSError("could not return to our own PID namespace after a guarded fork")

    def stay(self) -> None:
        """Keep forking into the namespace (a zygote): forget the way back."""
        own, self.own = self.own, -1
        if own >= 0:
            os.close(own)

    def orphans(self) -> int:
        """Kill what is left running in the namespace below the init; how many there were."""
        if not self.init:
            return 0
        return _walkkill.kill_descendants(self.init)

    def close(self) -> int:
        """Kill everything in the namespace; how many were left running (the init aside).

        The processes of the namespace that are our own children (the guarded process) must be
        reaped first: the init's exit waits until nothing of its namespace is left, zombies
        included. Bounded: the init is reaped within :data:`_reap.REAP_WAIT_S` or left to
        the next sweep of unreaped children.
        """
        init = self.init
        if not init:
            return 0
        leaked = self.orphans()
        self.init = 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(init, signal.SIGKILL)
        _reap.reap_within(init, None, _reap.REAP_WAIT_S)
        return leaked


def start(watch: int | None = None) -> Namespace | None:
    """Give the calling thread's next children a new PID namespace, and start its init.

    ``watch``: a pidfd whose process's death ends the namespace too (a pool's caller); the
    process that calls this is always watched. None where namespaces are unavailable.
    """
    if not _libc.pid_namespaces():
        return None
    own = _libc.open_pid_namespace()
    if not _libc.new_pid_namespace():
        os.close(own)
        return None
    ours = Namespace(own, 0)
    watched = [] if watch is None else [watch]
    ourselves = -1
    try:
        with contextlib.suppress(OSError):  # without it, the death signal alone
            ourselves = os.pidfd_open(os.getpid())
            watched.append(ourselves)
        init = os.fork()
        if init == 0:  # pragma: no cover - the namespace's init
            _init(watched)
        ours.init = init
    except BaseException:
        ours.restore()
        raise
    finally:
        if ourselves >= 0:
            os.close(ourselves)
    return ours


def _init(watch: list[int]) -> None:  # pragma: no cover - runs only as a namespace's init
    """Wait, doing nothing, until a watched process dies or the guard kills us; then exit."""
    try:
        _libc.die_with_parent()
        # Auto-reap orphans; and no Ctrl-C (the only signal with a handler): the rest, sent
        # from inside the namespace, an init ignores.
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        low = 0
        for fd in sorted(set(watch)):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 20)
        poller = select.poll()
        for fd in watch:
            poller.register(fd, select.POLLIN)
        poller.poll()
    finally:
        os._exit(0)
