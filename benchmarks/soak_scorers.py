"""The soak benchmark's scorer, in its own module so the pool's zygote imports it.

``score(index, kind)`` answers for item ``index``: an ``"ok"`` item returns its index, an
``"error"`` item raises with its index in the message, and every other kind first writes
``item <index>`` to stdout, so each :class:`Outcome` can be traced back to the item it answers.
A C hang lowers its RLIMIT_CPU first and an orphan sleeps for a bounded time, so nothing the
benchmark starts outlives it for long even if the guard misses it.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import time

# Loaded by file path in the pool's zygote, a fresh interpreter: find _procs beside us.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _procs import set_name

#: The process name of the setsid children the ``"setsid"`` items leave behind.
ORPHAN_NAME = "soak-orphan"
ORPHAN_SLEEP_S = 60.0
HANG_CPU_S = 20
BOMB_BYTES = 1 << 30

#: kind -> the status its outcome must have (``setsid`` items return, leaving a child behind).
EXPECTED = {
    "ok": "ok",
    "c_hang": "timeout",
    "exit": "crashed",
    "segfault": "crashed",
    "memory": "memory",
    "setsid": "ok",
    "error": "error",
}
EXIT_CODE = 7


def _orphan() -> None:
    set_name(ORPHAN_NAME)
    os.setsid()
    time.sleep(ORPHAN_SLEEP_S)


def score(index: int, kind: str) -> int:
    if kind == "ok":
        return index
    if kind == "error":
        raise ValueError(f"item {index} fails on purpose")
    sys.stdout.write(f"item {index}\n")
    sys.stdout.flush()
    if kind == "c_hang":
        # Relative to what this warm worker has used on earlier items.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        limit = int(usage.ru_utime + usage.ru_stime) + HANG_CPU_S
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
        return sum(range(10**13))
    if kind == "exit":
        os._exit(EXIT_CODE)
    if kind == "segfault":
        ctypes.string_at(0)
    if kind == "memory":
        bomb = b"\x01" * BOMB_BYTES
        return len(bomb)
    if kind == "setsid":
        if os.fork() == 0:
            try:
                _orphan()
            finally:
                os._exit(0)
        return index
    raise ValueError(f"unknown kind {kind!r}")
