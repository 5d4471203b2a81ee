from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._lazy import SOURCE

pytest_plugins = ["pytester"]


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


def join_a_lingering_thread(linger_s: float) -> None:
    """Start a thread and join it, leaving it in the kernel's count of this process's threads
    for ``linger_s`` more seconds, as a thread does while it exits on a busy machine.

    The thread sets a thread-specific key whose destructor is libc's ``usleep``: glibc runs it,
    with the value set, as the thread exits, after Python's ``join`` has returned.
    """
    global _linger_key
    libc = ctypes.CDLL(None)
    if _linger_key is None:
        key = ctypes.c_uint()
        destructor = ctypes.cast(libc.usleep, ctypes.c_void_p)
        assert libc.pthread_key_create(ctypes.byref(key), destructor) == 0
        _linger_key = key

    def lingering() -> None:
        libc.pthread_setspecific(_linger_key, ctypes.c_void_p(int(linger_s * 1e6)))

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
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        status = Path(f"/proc/{pid}/status").read_text()
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


def kill_everything_below(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc`` and every descendant (setsid ones too: found before the kill)."""
    found, frontier = [proc.pid], [proc.pid]
    while frontier:
        with contextlib.suppress(OSError):
            for pid in children(frontier.pop()):
                found.append(pid)
                frontier.append(pid)
    for signum in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: nothing forks meanwhile
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
    proc.communicate()


def sigint_storm(args: list[str], stop: Path, timeout: float) -> tuple[int, str, str]:
    """Run ``python -c`` ``args``, a caller that prints "ready" and then calls the guard in a
    loop until ``stop`` exists; send it SIGINT every millisecond for 3 s, then create ``stop``.
    Its exit code, stdout and stderr; it and all below it are killed if it does not end."""
    proc = subprocess.Popen(
        [sys.executable, "-c", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        end = time.monotonic() + 3
        while time.monotonic() < end:
            os.kill(proc.pid, signal.SIGINT)
            time.sleep(0.001)
        stop.touch()
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            kill_everything_below(proc)
    return proc.returncode, out, err


@pytest.fixture(scope="session", autouse=True)
def private_tempdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A temp dir of the suite's own, so the leak check never sees other programs' files."""
    path = str(tmp_path_factory.mktemp("tempdir"))
    # Ray puts its sockets under its temp dir, and an AF_UNIX path holds 107 bytes at most:
    # under pytest's (with xdist's popen-gw1/, or once pytest-of-root/pytest-1000/ is reached)
    # Ray could not start. A short one of its own, removed at the end.
    ray = tempfile.mkdtemp(prefix="rh-ray-")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tempfile, "tempdir", path)
            patch.setenv("TMPDIR", path)
            patch.setenv("RAY_TMPDIR", ray)
            yield
    finally:
        shutil.rmtree(ray, ignore_errors=True)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, its runs without Hypothesis's pytest plugin: loading it imports all of
    Hypothesis, most of a second at every start of a run, and no run here has a Hypothesis test
    (the check's search imports Hypothesis itself, when it is asked for)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    return pytester


@pytest.fixture
def lazy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The name of a module nobody has imported, which records the pid that imported it (see
    tests/_lazy.py)."""
    name = f"lazy_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fails the test if it leaves a child process, an open descriptor or a temp file."""
    fds = set(os.listdir("/proc/self/fd"))
    kids = children()
    temps = set(os.listdir(tempfile.gettempdir()))
    yield
    assert children() - kids == set(), "child processes left behind"
    # listdir's own descriptor shows up in both listings, so the sets compare like for like.
    assert set(os.listdir("/proc/self/fd")) == fds, "descriptors left open"
    assert set(os.listdir(tempfile.gettempdir())) - temps == set(), "temp files left behind"


#: The optional dependency groups that tests mark with ``needs_extra(name)``, and the module
#: whose presence shows the group is installed.
_EXTRA_MODULES = {"ray": ("ray",), "bench": ("sympy", "numpy")}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs_extra("ray")`` skips, saying how to install the group, where it is
    missing; where ``REWARDHANG_REQUIRE_EXTRAS`` names the group (CI does), it fails instead."""
    for marker in item.iter_markers("needs_extra"):
        (name,) = marker.args
        if all(importlib.util.find_spec(module) for module in _EXTRA_MODULES[name]):
            continue
        required = os.environ.get("REWARDHANG_REQUIRE_EXTRAS", "").split(",")
        text = f"needs the {name!r} extra: pip install -e '.[{name}]'"
        if name in required:
            pytest.fail(f"{text} (REWARDHANG_REQUIRE_EXTRAS={','.join(required)})")
        pytest.skip(text)
