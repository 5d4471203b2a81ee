"""Attacks on the cgroup containment, with real processes: what a hostile or sloppy scorer can
do to the cgroup it lives in, to the folder of groups around it, and to the keeper that cleans
up after a SIGKILLed caller.

Every test skips where cgroups are not this process's containment. The bounds are generous
(a hang must end, nothing must be left running, no folder must be left behind); none is a
latency claim. Every process a scorer starts reports its pid through a file, so the test can
check it, and kill it if the guard did not.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.guard import Containment, Pool, Status, _cgroup, _contain, run
from pytest_rewardhang.guard._state import STATE
from tests.conftest import children, sigint_storm, state
from tests.guard._bounds import GONE_WITHIN_S, HANG_S

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]

# ruff: noqa: S606, S607 - "sleep" from PATH, as a scorer would start it


@pytest.fixture(autouse=True)
def cgroups_only() -> None:
    if _contain.containment() is not Containment.CGROUP:
        pytest.skip("cgroups are not this process's containment (no cgroup v2 folder here)")


# --- helpers that run in the scorer ----------------------------------------------------------


def own_group() -> str:
    """The cgroup folder the calling process lives in (a scorer's: its call's group)."""
    mount, own = _cgroup._mount(), _cgroup._own()
    assert mount is not None
    assert own is not None
    return os.path.join(mount, own.lstrip("/"))


def record(path: str, *pids: int) -> None:
    with open(path, "a") as f:
        f.write(" ".join(map(str, pids)) + "\n")


def me() -> int:
    return int(os.readlink("/proc/self"))


def sleeper(group: str | None = None) -> int:
    """A ``sleep 60`` in a session of its own, moved into ``group`` if given; its pid."""
    pid = subprocess.Popen(["sleep", "60"], start_new_session=True).pid
    if group is not None:
        Path(group, "cgroup.procs").write_text(str(pid))
    return pid


def keepers(home: str) -> list[int]:
    """The keepers watching ``home`` (a bare interpreter whose last argument is the folder)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-I" in argv and b"-S" in argv and argv[-2:] == [home.encode(), b""]:
            found.append(int(name))
    return found


# --- helpers of the test ---------------------------------------------------------------------


def folders(path: str) -> list[str]:
    """Every folder below ``path``, however deep (by descriptor: no PATH_MAX)."""
    found = []
    with contextlib.suppress(OSError):
        for top, dirs, _, _ in os.fwalk(path):
            found += [os.path.join(top, d) for d in dirs]
    return found


def rmtree(path: str) -> None:
    """Remove a cgroup folder and all below it, however deep; retried while busy (bounded)."""
    deadline = time.monotonic() + 5
    while os.path.exists(path):
        with contextlib.suppress(OSError):
            for _, dirs, _, fd in os.fwalk(path, topdown=False):
                for name in dirs:
                    with contextlib.suppress(OSError):
                        os.rmdir(name, dir_fd=fd)
        with contextlib.suppress(OSError):
            os.rmdir(path)
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)


def gone(pid: int) -> bool:
    return state(pid) in (None, "Z", "X")


def await_pids(path: Path, count: int, proc: subprocess.Popen[bytes] | None = None) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        words = text.split()
        if len(words) >= count and text.endswith("\n"):
            return [int(word) for word in words]
        assert proc is None or proc.poll() is None, "the caller ended before the attack began"
        time.sleep(0.01)
    pytest.fail(f"fewer than {count} pids in {path} after 30 s")


def kill_all(pids: list[int]) -> None:
    """SIGKILL each (and continue it, if stopped); wait, bounded, until they have exited."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(gone(pid) for pid in pids):
        time.sleep(0.02)


def assert_gone(pids: list[int], within: float = GONE_WITHIN_S) -> None:
    """Every pid is dead within ``within``; whatever is not is killed, then the test fails."""
    assert pids, "nothing was reported, so nothing was checked"
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and not all(gone(pid) for pid in pids):
        time.sleep(0.02)
    alive = {pid: state(pid) for pid in pids if not gone(pid)}
    kill_all(list(alive))
    assert not alive, f"still running {within:g} s after the call ended: {alive}"


def reused(path: str) -> bool:
    """Whether the pid a dead process's folder of groups is named by runs again: the folder
    may now be another process's (pids wrap at 32768 here), so it is left alone."""
    name = os.path.basename(path)
    pid = name.removeprefix(_cgroup.PREFIX).partition("-")[0]
    return name.startswith(_cgroup.PREFIX) and os.path.exists(f"/proc/{pid}")


def assert_removed(path: str, within: float = GONE_WITHIN_S) -> None:
    """The folder of groups of a process that ended is gone within ``within``; else it is
    removed here, and the test fails (unless its pid runs again: then it is not ours)."""
    deadline = time.monotonic() + within
    while os.path.exists(path) and not reused(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    if reused(path):
        return
    left = folders(path) if os.path.exists(path) else []
    exists = os.path.exists(path)
    rmtree(path)
    assert not exists, f"{path} still there {within:g} s on, {len(left)} folders below it"


def fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def home() -> Iterator[str]:
    """This process's folder of groups; what a test left below it is removed after it.

    The test checks, with :func:`assert_no_groups`, that nothing is left once a later call
    has swept: a group still being torn down when its call ended is removed by a later call.
    """
    path = _cgroup.home()
    assert path
    yield path
    for folder in [os.path.join(path, name) for name in os.listdir(path)]:
        if os.path.isdir(folder):
            rmtree(folder)
    STATE.cgroups_pending.clear()


def assert_no_groups(home: str) -> None:
    """No group is left below ``home`` once calls that sweep have run (bounded)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while True:
        run(int, budget=10)  # sweeps what a killed call left exiting
        left = folders(home)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"{len(left)} folders left below {home}, e.g. {left[:3]}"


def timed(fn: Callable[..., Any], *args: Any, budget: float) -> tuple[Any, float]:
    start = time.monotonic()
    out = run(fn, args, budget=budget)
    return out, time.monotonic() - start


# --- 1. what a scorer does to its own group ---------------------------------------------------


def sub_cgroups_with_sleepers(path: str, count: int, hang: bool) -> int:
    """Make ``count`` sub-cgroups, one nested in the other for the last, a sleeper in each."""
    group = own_group()
    for i in range(count):
        sub = os.path.join(group, f"sub{i}")
        os.mkdir(sub)
        record(path, sleeper(sub))
    nested = os.path.join(group, "sub0", "a", "b")
    os.makedirs(nested)
    record(path, sleeper(nested))
    if hang:
        time.sleep(60)
    return count + 1


@pytest.mark.parametrize("hang", [False, True], ids=["returns", "hangs"])
def test_sub_cgroups_with_a_sleeper_each_are_killed_counted_and_removed(
    tmp_path: Path, home: str, hang: bool
) -> None:
    path = tmp_path / "pids"
    out, took = timed(sub_cgroups_with_sleepers, str(path), 20, hang, budget=3 if hang else 20)
    pids = await_pids(path, 21)
    assert took < (3 if hang else 20) + HANG_S, out.describe()
    assert out.status is (Status.TIMEOUT if hang else Status.OK), out.describe()
    assert_gone(pids, within=0.5)  # dead or dying when run() returned, gone soon after
    assert out.leaked == 21, out.describe()
    assert_no_groups(home)


def freeze_own_group_and_hang() -> None:
    Path(own_group(), "cgroup.freeze").write_text("1")
    time.sleep(60)


def test_a_scorer_that_freezes_its_own_group_times_out(home: str) -> None:
    before = fds()
    out, took = timed(freeze_own_group_and_hang, budget=1)
    assert out.status is Status.TIMEOUT, out.describe()
    assert took < 1 + HANG_S
    assert fds() == before
    assert_no_groups(home)


def freeze_later_from_a_grandchild(path: str) -> str:
    """Return at once; a setsid grandchild freezes the group a moment later, itself in it."""
    group = own_group()
    script = f"echo $$ >> {path}; sleep 0.2; echo 1 > {group}/cgroup.freeze; sleep 60"
    subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    return "returned"


def test_a_group_frozen_after_the_scorer_returned_is_still_killed(
    tmp_path: Path, home: str
) -> None:
    path = tmp_path / "pids"
    out = run(freeze_later_from_a_grandchild, (str(path),), budget=20)
    assert out.value == "returned", out.describe()
    assert out.leaked >= 1
    assert_gone(await_pids(path, 1))
    assert_no_groups(home)


def freeze_a_sub_cgroup(path: str) -> str:
    """Move a sleeper into a sub-cgroup, freeze that, and return."""
    sub = os.path.join(own_group(), "frozen")
    os.mkdir(sub)
    record(path, sleeper(sub))
    Path(sub, "cgroup.freeze").write_text("1")
    return "returned"


def test_a_frozen_sub_cgroup_is_killed_counted_and_removed(tmp_path: Path, home: str) -> None:
    path = tmp_path / "pids"
    out = run(freeze_a_sub_cgroup, (str(path),), budget=20)
    assert out.value == "returned", out.describe()
    assert out.leaked == 1, out.describe()
    assert_gone(await_pids(path, 1))
    assert_no_groups(home)


def kill_own_group(path: str) -> None:
    record(path, sleeper(), sleeper())
    Path(own_group(), "cgroup.kill").write_text("1")
    time.sleep(60)


def test_a_scorer_that_kills_its_own_group_is_a_crash_and_leaves_nothing(
    tmp_path: Path, home: str
) -> None:
    path = tmp_path / "pids"
    out = run(kill_own_group, (str(path),), budget=20)
    assert out.status is Status.CRASHED, out.describe()
    assert out.signal == signal.SIGKILL
    assert_gone(await_pids(path, 2))
    assert_no_groups(home)


def deep_sub_cgroups(path: str, hang: bool) -> int:
    """A chain of sub-cgroups as deep as it is let (made relative to each other, as mkdir -p
    in a loop of cd would, aiming past PATH_MAX), a sleeper at the bottom; how deep it got."""
    os.chdir(own_group())
    depth = 0
    with contextlib.suppress(OSError):  # the kernel refuses past the group's cgroup.max.depth
        for _ in range(20):  # 20 x 251 bytes: past the 4096 a path may have
            os.mkdir("d" * 250)
            os.chdir("d" * 250)
            depth += 1
    pid = subprocess.Popen(["sleep", "60"], start_new_session=True).pid
    Path("cgroup.procs").write_text(str(pid))
    record(path, pid)
    os.chdir("/")
    if hang:
        time.sleep(60)
    return depth


@pytest.mark.parametrize("hang", [False, True], ids=["returns", "hangs"])
def test_sub_cgroups_as_deep_as_a_call_may_go_are_counted_and_removed(
    tmp_path: Path, home: str, hang: bool
) -> None:
    """The guard walks its groups: a chain past PATH_MAX would hide a sleeper from the count
    and its folders from removal (the keeper's too). The group's depth is capped instead."""
    path = tmp_path / "pids"
    out = run(deep_sub_cgroups, (str(path), hang), budget=3 if hang else 20)
    assert out.status is (Status.TIMEOUT if hang else Status.OK), out.describe()
    if not hang:
        assert 1 <= out.value <= int(_cgroup._MAX_DEPTH), out.value
    assert_gone(await_pids(path, 1))
    assert out.leaked == 1, out.describe()
    assert_no_groups(home)


def flood_of_sub_cgroups(limit: int) -> None:
    """Make sub-cgroups as fast as it can, until ``limit`` or the kernel refuses, then hang."""
    group = own_group()
    with contextlib.suppress(OSError):  # refused past the group's cgroup.max.descendants
        for i in range(limit):
            os.mkdir(os.path.join(group, str(i)))
    time.sleep(60)


def test_a_flood_of_sub_cgroups_does_not_hold_the_caller_past_its_budget(home: str) -> None:
    """A kill that walked 200,000 sub-cgroups (reading each cgroup.procs) before it wrote
    cgroup.kill, while the flood went on, and removed each without looking at the clock came
    back 25-37 s past a 1 s budget. The group's descendants are capped instead."""
    out, took = timed(flood_of_sub_cgroups, 200_000, budget=1)
    assert out.status is Status.TIMEOUT, out.describe()
    assert took < 1 + HANG_S, f"run() with a 1 s budget came back after {took:.1f} s"
    assert_no_groups(home)


def fork_storm(path: str, depth: int) -> None:
    """A binary tree of forks, each recording itself; the leaves fork and reap in a loop, so
    forks are in flight when the kill comes."""
    for _ in range(depth):
        if os.fork() == 0:
            os.setsid()
            continue
        if os.fork() == 0:
            continue
        break
    record(path, me())
    if depth:
        while True:
            child = os.fork()
            if child == 0:
                os._exit(0)
            os.waitpid(child, 0)


@pytest.mark.slow  # a storm or a race, repeated: seconds of real processes
def test_a_fork_storm_racing_the_kill_leaves_nothing(tmp_path: Path, home: str) -> None:
    path = tmp_path / "pids"
    out, took = timed(fork_storm, str(path), 7, budget=2)
    assert out.status is Status.TIMEOUT, out.describe()
    assert took < 2 + HANG_S
    pids = [int(word) for word in path.read_text().split()]
    assert len(pids) > 10, "the storm hardly started"
    assert_gone(pids)
    assert out.leaked > 0, out.describe()  # exactly: see the next test
    assert_no_groups(home)


def spawn_sleepers_until_killed(path: str, spawners: int) -> None:
    """``spawners`` processes, each forking a ``sleep`` every few milliseconds (recording
    its pid) until it is killed: processes are being born all through the kill."""
    for _ in range(spawners - 1):
        if os.fork() == 0:
            break
    for _ in range(400):
        child = os.fork()
        if child == 0:  # pragma: no cover - becomes the sleep
            try:
                os.execvp("sleep", ["sleep", "60"])
            finally:
                os._exit(70)
        record(path, child)
        time.sleep(0.005)
    time.sleep(60)


def test_processes_born_while_the_kill_counts_are_killed_and_counted(
    tmp_path: Path, home: str
) -> None:
    """BUG (count): Group.kill lists and counts the group's members (reading /proc for each,
    demoting each) and only then writes cgroup.kill; the group goes on forking meanwhile, and
    what is born in that window is killed but never counted in Outcome.leaked."""
    path = tmp_path / "pids"
    out, took = timed(spawn_sleepers_until_killed, str(path), 8, budget=2)
    assert out.status is Status.TIMEOUT, out.describe()
    assert took < 2 + HANG_S
    pids = [int(word) for word in path.read_text().split()]
    assert len(pids) > 50, "the spawners hardly started"
    assert_gone(pids)
    # Every recorded sleep was alive when the kill came (none exits by itself), as were the
    # seven other spawners: all are what the call left running.
    assert out.leaked >= len(pids) + 7, f"{out.leaked} counted of {len(pids) + 7} killed"
    assert_no_groups(home)


def clobber_every_descriptor(path: str) -> None:
    """dup2 /dev/null over every descriptor above stdio (the group's cgroup.procs, the result
    pipe...), then start a setsid sleeper and hang."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in range(3, 1024):
        if fd != null:
            with contextlib.suppress(OSError):
                os.dup2(null, fd)
    record(path, sleeper())
    time.sleep(60)


def test_a_scorer_that_clobbers_its_descriptors_is_still_contained(
    tmp_path: Path, home: str
) -> None:
    path = tmp_path / "pids"
    before = fds()
    out, took = timed(clobber_every_descriptor, str(path), budget=1)
    assert out.status is Status.TIMEOUT, out.describe()
    assert took < 1 + HANG_S
    assert_gone(await_pids(path, 1), within=0.5)
    assert fds() == before
    assert_no_groups(home)


# --- 2. many calls, nested calls, concurrent calls ---------------------------------------------


_LEFT_OPEN: list[Pool] = []


def nested_pool_left_open(path: str) -> str:
    """Start a Pool inside the call whose item starts a sleeper and hangs; never close it."""
    pool = Pool(hang_with_a_sleeper_in_a_sub_cgroup, budget=60, workers=1)
    _LEFT_OPEN.append(pool)  # never closed, never collected: the call just returns
    pool.submit(path)
    deadline = time.monotonic() + 30
    while len(Path(path).read_text().split() if Path(path).exists() else []) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return "returned"


def hang_with_a_sleeper_in_a_sub_cgroup(path: str) -> None:
    sub = os.path.join(own_group(), "mine")
    os.mkdir(sub)
    record(path, me(), sleeper(sub))
    time.sleep(60)


def test_a_pool_left_open_inside_a_call_dies_with_it(tmp_path: Path, home: str) -> None:
    path = tmp_path / "pids"
    out = run(nested_pool_left_open, (str(path),), budget=60)
    assert out.value == "returned", out.describe()
    assert out.leaked >= 3, out.describe()  # the zygote, the worker, the sleeper
    assert_gone(await_pids(path, 2))
    assert_no_groups(home)


def nested_run_with_sub_cgroups(path: str) -> tuple[Any, int]:
    got = run(sub_cgroups_with_sleepers, (path, 3, True), budget=1)
    return got.status.value, got.leaked


def test_a_nested_run_kills_counts_and_removes_its_sub_cgroups(tmp_path: Path, home: str) -> None:
    path = tmp_path / "pids"
    out = run(nested_run_with_sub_cgroups, (str(path),), budget=30)
    assert out.value == ("timeout", 4), out.describe()
    assert out.leaked == 0, out.describe()
    assert_gone(await_pids(path, 4))
    assert_no_groups(home)


def test_sixteen_threads_of_attacks_leave_nothing(tmp_path: Path, home: str) -> None:
    before = fds()
    outs: dict[int, Any] = {}

    def one(i: int) -> None:
        if i % 2:
            outs[i] = run(sub_cgroups_with_sleepers, (str(tmp_path / f"{i}"), 2, True), budget=2)
        else:
            outs[i] = run(sub_cgroups_with_sleepers, (str(tmp_path / f"{i}"), 2, False), budget=30)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a run() never came back"
    pids = []
    for i in range(16):
        pids += await_pids(tmp_path / f"{i}", 3)
        assert outs[i].status is (Status.TIMEOUT if i % 2 else Status.OK), outs[i].describe()
        assert outs[i].leaked == 3, outs[i].describe()
    assert_gone(pids)
    assert children() == set()
    assert fds() == before
    assert_no_groups(home)


@pytest.mark.slow  # hundreds of calls in a row: the slow tier
def test_many_calls_accumulate_no_folder_descriptor_or_keeper(tmp_path: Path, home: str) -> None:
    run(int, budget=10)
    before, keeping = fds(), keepers(home)
    assert len(keeping) == 1, keeping
    for i in range(40):
        path = tmp_path / f"{i}"
        out = run(
            sub_cgroups_with_sleepers, (str(path), 2, i % 4 == 0), budget=1 if i % 4 == 0 else 30
        )
        assert out.leaked == 3, out.describe()
        assert_gone(await_pids(path, 3))
    assert fds() == before
    assert keepers(home) == keeping
    assert children() == set()
    assert_no_groups(home)


_STORM = """
import json, os, signal, sys, time
sys.path[:0] = [{root!r}]
from pytest_rewardhang.guard import _cgroup, run
from tests.guard.test_cgroup_attacks import folders, sub_cgroups_with_sleepers
from tests.conftest import children

armed = False

def on_sigint(signum, frame):
    if armed:
        raise KeyboardInterrupt

signal.signal(signal.SIGINT, on_sigint)
run(int)
before = len(os.listdir("/proc/self/fd"))
print("ready", flush=True)
calls = interrupted = 0
while not os.path.exists(sys.argv[1]):
    try:
        armed = True
        run(sub_cgroups_with_sleepers, (sys.argv[2], 1, calls % 2 == 1), budget=0.3)
        armed = False
        calls += 1
    except KeyboardInterrupt:
        armed = False
        interrupted += 1
time.sleep(0.5)
run(int)  # sweeps groups a killed call left exiting
print(json.dumps({{"calls": calls, "interrupted": interrupted, "kids": sorted(children()),
                   "fds": [before, len(os.listdir("/proc/self/fd"))],
                   "folders": folders(_cgroup.home()), "home": _cgroup.home()}}), flush=True)
"""


@pytest.mark.slow  # a storm or a race, repeated: seconds of real processes
def test_a_sigint_storm_leaves_no_group_process_or_descriptor(tmp_path: Path) -> None:
    stop, path = tmp_path / "stop", tmp_path / "pids"
    script = _STORM.format(root=str(ROOT))
    returncode, out, err = sigint_storm([script, str(stop), str(path)], stop, timeout=60)
    pids = [int(word) for word in path.read_text().split()] if path.exists() else []
    assert returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["interrupted"] > 0, result
    assert result["kids"] == [], result
    assert result["fds"][0] == result["fds"][1], result
    assert result["folders"] == [], result
    if pids:  # a call the storm let get as far as its sleepers (most are interrupted sooner)
        assert_gone(pids)
    assert_removed(result["home"])


def test_a_caller_that_forks_after_using_the_guard(tmp_path: Path, home: str) -> None:
    """The forked child makes a folder and keeper of its own, which go when it exits; the
    parent's folder and calls are untouched."""
    path = tmp_path / "pids"
    run(int, budget=10)
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked caller
        code = 1
        try:
            os.close(reader)
            out = run(sub_cgroups_with_sleepers, (str(path), 2, True), budget=1)
            mine = _cgroup.home()
            os.write(writer, f"{mine} {out.leaked} {out.containment.value}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader) as f:
        line = f.read().split()
    os.waitpid(child, 0)
    assert len(line) == 3, "the forked caller failed"
    theirs, leaked, containment = line
    assert (leaked, containment) == ("3", "cgroup")
    assert theirs != home
    assert_gone(await_pids(path, 3))
    assert_removed(theirs)
    assert os.path.isdir(home)
    assert run(os.getpid, budget=10).containment is Containment.CGROUP
    assert_no_groups(home)


# --- 3. the keeper, and a caller that is SIGKILLed ----------------------------------------------


_CALLER = """
import os, signal, sys, time
sys.path[:0] = [{root!r}]
from pytest_rewardhang.guard import _cgroup, Pool, run
from tests.guard import test_cgroup_attacks as attacks
path = sys.argv[2]
attacks.record(path + ".home", os.getpid())
print(_cgroup.home(), flush=True)
getattr(attacks, "caller_" + sys.argv[1])(path)
time.sleep(60)
"""


def caller_kill_the_keeper_then_hang(path: str) -> None:
    """A first call kills its caller's keeper and returns; a second one hangs with a sleeper."""
    out = run(signal_the_keeper, (signal.SIGKILL,), budget=20)
    assert out.value == 1, out.describe()
    run(hang_with_a_sleeper, (path,), budget=60)


def caller_stop_the_keeper_then_hang(path: str) -> None:
    out = run(signal_the_keeper, (signal.SIGSTOP,), budget=20)
    assert out.value == 1, out.describe()
    run(hang_with_a_sleeper, (path,), budget=60)


def caller_stop_itself_then_hang(path: str) -> None:
    run(stop_myself_with_a_sleeper, (path,), budget=60)


def caller_pool_stops_its_zygote(path: str) -> None:
    with Pool(stop_the_zygote_and_hang, budget=60, workers=1) as pool:
        pool.map([(path,)])


def signal_the_keeper(signum: int) -> int:
    found = keepers(os.path.dirname(own_group()))
    for pid in found:
        os.kill(pid, signum)
    return len(found)


def hang_with_a_sleeper(path: str) -> None:
    record(path, me(), sleeper())
    time.sleep(60)


def stop_myself_with_a_sleeper(path: str) -> None:
    record(path, me(), sleeper())
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(60)


def stop_the_zygote_and_hang(path: str) -> None:
    zygote = os.getppid()
    record(path, me(), sleeper(), zygote)
    os.kill(zygote, signal.SIGSTOP)
    time.sleep(60)


def kill_the_keeper_and_the_zygote_and_hang(path: str) -> None:
    """What the existing zygote-killing attack does, but the zygote's keeper goes first."""
    zygote_home = os.path.dirname(own_group())
    record(path + ".home", os.getppid())
    for pid in keepers(zygote_home):
        os.kill(pid, signal.SIGKILL)
    record(path, me(), sleeper())
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)


def _sigkilled_caller(tmp_path: Path, mode: str, count: int) -> tuple[list[int], str]:
    """Start a caller in ``mode``, wait for ``count`` pids, SIGKILL it: the pids, its home."""
    path = tmp_path / "pids"
    script = _CALLER.format(root=str(ROOT))
    with subprocess.Popen(
        [sys.executable, "-c", script, mode, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        try:
            assert proc.stdout is not None
            home = proc.stdout.readline().decode().strip()
            assert home, "the caller found no folder of groups"
            pids = await_pids(path, count, proc)
            time.sleep(0.2)
        finally:
            proc.kill()
            proc.wait()
    return pids, home


@pytest.mark.parametrize("signum", ["kill", "stop"])
def test_a_caller_whose_keeper_a_scorer_ended_still_takes_its_calls_along(
    tmp_path: Path, signum: str
) -> None:
    """BUG: a scorer kills (or stops) its caller's keeper and returns; nothing notices. The
    caller is SIGKILLed during a later, innocent call: that call's process and its sleeper run
    on forever, and the caller's folder of groups is never removed."""
    pids, home = _sigkilled_caller(tmp_path, f"{signum}_the_keeper_then_hang", 2)
    try:
        assert_gone(pids)
        assert_removed(home)
    finally:
        kill_all(keepers(home))  # a stopped one
        if not reused(home):
            rmtree(home)


def test_a_caller_sigkilled_while_its_scorer_stops_itself_takes_it_along(tmp_path: Path) -> None:
    pids, home = _sigkilled_caller(tmp_path, "stop_itself_then_hang", 2)
    try:
        assert_gone(pids)
        assert_removed(home)
    finally:
        kill_all(pids)
        if not reused(home):
            rmtree(home)


def test_a_caller_sigkilled_while_an_item_holds_its_zygote_stopped(tmp_path: Path) -> None:
    """BUG: the zygote's keeper watches the zygote, not the caller; an item that stops the
    zygote keeps it alive once the caller is SIGKILLed, and the worker and its sleeper run on
    (the zygote's folder is not below the caller's, so the caller's keeper misses it too)."""
    pids, home = _sigkilled_caller(tmp_path, "pool_stops_its_zygote", 3)
    worker, sleeper_pid, zygote = pids
    try:
        assert_gone([worker, sleeper_pid])
        assert_removed(home)
    finally:
        kill_all([zygote, worker, sleeper_pid])
        time.sleep(0.5)
        for folder in (home, os.path.join(os.path.dirname(home), f"{_cgroup.PREFIX}{zygote}")):
            if not reused(folder):
                rmtree(folder)


def test_an_item_that_kills_the_zygotes_keeper_then_the_zygote_leaves_nothing(
    tmp_path: Path,
) -> None:
    """BUG: when a zygote dies, only its keeper kills its workers' groups: an item that kills
    the keeper first, then the zygote, leaves its worker and sleeper running after map()
    returned, and after close(), in a caller that is alive and well."""
    path = tmp_path / "pids"
    with Pool(kill_the_keeper_and_the_zygote_and_hang, budget=30, workers=1) as pool:
        (out,) = pool.map([(str(path),)])
    assert out.status is not Status.OK, out.describe()
    # Every run's (map() has returned): the item runs again, alone, after the zygote's death.
    pids = await_pids(path, 2)
    zygotes = await_pids(Path(f"{path}.home"), 1)
    top = os.path.dirname(_cgroup.home())
    homes = [os.path.join(top, f"{_cgroup.PREFIX}{zygote}") for zygote in zygotes]
    try:
        assert_gone(pids)
        for zygote_home in homes:
            assert_removed(zygote_home)
    finally:
        kill_all(pids)
        time.sleep(0.5)
        for zygote_home in homes:
            if not reused(zygote_home):
                rmtree(zygote_home)


_REUSE = """
import os, sys
sys.path[:0] = [{root!r}]
from pytest_rewardhang.guard import run
print(os.getpid(), run(os.getpid, budget=10).containment.value, flush=True)
"""


def test_a_stale_folder_of_a_dead_process_with_our_pid_does_not_uncontain_a_call() -> None:
    """BUG: folders are named by pid only (pid_max is often 32768). The folder of a dead
    process whose keeper was killed, stopped or late, or that held a chain too deep to
    remove, is taken over by the next process of that pid, and the groups it left clash with
    the new process's names: its first call runs uncontained (containment 'subreaper')."""
    last = Path("/proc/sys/kernel/ns_last_pid")
    if not os.access(last, os.W_OK):
        pytest.skip("cannot choose the next pid here (ns_last_pid)")
    parent = os.path.dirname(_cgroup.home())
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for _ in range(20):  # other processes on the machine may take the pid first
        # Past pid_max the kernel refuses it (EINVAL): pids wrap to the low ones there.
        target = max((int(last.read_text()) + 100) % pid_max, 1000)
        stale = os.path.join(parent, f"{_cgroup.PREFIX}{target}")
        try:
            os.makedirs(os.path.join(stale, "0"))
        except FileExistsError:
            continue
        try:
            last.write_text(str(target - 1))
            proc = subprocess.run(
                [sys.executable, "-c", _REUSE.format(root=str(ROOT))],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
        finally:
            time.sleep(0.5)  # its keeper removes the folder when it exits
            if not reused(stale):  # else another process took the pid, and the folder
                rmtree(stale)
        pid, containment = proc.stdout.split()
        if int(pid) == target:
            assert containment == "cgroup"
            return
    pytest.skip("never got the pid chosen")


def test_sequential_pools_leave_no_keeper_or_folder(tmp_path: Path) -> None:
    """Each pool's zygote has a folder and a keeper of its own: both go with the pool."""
    script = tmp_path / "scorer.py"
    script.write_text(
        "import os\ndef sub(i):\n"
        "    g = open('/proc/self/cgroup').read().split('0::')[1].strip()\n"
        f"    os.mkdir({_cgroup._mount()!r} + g + f'/s{{i}}')\n"
        "    return os.getppid()\n"
    )
    parent = os.path.dirname(_cgroup.home())
    zygotes = set()
    for _ in range(5):
        with Pool(f"{script}:sub", budget=10, workers=2) as pool:
            items = pool.map([(i,) for i in range(6)])
        assert all(item.ok for item in items), [item.describe() for item in items]
        zygotes |= {item.value for item in items}
    homes = [os.path.join(parent, f"{_cgroup.PREFIX}{pid}") for pid in zygotes]
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline and any(keepers(home) for home in homes):
        time.sleep(0.05)
    left = {home: keepers(home) for home in homes if keepers(home)}
    kill_all([pid for pids in left.values() for pid in pids])
    assert not left, left
    for home in homes:
        assert_removed(home)


_INHERITABLE = """
import os, select, sys
sys.path[:0] = [{root!r}]
from pytest_rewardhang.guard import run
read, write = os.pipe()
os.set_inheritable(write, True)  # meant for a subprocess (pass_fds, a jobserver...)
assert run(int, budget=10).ok
os.close(write)
print("eof" if select.select([read], [], [], 5)[0] else "held", flush=True)
"""


def test_the_keeper_holds_none_of_the_callers_descriptors() -> None:
    """BUG: the keeper is posix_spawned with only fds 0-3 set up: every inheritable
    descriptor of the caller goes with it and is held as long as the caller lives (a pipe
    whose writer the caller closed never reaches EOF)."""
    proc = subprocess.run(
        [sys.executable, "-c", _INHERITABLE.format(root=str(ROOT))],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout.strip() == "eof", "the caller's closed pipe is held open by its keeper"
