"""Process bookkeeping the benchmarks share: dying with the benchmark, naming, finding, killing,
a bare forked call (the reference a guard is measured against), and the machine line under
each table.

Benchmarks run real hangs; these make sure none of them outlives the benchmark, and let a
benchmark count what a guarded call left behind by a tag in the processes' environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import pickle
import platform
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (a worker killed from outside takes it along)."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def set_name(name: str) -> None:
    """The name ``/proc/PID/stat`` shows, so a benchmark can tell its hangs from the rest."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_NAME, name.encode(), 0, 0, 0)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    comm: str
    #: The kernel's ``PF_*`` flags (``PF_EXITING``: in ``do_exit()``).
    flags: int


def stat(pid: int) -> Proc | None:
    """What ``/proc/PID/stat`` says of ``pid`` now; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    close = text.rindex(b")")
    fields = text[close + 2 :].split()
    comm = text[text.index(b"(") + 1 : close].decode("utf-8", "replace")
    return Proc(pid, int(fields[1]), fields[0].decode(), comm, int(fields[6]))


def processes() -> list[Proc]:
    found = (stat(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return [p for p in found if p is not None]


def _has(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read()
    except OSError:
        return False


def tagged(var: str, tag: str) -> tuple[list[Proc], list[Proc]]:
    """``(live, zombies)``: live processes with ``var=tag`` in their environment, and zombies
    whose parent has it or is this process (a zombie's environment can no longer be read)."""
    marker = f"{var}={tag}".encode()
    procs = processes()
    live = [p for p in procs if p.state not in ("Z", "X") and _has(p.pid, marker)]
    parents = {p.pid for p in live} | {os.getpid()}
    zombies = [p for p in procs if p.state == "Z" and p.ppid in parents]
    return live, zombies


def kill_tagged(var: str, tag: str, victim: Callable[[Proc], bool] = lambda p: True) -> None:
    """SIGKILL the live processes tagged ``var=tag`` that ``victim`` picks; bounded at 5 s."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        victims = [p for p in tagged(var, tag)[0] if victim(p)]
        if not victims:
            return
        for p in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        time.sleep(0.02)


def machine() -> str:
    """The line a benchmark prints under its table: what the figures were measured on."""
    with open("/proc/meminfo") as f:
        total_kib = int(f.readline().split()[1])
    return (
        f"Python {platform.python_version()}, Linux {platform.release()}, {os.cpu_count()} CPUs, "
        f"{total_kib / (1 << 20):.0f} GiB RAM"
    )


def forked(fn: Callable[..., Any], args: tuple[Any, ...], poll_s: float | None = None) -> Any:
    """The least that runs a call in a process of its own and brings its value back: a fork,
    a pipe, ``waitpid``. ``poll_s``: find its end by polling its status that often instead (a
    fork per call polled at 50 ms is NeMo Gym's way)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, pickle.dumps(fn(*args)))
        finally:
            os._exit(0)
    os.close(write)
    if poll_s is not None:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            time.sleep(poll_s)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    if poll_s is None:
        os.waitpid(pid, 0)
    return pickle.loads(data)
