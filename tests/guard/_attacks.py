"""What the pool attack tests' items do: module level, so a zygote imports them by name, and
the standard library only, so that its fresh interpreter imports no pytest to serve them.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import faulthandler
import importlib
import os
import resource
import signal
import stat
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

from pytest_rewardhang.guard._wire import MAGIC, RESULT, result_frame
from tests._procs import LIBC, join_a_lingering_thread, orphan_grandchildren, pipes

#: The test process's own pipes (pytest's terminal may be one), spared by "scribble" when the
#: pool's zygote was forked from this process.
CALLER_PIPES = frozenset(pipes().values())


def damages_its_descriptors(how: str) -> Any:
    """Do to every descriptor the process holds past stdio what ``how`` says, then return (or
    exit): the worker's task and result pipes, its fence and its ``/proc`` files among them."""
    if how == "ok":
        return "ok"
    fds = [int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2]
    read, write = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        try:
            if how.startswith("close"):
                os.close(fd)
            elif how == "devnull":
                os.dup2(null, fd)
            elif how == "swap-pipes":
                os.dup2(read if fd % 2 else write, fd)
            elif how == "flip-blocking":
                os.set_blocking(fd, not os.get_blocking(fd))
        except OSError:
            pass
    if how == "close-and-exit":
        os._exit(0)
    return "damaged"


def limits_its_zygote(what: str) -> Any:
    """``lower``: lower the limits of the process that forked this one (the zygote, or an
    isolating worker), renice, re-pin and idle it from outside (as any process of its user may),
    and (as root) slacken its timers,
    then end this process, so that the next item runs in one forked after it;
    ``lower-and-return``: the same, then return; ``idle``: only ``SCHED_IDLE``, which it can
    undo, then return. Anything else: what this process inherited."""
    if what == "idle":
        os.sched_setscheduler(os.getppid(), os.SCHED_IDLE, os.sched_param(0))
        return "lowered"
    if what.startswith("lower"):
        parent = os.getppid()
        resource.prlimit(parent, resource.RLIMIT_NOFILE, (32, 32))
        resource.prlimit(parent, resource.RLIMIT_AS, (1 << 31, 1 << 31))
        os.setpriority(os.PRIO_PROCESS, parent, 19)
        os.sched_setaffinity(parent, {min(os.sched_getaffinity(0))})
        os.sched_setscheduler(parent, os.SCHED_IDLE, os.sched_param(0))
        with contextlib.suppress(PermissionError):  # root's alone to write: 0.5 s late sleeps
            Path(f"/proc/{parent}/timerslack_ns").write_text("500000000")
        if what == "lower":
            os._exit(1)
        return "lowered"
    limits = [resource.getrlimit(r) for r in (resource.RLIMIT_NOFILE, resource.RLIMIT_AS)]
    policy = os.sched_getscheduler(0)
    slack = Path("/proc/self/timerslack_ns").read_text()
    cpus = sorted(os.sched_getaffinity(0))
    return limits, os.getpriority(os.PRIO_PROCESS, 0), cpus, policy, slack


def kills_its_zygote_or_not(item: str) -> str:
    """A GRPO group's samples: "kill" ones kill the zygote (the worker's parent) and answer;
    the others take a moment, so that they run beside one that does."""
    if item == "kill":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(0.05)
        return "killed"
    time.sleep(0.02)
    return item


def attack(kind: str, arg: str = "", burn_s: float = 0.0) -> Any:
    if kind == "stop-parent-and-hang":
        os.kill(os.getppid(), signal.SIGSTOP)
        while True:
            pass
    if kind == "stop-parent-and-exit":
        os.kill(os.getppid(), signal.SIGSTOP)
        os._exit(3)
    if kind == "kill-parent":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(3600)
    if kind == "thread-kills-worker":

        def strike() -> None:
            time.sleep(0.05)
            os._exit(9)

        threading.Thread(target=strike, daemon=True).start()
        return "left a thread"
    if kind == "nofile":
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (3, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )
        return "lowered"
    if kind == "cpu":
        resource.setrlimit(resource.RLIMIT_CPU, (1, resource.RLIM_INFINITY))
        return "lowered"
    if kind == "chdir-deleted":
        path = tempfile.mkdtemp(dir=arg)
        os.chdir(path)
        os.rmdir(path)
        return "moved"
    if kind == "umask-env-alarm":
        os.umask(0o777)
        os.environ["REWARDHANG_POISON"] = "1"
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(1)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        return "set"
    if kind == "itimers":  # a quick item: no audited event, no full check after it
        signal.setitimer(signal.ITIMER_PROF, 0.3)
        signal.setitimer(signal.ITIMER_VIRTUAL, 0.3)
        return "set"
    if kind == "putenv":  # the C environment itself: os.environ does not see it
        os.putenv("REWARDHANG_POISON", "1")
        os.unsetenv("PATH")
        return "set"
    if kind == "nice-affinity":  # found by the full check: a quick item's wait for the 64th
        os.nice(3)
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        time.sleep(0.002)
        return "set"
    if kind == "reduce-changes-state":  # code of the call's that runs as its value is pickled
        return ChangesStateWhenPickled()
    if kind == "forge-answer":  # a well-formed answer of its own, ending in a time to come
        serve, index = serving()
        fields = (0, index, 0, 0.001, 0.0, 0.0, 1e12, 0, False)
        os.write(serve.result_w, result_frame(("ok", 1.0, None, None), None, b"", *fields))
        time.sleep(3600)
    if kind == "answer-then-return":  # a plausible answer of its own; then the worker's
        serve, index = serving()
        fields = (0, index, 0, 0.001, 0.0, 0.0, time.monotonic(), 0, False)
        os.write(serve.result_w, result_frame(("ok", 1.0, None, None), None, b"", *fields))
        return "returned"
    if kind == "forge-nested-status":  # an answer whose status recurses past any repr
        serve, index = serving()
        payload = nested_status_frame(100_000, fields=4)
        fields = (0, index, 0, 0.001, 0.0, 0.0, 0.0, 0, False)
        os.write(serve.result_w, result_frame(("error",), payload, b"", *fields))
        time.sleep(3600)
    if kind == "flip-pipes":  # O_NONBLOCK is the open file's: shared with whoever holds it
        flipped = 0
        for name in os.listdir("/proc/self/fd"):
            try:
                if stat.S_ISFIFO(os.fstat(int(name)).st_mode) and not os.get_blocking(int(name)):
                    os.set_blocking(int(name), True)
                    flipped += 1
            except OSError:
                continue
        return flipped
    if kind == "print":
        print("printed")
        return None
    if kind == "big-plain":  # 1 MB of plain data to check before it is built
        return list(range(200_000))
    if kind == "forge-output":  # a header for itself that claims 1 MiB of output follows
        serve, index = serving()
        header = (MAGIC, 0, 1 << 20, 0, index, 0, 0.0, 0.0, 0.0, 0.0, 0, False, 0.0)
        os.write(serve.result_w, RESULT.pack(*header))
        return "forged"
    if kind == "flood-result":  # a header for itself that claims 4 GiB of result, then bytes
        serve, index = serving()
        header = (MAGIC, (1 << 32) - 1, 0, 0, index, 0, 0.0, 0.0, 0.0, 0.0, 0, False, 0.0)
        os.write(serve.result_w, RESULT.pack(*header))
        block = b"x" * (1 << 20)
        while True:
            os.write(serve.result_w, block)
    if kind == "signal-self":
        signal.signal(signal.SIGUSR1, lambda *_: None)
        os.kill(os.getpid(), signal.SIGUSR1)
        return "signalled"
    if kind == "read-stdin":
        return os.read(0, 100)
    if kind == "leak-fds":  # every descriptor the limit allows, left open
        fd = os.open(os.devnull, os.O_RDONLY)
        try:
            while True:
                os.dup(fd)
        except OSError as exc:
            if exc.errno != errno.EMFILE:
                raise
        return "leaked"
    if kind == "fork-and-return":
        if os.fork():  # the child returns from the call too, without _exit, and first
            time.sleep(0.2)
        return "forked"
    if kind == "pipes":  # what this worker holds, while its neighbour runs beside it
        time.sleep(0.2)
        return os.getpid(), sorted(set(pipes(CALLER_PIPES).values()))
    if kind == "sleep":
        time.sleep(3600)
    if kind == "scribble":  # garbage on every pipe the worker holds
        for fd in pipes(CALLER_PIPES):
            try:  # noqa: SIM105 - a read end refuses
                os.write(fd, b"\xff" * 64)
            except OSError:
                pass
        return "scribbled"
    if kind == "innocent":
        with open(os.path.join(arg, "probe"), "w") as f:
            f.write("x")
        os.remove(os.path.join(arg, "probe"))
        burn = time.process_time() + burn_s  # past an RLIMIT_CPU another item may have left
        while time.process_time() < burn:
            pass
        return (
            os.getcwd(),
            os.umask(0o022),
            os.environ.get("REWARDHANG_POISON"),
            signal.pthread_sigmask(signal.SIG_BLOCK, ()) == set(),
            LIBC.getenv(b"REWARDHANG_POISON"),
            LIBC.getenv(b"PATH") is not None,
            os.getpriority(os.PRIO_PROCESS, 0),
            sorted(os.sched_getaffinity(0)),
        )
    if kind in REACHING:
        return reach(kind)
    if kind == "probe-later":
        return probe(0.4)
    raise ValueError(kind)


#: Attacks on what the warm worker cannot put back, each aimed at later items (see ``probe``).
REACHING = (
    "patch-builtins",
    "patch-guard",
    "replace-module",
    "signal-handler",
    "watchdog",
    "thread-patches",
    "nofile-cpu",
    "env-cwd-umask",
)


def reach(kind: str) -> str:
    if kind == "patch-builtins":
        builtins.sum = lambda *_: 1.0  # type: ignore[assignment]
        builtins.len = lambda *_: 1
    elif kind == "patch-guard":  # every later call of the worker's answers 1.0
        worker = sys.modules["pytest_rewardhang.guard._worker"]
        worker.call = lambda *_: ("ok", 1.0, None, None)  # type: ignore[attr-defined]
    elif kind == "replace-module":
        fake = types.ModuleType("json")
        fake.dumps = lambda *_: "1.0"  # type: ignore[attr-defined]
        sys.modules["json"] = fake
    elif kind == "signal-handler":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, lambda *_: None)
    elif kind == "watchdog":  # ends whatever process it is in, 0.3 s on
        faulthandler.dump_traceback_later(0.3, exit=True)
    elif kind == "thread-patches":

        def patch() -> None:
            time.sleep(0.05)
            builtins.sum = lambda *_: 1.0  # type: ignore[assignment]

        threading.Thread(target=patch, daemon=True).start()
    elif kind == "nofile-cpu":
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (8, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )
        resource.setrlimit(resource.RLIMIT_CPU, (1, resource.getrlimit(resource.RLIMIT_CPU)[1]))
    elif kind == "env-cwd-umask":
        os.environ["REWARDHANG_POISON"] = "1"
        os.chdir("/")
        os.umask(0o777)
    return kind


def probe(seconds: float) -> tuple[Any, ...]:
    """What an innocent item sees of the process, after ``seconds`` (for what strikes later)."""
    time.sleep(seconds)
    descriptors = [os.open(os.devnull, os.O_RDONLY) for _ in range(16)]
    for fd in descriptors:
        os.close(fd)
    return (
        sum([1, 2]),
        len([1, 2, 3]),
        importlib.import_module("json").dumps([1]),
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
        signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL,
        resource.getrlimit(resource.RLIMIT_CPU),
        os.environ.get("REWARDHANG_POISON"),
        os.getcwd(),
        os.umask(0o022),
        threading.active_count(),
    )


def crash(how: str, mb: int = 0) -> int:
    """An isolated item that dies: ``exit`` (os._exit), ``segv`` (through ctypes), ``memory``."""
    if how == "exit":
        os._exit(3)
    if how == "segv":
        ctypes.string_at(0)
    if how == "memory":
        return len(bytearray(mb * 1024 * 1024))
    if how == "hang":
        time.sleep(3600)
    if how == "fork-sleep":  # a child left sleeping, holding what the call's process held
        if os.fork() == 0:
            time.sleep(3600)
        return 1
    return 0


def nested_status_frame(depth: int, fields: int) -> bytes:
    """The pickle of a result frame of ``fields`` fields whose status is a list nested
    ``depth`` deep, the rest None and 0: written opcode by opcode, as pickling it would
    recurse past the C stack (Python 3.12 refuses a thousand)."""
    status = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST each, then APPEND each inward
    rest = b"N" * 3 + b"K\x00" * (fields - 4)  # NONE, NONE, NONE, then BININT1 0
    return b"\x80\x02(" + status + rest + b"t."  # PROTO 2, MARK ... TUPLE, STOP


def serving() -> tuple[Any, int]:
    """The worker's loop this call runs in, and the item's index, found up the stack."""
    frame = sys._getframe()
    while frame.f_code.co_name != "_one":
        frame = frame.f_back  # type: ignore[assignment]
    return frame.f_locals["self"], frame.f_locals["index"]


LIBC.getenv.restype = ctypes.c_char_p


class ChangesStateWhenPickled:
    def __reduce__(self) -> tuple[Any, ...]:
        os.umask(0o777)
        os.putenv("REWARDHANG_POISON", "1")
        signal.alarm(1)
        return (str, ("pickled",))


def quick(i: int) -> int:
    return i * 2


def near_deadline(log: str, i: int, seconds: float) -> int:
    """Log each start (one O_APPEND line), then take about the budget."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{i}\n".encode())
    os.close(fd)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return i


def leaves_a_thread(log: str, i: int) -> int:
    """Log each start, then return leaving a thread running: its worker retires after it."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{i}\n".encode())
    os.close(fd)
    threading.Thread(target=time.sleep, args=(0.05,), daemon=True).start()
    return i


def joins_a_thread(seconds: float) -> int:
    """Start and join a thread that lingers in the kernel's count, then take ``seconds``: an
    item past a millisecond gets the worker's full check, kernel thread count and all."""
    join_a_lingering_thread(0.01)
    time.sleep(seconds)
    return os.getpid()


def swaps_its_workers_descriptor(what: str, folder: str = "") -> Any:
    """Put another file at one of its worker's own descriptors (``dup2``), leaving everything
    else alone. ``children``: /dev/null at the one its children list is read through (it then
    reads as none), then fork a child that sleeps, and return this process's pid and the
    child's; ``cwd``: ``folder`` at the one its starting directory is kept in, then ``chdir``
    (the worker goes back through it). Anything else, or after ``cwd``: this process's pid and
    working directory."""
    serve, _ = serving()
    if what == "children":
        os.dup2(os.open(os.devnull, os.O_RDONLY), serve.children_fd)
        child = os.fork()
        if not child:
            time.sleep(3600)
            os._exit(0)
        return os.getpid(), child
    if what == "cwd":
        os.dup2(os.open(folder, os.O_RDONLY | os.O_DIRECTORY), serve.state.cwd)
        os.chdir(folder)
    return os.getpid(), os.getcwd()


_THREAD_START = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
#: The C threads' entry points, kept alive as long as the process.
_STARTS: list[Any] = []


def forks_from_a_c_thread(what: str, before: float = 0.0, after: float = 0.0) -> int:
    """``fork``: start a thread of libc's own (Python does not count it) that forks a child
    ``before`` seconds later, then ends ``after`` seconds after that, and return at once; the
    child sleeps. Anything else: this process's pid."""
    if what == "fork":

        def start(_: Any) -> None:
            time.sleep(before)
            if not os.fork():
                time.sleep(3600)
                os._exit(0)
            time.sleep(after)

        _STARTS.append(_THREAD_START(start))
        thread = ctypes.c_ulong()
        assert LIBC.pthread_create(ctypes.byref(thread), None, _STARTS[-1], None) == 0
        LIBC.pthread_detach(thread)
    return os.getpid()


def leaves_descriptors(count: int) -> int:
    """Leave ``count`` descriptors open (a lazily opened cache, say), and say which worker."""
    for _ in range(count):
        os.open(os.devnull, os.O_RDONLY)
    return os.getpid()


def leaves_a_c_thread() -> int:
    """Leave a thread running that Python never started (a C library's pool, say): ``pause``
    in a thread of libc's own, which only the kernel's count of threads shows."""
    thread = ctypes.c_ulong()
    assert LIBC.pthread_create(ctypes.byref(thread), None, LIBC.pause, None) == 0
    return os.getpid()


def exits_with(log: str, i: int, code: int | None) -> int:
    """Log each start, then exit with ``code`` without answering (or return, for None)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{i}\n".encode())
    os.close(fd)
    if code is not None:
        os._exit(code)
    return i


def hang_holding_memory(pidfile: str, mib: int) -> None:
    """Log this worker's pid and a child's, both holding ``mib`` MiB; hang."""
    pid = os.fork()
    held = bytearray(mib << 20)
    held[::4096] = b"x" * len(held[::4096])
    if pid:
        with open(pidfile, "a") as f:
            f.write(f"{os.getpid()} {pid}\n")
    while True:
        pass


def orphan_then_crash(pidfile: str) -> None:
    """Leave a setsid()'d grandchild running, then crash on our own."""
    orphan_grandchildren(1, pidfile)
    os._exit(5)


class BigCallable:
    def __init__(self) -> None:
        self.blob = os.urandom(210 * 1024)

    def __call__(self, x: int) -> int:
        return x + len(self.blob)


class Unpicklable:
    def __reduce__(self) -> Any:
        raise TypeError("not today")


def crash_every_other(i: int) -> int:
    """Odd items end their worker at once: its pipes' reader is gone while the caller writes."""
    if i % 2:
        os._exit(3)
    return i


class _SigEvent(ctypes.Structure):
    _fields_ = [
        ("value", ctypes.c_void_p),
        ("signo", ctypes.c_int),
        ("notify", ctypes.c_int),
        ("pad", ctypes.c_byte * 48),
    ]


class _SigAction(ctypes.Structure):
    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


def changes_what_python_does_not_show(what: str, arg: Any = None) -> Any:
    """Change state of the process that Python's own tables do not show, and return; or
    ``look``: sleep ``arg`` seconds, then say which worker this is and what it runs with.

    ``posix-timer``: a POSIX timer (``timer_create``, through libc) that sends SIGKILL ``arg``
    seconds later. ``sigchld-ignored``: SIGCHLD ignored through libc's ``sigaction`` (a child's
    exit status is then lost: ``subprocess`` reads a failed program as passed). ``slack``: a
    timer slack of 0.2 s, through the guard's own handle on libc. ``sched-idle``: ``SCHED_IDLE``,
    one plain call. ``wakeup``: the worker's result pipe as Python's signal wakeup descriptor.
    Over a millisecond each (the worker's full check): ``nobody``, ``chroot``: the user (as
    root), the root folder (``arg``); ``dump-on-sigchld``: faulthandler dumping onto the result
    pipe at each SIGCHLD; ``stdin``: a pipe holding 66 bytes at fd 0; ``zone``: the C library's
    time zone nine hours east, the environment as it was."""
    if what in ("posix-timer", "sigchld-ignored"):
        libc = ctypes.CDLL(None, use_errno=True)  # loaded in the item, as a program would
    if what == "posix-timer":
        event = _SigEvent(signo=signal.SIGKILL, notify=0)  # SIGEV_SIGNAL
        timer = ctypes.c_void_p()
        clock = time.CLOCK_MONOTONIC
        assert libc.timer_create(clock, ctypes.byref(event), ctypes.byref(timer)) == 0
        due = (ctypes.c_long * 4)(0, 0, 0, int(arg * 1e9))  # it_interval, it_value (ns)
        assert libc.timer_settime(timer, 0, due, None) == 0
    elif what == "sigchld-ignored":
        assert libc.sigaction(signal.SIGCHLD, ctypes.byref(_SigAction(handler=1)), None) == 0
    elif what == "slack":
        from pytest_rewardhang.guard import _libc

        guards = _libc.libc()
        assert guards is not None
        assert guards.prctl(29, 200_000_000, 0, 0, 0) == 0  # PR_SET_TIMERSLACK
    elif what == "sched-idle":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif what == "wakeup":
        result_w = serving()[0].result_w
        os.set_blocking(result_w, False)
        signal.set_wakeup_fd(result_w)
        os.set_blocking(result_w, True)
    elif what == "nobody":
        time.sleep(0.002)
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
    elif what == "chroot":
        time.sleep(0.002)
        os.chroot(arg)
    elif what == "dump-on-sigchld":
        time.sleep(0.002)
        faulthandler.register(signal.SIGCHLD, file=serving()[0].result_w, chain=False)
    elif what == "stdin":
        time.sleep(0.002)
        os.close(0)
        read, write = os.pipe()
        assert read == 0, read
        os.write(write, b"x" * 66)
        os.close(write)
    elif what == "zone":
        os.environ["TZ"] = "XXX-9"
        time.tzset()
        del os.environ["TZ"]
    elif what == "look":
        return _look(arg)
    return what


def _look(sleep_s: float) -> tuple[Any, ...]:
    """What :func:`changes_what_python_does_not_show` changes, as an item finds it: after a
    signal its Python handler catches, and a child's exit."""
    time.sleep(sleep_s)
    signal.signal(signal.SIGALRM, lambda *_: None)  # a byte at the wakeup descriptor, if any
    signal.setitimer(signal.ITIMER_REAL, 0.001)
    time.sleep(0.01)
    child = os.fork()
    if not child:
        os._exit(7)
    try:
        exited: Any = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    except ChildProcessError:
        exited = "reaped unseen"
    root = os.stat("/")
    with open("/proc/self/timerslack_ns") as f:
        slack = int(f.read())
    os.set_blocking(0, False)
    try:
        stdin = len(os.read(0, 100))
    except BlockingIOError:
        stdin = -1
    ids = (os.getuid(), (root.st_dev, root.st_ino))
    zone = time.localtime(0).tm_hour
    return os.getpid(), os.sched_getscheduler(0), *ids, slack, stdin, zone, exited


class Finalized:
    """A returned value whose finalizer is the call's code too: it burns ``burn_s`` of CPU, or
    (``fork``) leaves a sleeping child behind."""

    def __init__(self, burn_s: float = 0.0, fork: bool = False) -> None:
        self.burn_s = burn_s
        self.fork = fork

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, ("finalized",))

    def __del__(self) -> None:
        if self.fork and not os.fork():
            time.sleep(3600)
            os._exit(0)
        end = time.process_time() + self.burn_s
        while time.process_time() < end:
            pass


def returns_a_finalized_value(what: str, arg: Any = None) -> Any:
    """``burns``: a value whose finalizer burns ``arg`` seconds of CPU; ``forks``: one whose
    finalizer leaves a child; ``litter``: leave ``arg`` files in the temporary folder; anything
    else: this process's pid and its CPU seconds so far."""
    if what == "burns":
        return Finalized(burn_s=arg)
    if what == "forks":
        return Finalized(fork=True)
    if what == "litter":
        folder = tempfile.mkdtemp()
        for i in range(arg):
            open(os.path.join(folder, str(i)), "w").close()
        return folder
    return os.getpid()
