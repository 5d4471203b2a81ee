"""Pooled scoring inside Ray actors spread over a two-node cluster, simulated on this machine.

One module-scoped cluster (``ray.cluster_utils.Cluster``: a head and a second node, each a
raylet of its own), because starting Ray is the slow part on two cores. Each simulated node has
one CPU and a custom resource naming it, so each actor is placed on the node the test chooses,
which the actor confirms with ``ray.get_runtime_context().get_node_id()``. Every actor builds
one warm ``Pool`` in ``__init__`` (see ``_ray_scorers``) and scores batches with real hangs
(``sum(range(10**13))``, one C call); every actor is killed at the end of its test and the pool
processes it reported (its zygote and workers) must be gone. docs/ray.md's example runs here too
(test_docs cannot run it where Ray is missing), as a driver of its own on this cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters._ray_scorers import (
    ASYNC_SCORER,
    HANG,
    SCORER,
    AdapterScorer,
    AsyncScorer,
    ThreadedScorer,
    descendants,
)
from tests.conftest import state

ROOT = Path(__file__).resolve().parents[2]
BUDGET = 1.0
#: A hang must end: its wall time is the budget plus at most this, on a loaded two-core machine
#: running two raylets and four actors (a correctness bound, not a latency claim).
SLACK = 2.5
#: How long the processes of a killed actor may take to be gone.
GONE_S = 30.0
NODES = ("node-a", "node-b")

pytestmark = [pytest.mark.needs_extra("ray"), pytest.mark.slow, pytest.mark.timeout(90)]

#: One batch: clean items around a hang; what each must come back as.
BATCH = [("1", "1"), (f"{HANG} 1 1 1", "1"), ("2", "2"), ("x", "y")]
EXPECTED = [("ok", 1.0), ("timeout", None), ("ok", 1.0), ("ok", 0.0)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Two simulated nodes, and this process connected to them as the driver."""
    import ray
    from ray.cluster_utils import Cluster
    from ray.job_config import JobConfig

    head = {"num_cpus": 1, "resources": {NODES[0]: 4}, "include_dashboard": False}
    made: Any = Cluster(initialize_head=True, head_node_args=head)  # unannotated in ray
    try:
        made.add_node(num_cpus=1, resources={NODES[1]: 4})
        made.wait_for_nodes()
        # The actor classes are pickled by reference (tests.adapters._ray_scorers): the job's
        # workers import them from the checkout, wherever pytest was started.
        job = JobConfig(code_search_path=[str(ROOT)])
        ray.init(address=made.address, job_config=job, log_to_driver=False)
        yield made
    finally:
        ray.shutdown()
        made.shutdown()


def node_ids(cluster: Any) -> list[str]:
    return [node.node_id for node in cluster.list_all_nodes()]


def start(cls: type, node: str, scorer: str = SCORER, **options: Any) -> Any:
    """One actor of ``cls`` on the node holding the resource ``node``; one CPU-free slot of it,
    so two actors share a simulated node (the pool's one worker is the CPU it uses)."""
    import ray

    actor_class: Any = ray.remote(cls)
    return actor_class.options(num_cpus=0, resources={node: 1}, **options).remote(
        scorer, budget=BUDGET
    )


def check_batch(scored: list[tuple[str, Any, float]]) -> None:
    assert [(status, value) for status, value, _ in scored] == EXPECTED
    hung = scored[1][2]
    assert BUDGET <= hung <= BUDGET + SLACK, f"the hang took {hung:.2f} s, budget {BUDGET} s"


def kill_and_check_gone(actors: list[Any], wheres: list[dict[str, Any]]) -> None:
    """Kill the actors (if not dead already); every process each reported (itself, its
    zygote, its workers) goes, reaped."""
    import ray

    for actor in actors:
        ray.kill(actor)
    pids = [w["pid"] for w in wheres] + [pid for w in wheres for pid in w["pool_pids"]]
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline and any(state(pid) is not None for pid in pids):
        time.sleep(0.05)
    left = {pid: state(pid) for pid in pids if state(pid) is not None}
    assert not left, f"left behind once the actors died (pid: state): {left}"


def reported(actor: Any) -> dict[str, Any]:
    import ray

    where: dict[str, Any] = ray.get(actor.where.remote(), timeout=60)
    # The pool is warm before the first call: a zygote and its worker under the actor.
    assert len(where["pool_pids"]) >= 2, where
    return where


def test_threaded_actors_on_two_nodes_score_through_their_own_pools(cluster: Any) -> None:
    import ray

    actors = [start(ThreadedScorer, node, max_concurrency=4) for node in NODES]
    before = [reported(actor) for actor in actors]
    assert sorted(w["node"] for w in before) == sorted(node_ids(cluster)), "not one per node"

    # Several driver threads submit at once; each actor runs its calls in threads of its own.
    refs: list[Any] = []
    lock = threading.Lock()

    def submit(actor: Any) -> None:
        ref = actor.score.remote(BATCH)
        with lock:
            refs.append(ref)

    threads = [threading.Thread(target=submit, args=(a,)) for a in actors for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(refs) == 6
    results = ray.get(refs, timeout=60)
    for _, scored in results:
        check_batch(scored)
    ran_in: dict[int, set[int]] = {}
    for (pid, ident), _ in results:
        ran_in.setdefault(pid, set()).add(ident)
    assert sorted(ran_in) == sorted(w["pid"] for w in before)
    assert all(len(ids) >= 2 for ids in ran_in.values()), f"one thread per actor: {ran_in}"

    # The hangs killed workers; the pools replaced them, so the pids are read again.
    after = [reported(actor) for actor in actors]
    kill_and_check_gone(actors, before + after)


def wait_for_ping_while_scoring(actor: Any) -> float:
    """When ``actor`` first answered a ping while a ``score`` call of it was under way."""
    import ray

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        at, scoring = ray.get(actor.ping.remote(), timeout=30)
        if scoring:
            return float(at)
    raise AssertionError("no ping was answered while the actor was scoring")


def test_a_hung_item_never_blocks_an_async_actors_event_loop(cluster: Any) -> None:
    import ray

    # One scores with a plain function, the other with an ``async def`` one.
    scorers = (SCORER, ASYNC_SCORER)
    actors = [
        start(AsyncScorer, n, s, max_concurrency=8) for n, s in zip(NODES, scorers, strict=True)
    ]
    before = [reported(actor) for actor in actors]
    assert sorted(w["node"] for w in before) == sorted(node_ids(cluster))

    hung = [actor.score.remote([(HANG, "1")] * 3) for actor in actors]
    # While each actor awaits its hung items (three budgets, one worker), its loop answers.
    answered = [wait_for_ping_while_scoring(actor) for actor in actors]
    for (started, ended, scored), at in zip(ray.get(hung, timeout=60), answered, strict=True):
        assert [status for status, _, _ in scored] == ["timeout"] * 3
        assert started < at < ended
    for _, _, scored in ray.get([actor.score.remote(BATCH) for actor in actors], timeout=60):
        check_batch(scored)

    after = [reported(actor) for actor in actors]
    kill_and_check_gone(actors, before + after)


def _mid_hang(actor: Any) -> tuple[Any, dict[str, Any]]:
    """A hung batch under way on ``actor``, and the processes it has while the hang runs."""
    import ray

    reported(actor)  # warm
    ref = actor.score.remote([(HANG, "1")] * 20)
    ready, _ = ray.wait([ref], timeout=BUDGET / 2)
    assert ready == [], "the hung batch ended at once"
    return ref, reported(actor)  # a threaded actor answers while its other call hangs


def test_an_actor_killed_mid_hang_takes_its_pool_with_it(cluster: Any) -> None:
    import ray
    from ray.exceptions import RayActorError

    actor = start(ThreadedScorer, NODES[1], max_concurrency=2)
    ref, where = _mid_hang(actor)
    kill_and_check_gone([actor], [where])
    with pytest.raises(RayActorError):
        ray.get(ref, timeout=30)


def test_a_node_that_goes_away_takes_its_actors_pools_with_it(cluster: Any) -> None:
    import ray
    from ray.exceptions import RayActorError

    node = cluster.add_node(num_cpus=1, resources={"node-c": 4})
    cluster.wait_for_nodes()
    actor = start(ThreadedScorer, "node-c", max_concurrency=2)
    ref, where = _mid_hang(actor)
    assert where["node"] == node.node_id
    cluster.remove_node(node)
    kill_and_check_gone([], [where])
    with pytest.raises(RayActorError):
        ray.get(ref, timeout=30)


def test_an_adapter_in_an_actor_scores_a_hang_as_its_default(cluster: Any) -> None:
    import ray

    actor = start(AdapterScorer, NODES[0], max_concurrency=8)
    before = reported(actor)
    assert ray.get(actor.score.remote(BATCH), timeout=60) == [1.0, -1.0, 1.0, 0.0]
    kill_and_check_gone([actor], [before, reported(actor)])


def _zygotes_and_workers() -> set[int]:
    """The pools' processes under this cluster: descendants of this process (the raylets are
    its children), running the zygote's code (its workers are forks of it)."""
    found = set()
    for pid in descendants(os.getpid()):
        try:
            if b"_zygote" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:  # gone since the listing
            continue
    return found


def test_the_docs_example_runs_on_the_cluster(cluster: Any, tmp_path: Path) -> None:
    """docs/ray.md's driver, as a job of its own on this cluster (``RAY_ADDRESS``), with the
    scorer file the page shows; its pools' processes, seen while it runs, are gone after."""
    from tests.test_docs import assert_quoted, parse_page

    page = parse_page(ROOT / "docs" / "ray.md")
    for block in page.blocks:
        if "file" in block.directives:
            target = tmp_path / block.directives["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text)
    (driver,) = [b for b in page.blocks if b.lang == "python" and "skip" in b.directives]
    quote = page.blocks[page.blocks.index(driver) + 1]
    assert quote.lang == "text", quote
    (tmp_path / "driver.py").write_text(driver.text)

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_ADDRESS"] = cluster.address
    earlier = _zygotes_and_workers()  # none, unless an earlier test left some
    seen: set[int] = set()
    with subprocess.Popen(
        [sys.executable, "driver.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        try:
            while proc.poll() is None:
                seen |= _zygotes_and_workers() - earlier
                time.sleep(0.05)
            output = proc.stdout.read() if proc.stdout else ""
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, output
    assert_quoted(quote.text, output, quote.id)
    assert len(seen) >= 4, f"two zygotes and their workers expected, saw {seen}"
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline and any(state(pid) is not None for pid in seen):
        time.sleep(0.05)
    left = {pid: state(pid) for pid in seen if state(pid) is not None}
    assert not left, f"left behind after the driver's ray.shutdown() (pid: state): {left}"
