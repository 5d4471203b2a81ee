"""Every adapter passes ``max_processes``, ``network`` and ``unprivileged`` on to its pool, tried
with real scorers doing what they bound: forking until a fork fails, a fork bomb, reading their
own uid, looking for the network and connecting to the caller's listener. Each adapter built
without the keyword is the control: another pool (they are keyed by them), not confined.

Each test skips, saying why, where the kernel does not permit what it tests (a cgroup
controller, a namespace, root). Each has a time bound and checks that nothing is left.
"""

from __future__ import annotations

import fnmatch
import logging
import socket
import time
from typing import Any

import pytest

import pytest_rewardhang.adapters.verl as verl_adapter
from pytest_rewardhang.adapters.ray import RewardActor
from pytest_rewardhang.guard import Confinement
from pytest_rewardhang.guard._confine import UID_BASE
from tests.adapters._scorers import SLACK, spec
from tests.adapters.test_trainers import ADAPTERS, adapted
from tests.guard.test_confinement import needs

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.usefixtures("no_leaks", "closed_pools"),
]
every_adapter = pytest.mark.parametrize("adapter", ADAPTERS)

SCORER = spec("confined")
#: Long enough for a busy machine to fork a handful of children within it.
BUDGET = 2.0


@every_adapter
@needs(Confinement.PIDS_MAX, "a cgroup pids controller")
def test_max_processes_bounds_what_a_sample_forks(adapter: str) -> None:
    # One worker with its sample's children: at most 8 tasks, so fewer than 8 forks succeed.
    bounded = adapted(adapter, SCORER, budget=BUDGET, workers=1, max_processes=8)
    [made] = bounded(["forks"])
    assert 0 < made < 8
    assert adapted(adapter, SCORER, budget=BUDGET, workers=1)(["forks"]) == [100.0]


@pytest.mark.parametrize("adapter", ["verl_async", "trl_sync"])
@needs(Confinement.PIDS_MAX, "a cgroup pids controller")
def test_a_fork_bomb_scores_the_default_and_the_next_sample_scores(
    adapter: str, caplog: pytest.LogCaptureFixture
) -> None:
    score = adapted(adapter, SCORER, budget=BUDGET, default=-1.0, workers=1, max_processes=8)
    assert score(["ok"]) == [1.0]  # starts the pool
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="pytest_rewardhang.adapters"):
        assert score(["fork bomb"]) == [-1.0]
    assert time.perf_counter() - start <= BUDGET + SLACK
    assert "confined: timeout" in caplog.text
    assert score(["ok", "ok"]) == [1.0, 1.0]  # on the worker that replaced the bomb's


@every_adapter
@needs(Confinement.UNPRIVILEGED, "a root caller")
def test_unprivileged_scores_under_a_uid_of_its_own(adapter: str) -> None:
    [uid] = adapted(adapter, SCORER, budget=BUDGET, unprivileged=True)(["uid"])
    assert uid >= UID_BASE
    assert adapted(adapter, SCORER, budget=BUDGET)(["uid"]) == [0.0]


@every_adapter
@needs(Confinement.NO_NETWORK, "a network namespace")
def test_without_network_a_sample_has_only_loopback(adapter: str) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        connect = f"connect {server.getsockname()[1]}"
        offline = adapted(adapter, SCORER, budget=BUDGET * 5, network=False)
        assert offline(["only loopback", connect]) == [1.0, 0.0]
        assert adapted(adapter, SCORER, budget=BUDGET * 5)([connect]) == [1.0]


@every_adapter
def test_nonsense_confinement_fails_at_the_door_in_one_line(adapter: str) -> None:
    nonsense: Any
    for nonsense in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=r"^max_processes must be a positive int") as info:
            adapted(adapter, SCORER, max_processes=nonsense)  # before any sample
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"^max_processes must be a positive int"):
        verl_adapter.compute_score("d", "ok", "1", scorer=SCORER, max_processes=0)
    # Each of these once passed the door and failed at the first sample, or at the first hang
    # (hang_log), in training; the switches were read as true.
    for keyword, value, message in (
        ("workers", 0, "workers must be a positive int, not 0"),
        ("workers", "2", "workers must be a positive int, not '2'"),
        ("network", "false", "network must be True or False, not 'false'"),
        ("isolate", "no", "isolate must be True or False, not 'no'"),
        ("unprivileged", 1, "unprivileged must be True or False, not 1"),
        ("hang_log", "/nonexistent/hangs.jsonl", "hang_log '/nonexistent/hangs.jsonl' cannot *"),
    ):
        with pytest.raises(ValueError, match=f"^{keyword} ") as info:
            adapted(adapter, SCORER, **{keyword: value})
        assert fnmatch.fnmatchcase(str(info.value), message), str(info.value)


@needs(Confinement.PIDS_MAX, "a cgroup pids controller")
@needs(Confinement.UNPRIVILEGED, "a root caller")
@needs(Confinement.NO_NETWORK, "a network namespace")
def test_the_ray_reward_actor_confines_its_items() -> None:
    # A plain class until ray.remote makes it an actor: its pool is made in __init__.
    options: dict[str, Any] = {"max_processes": 8, "network": False, "unprivileged": True}
    actor = RewardActor(SCORER, workers=1, budget=BUDGET, default=-1.0, **options)
    try:
        made, bomb, uid, loopback = actor.score(
            [("forks",), ("fork bomb",), ("uid",), ("only loopback",)]
        )
    finally:
        actor.pool.close()
    assert 0 < made < 8
    assert bomb == -1.0
    assert uid >= UID_BASE
    assert loopback == 1.0
    assert actor.statuses == {"ok": 3, "timeout": 1}
    with pytest.raises(ValueError, match=r"^max_processes must be a positive int"):
        RewardActor(SCORER, max_processes=0)
