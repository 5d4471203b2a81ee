"""The hangs the lateness benchmark times, in their own module so the pool's zygote imports them.

``score(kind, scratch)`` hangs in the way ``kind`` names (``"fast"`` returns at once). Every hang
first renames its process ``bench-hang`` (children it forks inherit the name), so the benchmark
can tell a hang's processes from the pool's own, and lowers its RLIMIT_CPU, so a process that
escapes every kill still stops burning a core within :data:`HANG_CPU_S` of CPU time. Processes
that only sleep are bounded by :data:`HANG_SLEEP_S` instead. Nothing here sets a death signal:
killing a hang's descendants is the guard's job, and what it leaves is what the benchmark counts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable

# Loaded by file path in the pool's zygote, a fresh interpreter: find _procs beside us.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _procs import set_name

#: The process name every hang's processes carry (``/proc/<pid>/comm``, at most 15 bytes).
HANG_NAME = "bench-hang"
#: CPU seconds after which a hang's process (and any it forked) is killed by the kernel.
HANG_CPU_S = 20
#: Seconds a sleeping hang sleeps: far past any budget, yet nothing sleeps on for good.
HANG_SLEEP_S = 120.0

_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_GIB = 1 << 30
_PAGE = 4096


def _mark() -> None:
    set_name(HANG_NAME)
    # Relative to what this process has used: a warm pool worker may have run other items.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    limit = int(usage.ru_utime + usage.ru_stime) + HANG_CPU_S
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))


def _sleep() -> None:
    time.sleep(HANG_SLEEP_S)


def _spin() -> None:
    n = 0
    while True:
        n += 1


def _fork(body: Callable[[], object], *, new_session: bool = False) -> None:
    """A child running ``body``; it never returns into the caller's stack."""
    if os.fork() == 0:
        try:
            if new_session:
                os.setsid()
            body()
        finally:
            os._exit(0)


def c_loop(scratch: str) -> object:
    return sum(range(10**13))


def python_loop(scratch: str) -> object:
    _spin()
    return None


def sleep(scratch: str) -> object:
    _sleep()
    return None


def lock(scratch: str) -> object:
    held = threading.Lock()
    taken = threading.Event()

    def hold() -> None:
        with held:
            taken.set()
            _sleep()

    threading.Thread(target=hold, daemon=True).start()
    taken.wait()
    held.acquire()
    return None


def blocked_read(scratch: str) -> object:
    reader, _writer = os.pipe()  # the write end stays open here, so no EOF ever comes
    return os.read(reader, 1)


def stopped_self(scratch: str) -> object:
    os.kill(os.getpid(), signal.SIGSTOP)
    _sleep()  # if someone continues it
    return None


def signals_ignored(scratch: str) -> object:
    for number in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    _spin()
    return None


def busy_threads(scratch: str) -> object:
    block = b"\x01" * (1 << 20)

    def burn() -> None:
        while True:
            hashlib.sha256(block).digest()  # releases the GIL: eight cores' worth of work

    for _ in range(8):
        threading.Thread(target=burn, daemon=True).start()
    _sleep()
    return None


def busy_forks(scratch: str) -> object:
    for _ in range(50):
        _fork(_spin)
    _spin()
    return None


def setsid_grandchildren(scratch: str) -> object:
    for _ in range(4):
        _fork(_spin, new_session=True)
    _sleep()
    return None


def output_flood(scratch: str) -> object:
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)
    chunk = b"flood " * 10_000
    while True:
        os.write(1, chunk)
        os.write(2, chunk)


def touch_gib(scratch: str) -> object:
    ballast = bytearray(_GIB)
    ballast[::_PAGE] = b"\x01" * (_GIB // _PAGE)  # one write per page: all of it resident
    _spin()
    return len(ballast)


def vfork_wait(scratch: str) -> object:
    """``posix_spawn`` whose child blocks opening a FIFO: the caller waits in vfork."""
    fifo = os.path.join(scratch, f"fifo-{os.getpid()}")
    os.mkfifo(fifo)
    os.posix_spawn(
        "/bin/true",
        ["true"],
        {},
        file_actions=[(os.POSIX_SPAWN_OPEN, 5, fifo, os.O_RDONLY, 0)],
    )
    _sleep()
    return None


#: kind -> (table label, the hang). Order is the table's.
KINDS: dict[str, tuple[str, Callable[[str], object]]] = {
    "c_loop": ("C loop `sum(range(10**13))`", c_loop),
    "python_loop": ("Python loop", python_loop),
    "sleep": ("sleep", sleep),
    "lock": ("lock held by a thread", lock),
    "blocked_read": ("blocked read (pipe nobody writes)", blocked_read),
    "stopped_self": ("stopped self (SIGSTOP)", stopped_self),
    "signals_ignored": ("all catchable signals ignored and blocked", signals_ignored),
    "busy_threads": ("8 busy threads", busy_threads),
    "busy_forks": ("50 busy forks", busy_forks),
    "setsid_grandchildren": ("4 busy setsid grandchildren", setsid_grandchildren),
    "output_flood": ("output flood (1 MiB pipe)", output_flood),
    "touch_gib": ("1 GiB touched, then a loop", touch_gib),
    "vfork_wait": ("vfork wait: `posix_spawn` opening a FIFO (extra)", vfork_wait),
}


def score(kind: str, scratch: str) -> float:
    """Hang as ``kind`` says; ``"fast"`` is the innocent item that follows the hangs."""
    if kind == "fast":
        return 1.0
    _mark()
    KINDS[kind][1](scratch)
    return 0.0
