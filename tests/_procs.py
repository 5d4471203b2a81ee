"""Reading and waiting on processes through ``/proc``: the standard library only, so that a
scorer module a test's pool imports by name (its zygote a fresh interpreter) can use them without
importing pytest. ``tests/conftest.py`` re-exports them for the tests.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def children(pid: int | str = "self") -> set[int]:
    found: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.update(int(p) for p in f.read().split())
        except FileNotFoundError:  # a thread that ended since the listing
            continue
    return found


_linger_key: ctypes.c_uint | None = None
#: libc, with the functions join_a_lingering_thread calls looked up at import, as a scorer's
#: library does: a pool's warm worker retires after an item that loads a C library or looks a
#: function up in one.
LIBC = ctypes.CDLL(None)
for _name in ("usleep", "pthread_key_create", "pthread_setspecific"):
    getattr(LIBC, _name)


def join_a_lingering_thread(linger_s: float) -> None:
    """Start a thread and join it, leaving it in the kernel's count of this process's threads
    for ``linger_s`` more seconds, as a thread does while it exits on a busy machine.

    The thread sets a thread-specific key whose destructor is libc's ``usleep``: glibc runs it,
    with the value set, as the thread exits, after Python's ``join`` has returned.
    """
    global _linger_key
    if _linger_key is None:
        key = ctypes.c_uint()
        destructor = ctypes.cast(LIBC.usleep, ctypes.c_void_p)
        assert LIBC.pthread_key_create(ctypes.byref(key), destructor) == 0
        _linger_key = key

    def lingering() -> None:
        LIBC.pthread_setspecific(_linger_key, ctypes.c_void_p(int(linger_s * 1e6)))

    thread = threading.Thread(target=lingering)
    thread.start()
    thread.join()


def pipes(exclude: frozenset[str] = frozenset()) -> dict[int, str]:
    """This process's descriptors that are pipes, by what they link to, less ``exclude``'s.

    A guarded call that writes on "every pipe" must spare the ones it inherited from the test
    (pytest's own terminal, when it is a pipe): pass ``exclude=frozenset(pipes().values())``
    taken in the caller.
    """
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if link.startswith("pipe:") and link not in exclude:
            found[int(name)] = link
    return found


def state(pid: int) -> str | None:
    """The process state letter (R, S, Z, ...), or None once the pid is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()[0].decode()


_PF_EXITING = 0x4
_SIGKILL_BIT = 1 << (9 - 1)


def dead_or_dying(pid: int) -> bool:
    """Gone, a zombie, exiting, or with SIGKILL pending: it will never run its own code again."""
    try:
        # Pending signals before flags, as a kill moves a process through them: a SIGKILL a
        # thread takes leaves its pending set before its flags say exiting.
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X") or int(fields[6]) & _PF_EXITING:
        return True
    pending = [
        int(line.split()[1], 16) for line in status.splitlines() if line[:6] in ("SigPnd", "ShdPnd")
    ]
    return any(mask & _SIGKILL_BIT for mask in pending)


def assert_dead(pids: list[int]) -> None:
    """Every pid is dead or dying now, and soon reaped, or a zombie in init's hands (not ours)."""
    assert pids, "the test's child reported no descendants, so it checked nothing"
    living = [pid for pid in pids if not dead_or_dying(pid)]
    # Looked at once more, soon: a process that has just taken its SIGKILL off its pending set
    # is briefly neither (nothing of the guard's runs after it returned, to kill one later).
    time.sleep(0.01)
    living = [pid for pid in living if not dead_or_dying(pid)]
    assert not living, f"still running after the call returned: {living}"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(reaped_or_inits(pid) for pid in pids):
        time.sleep(0.01)
    assert all(reaped_or_inits(pid) for pid in pids), "zombies left behind"


def reaped_or_inits(pid: int) -> bool:
    """Gone, or a zombie that init holds: init reaps the orphans it is given in its own time
    (here, up to a couple of seconds later); a zombie any other process holds is its leak."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    fields = stat[stat.rindex(b")") + 2 :].split()
    return fields[0] in (b"Z", b"X") and int(fields[1]) == 1


def orphan_grandchildren(count: int, pidfile: str) -> list[str]:
    """Leave ``count`` setsid()'d grandchildren sleeping, re-parented to us; their pids go to
    ``pidfile``."""
    for _ in range(count):
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(3600)
            os._exit(0)
        os.waitpid(child, 0)
    time.sleep(0.05)
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        orphans = f.read().split()
    Path(pidfile).write_text(" ".join(orphans))
    return orphans


#: The checkout: scripts run from it import ``tests`` and the package as the tests do.
CHECKOUT = Path(__file__).resolve().parents[1]


def python_c(script: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -c script args`` from the checkout, its output captured, bounded by ``timeout``:
    for an attack whose failure would kill or bloat the process that runs it."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=CHECKOUT,
    )
