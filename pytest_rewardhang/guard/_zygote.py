"""The zygote, in its own process: a fresh interpreter that imports the scorer and forks workers.

It is started with ``posix_spawn`` of the caller's interpreter, so it holds none of the caller's
threads, locks or heap: forking a worker from it costs the same whether the caller is a 50 MiB
script or a 40 GiB trainer, and cannot inherit a lock some trainer thread held at the fork.

It is single-threaded and waits in ``poll()`` on its control socket, the caller's pidfd and one
pidfd per worker. Workers are its children, so it is the one that can freeze (``waitid``), kill
and reap them; the caller asks over the socket and hears back every death with its wait status
and resource usage. It dies with the caller (the caller's pidfd turns readable) and takes every
worker with it.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import pickle
import select
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from . import _box, _cgroup, _contain, _inherit, _libc, _procfs, _reap, _treekill
from ._box import Box, Confining
from ._child import call, null_stdin
from ._isolate import Isolated
from ._outcome import Status
from ._spec import SpecError, load_callable
from ._state import STATE
from ._wire import (
    EXITED,
    GROUP_FD,
    MESSAGE_LIMIT,
    MSG_ERROR,
    MSG_FORK,
    MSG_FORKED,
    MSG_KILL,
    MSG_KILLED,
    MSG_QUIT,
    MSG_READY,
    MSG_REAPED,
    MSG_WARMUP_FAILED,
    PIPE_ROLES,
    SOCKET_FD,
    SPAWNED,
    TMPDIR_PREFIX,
    WID,
    Warmup,
    confinement_bits,
    read_config,
)
from ._worker import ITIMERS, serve


def main(joins: bool = False) -> None:  # pragma: no cover - runs in the zygote process
    """The zygote's start; ``joins``: its caller made it a group, whose ``cgroup.procs`` is
    open as GROUP_FD. Started again by :func:`_import_in_each_worker`, it imports nothing."""
    # The temporary folder its caller made for it (see ._launch), as it was started: it
    # removes it as it exits, its caller gone or not.
    STATE.zygote_tmpdir[:] = [os.environ.get("TMPDIR", "")]
    again = sys.argv[1:2] == [_AGAIN]
    config = b""
    if again:  # the config, as the caller sent it, is on GROUP_FD; we are in our group already
        with open(GROUP_FD, "rb") as sent:
            config = sent.read()
    elif joins:
        _cgroup.join(GROUP_FD)
    # Its box's descriptors step (see ._box): what a C library in the caller forgot to mark
    # close-on-exec, the group's descriptor once joined.
    _box.close_all_but((SOCKET_FD,))
    sock = socket.socket(fileno=SOCKET_FD)
    caller = os.getppid()
    caller_pidfd = os.pidfd_open(caller)
    if os.getppid() != caller:
        os._exit(1)
    # Inherited ignore dispositions survive exec; ignored SIGCHLD would reap workers unseen.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    received = bytearray()

    def receive(limit: int) -> bytes:
        piece = sock.recv(limit)
        received.extend(piece)
        return piece

    try:
        path, target, memory_mb, warm, isolate, confining = read_config(
            io.BytesIO(config).read if again else receive
        )
    except Exception:  # noqa: BLE001 - the caller went away (interrupted, say) before it was sent
        os._exit(1)
    sys.path[:] = path
    if again:
        _serve_importing_in_each_worker(
            sock, caller_pidfd, target, memory_mb, warm, isolate, confining
        )
    try:
        fn = _resolve(target)
    except BaseException as exc:  # noqa: BLE001 - the caller raises it with this text
        said = str(exc) if isinstance(exc, SpecError) else f"{type(exc).__name__}: {exc}"
        text = said.splitlines()[0]
        sock.send(MSG_ERROR + text.encode("utf-8", "replace"))
        os._exit(1)
    try:
        warmup = None if warm is None else pickle.loads(warm)
    except Exception as exc:  # noqa: BLE001 - e.g. a class of the caller's __main__
        what = f"{type(exc).__name__}: {exc}"
        _warmup_failed(sock, f"the warm-up item could not be unpickled in the zygote: {what}")
    warm_up(sock, fn, warmup)
    shared = shared_across_fork() or threads_started()
    if shared is not None:
        _import_in_each_worker(bytes(received), shared)
    _serve(sock, caller_pidfd, fn, memory_mb, isolate, confining, b"")


def _serve(
    sock: socket.socket,
    caller_pidfd: int,
    fn: Callable[..., Any] | None,
    memory_mb: float | None,
    isolate: bool,
    confining: Confining | None,
    note: bytes,
    load: Callable[[], Callable[..., Any]] | None = None,
) -> NoReturn:  # pragma: no cover - zygote only
    _contain.prepare(zygote=True)  # before we adopt orphans
    # Orphans of a crashed worker come to us, to be killed. No death signal: the caller's pidfd
    # says when to go, and we take the workers with us.
    _libc.become_subreaper(None)
    # Everything imported so far is shared with every worker: keep the cyclic collector from
    # writing to it, which would copy each page into each worker on its first collection.
    gc.freeze()
    sock.send(MSG_READY + note)
    _Zygote(sock, caller_pidfd, fn, memory_mb, isolate, confining, load).loop()
    os._exit(0)


#: The zygote's argument when :func:`_import_in_each_worker` starts it again.
_AGAIN = "--import-in-each-worker"


def shared_across_fork() -> str | None:  # pragma: no cover - zygote only
    """What the scorer's import (and warm-up) made that every worker forked from one process
    would share: a multiprocessing lock, queue, pool or executor, whose semaphores and heap
    live in memory a fork shares. A worker killed while one of its processes held such a lock
    leaves it held for every later worker (their calls then wait for ever), and what one item
    writes there the next reads. None if there is none."""
    found = [
        sys.modules.get(name) for name in ("multiprocessing.synchronize", "multiprocessing.heap")
    ]
    kinds = tuple(
        kind
        for module, name in zip(found, ("SemLock", "Arena"), strict=True)
        if module is not None and isinstance(kind := getattr(module, name, None), type)
    )
    if not kinds:
        return None  # the usual case: no multiprocessing object can exist
    for obj in gc.get_objects():
        if isinstance(obj, kinds):
            return f"a multiprocessing {type(obj).__name__} ({type(obj).__module__})"
    return None


def threads_started() -> str | None:  # pragma: no cover - zygote only
    """The threads the scorer's import (and warm-up) started in this fresh interpreter (an
    executor warmed at import): a forked worker has none of them, and what waits on them there
    waits for ever. None if there are none."""
    started = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if not started:
        return None
    return f"{len(started)} thread(s) started at import ({', '.join(started[:3])})"


def _import_in_each_worker(config: bytes, shared: str) -> NoReturn:  # pragma: no cover
    """Start this zygote again, as a fresh interpreter that does not import the scorer: each
    worker imports it after its fork, so that what the import makes is each worker's own."""
    kept = os.memfd_create("rewardhang-config", 0)
    view = memoryview(config)
    while view:
        view = view[os.write(kept, view) :]
    os.lseek(kept, 0, os.SEEK_SET)
    os.dup2(kept, GROUP_FD)
    os.set_inheritable(SOCKET_FD, True)
    os.execv(sys.executable, [*sys.orig_argv, _AGAIN, shared])  # noqa: S606 - ourselves again


def _serve_importing_in_each_worker(
    sock: socket.socket,
    caller_pidfd: int,
    target: tuple[Any, ...],
    memory_mb: float | None,
    warm: bytes | None,
    isolate: bool,
    confining: Confining | None,
) -> NoReturn:  # pragma: no cover - zygote only
    shared = sys.argv[2]

    def load() -> Callable[..., Any]:  # in each worker, after its fork
        fn = _resolve(target)
        if warm is not None:
            warmup = pickle.loads(warm)
            args, kwargs = (warmup, {}) if isinstance(warmup, tuple) else ((), warmup)
            call(fn, args, kwargs)
        return fn

    note = shared.encode("utf-8", "replace")
    _serve(sock, caller_pidfd, None, memory_mb, isolate, confining, note, load)


def serve_forked(
    sock: socket.socket,
    fn: Callable[..., Any],
    memory_mb: float | None,
    caller: int,
    warmup: Warmup,
    isolate: bool,
    confining: Confining | None,
) -> None:  # pragma: no cover - runs in a zygote forked from the caller; never returns
    """The zygote of a callable that no fresh interpreter can import, forked from the caller.

    The caller's signal handlers and mask are not ours, and neither is its session.
    """
    code = 70
    STATE.zygote_tmpdir[:] = [os.environ.get("TMPDIR", "")]
    try:
        for signum in _RESET:  # as a fresh interpreter has them
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        # The caller's wakeup fd (asyncio's): a signal handled in a worker would wake the
        # caller's own handlers. Its stdin: the warm-up and every worker could read it.
        signal.set_wakeup_fd(-1)
        null_stdin()
        os.setsid()
        caller_pidfd = os.pidfd_open(caller)
        if os.getppid() != caller:
            os._exit(1)
        warm_up(sock, fn, warmup)
        _contain.prepare(zygote=True)  # before we adopt orphans
        _libc.become_subreaper(None)
        gc.freeze()
        shared = shared_across_fork()
        sock.send(MSG_READY + (b"" if shared is None else shared.encode("utf-8", "replace")))
        _Zygote(sock, caller_pidfd, fn, memory_mb, isolate, confining).loop()
        code = 0
    finally:
        os._exit(code)


def warm_up(
    sock: socket.socket, fn: Callable[..., Any], warmup: Warmup
) -> None:  # pragma: no cover - zygote only
    """Score the pool's warm-up item once, before any worker is forked; if it fails, say so and
    exit.

    What a scorer does on its first call only (sympy imports 16 modules on its first
    ``expand``: 40 ms), every worker then finds done, a replacement after a hang too.
    """
    if warmup is None:
        return
    threads = _procfs.own_threads()
    if isinstance(warmup, tuple):
        status, _, error, _ = call(fn, warmup, {})
    else:
        status, _, error, _ = call(fn, (), warmup)
    left = None if threads is None else _procfs.own_threads(threads, _THREAD_EXIT_S)
    for which in ITIMERS:
        signal.setitimer(which, 0)  # an alarm it left would end the zygote later, not the call
    text = None
    if status != Status.OK.value:
        text = f"the warm-up call failed in the zygote: {(error or status).splitlines()[0]}"
    elif left is not None and threads is not None and left > threads:
        # A fork takes only the forking thread: a lock another thread held stays held for
        # good in every worker.
        text = (
            "the warm-up call left a thread running in the zygote, which forks the workers "
            "and so must have none"
        )
    if text is not None:
        _warmup_failed(sock, text)


def _warmup_failed(sock: socket.socket, text: str) -> NoReturn:  # pragma: no cover - zygote only
    sock.send(MSG_WARMUP_FAILED + text.splitlines()[0].encode("utf-8", "replace"))
    os._exit(1)


_RESET = (
    signal.SIGCHLD,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGALRM,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def _resolve(target: tuple[Any, ...]) -> Callable[..., Any]:  # pragma: no cover - zygote only
    if target[0] == "spec":
        _, spec, rootdir = target
        return load_callable(spec, None if rootdir is None else Path(rootdir))
    if target[0] == "pickle":
        fn: Callable[..., Any] = pickle.loads(target[1])
        return fn
    _, module, qualname, path = target
    try:
        return load_callable(f"{module}:{qualname}")
    except SpecError:
        if not path.endswith(".py"):
            raise
        return load_callable(f"{path}:{qualname}")


#: How long a thread the warm-up joined may take to leave the kernel's count (once, at start).
_THREAD_EXIT_S = 1.0
#: How often the zygote looks for exited orphans while some are still exiting, and otherwise.
_EXITING_POLL_MS = 10
_SWEEP_MS = 1000


class _Zygote:  # pragma: no cover - zygote only
    def __init__(
        self,
        sock: socket.socket,
        caller_pidfd: int,
        fn: Callable[..., Any] | None,
        memory_mb: float | None,
        isolate: bool,
        confining: Confining | None,
        load: Callable[[], Callable[..., Any]] | None = None,
    ) -> None:
        self.sock = sock
        self.caller_pidfd = caller_pidfd
        # The workers and all they start live in one PID namespace where the platform allows
        # (probed once, here): it dies with the caller even if we are stopped, and nothing in
        # it can name us to stop or kill us. We stay outside, forking into it.
        _libc.prepare()
        self.strategy = _contain.strategy()
        self.namespace = self.strategy.workers(caller_pidfd)
        #: The scorer; or, where its import makes what workers must not share, how each
        #: worker imports it (see shared_across_fork).
        self.fn = fn
        self.load = load
        self.memory_mb = memory_mb
        #: Each item in a process of its own, forked from the worker: see Pool's ``isolate``.
        self.isolate = isolate
        self.workers: dict[int, tuple[int, int]] = {}
        #: What confines each worker's items (see ._box.Confining).
        self.confining = confining
        #: Each worker's box (see ._box): its cage, its limits over all its processes, its
        #: folders, namespaces and identity; made once per worker, not per item, so that a
        #: warm worker's item pays nothing for them.
        self.boxes: dict[int, Box] = {}
        #: A worker's OOM alarm (v1 memory groups), by its fd: the worker is ended at once.
        self.by_alarm: dict[int, int] = {}
        self.by_pidfd: dict[int, int] = {}
        #: Workers killed and not reaped yet, with how many descendants they had.
        self.killed: dict[int, int] = {}
        #: Killed orphans of dead workers still exiting, to be reaped when they have.
        self.exiting = 0
        self.poller = select.poll()
        self.poller.register(sock.fileno(), select.POLLIN)
        #: Whether another message waits.
        self.inbox = select.poll()
        self.inbox.register(sock.fileno(), select.POLLIN)
        self.poller.register(caller_pidfd, select.POLLIN)
        #: Put back before each fork (see ._inherit); taken once the scorer is imported and
        #: warmed up, what it set being the workers' to inherit.
        self.inherited = _inherit.read()

    def loop(self) -> None:
        swept = time.monotonic()
        while True:
            events = self.poller.poll(_EXITING_POLL_MS if self.exiting else _SWEEP_MS)
            if self.exiting or time.monotonic() - swept >= _SWEEP_MS / 1000:
                # Orphans a worker killed between its items (its group's strays) come to us
                # too, and nothing tells us when: looked for every second.
                self.reap_exited()
                swept = time.monotonic()
            # Deaths before orders: a dead worker's strays are swept before its replacement is
            # forked, so that nothing an item left runs beside the next one's first item.
            for fd, _ in sorted(events, key=lambda event: event[0] == self.sock.fileno()):
                if fd == self.caller_pidfd:
                    return self.shutdown()
                if fd == self.sock.fileno():
                    if not self.orders():
                        return self.shutdown()
                elif fd in self.by_pidfd:
                    wid = self.by_pidfd[fd]
                    self.reap(wid, self.killed.pop(wid, 0))
                elif fd in self.by_alarm:
                    # The OOM killer struck in its group: its item ends now, as cgroup v2's
                    # memory.oom.group ends it, and is reported over its memory once reaped.
                    self.poller.unregister(fd)
                    self.kill(self.by_alarm.pop(fd))

    def orders(self) -> bool:
        """Carry out every message waiting from the caller; False when it says to go.

        Taken all at once, because the caller asks at one deadline check for several kills
        and their replacements: every group to kill is frozen first (then none of them takes
        the CPU from us or the new workers), the replacements are forked next, and only then
        is each frozen group counted and killed. One at a time, fifty busy forks in each of two
        workers held the replacements back by the two freezes. Without cgroups each kill
        comes first, whole, as it did.
        """
        kills: list[int] = []
        forks: list[tuple[int, list[int]]] = []
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.sock, MESSAGE_LIMIT, len(PIPE_ROLES))
            except ConnectionError:
                message, fds = b"", []
            if not message or message[:1] == MSG_QUIT:
                for extra in fds + [fd for _, order in forks for fd in order]:
                    os.close(extra)
                return False
            if message[:1] == MSG_FORK:
                forks.append((WID.unpack_from(message, 1)[0], fds))
            elif message[:1] == MSG_KILL:
                kills.append(WID.unpack_from(message, 1)[0])
            if not self.inbox.poll(0):  # (recv_fds ignores MSG_DONTWAIT before Python 3.13)
                break
        # Said first: killing a fork storm takes a while, and a zygote busy killing is not
        # stuck (the caller replaces a zygote that does not answer a kill in time).
        frozen = []
        for wid in kills:
            with contextlib.suppress(OSError):
                self.sock.send(MSG_KILLED + WID.pack(wid))
            if wid in self.boxes and wid not in self.killed and self.boxes[wid].cage.begin_freeze():
                frozen.append(wid)
            else:  # nothing to freeze: its kill freezes the tree first thing anyway
                self.kill(wid)
        for wid, fds in forks:
            self.fork(wid, fds)
        for wid in frozen:
            self.kill(wid)
        return True

    def fork(self, wid: int, fds: list[int]) -> None:
        """Fork worker ``wid`` on pipes ``fds`` (by PIPE_ROLES), in a box of its own: of all
        the zygote holds (its socket, other workers' pipes and pidfds), it keeps those alone."""
        if not _inherit.put_back(self.inherited):
            # Every worker would inherit what an item lowered: the caller starts a new zygote.
            os._exit(1)
        # What an item started as our own child (clone(CLONE_PARENT)), outside its worker's
        # tree, where no group holds it: gone before a new worker's first item, not when the
        # worker it came from is reaped, which may come after (one look at our children).
        self.sweep()
        parent = os.getpid()
        # An isolating worker is one task more than its items may start, and leaves the IPC
        # namespace and the identity to each of them: it stays out of their reach.
        box = Box.make(
            self.strategy.worker(), self.confining, beside=int(self.isolate), apart=self.isolate
        )
        pid = os.fork()
        if pid == 0:
            try:
                # First: until its death signal is set, a worker whose zygote dies (an item
                # killed it) is not told, and one stopped meanwhile (a tree kill's SIGSTOP)
                # would stay stopped for good, a child of init.
                subreaper = _libc.become_subreaper(parent)
                alarm = box.quota.alarm
                keep = [*fds, *([] if alarm is None else [alarm])]
                # The import comes after the descriptors are closed (it is the scorer's code)
                # and before the namespaces and the identity (it may need root's files, the
                # network), as does the rest of the worker's setting up.
                fn = box.enter(keep, parent, self.scorer)
                os.setsid()
                pipes = dict(zip(PIPE_ROLES, fds, strict=True))
                serving = Isolated if self.isolate else None
                serve(fn, pipes, self.memory_mb, subreaper, box, serving)
            finally:
                os._exit(_box.UNBOXED)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.workers[wid] = (pid, pidfd)
        self.boxes[wid] = box
        self.by_pidfd[pidfd] = wid
        self.poller.register(pidfd, select.POLLIN)
        if box.quota.alarm is not None:
            self.by_alarm[box.quota.alarm] = wid
            self.poller.register(box.quota.alarm, select.POLLIN)
        bits = confinement_bits(box.applied)
        socket.send_fds(self.sock, [MSG_FORKED + SPAWNED.pack(wid, pid, bits)], [pidfd])

    def scorer(self) -> Callable[..., Any]:
        """In a new worker: the scorer, imported now where each worker imports it."""
        fn = self.fn if self.load is None else self.load()
        assert fn is not None
        return fn

    def kill(self, wid: int) -> None:
        """Kill a worker's tree, if it is still there; it is reaped when its pidfd fires."""
        if wid in self.workers and wid not in self.killed:
            pid, pidfd = self.workers[wid]
            self.killed[wid] = self.boxes[wid].cage.kill(pid, pidfd)

    def reap(self, wid: int, leaked: int) -> None:
        """Reap a dead worker and what it left running; tell the caller."""
        pid = self._forget(wid)
        box = self.boxes.pop(wid)
        status, usage = _reap.reap(pid)
        cpu, rss = float("nan"), 0.0
        if usage is not None:
            cpu, rss = usage.ru_utime + usage.ru_stime, usage.ru_maxrss
        oom_kills = box.oom_kills()  # read before its group goes
        leaked += box.close(time.monotonic(), strays=self)  # removed later if still exiting
        with contextlib.suppress(OSError):
            self.sock.send(MSG_REAPED + EXITED.pack(wid, status, cpu, rss, leaked, oom_kills))

    def sweep(self) -> int:
        """Kill what a dead worker left running; it was re-parented to us, the subreaper, or
        (in a PID namespace) to the namespace's init."""
        leaked = self.namespace.orphans()
        return leaked + _reap.reap_children(spare=self._spare())

    def reap_exited(self) -> None:
        """Reap the strays that have exited; count those still exiting, to look again soon."""
        self.exiting = _reap.reap_exited(self._spare())

    def _spare(self) -> set[int]:
        """Our children that are not strays: the workers, and a PID namespace's init."""
        spare = {pid for pid, _ in self.workers.values()}
        spare.add(self.namespace.init)  # 0 where there is none: no child's pid
        return spare

    def shutdown(self) -> None:
        """Kill and reap every worker and all below them; the caller is gone or not listening."""
        for box in self.boxes.values():  # first: nothing below any worker runs on meanwhile
            box.cage.kill_others()
        for wid, (pid, pidfd) in list(self.workers.items()):
            _treekill.kill_and_reap(pid, pidfd)
            self._forget(wid)
        until = time.monotonic() + _reap.REAP_WAIT_S
        for box in self.boxes.values():
            box.close(until)
        self.sweep()
        self.namespace.close()
        tmpdir = STATE.zygote_tmpdir[0]
        if os.path.basename(tmpdir).startswith(TMPDIR_PREFIX):
            shutil.rmtree(tmpdir, ignore_errors=True)

    def _forget(self, wid: int) -> int:
        """Stop watching a worker; its pid, to reap it by."""
        pid, pidfd = self.workers.pop(wid)
        del self.by_pidfd[pidfd]
        self.poller.unregister(pidfd)
        os.close(pidfd)
        alarm = self.boxes[wid].quota.alarm if wid in self.boxes else None
        if alarm is not None and self.by_alarm.pop(alarm, None) is not None:
            self.poller.unregister(alarm)
        return pid
