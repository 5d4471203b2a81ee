"""A pool item is confined as a ``run()`` call is, tried with real processes doing the worst
thing: a fork bomb, children that together hold more than ``memory_mb``, files left in
``/dev/shm`` and the temporary folder for the next item, and a root item acting on the caller
and the zygote. Each in a warm worker and in an isolating one.

Each test skips, saying why, where the kernel does not permit what it tests (a cgroup
controller, a namespace, root). Each has a time bound and checks that nothing is left.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.guard import Confinement, Pool, Status, _cgroup, _confine, _quota, run
from pytest_rewardhang.guard._state import STATE
from tests._procs import assert_dead
from tests.guard import _confined_items
from tests.guard.test_confinement import needs

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("no_leaks"),
    pytest.mark.parametrize("isolate", [False, True], ids=["warm", "isolated"]),
]

ITEM = _confined_items.item


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytest.mark.slow  # a fork bomb per mode: the slow tier
@needs(Confinement.PIDS_MAX, "a cgroup pids controller")
def test_a_pool_items_forks_stop_at_max_processes_and_the_pool_goes_on(
    tmp_path: Path, isolate: bool
) -> None:
    pidfile = tmp_path / "pids"
    with Pool(ITEM, workers=1, budget=4, max_processes=16, isolate=isolate) as pool:
        counted, bomb, *after = pool.map(
            [("forks", 100, str(pidfile)), ("fork_bomb",), ("quick", 1), ("quick", 2)]
        )
    assert counted.status is Status.OK, counted.describe()
    made, failed = counted.value
    assert failed
    assert 0 < made < 16
    assert Confinement.PIDS_MAX in counted.confined
    assert counted.leaked == made  # its children, left running, killed after it
    assert bomb.status is Status.TIMEOUT, bomb.describe()
    assert [out.value for out in after] == [1, 2]
    assert_dead(_pids(pidfile))


@needs(Confinement.MEMORY_MAX, "a cgroup memory controller")
def test_a_pool_items_children_past_memory_mb_are_memory_and_nothing_survives(
    tmp_path: Path, isolate: bool
) -> None:
    pidfile = tmp_path / "pids"
    # Each child holds 40 MiB, below the 64 MiB limit of each process; eight of them hold
    # more than the worker's group may: 64 MiB, the zygote's size, and a little headroom.
    with Pool(ITEM, workers=1, budget=60, memory_mb=64, isolate=isolate) as pool:
        hoard, after = pool.map([("children_holding", 40, 8, str(pidfile)), ("quick", 3)])
    assert hoard.status is Status.MEMORY, hoard.describe()
    assert hoard.error is not None
    assert hoard.error.startswith("MemoryError: the kernel's OOM killer ended ")
    assert Confinement.MEMORY_MAX in hoard.confined
    assert hoard.wall_s < 30  # ended at the kill, not when the children's sleep ended
    assert after.value == 3
    assert_dead(_pids(pidfile))


@needs(Confinement.PRIVATE_SHM, "a mount namespace (root)")
def test_what_a_pool_item_leaves_in_its_tmpdir_and_dev_shm_is_gone_after_it(
    isolate: bool,
) -> None:
    name = f"rewardhang-litter-{os.getpid()}-{isolate}"
    try:
        with Pool(ITEM, workers=1, budget=20, isolate=isolate) as pool:
            first, second, third = pool.map([("litter", name), ("look", name), ("look", name)])
        assert first.status is Status.OK, first.describe()
        assert {Confinement.PRIVATE_TMP, Confinement.PRIVATE_SHM} <= first.confined
        tmpdir = first.value["tmpdir"]
        assert first.value == {"tmpdir": tmpdir, "env": tmpdir, "found": []}
        assert second.value == third.value == {"tmpdir": tmpdir, "found": [], "shm": False}
        assert not os.path.exists(os.path.join("/dev/shm", name))  # noqa: S108
    finally:
        Path("/dev/shm", name).unlink(missing_ok=True)  # noqa: S108 - where the code is wrong


@needs(Confinement.UNPRIVILEGED, "a root caller")
def test_an_unprivileged_pool_item_cannot_act_on_the_caller_or_the_zygote(isolate: bool) -> None:
    with Pool(ITEM, workers=1, budget=20, unprivileged=True, isolate=isolate) as pool:
        zygote = pool._engine.zygote
        assert zygote is not None
        out = pool.map([("act_on", [os.getpid(), zygote.pid])])[0]
    assert out.status is Status.OK, out.describe()
    assert Confinement.UNPRIVILEGED in out.confined
    # Refused, or not even seen: a sealed item's /proc lists its own processes alone.
    hidden = "FileNotFoundError" if Confinement.SEALED in out.confined else "PermissionError"
    denied = {
        f"{what} {n}": hidden if what == "oom_score_adj" else "PermissionError"
        for n in range(2)
        for what in ("signal", "prlimit", "oom_score_adj")
    }
    assert int(out.value.pop("uid")) >= _confine.UID_BASE
    assert out.value == denied


@needs(Confinement.UNPRIVILEGED, "a root caller")
def test_an_unprivileged_item_starts_where_it_may_when_its_callers_folder_is_closed(
    isolate: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkout in a 0700 folder (mktemp -d) as the working directory: every worker dropped
    # to nobody died at its first look at it, and every item came back crashed.
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    monkeypatch.chdir(closed)
    with Pool(ITEM, workers=1, budget=20, unprivileged=True, isolate=isolate) as pool:
        out = pool.map([("where",)])[0]
    assert out.status is Status.OK, out.describe()
    uid, cwd, tmp = out.value
    assert uid >= _confine.UID_BASE
    assert cwd == tmp != str(closed)


def test_pool_items_say_what_confined_them_as_run_calls_do(isolate: bool) -> None:
    asked: dict[str, Any] = {"memory_mb": 64, "max_processes": 64}
    with Pool(ITEM, workers=1, budget=20, isolate=isolate, **asked) as pool:
        answered, crashed = pool.map([("quick", 1), ("dies",)])
    expected = run(int, budget=20, **asked).confined
    assert Confinement.PRIVATE_TMP in expected
    assert answered.confined == expected
    assert crashed.status is Status.CRASHED, crashed.describe()
    assert crashed.confined == expected


def test_pool_limits_are_checked_at_the_door(isolate: bool) -> None:
    nonsense: Any
    for nonsense in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_processes must be a positive int"):
            Pool(ITEM, max_processes=nonsense, isolate=isolate)


def test_what_a_pool_cannot_confine_its_items_by_is_said_once(
    isolate: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The zygote takes the caller's environment: with cgroups turned off there, its workers
    # have no group to count their processes in.
    monkeypatch.setenv(_cgroup.CGROUP_ENV, "0")
    monkeypatch.setattr(STATE, "unconfined_warned", set())
    with (
        caplog.at_level(logging.WARNING, logger="pytest_rewardhang.guard"),
        Pool(ITEM, workers=2, budget=20, max_processes=64, isolate=isolate) as pool,
    ):
        outs = pool.map([("quick", i) for i in range(4)] + [("dies",), ("quick", 5)])
    assert [out.value for out in outs[:4]] == [0, 1, 2, 3]
    assert all(Confinement.PIDS_MAX not in out.confined for out in outs)
    said = [r.getMessage() for r in caplog.records if "pids controller" in r.getMessage()]
    assert len(said) == 1, said


def test_a_closed_pool_leaves_no_v1_group_its_zygote_made(isolate: bool) -> None:
    # A worker's v1 pids group whose last process was still exiting when the zygote closed it
    # was left behind, its maker dead, until another process's first limited call swept it.
    home = _quota._v1_home("pids")
    if home is None or not _cgroup.enabled():
        pytest.skip("no cgroup v1 pids hierarchy to make groups in here")
    for _ in range(3):
        with Pool(ITEM, workers=2, budget=20, isolate=isolate) as pool:
            pool.map([("quick", i) for i in range(4)])
            zygote = pool._engine.zygote
            assert zygote is not None
            made = f"{_cgroup.PREFIX}{zygote.pid}-"
        left = [name for name in os.listdir(home) if name.startswith(made)]
        assert not left, left
