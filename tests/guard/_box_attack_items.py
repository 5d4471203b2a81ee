"""What the box attacks run inside guarded processes: hostile calls trying to reach past their
box. Standard library only, so a test pool's zygote imports no pytest to serve them."""

from __future__ import annotations

import array
import contextlib
import ctypes
import os
import select
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

#: Every folder a process of no group may write on a usual Linux (world-writable, sticky):
#: none is the call's own, and each outlives it.
SHARED_FOLDERS = ("/tmp", "/var/tmp", "/run/lock")  # noqa: S108 - the attack's point
#: Where two processes of two uids might meet at a socket's path.
MEETING_FOLDERS = (*SHARED_FOLDERS, "/dev/shm")  # noqa: S108 - the attack's point
_PR_SET_CHILD_SUBREAPER = 36


def leave(name: str, text: str) -> list[str]:
    """Leave ``text`` in a file ``name`` in every shared folder this process may write, for
    anyone to read; the paths left."""
    left = []
    for folder in SHARED_FOLDERS:
        path = os.path.join(folder, name)
        with contextlib.suppress(OSError):
            Path(path).write_text(text)
            os.chmod(path, 0o666)  # noqa: S103 - for the next item to read
            left.append(path)
    return left


def find(name: str) -> dict[str, str]:
    """What an earlier call left under ``name`` in the shared folders, by path."""
    found = {}
    for folder in SHARED_FOLDERS:
        with contextlib.suppress(OSError):
            found[folder] = Path(folder, name).read_text()
    return found


def identity() -> tuple[int, int]:
    """This process's pid and uid."""
    return os.getpid(), os.getuid()


# --- two items meeting through a socket in a shared folder, descriptors passed --------------


def hand_over_channel(name: str, wait_s: float) -> str:
    """Listen on a unix socket called ``name`` in every shared folder this process may bind
    one in (outside any network namespace), and hand the first caller this item's own
    descriptors: its result channel, output and stack pipes (SCM_RIGHTS); then wait, as a slow
    item, while the other uses them."""
    fds = [fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 0]
    servers = []
    for folder in MEETING_FOLDERS:
        path = os.path.join(folder, name)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(path)
            os.chmod(path, 0o777)  # noqa: S103 - for the other uid
            server.listen(1)
        except OSError:
            server.close()
            continue
        servers.append(server)
    try:
        ready, _, _ = select.select(servers, [], [], wait_s)
        if not ready:
            return "nobody came"
        conn, _ = ready[0].accept()
        with conn:
            fine = [fd for fd in fds if _open(fd)]
            socket.send_fds(conn, [b"%d" % len(fine)], fine)
            conn.recv(1)  # until the other is done with them
    finally:
        for server in servers:
            server.close()
    time.sleep(1.0)
    return "honest answer"


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def take_channel(name: str, wait_s: float) -> list[str]:
    """Connect to :func:`hand_over_channel`'s socket, wherever it is found; what descriptors
    came over (their targets): another item's, held here."""
    end = time.monotonic() + wait_s
    while True:
        found = [os.path.join(f, name) for f in MEETING_FOLDERS]
        found = [path for path in found if os.path.exists(path)]
        if found:
            break
        if time.monotonic() > end:
            return []
        time.sleep(0.01)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(found[0])
        _, fds, _, _ = socket.recv_fds(conn, 64, 16)
        got = [os.readlink(f"/proc/self/fd/{fd}") for fd in fds]
        for fd in fds:
            os.close(fd)
        conn.send(b"!")
    return got


# --- a process that outlives its call, waiting for its uid to come back ---------------------


def leave_a_watcher(wait_s: float) -> int:
    """Turn off this process's subreaper (``prctl``), double-fork, and leave a process that
    outlives the call: it waits (``wait_s`` at most) for another process of its own uid to
    appear, and sends it SIGKILL. This call's uid, which it returns."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    uid = os.getuid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the leaver
        try:
            os.setsid()
            if os.fork() == 0:
                _watch_for(uid, wait_s)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return uid


def _watch_for(uid: int, wait_s: float) -> None:  # pragma: no cover - leftover
    me = os.getpid()
    for fd in range(3):
        with contextlib.suppress(OSError):
            os.close(fd)
    end = time.monotonic() + wait_s
    # First the call that left it ends (it holds the uid too): then every process of the uid
    # that comes is someone else's.
    ours = set(_of_uid(uid, me))
    while ours and time.monotonic() < end:
        ours &= set(_of_uid(uid, me))
        time.sleep(0.005)
    while time.monotonic() < end:
        for pid in _of_uid(uid, me):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.002)


def _of_uid(uid: int, me: int) -> list[int]:  # pragma: no cover - leftover
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            with contextlib.suppress(OSError):
                if _uid_of(name) == uid:
                    found.append(int(name))
    return found


def _uid_of(pid: str) -> int:  # pragma: no cover - leftover
    """``pid``'s real uid (its ``/proc`` folder is root's once it changed uid: not dumpable)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return -1


def wait_and_answer(seconds: float) -> str:
    """An honest call that takes ``seconds``."""
    time.sleep(seconds)
    return "answered"


def channel_fds() -> array.array[int]:
    """This process's descriptors (a probe for the tests)."""
    return array.array("i", sorted(map(int, os.listdir("/proc/self/fd"))))


def wait_and_answer_uid(seconds: float) -> int:
    """Wait ``seconds`` (holding its uid meanwhile, as a slow call does); the uid it ran as."""
    time.sleep(seconds)
    return os.getuid()


def leave_or_find(what: str, name: str) -> object:
    """One pool serving both: ``("leave", name)``, ``("find", name)``."""
    return leave(name, "the expected output is 42") if what == "leave" else find(name)


def wait_for(release: str, wait_s: float) -> int:
    """Wait until ``release`` exists (``wait_s`` at most; a folder of the caller's that every
    uid may read, where none may write): one of many calls alive at once. Its uid."""
    end = time.monotonic() + wait_s
    while not os.path.exists(release) and time.monotonic() < end:
        time.sleep(0.05)
    return os.getuid()


def uid_reuse() -> dict[str, object]:
    """The whole attack, in a fresh caller (whose containment its environment chose): a call
    leaves a process that waits for its uid to come back (:func:`leave_a_watcher`); the calls
    after it go one after another until the one given that uid again, an honest call that
    takes a second. What each came to."""
    from pytest_rewardhang.guard import _confine, run

    out = run(leave_a_watcher, (120.0,), budget=30.0, unprivileged=True)
    came: dict[str, object] = {"leaver": out.value, "containment": out.containment.value}
    if out.value is None:
        return came
    slot = (out.value - _confine.UID_BASE) % _confine.UID_BLOCK
    before = out.value - slot + (slot - 1) % _confine.UID_BLOCK
    for _ in range(_confine.UID_BLOCK + 8):
        if run(os.getuid, budget=30.0, unprivileged=True).value == before:
            break
    victim = run(wait_and_answer_uid, (2.0,), budget=30.0, unprivileged=True)
    came.update(victim=victim.status.value, victim_uid=victim.value)
    time.sleep(0.2)
    left = _of_uid(out.value, os.getpid())
    came["left"] = left
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return came


_SYS_CLONE = {"x86_64": 56, "aarch64": 220}
_CLONE_PARENT = 0x00008000


def clone_parent(seconds: float) -> int:
    """Start a process as its parent's child, not this one's (``clone(CLONE_PARENT)``, a plain
    call any uid may make): outside the call's subtree from its first instruction. It waits
    ``seconds``, then exits. Its pid."""
    libc = ctypes.CDLL(None, use_errno=True)
    pid = libc.syscall(_SYS_CLONE[os.uname().machine], _CLONE_PARENT | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:  # pragma: no cover - the sibling
        try:
            time.sleep(seconds)
        finally:
            os._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone")
    return int(pid)


def clone_parent_scenario(unprivileged: bool, seconds: float) -> dict[str, object]:
    """In a fresh caller (whose containment its environment chose): one call that starts a
    sibling of its own process (:func:`clone_parent`, running ``seconds``), and what the
    caller has as children a moment after it returned (then killed and reaped here, so the
    test leaves nothing)."""
    from pytest_rewardhang.guard import run

    def kids() -> set[int]:
        found: set[int] = set()
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):
                found.update(map(int, Path(f"/proc/self/task/{tid}/children").read_text().split()))
        return found

    before = kids()
    out = run(clone_parent, (seconds,), budget=30.0, unprivileged=unprivileged)
    # Later calls sweep up what was killed and slow to exit (on a loaded machine, past the
    # call's own wait for it): a bound for that, not a latency.
    end = time.monotonic() + 10.0
    while True:
        run(os.getpid, budget=30.0)
        time.sleep(0.1)
        left = sorted(kids() - before)
        if not left or time.monotonic() > end:
            break
    states = {}
    for pid in left:
        with contextlib.suppress(OSError):
            states[pid] = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return {
        "status": out.status.value,
        "containment": out.containment.value,
        "sibling": out.value,
        "left": {str(pid): state for pid, state in states.items()},
    }


def meet(what: str, name: str, wait_s: float) -> object:
    """One pool serving both ends: ``("hand", name, wait_s)``, ``("take", name, wait_s)``."""
    return hand_over_channel(name, wait_s) if what == "hand" else take_channel(name, wait_s)


def forge_handed_time(slept_s: float) -> None:
    """An isolated item that takes ``slept_s`` then writes its own hand-over to its worker, as
    the worker's child writes it, and ends as the child ends after handing over: it scored
    1.0, it says, and (where the hand-over carries the call's time) took a nanosecond.
    Written on each of its pipes but its output, the hand-over pipe among them. The layout:
    ``=dqdQ?`` (the time, payload size -1 for a float carried in the header, the float,
    output dropped, dirty) where the guard reads a time from it, else ``=qdQ?``."""
    time.sleep(slept_s)
    from pytest_rewardhang.guard import _isolate

    layout = _isolate._HANDED
    claim = (1e-9, -1, 1.0, 0, False)
    count = len(layout.unpack(bytes(layout.size)))
    forged = layout.pack(*claim[len(claim) - count :])
    output = os.fstat(1).st_ino
    for fd in map(int, os.listdir("/proc/self/fd")):
        with contextlib.suppress(OSError):
            status = os.fstat(fd)
            if fd > 2 and stat.S_ISFIFO(status.st_mode) and status.st_ino != output:
                os.write(fd, forged)
    os._exit(0)


def segfault() -> None:
    """Die of SIGSEGV, as a program that reads address 0 does."""
    ctypes.string_at(0)


def core_scenario(kind: str, unprivileged: bool) -> dict[str, object]:
    """In a fresh caller whose core dumps are on (``ulimit -c unlimited``, as for a trainer
    debugging its C code) and whose working directory is its own: one call (``kind``: "run",
    "warm" or "isolated") dies of SIGSEGV. What it came to, and the files left in the working
    directory."""
    import resource

    from pytest_rewardhang.guard import Pool, run

    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    if kind == "run":
        out = run(segfault, budget=30.0, unprivileged=unprivileged)
    else:
        isolate = kind == "isolated"
        with Pool(
            segfault, workers=1, budget=30.0, isolate=isolate, unprivileged=unprivileged
        ) as pool:
            out = pool.map([()])[0]
    return {"status": out.status.value, "left": sorted(os.listdir("."))}


def clone_or_look(what: str, pid: int = 0) -> object:
    """One pool serving both: ``("clone",)`` starts a sibling that runs a minute
    (:func:`clone_parent`), its pid; ``("look", pid)``: whether that sibling still runs (not a
    zombie, not gone)."""
    if what == "clone":
        return clone_parent(60.0)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def run_with_secret(secret: str, seconds: float) -> int:
    """A scorer's usual way to run a program: a subprocess whose command line carries the
    test's input (here ``secret``), for ``seconds``. (``/bin/sh``: an unprivileged item may
    not reach an interpreter installed in root's home.)"""
    command = ["/bin/sh", "-c", f"sleep {seconds}", secret]
    return subprocess.run(command, check=False, timeout=seconds + 30).returncode


def spy_for(marker: str, wait_s: float) -> list[str]:
    """Look through every process's command line (``/proc/PID/cmdline``, readable by all)
    for ``marker``, for ``wait_s`` at most: what another item's program was given."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    words = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                    found = [w.decode() for w in words if marker.encode() in w]
                    if found:
                        return found
        time.sleep(0.01)
    return []


def spy_or_run(what: str, text: str, seconds: float) -> object:
    """One pool serving both: ``("run", secret, s)``, ``("spy", marker, s)``."""
    return run_with_secret(text, seconds) if what == "run" else spy_for(text, seconds)


def plant_links(target_file: str, target_folder: str) -> list[str]:
    """Leave, in this item's temporary folders (which its root worker empties after it),
    symbolic links to a caller's file and folder, at the top and inside a folder of its own:
    a cleanup that followed one would remove the caller's. What it planted."""
    planted = []
    for folder in (os.environ["TMPDIR"], "/dev/shm"):  # noqa: S108 - its own tmpfs
        inner = os.path.join(folder, "inner")
        with contextlib.suppress(FileExistsError):
            os.mkdir(inner)
        for where in (folder, inner):
            for name, target in (("file", target_file), ("folder", target_folder)):
                link = os.path.join(where, f"link-{name}")
                os.symlink(target, link)
                planted.append(link)
    return planted


def try_to_reach(pids: list[int]) -> dict[str, str]:
    """Each way to reach another process's descriptors: its fd folder, ``pidfd_getfd`` of its
    descriptors 0 to 9; and to write a ``/proc/sys`` setting and a cgroup's files. What each
    came to: "done" or the error's name."""
    came: dict[str, str] = {}
    libc = ctypes.CDLL(None, use_errno=True)
    for pid in pids:
        try:
            os.listdir(f"/proc/{pid}/fd")
            came[f"{pid} fd folder"] = "done"
        except OSError as exc:
            came[f"{pid} fd folder"] = type(exc).__name__
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as exc:
            came[f"{pid} pidfd"] = type(exc).__name__
            continue
        try:
            got = [libc.syscall(438, pidfd, fd, 0) for fd in range(10)]  # pidfd_getfd
            came[f"{pid} pidfd_getfd"] = "done" if any(fd >= 0 for fd in got) else "refused"
        finally:
            os.close(pidfd)
    came["user namespace"] = _as_root_of_own_namespace(pids)
    for path in ("/proc/sys/kernel/pid_max", "/proc/sys/vm/overcommit_memory"):
        try:
            Path(path).write_text(Path(path).read_text())
            came[path] = "done"
        except OSError as exc:
            came[path] = type(exc).__name__
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            group = "/sys/fs/cgroup/unified" + line[3:]
            if not os.path.isdir(group):
                group = "/sys/fs/cgroup" + line[3:]
            for name in ("cgroup.procs", "pids.max", "memory.max", "cgroup.kill"):
                try:
                    Path(group, name).write_text("max\n" if name.endswith("max") else "1\n")
                    came[name] = "done"
                except OSError as exc:
                    came[name] = type(exc).__name__
    return came


def _as_root_of_own_namespace(pids: list[int]) -> str:
    """In a child: a user namespace of its own, in which it is root (uid 0 mapped to its
    uid), every capability there; then signal each of ``pids`` (SIGSTOP) and read their fd
    folders. "done" if any of it worked, else how the namespace came to be or failed."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid = os.getuid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            # Its /proc files its own again (a uid change left them root's), to map its uid.
            libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
            if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
                code = 2
            else:
                Path("/proc/self/setgroups").write_text("deny")
                Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
                code = 1
                for target in pids:
                    with contextlib.suppress(OSError):
                        os.kill(target, signal.SIGSTOP)
                        code = 0
                    with contextlib.suppress(OSError):
                        os.listdir(f"/proc/{target}/fd")
                        code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return {0: "done", 1: "refused", 2: "no namespace"}.get(
        os.waitstatus_to_exitcode(status), "failed"
    )


def links_or_reach(what: str, *args: object) -> object:
    """One pool serving both: ``("plant", file, folder)``, ``("reach", pids)``."""
    if what == "plant":
        return plant_links(str(args[0]), str(args[1]))
    return try_to_reach(list(args[0]))  # type: ignore[call-overload]
