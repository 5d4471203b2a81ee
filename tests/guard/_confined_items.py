"""What the pool confinement tests' items do: module level, so a zygote imports them by name,
and the standard library only, so that its fresh interpreter imports no pytest to serve them.
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from typing import Any

MIB = 1 << 20


def quick(i: int) -> int:
    return i


def dies() -> None:
    os._exit(3)


def forks(count: int, pidfile: str) -> tuple[int, bool]:
    """Fork up to ``count`` children that sleep, until a fork fails; how many were made and
    whether one failed. The children are left running (their pids in ``pidfile``)."""
    made = 0
    try:
        for _ in range(count):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            made += 1
            with open(pidfile, "a") as f:
                f.write(f"{pid}\n")
    except OSError:
        return made, True
    return made, False


def fork_bomb() -> None:
    """Fork for ever, every process."""
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.001)


def children_holding(
    each_mib: int, count: int, pidfile: str | None = None, hold_s: float = 60.0
) -> int:
    """Fork ``count`` children, each holding ``each_mib`` MiB for ``hold_s``, and wait for
    them; their pids go to ``pidfile``, if given."""
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            hoard = bytearray(each_mib * MIB)
            hoard[:: resource.getpagesize()] = b"x" * len(hoard[:: resource.getpagesize()])
            time.sleep(hold_s)
            os._exit(0)
        pids.append(pid)
        if pidfile is not None:
            with open(pidfile, "a") as f:
                f.write(f"{pid}\n")
    for pid in pids:
        os.waitpid(pid, 0)
    return count


def litter(name: str) -> dict[str, Any]:
    """Leave a file in /dev/shm, and files and folders in the temporary folder."""
    folder = tempfile.gettempdir()
    found = sorted(os.listdir(folder))
    with open(os.path.join("/dev/shm", name), "wb") as f:  # noqa: S108 - what is tested
        f.write(b"x" * MIB)
    os.makedirs(os.path.join(folder, "deep", "er"))
    with open(os.path.join(folder, "deep", "er", "left"), "w") as f:
        f.write("left behind")
    with open(os.path.join(folder, "left"), "w") as f:
        f.write("left behind")
    return {"tmpdir": folder, "env": os.environ.get("TMPDIR"), "found": found}


def look(name: str) -> dict[str, Any]:
    """What an item finds of what :func:`litter` left."""
    folder = tempfile.gettempdir()
    return {
        "tmpdir": folder,
        "found": sorted(os.listdir(folder)),
        "shm": os.path.exists(os.path.join("/dev/shm", name)),  # noqa: S108
    }


def act_on(pids: list[int]) -> dict[str, str]:
    """Try, harmlessly, what a hostile root item does to the caller and the zygote (``pids``):
    whether it may signal them (signal 0: the permission a SIGSTOP needs), read their limits
    (``prlimit``'s permission is the one to set them), write their ``oom_score_adj`` (with the
    value it has)."""
    came: dict[str, str] = {"uid": str(os.geteuid())}
    for n, pid in enumerate(pids):
        for name in ("signal", "prlimit", "oom_score_adj"):
            try:
                _act(name, pid)
                came[f"{name} {n}"] = "done"
            except OSError as exc:
                came[f"{name} {n}"] = type(exc).__name__
    return came


def _act(name: str, pid: int) -> None:
    if name == "signal":
        os.kill(pid, 0)
    elif name == "prlimit":
        resource.prlimit(pid, resource.RLIMIT_NOFILE)
    else:
        with open(f"/proc/{pid}/oom_score_adj") as f:
            value = f.read()
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write(value)


def where() -> tuple[int, str, str]:
    """Who the item runs as, where, and its temporary folder."""
    return os.getuid(), os.getcwd(), tempfile.gettempdir()


def item(kind: str, *args: Any) -> Any:
    """The item ``kind`` (one of this module's functions) on ``args``: one scorer per pool."""
    return globals()[kind](*args)
