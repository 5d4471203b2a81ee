"""``adapters.ray.RewardActor`` on a simulated two-node cluster (``ray.cluster_utils.Cluster``).

As tests/adapters/test_ray.py does, one module-scoped cluster of two raylets, one CPU each.
The actors are placed with :func:`actors_per_node` (one per node, one worker each), driven by
Ray's ``ActorPool`` over batches with real hangs (one C call), called the way verl's remote
reward manager calls its reward workers (``compute_score(**kwargs)``, round-robin over the
actors: verl/experimental/reward_loop/reward_manager/remote.py:60-73,108-115 at b178a3c), and
killed in the middle of a hang: the call in flight raises ``RayActorError``, the actor's pool
goes with it, and the other actor carries on.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters._ray_actor_scorers import VERL_SCORER
from tests.adapters._ray_scorers import HANG, SCORER, descendants
from tests.conftest import state

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 1.0
SLACK = 3.0
GONE_S = 30.0

pytestmark = [pytest.mark.slow, pytest.mark.needs_extra("ray"), pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    import ray
    from ray.cluster_utils import Cluster
    from ray.job_config import JobConfig

    made: Any = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        made.add_node(num_cpus=1)
        made.wait_for_nodes()
        ray.init(
            address=made.address,
            job_config=JobConfig(code_search_path=[str(ROOT)]),
            log_to_driver=False,
        )
        yield made
    finally:
        ray.shutdown()
        made.shutdown()


def gone(pids: list[int]) -> dict[int, str | None]:
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline and any(state(pid) is not None for pid in pids):
        time.sleep(0.05)
    return {pid: state(pid) for pid in pids if state(pid) is not None}


def started(actors: list[Any]) -> list[dict[str, Any]]:
    import ray

    stats: list[dict[str, Any]] = ray.get([a.stats.remote() for a in actors], timeout=90)
    for s in stats:
        s["pool_pids"] = descendants(s["pid"])
        assert len(s["pool_pids"]) >= 2, s  # the pool is warm: a zygote and its worker
    return stats


def test_actor_pool_over_one_actor_per_node_scores_batches_with_hangs(cluster: Any) -> None:
    import ray
    from ray.util import ActorPool

    from pytest_rewardhang.adapters.ray import actors_per_node

    actors = actors_per_node(SCORER, per_node=1, workers=1, budget=BUDGET, default=-1.0)
    try:
        stats = started(actors)
        assert len(actors) == 2
        assert {s["node"] for s in stats} == {n.node_id for n in cluster.list_all_nodes()}
        batches = [[(str(i), str(i)), (f"{HANG} {i}", "x"), ("a", "b")] for i in range(4)]
        begun = time.monotonic()
        scored = list(ActorPool(actors).map(lambda a, b: a.score_with_status.remote(b), batches))
        took = time.monotonic() - begun
        assert scored == [[(1.0, "ok"), (-1.0, "timeout"), (0.0, "ok")]] * 4
        # Four hangs, two actors of one worker each: two budgets one after the other.
        assert took < 2 * BUDGET + 2 * SLACK, f"{took:.1f} s"
        totals = [ray.get(a.stats.remote(), timeout=60)["statuses"] for a in actors]
        assert sum(t.get("timeout", 0) for t in totals) == 4
        assert sum(t.get("ok", 0) for t in totals) == 8
        assert ray.get(actors[0].score.remote([("1", "1"), ("2", "3")]), timeout=60) == [1.0, 0.0]
    finally:
        for actor in actors:
            ray.kill(actor)
    left = gone([s["pid"] for s in stats] + [p for s in stats for p in s["pool_pids"]])
    assert not left, f"left behind once the actors died (pid: state): {left}"


def test_verl_remote_manager_layout_and_a_killed_actor(cluster: Any) -> None:
    """verl's manager cycles over its workers and awaits ``compute_score.remote(...)`` per
    sample; here the driver does the same, then kills one actor while it holds a hang."""
    import ray
    from ray.exceptions import RayActorError

    from pytest_rewardhang.adapters.ray import actors_per_node

    actors = actors_per_node(VERL_SCORER, per_node=1, workers=1, budget=BUDGET)
    try:
        stats = started(actors)
        cycle = itertools.cycle(actors)

        def sample(text: str, truth: str) -> dict[str, Any]:
            return {
                "data_source": "math",
                "solution_str": text,
                "ground_truth": truth,
                "extra_info": {"num_turns": 1},
            }

        refs = [next(cycle).compute_score.remote(**sample(t, "7")) for t in ("7", HANG, "8", "7")]
        assert ray.get(refs, timeout=60) == [1.0, 0.0, 0.0, 1.0]

        victim, survivor = actors
        hung = victim.compute_score.remote(**sample(f"{HANG} again", "1"))
        time.sleep(0.3)  # the hang is running in the victim's pool
        ray.kill(victim, no_restart=True)
        with pytest.raises(RayActorError):
            ray.get(hung, timeout=60)
        victim_stats = stats[0]
        left = gone([victim_stats["pid"], *victim_stats["pool_pids"]])
        assert not left, f"the killed actor left (pid: state): {left}"
        assert ray.get(survivor.compute_score.remote(**sample("5", "5")), timeout=60) == 1.0
    finally:
        for actor in actors:
            ray.kill(actor)
    left = gone([stats[1]["pid"], *stats[1]["pool_pids"]])
    assert not left, f"left behind (pid: state): {left}"
