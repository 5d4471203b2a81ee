"""What the pool tests' items do: module level, so a zygote imports them by name, and the
standard library only, so that its fresh interpreter imports no pytest to serve them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pytest_rewardhang.guard._wire import DUMP_SIGNAL
from tests._procs import orphan_grandchildren


def score(log: str, item: str, action: str = "ok") -> str:
    """Log one line per call (to count how often each item ran), then act."""
    with open(log, "a") as f:
        f.write(f"{item} {os.getpid()}\n")
    if action == "hang":
        return str(sum(range(10**13)))
    if action == "swallow":
        while True:
            try:
                while True:
                    time.sleep(0.001)
            except BaseException:
                pass
    if action == "sleep":
        time.sleep(3600)
    if action == "slow":
        time.sleep(0.01)
    if action == "crash":
        os._exit(3)
    if action == "segv":
        ctypes.string_at(0)
    if action == "error":
        raise ValueError(f"malformed {item}")
    if action == "print":
        print(f"scoring {item}")
    return item.upper()


def chatty(mebibytes: int) -> str:
    line = "x" * 1023
    for _ in range(mebibytes * 1024):
        print(line)
    sys.stderr.write("done\n")
    return "scored"


def writes_to_fd_1(mebibytes: int, how: str) -> str:
    """Writes to fd 1 itself, as C code and subprocesses do: past the pipe, write() waits."""
    size = mebibytes << 20
    if how == "subprocess":
        write = f"import sys; sys.stdout.buffer.write(bytes({size}))"
        subprocess.run([sys.executable, "-c", write], check=True)
    else:
        view = memoryview(b"y" * size)
        while view:
            view = view[os.write(1, view) :]
    return "scored"


def captured_by_dup2(path: str) -> str:
    """Capture its own prints the way code scorers capture a program's: fd 1 onto a file."""
    saved = os.dup(1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.close(fd)
    try:
        print("into the file", flush=True)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    print("into the output")
    return Path(path).read_text()


def one(*_: Any) -> int:
    return 1


def pid(*_: Any) -> int:
    return os.getpid()


def python_loop(*_: Any) -> int:
    total = 0
    for i in range(10**12):
        total = (total + i * 7) % 1_000_003
    return total


def spawn_and_hang(pidfile: str, hang: bool) -> int:
    """Leave two setsid()'d grandchildren running below the worker, then hang or return."""
    orphans = orphan_grandchildren(2, pidfile)
    if hang:
        time.sleep(3600)
    return len(orphans)


def undo_the_dump_and_hang(*_: Any) -> None:
    """Reset the stack-dump signal to its default action (terminate), as a scorer that resets
    every signal might, then hang: the dump sent just before the deadline kills it."""
    signal.signal(DUMP_SIGNAL, signal.SIG_DFL)
    while True:
        pass


def size(value: Any) -> int:
    return len(value)


def lock(*_: Any) -> object:
    return threading.Lock()


def allocate(mb: int) -> int:
    return len(bytearray(mb * 1024 * 1024))


class Fraction(float):
    """A float subclass: it travels pickled, not as the bare float of a result frame."""


def a_float(kind: str, pidfile: str = "") -> Any:
    """A float result, as scorers mostly return one, in each way it may come back."""
    if kind == "print":
        print("scored half")
    if kind == "leak":
        orphan_grandchildren(1, pidfile)
    if kind == "nan":
        return float("nan")
    if kind == "inf":
        return float("-inf")
    if kind == "zero":
        return -0.0
    if kind == "subclass":
        return Fraction(0.25)
    if kind == "int":
        return 1
    return 0.5


def chdir_by(how: str, path: str) -> str:
    """Change directory through Python, or through C where no audit hook sees it."""
    if how == "c":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.chdir(path.encode()) != 0:
            raise OSError(ctypes.get_errno(), "chdir")
    elif how == "python":
        os.chdir(path)
    return os.getcwd()


def decoded_on() -> str:
    """Run where the caller builds the answer: the name of the thread it builds it on."""
    return threading.current_thread().name


class SaysWhereItIsDecoded:
    def __reduce__(self) -> tuple[Any, ...]:
        return (decoded_on, ())


def where_decoded(kind: str) -> Any:
    """An object that says which of the caller's threads built it (with ``objects=True``)."""
    return SaysWhereItIsDecoded()
