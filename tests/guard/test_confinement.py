"""What a call is confined by besides its deadline, tried with real processes doing the worst
thing: children that together hold more than ``memory_mb``, a fork bomb, files left in
``/dev/shm`` and the temporary folder, a connection to the caller's listener, and a root call
stopping, re-limiting or marking its caller for the OOM killer through ``/proc``.

Each test skips, saying why, where the kernel does not permit what it tests (a cgroup
controller, a namespace, root). Each has a time bound and checks that nothing is left.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.guard import (
    Confinement,
    Outcome,
    Status,
    _cgroup,
    _confine,
    _quota,
    guarded,
    run,
)
from pytest_rewardhang.guard._state import STATE
from tests.guard._bounds import MIB
from tests.guard._confined_items import children_holding, fork_bomb

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_leaks")]


def _probe(confinement: Confinement) -> bool:
    """Whether a plain call here gets ``confinement`` (what the kernel permits)."""
    kwargs: dict[str, Any] = {  # type: ignore[assignment]
        Confinement.MEMORY_MAX: {"memory_mb": 64},
        Confinement.NO_NETWORK: {"network": False},
        Confinement.UNPRIVILEGED: {"unprivileged": True},
    }.get(confinement, {})
    return confinement in run(int, budget=10, **kwargs).confined


def needs(confinement: Confinement, why: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not _probe(confinement), reason=f"{why}: not permitted here")


def timed(fn: Callable[..., Any], *args: Any, bound: float = 30.0, **kwargs: Any) -> Outcome:
    start = time.monotonic()
    out = run(fn, args, **kwargs)
    assert time.monotonic() - start < bound, "the call held the caller past its bound"
    return out


# --- memory ---------------------------------------------------------------------------------


def _resident_mib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // MIB


@needs(Confinement.MEMORY_MAX, "a cgroup memory controller")
def test_children_together_past_memory_mb_are_memory() -> None:
    # Each child holds 48 MiB, below the 64 MiB limit; together they hold more than the group
    # may: 64 MiB, plus what the call may copy of the caller (its resident size), plus headroom.
    room = 64 + _quota.HEADROOM_MB + _resident_mib()
    out = timed(children_holding, 48, room // 48 + 2, memory_mb=64, budget=60)
    assert out.status is Status.MEMORY, out.describe()
    assert out.error is not None
    assert out.error.startswith("MemoryError: the kernel's OOM killer ended ")
    assert Confinement.MEMORY_MAX in out.confined
    # Ended at the first kill, not when the survivors' sleep ended.
    assert out.wall_s < 30


@needs(Confinement.MEMORY_MAX, "a cgroup memory controller")
def test_one_process_past_memory_mb_is_still_its_memory_error() -> None:
    def bomb() -> int:
        hoard = []
        while True:
            hoard.append(bytearray(10 * MIB))

    out = timed(bomb, memory_mb=100, budget=20)
    assert out.status is Status.MEMORY
    assert out.error is not None
    assert out.error.startswith("MemoryError")


@needs(Confinement.MEMORY_MAX, "a cgroup memory controller")
def test_a_call_within_memory_mb_is_untouched() -> None:
    out = timed(children_holding, 8, 2, None, 0.1, memory_mb=64, budget=60)
    assert out.status is Status.OK, out.describe()
    assert out.value == 2


# --- processes ------------------------------------------------------------------------------


@needs(Confinement.PIDS_MAX, "a cgroup pids controller")
def test_a_fork_bomb_is_bounded_and_killed() -> None:
    out = timed(fork_bomb, budget=2.0, max_processes=64, bound=15)
    assert out.status is Status.TIMEOUT
    assert Confinement.PIDS_MAX in out.confined
    assert 0 < out.leaked < 64  # all of them found and killed, never more than the bound
    assert run(len, ("after",)).value == 5  # the caller is fine


@needs(Confinement.PIDS_MAX, "a cgroup pids controller")
def test_forks_past_max_processes_fail_in_the_call() -> None:
    def forks() -> int:
        made = []
        try:
            for _ in range(100):
                pid = os.fork()
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                made.append(pid)
        except OSError:
            pass
        for pid in made:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        return len(made)

    out = timed(forks, max_processes=16, budget=20)
    assert out.status is Status.OK, out.describe()
    assert out.value < 16
    assert run(forks, max_processes=None, budget=20).value == 100


@needs(Confinement.PIDS_MAX, "a cgroup pids controller")
def test_the_groups_a_killed_caller_left_are_removed() -> None:
    homes = [home for home in map(_quota._find_v1_home, ("pids", "memory")) if home]
    if not homes:
        pytest.skip("the limits are in cgroup v2 groups, removed with them by the keeper")
    dead = os.fork()
    if dead == 0:  # pragma: no cover - exits at once: its pid names a dead guard
        os._exit(0)
    os.waitpid(dead, 0)
    left = [os.path.join(home, f"rewardhang-{dead}-0") for home in homes]
    for path in left:
        os.mkdir(path)
    try:
        for home in homes:
            _quota._remove_abandoned(home)
        assert not any(map(os.path.exists, left))
    finally:
        for path in left:
            if os.path.exists(path):
                os.rmdir(path)


def nests_a_call_that_outlives_it() -> None:
    """A guarded call that runs a guarded call of its own, still sleeping at its deadline."""
    run(time.sleep, (30,), budget=20)


def test_a_nested_calls_v1_groups_go_with_the_call_that_held_them() -> None:
    # The nested call's v1 group lies inside the outer call's, and rmdir refuses a folder with a
    # folder in it: the outer group stayed (emptied, its maker's pid dead) for good.
    home = _quota._v1_home("pids")
    if home is None or not _cgroup.enabled():
        pytest.skip("no cgroup v1 pids hierarchy to make groups in here")
    out = run(nests_a_call_that_outlives_it, budget=1.0)
    assert out.status is Status.TIMEOUT, out.describe()
    made = f"{_cgroup.PREFIX}{os.getpid()}-"
    # A later call removes what was still exiting: on a loaded machine the nested call's
    # processes may take a while to go, so the calls go on until then (bounded).
    deadline = time.monotonic() + 30.0
    while True:
        assert run(int, budget=10).ok
        left = [name for name in os.listdir(home) if name.startswith(made)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left


@pytest.mark.skipif(not _cgroup.enabled(), reason="cgroups are turned off here")
def test_the_limits_go_in_the_calls_v2_group_where_it_has_the_controllers(
    tmp_path: Path,
) -> None:
    # A stand-in for a v2 group whose folder has the memory and pids controllers: the files
    # the kernel would have there.
    for name in ("memory.max", "memory.oom.group", "pids.max"):
        (tmp_path / name).write_text("max\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n")
    quota = _quota.Quota.make(64, 16, str(tmp_path))
    try:
        assert quota.applied == {Confinement.MEMORY_MAX, Confinement.PIDS_MAX}
        assert quota.groups == []  # nothing made in v1
        assert quota.alarm is None  # v2 kills the whole group itself (memory.oom.group)
        assert (tmp_path / "pids.max").read_text() == "16"
        assert (tmp_path / "memory.oom.group").read_text() == "1"
        limit = int((tmp_path / "memory.max").read_text())
        assert limit >= (64 + _quota.HEADROOM_MB) * MIB + _resident_mib() * MIB // 2
        assert quota.oom_kills() == 2
    finally:
        quota.close(0.0)


def test_max_processes_is_checked_at_the_door() -> None:
    nonsense: Any
    for nonsense in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_processes must be a positive int"):
            run(int, max_processes=nonsense)
        with pytest.raises(ValueError, match="max_processes must be a positive int"):
            guarded(max_processes=nonsense)


@needs(Confinement.NO_NETWORK, "a network namespace")
def test_guarded_passes_the_confinement_on() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        cut_off = guarded(budget=20, network=False)(_connect)
        assert cut_off(server.getsockname()[1]) == "ConnectionRefusedError"


# --- temporary files --------------------------------------------------------------------------


def _litter() -> str:  # pragma: no cover - in the call
    with open("/dev/shm/rewardhang-litter", "wb") as f:  # noqa: S108 - what is tested
        f.write(b"x" * (100 * MIB))
    folder = tempfile.gettempdir()
    with open(os.path.join(folder, "left"), "w") as f:
        f.write("left behind")
    assert os.environ["TMPDIR"] == folder
    return folder


@needs(Confinement.PRIVATE_SHM, "a mount namespace (root)")
def test_what_a_call_leaves_in_dev_shm_and_its_tmpdir_is_gone() -> None:
    out = timed(_litter, budget=20)
    assert out.status is Status.OK, out.describe()
    assert {Confinement.PRIVATE_SHM, Confinement.PRIVATE_TMP} <= out.confined
    assert not os.path.exists("/dev/shm/rewardhang-litter")  # noqa: S108
    assert out.value != tempfile.gettempdir()
    assert not os.path.exists(out.value)


@needs(Confinement.MEMORY_MAX, "a cgroup memory controller")
@needs(Confinement.PRIVATE_SHM, "a mount namespace (root)")
def test_what_a_call_writes_to_dev_shm_counts_against_memory_mb() -> None:
    out = timed(_litter, memory_mb=50, budget=20)
    assert out.status is not Status.OK  # 100 MiB do not fit in 50 (ENOSPC or the OOM killer)
    assert not os.path.exists("/dev/shm/rewardhang-litter")  # noqa: S108


def _leave_in_tmpdir() -> str:  # pragma: no cover - in the call
    folder = tempfile.gettempdir()
    os.makedirs(os.path.join(folder, "deep", "er"))
    with open(os.path.join(folder, "deep", "er", "left"), "w") as f:
        f.write("left behind")
    return folder


@pytest.mark.parametrize("unprivileged", [False, True])
def test_without_a_tmpfs_of_its_own_the_tmpdir_is_made_and_removed_by_the_caller(
    monkeypatch: pytest.MonkeyPatch, unprivileged: bool
) -> None:
    monkeypatch.setitem(STATE.permitted, Confinement.PRIVATE_SHM, False)
    monkeypatch.setattr(STATE, "unconfined_warned", {Confinement.PRIVATE_SHM})
    out = timed(_leave_in_tmpdir, budget=20, unprivileged=unprivileged)
    assert out.status is Status.OK, out.describe()
    assert Confinement.PRIVATE_TMP in out.confined
    assert Confinement.PRIVATE_SHM not in out.confined
    assert os.path.basename(out.value).startswith("rewardhang-call-")
    assert not os.path.exists(out.value)


def test_the_tmpdir_is_removed_even_when_the_call_is_killed() -> None:
    def fill_then_hang() -> None:
        with open(os.path.join(tempfile.gettempdir(), "big"), "wb") as f:
            f.write(b"x" * MIB)
        time.sleep(60)

    before = set(os.listdir(tempfile.gettempdir()))
    out = timed(fill_then_hang, budget=0.5, bound=10)
    assert out.status is Status.TIMEOUT
    assert Confinement.PRIVATE_TMP in out.confined
    assert set(os.listdir(tempfile.gettempdir())) == before


# --- network --------------------------------------------------------------------------------


def _connect(port: int) -> str:  # pragma: no cover - in the call
    with socket.socket() as client:
        client.settimeout(5)
        try:
            client.connect(("127.0.0.1", port))
        except OSError as exc:
            return type(exc).__name__
    return "connected"


def _own_loopback() -> str:  # pragma: no cover - in the call
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        return _connect(server.getsockname()[1])


@needs(Confinement.NO_NETWORK, "a network namespace")
def test_without_network_the_call_cannot_reach_the_callers_listener() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        out = timed(_connect, port, network=False, budget=20)
        assert out.status is Status.OK, out.describe()
        assert out.value == "ConnectionRefusedError"
        assert Confinement.NO_NETWORK in out.confined
        assert run(_connect, (port,), budget=20).value == "connected"  # by default it can


@needs(Confinement.NO_NETWORK, "a network namespace")
def test_without_network_the_call_keeps_a_loopback_of_its_own() -> None:
    assert timed(_own_loopback, network=False, budget=20).value == "connected"


# --- privileges -----------------------------------------------------------------------------


def _act_on_caller() -> dict[str, str]:  # pragma: no cover - in the call
    """Try what a hostile root call does to its caller through /proc; what each came to."""
    caller = os.getppid()
    attempts: dict[str, Callable[[], object]] = {
        "sigstop": lambda: os.kill(caller, signal.SIGSTOP),
        "prlimit": lambda: resource.prlimit(caller, resource.RLIMIT_NOFILE, (3, 3)),
        "oom_score_adj": lambda: open(f"/proc/{caller}/oom_score_adj", "w").write("1000"),  # noqa: SIM115
        "setuid back": lambda: os.setuid(0),
    }
    came: dict[str, str] = {"uid": str(os.geteuid())}
    for name, attempt in attempts.items():
        try:
            attempt()
            came[name] = "done"
        except OSError as exc:
            came[name] = type(exc).__name__
    return came


def _oom_score_adj() -> str:
    with open("/proc/self/oom_score_adj") as f:
        return f.read().strip()


@needs(Confinement.UNPRIVILEGED, "a root caller")
def test_an_unprivileged_call_cannot_act_on_its_caller() -> None:
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    score = _oom_score_adj()
    out = timed(_act_on_caller, unprivileged=True, budget=20)
    assert out.status is Status.OK, out.describe()
    assert Confinement.UNPRIVILEGED in out.confined
    assert int(out.value.pop("uid")) >= _confine.UID_BASE
    sealed = Confinement.SEALED in out.confined
    assert out.value == {
        "sigstop": "PermissionError",
        "prlimit": "PermissionError",
        # Refused, or not even seen: a sealed call's /proc lists its own processes alone.
        "oom_score_adj": "FileNotFoundError" if sealed else "PermissionError",
        "setuid back": "PermissionError",
    }
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == limits
    assert _oom_score_adj() == score
    with open(f"/proc/{os.getpid()}/stat") as f:
        assert f.read().split(") ", 1)[1][0] != "T"  # not stopped


@needs(Confinement.UNPRIVILEGED, "a root caller")
def test_an_unprivileged_call_writes_its_own_tmpdir() -> None:
    def write() -> int:
        with open(os.path.join(tempfile.gettempdir(), "mine"), "w") as f:
            return f.write("x")

    out = timed(write, unprivileged=True, budget=20)
    assert out.status is Status.OK, out.describe()
    assert out.value == 1


def _nested() -> tuple[str, bool, bool]:  # pragma: no cover - in the call
    inner = run(os.geteuid, budget=10)
    same = inner.value == os.geteuid()  # the outer call's own uid: it has no other to give
    return str(inner.status), Confinement.PRIVATE_SHM in inner.confined, same


@needs(Confinement.UNPRIVILEGED, "a root caller")
def test_a_guard_nested_in_an_unprivileged_call_asks_for_what_it_may_have() -> None:
    out = timed(_nested, unprivileged=True, budget=20)
    assert out.status is Status.OK, out.describe()
    # Not the mount namespace its root caller could make: its call would crash entering it.
    assert out.value == ("ok", False, True)


# --- what applied, and the warning ----------------------------------------------------------


def test_each_call_says_what_confined_it() -> None:
    out = run(len, ("x",))
    assert Confinement.PRIVATE_TMP in out.confined
    assert Confinement.NO_NETWORK not in out.confined
    assert Confinement.UNPRIVILEGED not in out.confined
    assert (Confinement.PIDS_MAX in out.confined) == _probe(Confinement.PIDS_MAX)


def test_what_cannot_apply_is_warned_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(STATE, "unconfined_warned", set())
    monkeypatch.setitem(STATE.permitted, Confinement.NO_NETWORK, False)
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.guard"):
        for _ in range(3):
            out = run(int, network=False)
            assert Confinement.NO_NETWORK not in out.confined
    said = [r.getMessage() for r in caplog.records if "network=False" in r.getMessage()]
    assert len(said) == 1
    assert "no network namespace" in said[0]


def test_the_default_process_bound_is_documented() -> None:
    assert _quota.MAX_PROCESSES == 1024
