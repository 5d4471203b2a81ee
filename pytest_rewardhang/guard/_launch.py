"""How a pool worker comes to exist: forked by a zygote the caller starts, or by the caller.

Runs in the caller. A scorer that a fresh interpreter can import (a module-level function, a
spec, a picklable callable object) is imported once by a zygote started with ``posix_spawn``,
and every worker is forked from that; any other callable (a lambda, a closure, a bound method)
can only be served by workers forked from the caller itself, which costs more the larger the
caller is.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import pickle
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _contain, _quota, _treekill
from ._box import UNBOXED, Box, Confining
from ._interrupts import let_in
from ._spec import SpecError, is_file_target, split_spec
from ._state import STATE
from ._wire import (
    FENCE,
    GROUP_FD,
    MESSAGE_LIMIT,
    MSG_ERROR,
    MSG_FORK,
    MSG_KILL,
    MSG_WARMUP_FAILED,
    REPLY_LIMIT,
    SOCKET_FD,
    TMPDIR_PREFIX,
    WID,
    Warmup,
    config_message,
)
from ._zygote import main as zygote_main
from ._zygote import serve_forked

#: A caller this large pays ~55 ms per GiB for every worker it forks itself.
LARGE_CALLER_BYTES = 1 << 30
#: How long a zygote may take to import the scorer (and score its warm-up item), and workers
#: to start.
START_TIMEOUT_S = 120.0
#: How long a killed zygote may take to finish exiting before it is left to be reaped later.
_REAP_S = 1.0
_PIPE_SIZE = 1 << 20
_SIGNALS_TO_RESET = (
    signal.SIGCHLD,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGPIPE,
    signal.SIGALRM,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_ZYGOTE_CODE = (
    "import sys; sys.path.insert(0, {root!r}); from {module} import main; main(joins={joins})"
)


log = logging.getLogger("pytest_rewardhang.guard")


def _say_once(note: str, forked: bool) -> None:
    """Warn, once per process and note, of what a scorer's import made that workers forked
    from one process would share (a kill could leave its lock held for all of them)."""
    if not STATE.say_once(note):
        return
    if forked:  # a closure: only this process has it, so no worker can import it by name
        what = "make it in the scorer's first call instead, or serve a function by name"
    else:
        what = "so each worker imports the scorer itself (its workers start slower)"
    log.warning(
        "pool: the scorer comes with %s, which workers forked from one process share, and a"
        " kill could leave it locked for all of them; %s",
        note,
        what,
    )


class PoolError(RuntimeError):
    """The pool itself failed (its zygote died, or workers die before they can take an item)."""


# --- which way -------------------------------------------------------------------------------


def import_target(fn: Callable[..., Any] | str) -> tuple[Any, ...] | None:
    """What a fresh interpreter imports to get ``fn``, or None when it cannot."""
    if isinstance(fn, str):
        # A file is found from here, and an error names the spec as it was given.
        return ("spec", fn, str(Path.cwd()) if is_file_target(split_spec(fn)[0]) else None)
    if not isinstance(fn, _PLAIN_CALLABLES) and _importable(type(fn)):
        # A callable object of an importable class travels pickled; unpickling it in the
        # zygote may import what it wraps there, once for every worker.
        try:
            return ("pickle", pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 - not picklable: served from the caller instead
            return None
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or "<" in qualname:
        return None
    # A module loaded from a file under a made-up name (verl loads a custom reward file as
    # "custom_module", without registering it) is found by its path instead.
    path = getattr(fn, "__globals__", {}).get("__file__")
    path = path if isinstance(path, str) and path.endswith(".py") else ""
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is fn or (found is None and path):
        return ("function", module, qualname, path)
    return None  # that name holds something else (a wrapper, a rebinding): serve fn itself


_PLAIN_CALLABLES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    functools.partial,
    type,
)


def _importable(cls: type) -> bool:
    return cls.__module__ != "__main__" and "<" not in cls.__qualname__


def warn_if_large() -> None:
    """Warn that workers forked from this process cost what it weighs, if it weighs much."""
    try:
        with open("/proc/self/statm", "rb") as f:
            resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return
    if resident > LARGE_CALLER_BYTES:
        warnings.warn(
            f"Pool: the scorer cannot be imported by name (a lambda, closure or method), so its "
            f"workers are forked from this {resident / (1 << 30):.1f} GiB process: every worker "
            f"start costs ~55 ms per GiB and may copy locks held by other threads. Pass a "
            f"module-level function or a 'pkg.mod:func' spec to fork them from a clean zygote.",
            RuntimeWarning,
            stacklevel=4,
        )


# --- a worker's pipes ------------------------------------------------------------------------


def worker_pipes() -> tuple[dict[str, int], dict[str, int]]:
    """New pipes for one worker: the worker's ends (by PIPE_ROLES) and the caller's.

    The caller's are task_w, result_r, output_r and stack_r. Both read the output pipe: the
    worker after each item, the caller during a long one and after a death. The caller reads it
    through a file of its own (the same pipe opened again), so that an item cannot make the
    caller's reads block by clearing ``O_NONBLOCK`` on the file the worker shares with it.
    """
    pairs: dict[str, tuple[int, int]] = {}
    made: list[int] = []  # the fence
    try:
        for role in ("task", "result", "output", "stack"):
            pairs[role] = os.pipe2(os.O_CLOEXEC)
        made.append(os.memfd_create("rewardhang-fence", os.MFD_CLOEXEC))
        os.ftruncate(made[0], FENCE.size)
    except BaseException:  # out of descriptors, say: none of those made is left open
        for fd in (*made, *(fd for pair in pairs.values() for fd in pair)):
            os.close(fd)
        raise
    fence = made[0]
    for role in ("output", "task"):  # room for an item's output, and for whole batches
        with contextlib.suppress(OSError):
            fcntl.fcntl(pairs[role][1], fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    theirs = {
        "task_r": pairs["task"][0],
        "result_w": pairs["result"][1],
        "output_w": pairs["output"][1],
        "output_r": pairs["output"][0],
        "stack_w": pairs["stack"][1],
        "fence": fence,
    }
    output_r = pairs["output"][0]
    with contextlib.suppress(OSError):  # no /proc: shared, as it was
        output_r = os.open(f"/proc/self/fd/{output_r}", os.O_RDONLY | os.O_CLOEXEC)
    ours = {
        "task_w": pairs["task"][1],
        "result_r": pairs["result"][0],
        "output_r": output_r,
        "stack_r": pairs["stack"][0],
        "fence": fence,
    }
    return theirs, ours


# --- forked by a zygote ----------------------------------------------------------------------


def _pool_tmpdir() -> str | None:
    """A temporary folder for a new zygote, where its workers' items have theirs when they
    have no tmpfs of their own to make them in (only root may make one): what an item that
    kills the zygote leaves there, its caller removes. None for a root caller: its workers'
    folders are in their own tmpfs, gone with them."""
    if os.geteuid() == 0:
        return None
    return tempfile.mkdtemp(prefix=TMPDIR_PREFIX)


def _remove(tmpdir: str | None) -> None:
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _zygote_cage() -> _contain.Cage:
    """A new zygote's cage; where it is a cgroup, its folder hands the memory and pids
    controllers down to it, for its workers' limits (see :func:`._contain.prepare`)."""
    cage = _contain.strategy().zygote()
    if cage.folder is not None:
        _quota.enable_below(os.path.dirname(cage.folder))
    return cage


class Zygote:
    """The caller's end of a zygote: its process, and the socket to ask it for workers.

    Started with ``posix_spawn`` (:meth:`start`) for a scorer a fresh interpreter imports, or
    forked from the caller (:meth:`fork`, ``forked``) for any other callable: either way the
    workers are its children, never the caller's, so what a worker's item does to its parent
    (stop it, kill it) lands on the zygote, which the caller can always replace.
    """

    def __init__(
        self,
        sock: socket.socket,
        pid: int,
        cage: _contain.Cage,
        tmpdir: str | None,
        *,
        forked: bool = False,
    ) -> None:
        self.sock = sock
        self.pid = pid
        self.pidfd = -1
        #: The zygote's temporary folder, where it makes its workers' (see _pool_tmpdir):
        #: removed with all they left by :meth:`close`, however the zygote ended.
        self.tmpdir = tmpdir
        #: Where cgroups contain the calls, the zygote's own group (its workers' groups are
        #: below it): killing it kills everything the pool made, whatever an item did to it.
        self.cage = cage
        self.forked = forked

    @classmethod
    def start(
        cls,
        target: tuple[Any, ...],
        memory_mb: float | None,
        warmup: Warmup,
        isolate: bool,
        confining: Confining | None = None,
    ) -> Zygote:
        """Spawn a zygote and wait until it has imported ``target`` and scored ``warmup``.

        Raises :class:`SpecError` with the zygote's reason when it cannot import it, and
        :class:`PoolError` when the warm-up fails or it does not answer; either way the zygote
        is gone. Called with the signals held (see ._interrupts): an interrupt lands only while
        it waits.
        """
        # Where the top package can be imported from, and the zygote's module, derived rather
        # than spelled: neither depends on where this file sits in the package.
        top = sys.modules[__name__.partition(".")[0]]
        root = str(Path(top.__file__ or "").resolve().parent.parent)
        cage = _zygote_cage()
        joins = cage.spawn_actions(GROUP_FD)
        code = _ZYGOTE_CODE.format(root=root, module=zygote_main.__module__, joins=bool(joins))
        argv = [sys.executable, "-c", code]
        config = list(config_message(list(sys.path), target, memory_mb, warmup, isolate, confining))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        tmpdir = _pool_tmpdir()
        try:
            try:
                pid = os.posix_spawn(
                    sys.executable,
                    argv,
                    os.environ if tmpdir is None else {**os.environ, "TMPDIR": tmpdir},
                    file_actions=[
                        (os.POSIX_SPAWN_DUP2, theirs.fileno(), SOCKET_FD),
                        *joins,
                        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    ],
                    setsid=True,
                    setsigmask=(),
                    setsigdef=_SIGNALS_TO_RESET,
                )
            finally:
                theirs.close()
        except BaseException:
            ours.close()
            cage.close(time.monotonic())
            _remove(tmpdir)
            raise
        return cls(ours, pid, cage, tmpdir)._started(config, warmup)

    @classmethod
    def fork(
        cls,
        fn: Callable[..., Any],
        memory_mb: float | None,
        warmup: Warmup,
        isolate: bool,
        confining: Confining | None = None,
    ) -> Zygote:
        """Fork a zygote from the caller, for a callable a fresh interpreter cannot import.

        In a box of its own (see ._box): of all the caller holds (other pools' pipes, other
        threads' calls, the trainer's sockets and files), it keeps its socket alone. Called
        with the signals held, as :meth:`start`.
        """
        parent = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        box = Box(_zygote_cage())
        tmpdir = _pool_tmpdir()
        try:
            pid = os.fork()
        except BaseException:
            ours.close()
            theirs.close()
            box.close(time.monotonic())
            _remove(tmpdir)
            raise
        if pid == 0:  # pragma: no cover - the zygote
            try:
                box.enter((theirs.fileno(),))
                if tmpdir is not None:
                    os.environ["TMPDIR"] = tempfile.tempdir = tmpdir
                serve_forked(theirs, fn, memory_mb, parent, warmup, isolate, confining)
            finally:
                os._exit(UNBOXED)
        theirs.close()
        return cls(ours, pid, box.cage, tmpdir, forked=True)._started([], warmup)

    def _started(self, config: list[bytes], warmup: Warmup) -> Zygote:
        """Hold its pidfd, send it ``config``, wait until it is ready; gone if any of it fails."""
        try:
            self.pidfd = os.pidfd_open(self.pid)
            if config:
                self.sock.settimeout(START_TIMEOUT_S)
                with let_in():
                    for message in config:
                        self.sock.send(message, socket.MSG_NOSIGNAL)
            self._ready(warmup)
        except BaseException:
            self.close()
            raise
        return self

    def _ready(self, warmup: Warmup) -> None:
        """Wait for the zygote's first answer: ready, or the error that stops the pool."""
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        with let_in():
            ready = poller.poll(START_TIMEOUT_S * 1000)
        doing = "importing the scorer" + (" and scoring its warm-up item" if warmup else "")
        if not ready:
            raise PoolError(
                f"the pool's zygote did not start within {START_TIMEOUT_S:g} s ({doing})"
            )
        reply = self.sock.recv(REPLY_LIMIT)
        if not reply:
            raise PoolError(f"the pool's zygote exited while {doing}")
        if reply[:1] == MSG_ERROR:
            raise SpecError(reply[1:].decode("utf-8", "replace"))
        if reply[:1] == MSG_WARMUP_FAILED:
            raise PoolError(reply[1:].decode("utf-8", "replace"))
        if len(reply) > 1:  # ready, with a note: see _zygote.shared_across_fork
            _say_once(reply[1:].decode("utf-8", "replace"), self.forked)
        self.sock.setblocking(False)

    def fork_worker(self, wid: int, fds: list[int]) -> bool:
        """Ask for worker ``wid`` on these pipes (by PIPE_ROLES); it answers when it has one.

        False when the request could not even be sent (the zygote is not reading).
        """
        try:
            socket.send_fds(self.sock, [MSG_FORK + WID.pack(wid)], fds, socket.MSG_NOSIGNAL)
        except OSError:
            return False
        return True

    def kill(self, wid: int) -> None:
        """Ask for worker ``wid``'s tree to be killed; it says so at once, and when reaped."""
        with contextlib.suppress(OSError):  # not reading: it is replaced when it does not answer
            self.sock.send(MSG_KILL + WID.pack(wid), socket.MSG_NOSIGNAL)

    def receive(self) -> tuple[bytes, list[int]] | None:
        """The zygote's next message and the fds it carries; None when none is waiting."""
        try:
            message, fds, _, _ = socket.recv_fds(self.sock, MESSAGE_LIMIT, 1)
        except BlockingIOError:
            return None
        except ConnectionError:
            message, fds = b"", []
        if not message:
            raise PoolError("the pool's zygote died; its workers died with it")
        return message, fds

    def close(self) -> None:
        """Kill the zygote and everything below it, reap it, remove what it was given, close
        the caller's descriptors; bounded, whatever they do. A second call does nothing.

        The caller does it itself rather than ask: a zygote that an item stopped would never
        answer. Where it has a group, one write kills it, its workers and all they started;
        the workers are also the zygote's children and subreapers, so every process below it
        is found through ``/proc`` while it is held frozen (all there is without a group).
        """
        if self.sock.fileno() < 0:
            return
        try:
            until = time.monotonic() + _REAP_S
            self.cage.kill_others(spare=self.pid)
            _treekill.kill_and_reap(self.pid, self.pidfd if self.pidfd >= 0 else None, _REAP_S)
            self.cage.close(until)
            _quota.remove_left_by(self.pid, until)
            _remove(self.tmpdir)
        finally:
            self.sock.close()
            if self.pidfd >= 0:
                os.close(self.pidfd)
                self.pidfd = -1
