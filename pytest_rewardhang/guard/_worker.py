"""A pool worker, in its own process: warm, it scores item after item until its task pipe closes.

A worker reads batches of pickled items from its task pipe and answers each item with one result
frame on its result pipe *before* it starts the next item, so the caller always knows which item
is running and since when: a crash or a kill loses exactly the current item and nothing else.
"""

from __future__ import annotations

import faulthandler
import importlib
import io
import mmap
import os
import pickle
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from . import _confine, _inherit, _libc, _procfs, _reap, _walkkill
from ._box import Box
from ._child import call, setup_child
from ._outcome import UNREADABLE_ITEMS, Confinement, NotStarted, Status
from ._wire import (
    CHUNK,
    DUMP_SIGNAL,
    FENCE,
    OUTPUT_LIMIT,
    RETIRED,
    read_bounded,
    result_frame,
    result_payload,
    task_frame,
    write_all,
)

_NO_KWARGS: dict[str, Any] = {}


class _Unreadable:
    """Stands in for an item whose batch the worker could not unpickle."""

    def __init__(self, text: str) -> None:
        self.text = text


def serve(
    fn: Callable[..., Any],
    fds: dict[str, int],
    memory_mb: float | None,
    subreaper: bool,
    box: Box,
    serving: type[_Serve] | None = None,
) -> None:  # pragma: no cover - runs only in a worker; never returns
    """Serve items until the task pipe closes; ``serving`` says how each is run (the warm
    :class:`_Serve` by default, or ``._isolate``'s). ``box``: the worker's, entered already
    (see ._box): its cage, its items' temporary folders (emptied after each), the OOM alarm of
    its (v1) memory group."""
    code = 70
    try:
        setup_child(fds["output_w"], fds["stack_w"], memory_mb)
        dropped = _never_blocking_stdio()
        fence = mmap.mmap(fds["fence"], FENCE.size)
        os.close(fds["fence"])
        (serving or _Serve)(
            fn,
            fds["task_r"],
            fds["result_w"],
            fds["output_r"],
            subreaper,
            box,
            dropped,
            fence,
            fds["stack_w"],
        ).loop()
        code = 0
    except BaseException:  # noqa: BLE001, S110 - the caller sees the exit and reports the item
        pass
    finally:
        os._exit(code)


class _DroppingPipe(io.RawIOBase):  # pragma: no cover - worker only
    """The output pipe for ``sys.stdout``/``sys.stderr``: what does not fit is dropped, counted.

    Nobody reads a worker's output pipe while an item runs (the worker reads it after the item),
    so a scorer that printed more than the pipe holds blocked in ``print`` until its deadline
    and was reported as a hang. The pipe is opened a second time, non-blocking, so fds 1 and 2
    stay blocking for C code and subprocesses, and everything written keeps its order.
    """

    def __init__(self, fd: int, dropped: _Dropped) -> None:
        super().__init__()
        self.target = fd
        self.pipe = _identity(fd)
        self.fd = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.dropped = dropped
        dropped.fds.append(self.fd)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.target  # what callers hand on, e.g. to a subprocess, is the blocking fd

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        if _identity(self.target) != self.pipe:
            # The call pointed fd 1 (or 2) elsewhere, to capture or silence output with
            # os.dup2: prints follow it there, as they would on a plain file over that fd.
            write_all(self.target, view)
            return size
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except BlockingIOError:
            self.dropped.count += len(view)
        except OSError:  # the call closed our descriptor; the blocking one still works
            write_all(self.target, view)
        return size


class _Dropped:  # pragma: no cover - worker only
    """Bytes of output both :class:`_DroppingPipe` dropped since the last item's answer, and
    their own descriptors (the output pipe opened again: part of the output channel)."""

    __slots__ = ("count", "fds")

    def __init__(self) -> None:
        self.count = 0
        self.fds: list[int] = []


def _identity(fd: int) -> tuple[int, int]:  # pragma: no cover - worker only
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


def _never_blocking_stdio() -> _Dropped:  # pragma: no cover - worker only
    dropped = _Dropped()
    try:
        writers = [_DroppingPipe(1, dropped), _DroppingPipe(2, dropped)]
    except OSError:  # no /proc: prints that overflow the pipe wait for the deadline, as before
        return dropped
    sys.stdout, sys.stderr = (
        io.TextIOWrapper(io.BufferedWriter(w), line_buffering=True, errors="backslashreplace")
        for w in writers
    )
    return dropped


#: Events after which an item's full check runs (see :class:`_State`): what may change the
#: process state that a cheap per-item comparison does not see. ``os.putenv`` and
#: ``os.unsetenv`` are how ``os.environ`` changes (its every write and delete calls one).
_AUDITED = frozenset(
    {
        "resource.setrlimit",
        "resource.prlimit",
        "os.putenv",
        "os.unsetenv",
        "open",
        "gc.get_objects",  # the worker's own objects, within reach: its descriptors, say
        "gc.get_referrers",
        "gc.get_referents",
        "socket.__new__",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.dlopen",
        "ctypes.call_function",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "os.exec",
        "subprocess.Popen",
    }
)
#: A C library loaded, or one of its functions looked up, through ctypes: the way to call C
#: (CPython audits no single foreign call), which may change anything the kernel keeps for the
#: process (a POSIX timer, a signal's action, a seccomp filter, a namespace, a ``prctl`` flag
#: such as the subreaper's) where no check can list it all: the worker retires after the item.
_BENEATH = frozenset({"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle"})
#: How long a thread the item joined may take to leave the kernel's count: a thread left
#: running retires the worker, but one that is only exiting must not.
_THREAD_EXIT_S = 0.05
#: Every this many items, the full check runs anyway.
_FULL_EVERY = 64
#: An item this long pays for the full check: a few tens of µs against a millisecond.
_FULL_AFTER_S = 0.001
#: Descriptors an item may leave open (a scorer's lazily opened cache, say) before the worker
#: is replaced rather than run out of them.
_SPARE_FDS = 32
#: Every interval timer: one an item left set fires in a later item, whose process it ends.
ITIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
_NO_TIMER = (0.0, 0.0)
#: How a call changes the C environment itself, which os.environ does not show.
_ENV_EVENTS = frozenset({"os.putenv", "os.unsetenv"})
#: The handlers as the C module has them: signal.getsignal's enum conversion, for each of 64
#: signals, was half the cost of the full check. The mask likewise: signal.pthread_sigmask
#: turns every number it returns into an enum member, a µs an item.
_signal_module = importlib.import_module("_signal")
_getsignal: Callable[[int], Any] = _signal_module.getsignal
_sigmask: Callable[[int, Any], set[int]] = _signal_module.pthread_sigmask
_sched_getscheduler: Callable[[int], int] = os.sched_getscheduler
_set_wakeup_fd: Callable[[int], int] = signal.set_wakeup_fd
#: The signals an item may have faulthandler dump on (``faulthandler.register``, no audit
#: event), to a descriptor of the worker's (its result pipe) for every later item: all but the
#: fatal ones (faulthandler.enable's own) and the worker's stack dump, which it registers again.
_FAULT_SIGNALS = tuple(
    int(signum)
    for signum in signal.valid_signals()
    if signum not in (signal.SIGSEGV, signal.SIGFPE, signal.SIGABRT, signal.SIGBUS, signal.SIGILL)
    and signum not in (signal.SIGKILL, signal.SIGSTOP, DUMP_SIGNAL)
)
#: Threads started through _thread and still running, counted in C: see _Serve.threads.
_thread_count: Callable[[], int] = importlib.import_module("_thread")._count


class _State:  # pragma: no cover - worker only
    """What the worker was like before its first item, put back after each one.

    Per item, cheaply (a few system calls, no /proc): the working directory (``fchdir``,
    after an item that left it), the umask, the signal mask, the three interval timers (the
    alarm among them), Python's signal wakeup descriptor, the scheduling policy, Python
    threads. After an item that touched what those do not cover (an audited event:
    ``setrlimit``, ``putenv``, ``open``, ``ctypes``, a fork), or that ran for over a
    millisecond, and every 64th item: the environment (``os.putenv``'s own too) and the C
    library's time zone, the resource limits, the niceness and CPU affinity, every signal
    handler Python knows and faulthandler's registrations, the descriptors, fds 0-2, the
    threads the kernel counts, the user and group ids, the root folder and (Python 3.12 on) the
    namespaces. What cannot be put back (a thread left running, a hard limit lowered, a
    niceness raised without the privilege to lower it, over 32 descriptors more than at the
    start, fd 0, 1 or 2 pointed elsewhere, another scheduling policy, user, root folder or
    namespace), and a C library loaded or a function looked up in one through ctypes (what a C
    call changed no check can list), retire the worker once its answer is written; the items
    queued behind go to a fresh one. A quick item's signal handler or faulthandler
    registration, or a C extension's change to what the cheap check does not cover, is put back
    only at the next full check.
    """

    def __init__(self, stack_w: int) -> None:
        #: Where faulthandler writes the stack dump the caller asks for.
        self.stack_w = stack_w
        self.cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.cwd_id = _identity(self.cwd)
        self.cwd_path = _getcwd()
        #: The item changed directory through Python (an audited os.chdir or os.fchdir).
        self.moved = False
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.mask = _sigmask(signal.SIG_BLOCK, ())
        self.environ = dict(os.environ._data)  # type: ignore[attr-defined]
        #: Names the item passed to os.putenv or os.unsetenv (as bytes), seen by the audit hook.
        self.env_keys: set[bytes] = set()
        #: Its resource limits, niceness, CPUs and policy, as a forking process keeps them.
        self.inherited = _inherit.read()
        self.handlers = {signum: _getsignal(signum) for signum in signal.valid_signals()}
        self.fd_count = _procfs.own_fds()
        self.stdio = [_identity(fd) for fd in (0, 1, 2)]
        self.identities = _identities()
        self.policy = _sched_getscheduler(0)
        self.wakeup = _set_wakeup_fd(-1)
        _set_wakeup_fd(self.wakeup)
        self.zone = _zone()
        self.dirty = False
        #: The item reached C through ctypes (see _BENEATH): the worker retires.
        self.beneath = False
        self.count = 0
        sys.addaudithook(_audit_hook(self))

    def clean(self, wall: float, alone: bool, threads: int | None = None) -> bool:
        """Put back what the last item changed; False when the worker must be replaced.

        ``alone``: no Python thread but this one is running. ``threads``: the kernel's count
        of them, where the item's end has read it already.
        """
        # Back to the directory the worker started in, unless it is plainly still there:
        # getcwd() is a system call no audit hook sees, where fchdir() is an audited event
        # (0.6 µs of the hook's machinery). Python's own chdir is audited, so the path alone
        # is trusted only after an item that changed directory, if at all, from C.
        kept = True
        if self.moved or self.cwd_path is None or _getcwd() != self.cwd_path:
            # The saved descriptor is the item's to replace too (dup2): back through it while
            # it is the starting directory's, else retire.
            kept = _identity(self.cwd) == self.cwd_id
            if kept:
                os.fchdir(self.cwd)
            self.moved = False
        os.umask(self.umask)
        if _sigmask(signal.SIG_SETMASK, self.mask) != self.mask:
            self.dirty = True
        for which in ITIMERS:
            if signal.setitimer(which, 0) != _NO_TIMER:
                self.dirty = True
        # One plain call each that no audit hook sees: a wakeup descriptor left set (the result
        # pipe, say) gets a byte at every later item's signal, and is put back; SCHED_IDLE
        # starves every later item on a busy machine, and an unprivileged process may not be
        # allowed to undo it.
        if _set_wakeup_fd(self.wakeup) != self.wakeup:
            self.dirty = True
        if not (alone and kept) or _sched_getscheduler(0) != self.policy:
            return False
        self.count += 1
        if self.dirty or wall > _FULL_AFTER_S or not self.count % _FULL_EVERY:
            clean = self._full(threads)
            self.dirty = False  # the check's own reads of /proc are not the item's
            return clean
        return True

    def _full(self, threads: int | None = None) -> bool:
        touched, self.env_keys = self.env_keys, set()
        if os.environ._data != self.environ:  # type: ignore[attr-defined]
            os.environ.clear()
            for key, value in self.environ.items():
                os.environ[os.fsdecode(key)] = os.fsdecode(value)
        for name in touched:  # put or unset by os.putenv or os.unsetenv themselves
            if name in self.environ:
                os.putenv(name, self.environ[name])
            else:
                os.unsetenv(name)
        self.env_keys.clear()  # the puts above went through the audit hook too: not the item's
        if _zone() != self.zone:  # time.tzset() under another TZ: the C library keeps the zone
            time.tzset()
        # A dump an item had faulthandler make on a signal (no audit event) is undone, and the
        # worker's own stack dump registered again, whatever the item put there.
        for signum in _FAULT_SIGNALS:
            faulthandler.unregister(signum)
        faulthandler.register(DUMP_SIGNAL, file=self.stack_w, all_threads=True, chain=False)
        if not _inherit.put_back(self.inherited):  # a hard limit lowered, a niceness raised
            return False
        for signum, handler in self.handlers.items():
            if handler is not None and _getsignal(signum) is not handler:
                try:
                    signal.signal(signum, handler)
                except (OSError, ValueError, TypeError):
                    return False
        try:
            if [
                _identity(fd) for fd in (0, 1, 2)
            ] != self.stdio or _identities() != self.identities:
                return False
            if threads is None:
                threads = _procfs.own_threads(1, _THREAD_EXIT_S)
            opened = _procfs.own_fds()
        except OSError:
            return False
        return threads == 1 and opened - self.fd_count <= _SPARE_FDS


#: The namespaces an item may enter with a plain call: ``os.unshare`` and ``os.setns`` (Python
#: 3.12 on) raise no audit event. Before, only ctypes reaches them, and that retires the worker.
_NAMESPACES = ("mnt", "user", "net") if hasattr(os, "unshare") else ()


def _zone() -> tuple[object, ...]:
    """The time zone as the C library last read it (``time.tzset`` sets these)."""
    return time.timezone, time.altzone, time.daylight, time.tzname


def _identities() -> tuple[object, ...]:  # pragma: no cover - worker only
    """What an item may change with a plain call that no audit hook sees, and that cannot
    always be undone: the user and group ids, the root folder (``chroot``: ``/`` is another
    folder then), the namespaces of :data:`_NAMESPACES`. A change retires the worker."""
    root = os.stat("/")
    return (
        os.getresuid(),
        os.getresgid(),
        os.getgroups(),
        (root.st_dev, root.st_ino),
        *(os.readlink(f"/proc/self/ns/{name}") for name in _NAMESPACES),
    )


def _getcwd() -> str | None:  # pragma: no cover - worker only
    """The working directory's path; None when it has none (it was deleted, say)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _audit_hook(state: _State) -> Callable[[str, tuple[Any, ...]], None]:  # pragma: no cover
    """The audit hook that marks ``state`` dirty: a plain function, not a bound method.

    CPython looks a hook's ``__cantrace__`` up at every audited event: on a bound method the
    miss raises and formats an AttributeError (2 µs an event, and the worker's own ``fchdir``
    is one each item); on a function it is a dictionary miss.
    """

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event in _AUDITED:
            state.dirty = True
            if event in _ENV_EVENTS:
                state.env_keys.add(os.fsencode(args[0]))
            elif event in _BENEATH:
                state.beneath = True
        elif event == "os.chdir":
            state.moved = True

    return audit


def call_item(fn: Callable[..., Any], item: Any) -> tuple[Any, ...]:  # pragma: no cover
    """The frame of one item's call, as a worker reads the item: see :func:`._child.call`."""
    if type(item) is tuple:
        return call(fn, item, _NO_KWARGS)
    if type(item) is dict:
        return call(fn, (), item)
    if type(item) is list:  # Pool.submit's positional and keyword arguments together
        return call(fn, item[0], item[1])
    # An _Unreadable: its reason goes where an ERROR's value is (see _decode).
    return (Status.ERROR.value, NotStarted.UNREADABLE.value, item.text, None)


class _Serve:  # pragma: no cover - worker only
    def __init__(
        self,
        fn: Callable[..., Any],
        task_r: int,
        result_w: int,
        output_r: int,
        subreaper: bool,
        box: Box,
        dropped: _Dropped,
        fence: mmap.mmap,
        stack_w: int,
    ) -> None:
        self.fn = fn
        #: The worker's box, entered already (see ._box).
        self.box = box
        plan = box.plan
        #: Its items' temporary folders, emptied after each; None where it has none.
        self.scratch: _confine.Scratch | None = None
        if plan.tmpdir is not None:
            shm = Confinement.PRIVATE_SHM in plan.applied
            self.scratch = _confine.Scratch(plan.tmpdir, shm)
        alarm = box.quota.alarm
        self.oom_alarm = -1 if alarm is None else alarm
        #: Where faulthandler writes the stack dump the caller asks for.
        self.stack_w = stack_w
        self.dropped = dropped
        self.task_r = task_r
        self.result_w = result_w
        self.output_r = output_r
        os.set_blocking(output_r, False)
        #: What the worker looks at after each item, in one poll (see :meth:`_ready`): whether
        #: the call left output in the pipe, the OOM alarm of its (v1) memory group, and the
        #: watch on its items' temporary folders. poll() is one system call that no audit hook
        #: sees (an ioctl is audited).
        self.after_poll = select.poll()
        watch = -1 if self.scratch is None else self.scratch.watch
        for fd in (output_r, self.oom_alarm, watch):
            if fd >= 0:
                self.after_poll.register(fd, select.POLLIN)
        self.subreaper = subreaper
        self.children_fd = -1
        #: The children list's file: an item may put another at its number (``dup2``), and
        #: /dev/null reads as a list of none.
        self.children_id = (0, 0)
        if subreaper:
            try:
                pid = _procfs.own_pid()  # as /proc names it: we may be in a PID namespace
                self.children_fd = os.open(f"/proc/{pid}/task/{pid}/children", os.O_RDONLY)
                self.children_id = _identity(self.children_fd)
            except OSError:
                self.children_fd = -1
        #: An item put something else at one of the worker's own descriptors: it retires.
        self.damaged = False
        self.buffer = bytearray()
        self.items = 0
        self.cpu_mark = 0.0
        self.max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.pid = os.getpid()
        #: Threads started through _thread (threading's too) and still running, as C counts
        #: them: threading.active_count() takes a lock in Python, a µs an item. Compared with
        #: the count at the start, as a fork keeps the count of the threads the parent had
        #: (CPython 3.11 does not reset it): an item's thread left running changes it. A C
        #: library's own thread is found by the full check, which reads the kernel's count.
        self.threads = _thread_count()
        #: The caller writes here the index (+1) of an item it is killing at its deadline,
        #: before it looks for that item's answer: see :meth:`_one`. Read as a native integer
        #: through a view, without a struct call.
        self.fence = memoryview(fence).cast("Q")
        self.fence_map = fence
        # The guard's own handle on the C library, its functions looked up already, goes: an
        # item that calls C must load it (or look a function up) itself, which retires its
        # worker (see _BENEATH).
        _libc.forget()
        self.state = _State(stack_w)

    def loop(self) -> None:
        while True:
            batch = self._read_batch()
            if batch is None:
                return
            indexes, items = batch
            # One CPU clock read per item: each item's end is the next one's start.
            self.cpu_mark = time.process_time()
            for index, item in zip(indexes, items, strict=False):
                self._one(index, item)

    def _read_batch(self) -> tuple[list[int], list[Any]] | None:
        while (frame := task_frame(self.buffer)) is None:
            try:
                chunk = os.read(self.task_r, CHUNK)
            except BlockingIOError:  # an item made our end non-blocking: it waits again
                os.set_blocking(self.task_r, True)
                continue
            if not chunk:
                return None  # the pool closed our task pipe: leave quietly
            self.buffer += chunk
        indexes, payload, end = frame
        try:
            items: list[Any] = pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - e.g. a class the worker cannot import
            text = f"{type(exc).__name__}: {UNREADABLE_ITEMS}: {exc}"
            items = [_Unreadable(text)] * len(indexes)
        del self.buffer[:end]
        return indexes, items

    def _one(self, index: int, item: Any) -> None:
        # process_time() reads the same CPU accounting as getrusage() without building a
        # struct: at 50 µs an item, the guard's own microseconds are what throughput is made of.
        cpu_before = self.cpu_mark
        start = time.perf_counter()
        frame = call_item(self.fn, item)
        # Pickled before the checks below, as pickling runs the value's __reduce__: code of
        # the call's, which may change the state, fork or start a thread just as well. The
        # value goes then too, for its __del__ is the call's code as well, and would run after
        # the answer, in the next item's time (a float the frame's header carries has none).
        payload = result_payload(frame)
        if payload is not None:
            frame = ()
        if os.getpid() != self.pid:
            os._exit(0)  # a child the call forked, returning: it never answers for the worker
        wall = time.perf_counter() - start
        alone = _thread_count() == self.threads
        # The kernel's count, after an audited item: a thread that C started (ctypes, a
        # library's pool), which Python does not count, may fork until it ends, and its
        # children are on its own list until then: one still running after the full check's
        # wait makes the look below the full walk, and the worker retires. With this thread
        # alone nothing can start another: the full check takes the count as it stands.
        threads = _procfs.own_threads(1, _THREAD_EXIT_S) if self.state.dirty else None
        if threads not in (1, None):
            alone = False
        leaked, cleared = self._leaked(alone)
        # The peak only grows during an item that allocates, which takes time: a quick item
        # cannot have moved it far since the last look.
        self.items += 1
        if wall > 0.001 or not self.items % 64:
            self.max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # What this item changed that would charge the next one: put back, or retire. Before
        # the answer, which says so: the caller then knows the items queued behind never start.
        dirty, beneath = self.state.dirty, self.state.beneath
        try:
            leaving = not self.state.clean(wall, alone, threads)
        except Exception:  # noqa: BLE001 - e.g. the item closed the saved cwd's descriptor
            leaving = True
        ready = self._ready()
        confined = self._confined(dirty, ready) and cleared
        leaving = not confined or leaving or self.damaged or beneath
        # The CPU the item's leftovers took to clear (a folder of files, say) is its own, not
        # the next item's, which starts at this mark.
        cpu_total = self.cpu_mark = time.process_time()
        output, dropped = self._output(ready)
        if self.dropped.count:
            dropped += self.dropped.count
            self.dropped.count = 0
        result = result_frame(
            frame,
            payload,
            output,
            dropped,
            index,
            leaked,
            wall,
            cpu_total - cpu_before,
            cpu_total,
            time.monotonic(),
            self.max_rss,
            leaving,
        )
        write_all(self.result_w, result)
        # Exactly once near the deadline: the caller writes the fence *before* it reads the
        # result pipe for this answer, and the pipe's lock orders the two sides. Either it saw
        # the answer (and kills nothing), or the fence is visible here now: then the items
        # queued behind this one must not start, as the kill is on its way. Retiring leaves
        # them unstarted, and the caller hands them out again.
        if leaving or self.fence[0] == index + 1:
            os._exit(RETIRED)

    def _ready(self) -> list[tuple[int, int]]:
        """Once an item has ended and its state is put back: which of :attr:`after_poll`'s
        descriptors have something, in one system call for all three."""
        return self.after_poll.poll(0)

    def _confined(self, dirty: bool, ready: list[tuple[int, int]]) -> bool:
        """Once an item has ended, before its answer: an OOM kill in the worker's group ends
        the worker (the caller reports the item over its memory limit, whatever it answered,
        as cgroup v2's ``memory.oom.group`` would have ended it); what it left in its temporary
        folders is removed. False when they cannot be emptied: the worker retires. ``ready``:
        from :meth:`_ready`."""
        watched = False
        for fd, _ in ready:
            if fd == self.output_r:
                continue
            if fd == self.oom_alarm:
                os.kill(self.pid, signal.SIGKILL)
            watched = True
        return self.scratch is None or self.scratch.clean(dirty, watched)

    def _output(self, ready: list[tuple[int, int]]) -> tuple[bytes, int]:
        """What the call printed, and how much of it did not fit; cheap when it printed none.
        ``ready``: from :meth:`_ready`."""
        if not ready or all(fd != self.output_r for fd, _ in ready):
            return b"", 0
        # The call may have cleared O_NONBLOCK on it (any of our descriptors is the call's to
        # change): the read would then wait, after a later item, for output never sent.
        os.set_blocking(self.output_r, False)
        return read_bounded(self.output_r, OUTPUT_LIMIT)

    def _leaked(self, alone: bool) -> tuple[int, bool]:
        """Kill what the item left running; cheap when it started nothing. And whether its
        group was found clear after (if not, the worker retires, and the group goes whole)."""
        if not self.subreaper:
            return 0, True
        # An item that forked or called C (audited events) may have left a process outside
        # its subtree (the prctl escape): what else is in the worker's group is its too.
        # Taken first: the walk's own reads of /proc are audited events too.
        escapable = self.state.dirty
        # Orphans re-parent to the main thread, so its children list sees every leftover
        # unless another thread forked one; then the full walk is needed.
        leaked = 0
        if not (alone and self._childless()):
            leaked = _walkkill.kill_descendants(os.getpid()) + _reap.reap_children()
        if not escapable:
            return leaked, True
        strays, cleared = self.box.cage.kill_strays()
        return leaked + strays, cleared

    def _childless(self) -> bool:
        """The children list, read through the worker's own descriptor, is empty; False (look
        the slow way) when it cannot be read or is no longer the worker's file."""
        if self.children_fd < 0:
            return False
        try:
            if _identity(self.children_fd) != self.children_id:
                self.damaged = True
                return False
            return not os.pread(self.children_fd, 64, 0).strip()
        except OSError:
            self.damaged = True
            return False
