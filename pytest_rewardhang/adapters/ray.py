"""A Ray reward actor: one warm guarded pool per actor process, batches per call.

Ray has no per-task timeout and ``ray.cancel`` cannot stop a running actor method, so a reward
that hangs inside an actor holds it for good. :class:`RewardActor` scores every item on a
:class:`~pytest_rewardhang.guard.Pool` made in ``__init__``: a hung item is killed at its
budget and gets ``default``, the actor answers, and a killed actor takes its pool with it (the
zygote watches the actor's pid). It is a plain class, so importing this module never imports
Ray; make it an actor with ``ray.remote``, or place actors on every node with
:func:`actors_per_node`::

    from ray.util import ActorPool
    from pytest_rewardhang.adapters.ray import actors_per_node

    actors = actors_per_node("my_rewards.math:compute_score", per_node=1, workers=4, budget=2.0)
    scores = list(ActorPool(actors).map(lambda a, batch: a.score.remote(batch), batches))

Each item of a batch is a tuple of positional or a dict of keyword arguments, as for
:meth:`Pool.map`. The methods are synchronous: several calls in flight (``max_concurrency``,
16 unless told) share the pool's workers from Ray's threads. :meth:`RewardActor.compute_score`
has the call of verl's ``RewardComputeWorker`` (keyword arguments, one item), but verl's remote
reward manager makes its own workers and takes no other class: there, the verl adapter's sync
``compute_score`` with ``workers=1`` is the custom reward function (see ``docs/ray.md``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_rewardhang import guard
from pytest_rewardhang.adapters import _shared

__all__ = ["RewardActor", "actors_per_node"]

_Item = tuple[Any, ...] | Mapping[str, Any]
_log = logging.getLogger("pytest_rewardhang.adapters")


class RewardActor:
    """Scores batches on one warm guarded pool; ``default`` for an item that is not OK.

    When the scorer returns dicts, ``default`` is a dict of their keys, ``score`` being
    ``default`` (a dict ``default`` is used as given): their keys are learnt from the warm-up
    item, scored once more when the pool is up, or else from the first answer in the actor."""

    def __init__(
        self,
        scorer: str,
        workers: int = 1,
        budget: float = 2.0,
        default: Any = 0.0,
        memory_mb: float | None = None,
        warmup: _Item | None = None,
        isolate: bool = False,
        max_processes: int | None = guard.MAX_PROCESSES,
        network: bool = True,
        unprivileged: bool = False,
        slow_s: float | None = None,
    ) -> None:
        _shared.check_slow_s(slow_s)
        self._options: dict[str, Any] = {
            "workers": workers,
            "budget": budget,
            "memory_mb": memory_mb,
            "warmup": warmup,
            "isolate": isolate,
            "max_processes": max_processes,
            "network": network,
            "unprivileged": unprivileged,
        }
        self._scorer = scorer
        # Made here, once per actor process: warm before the first call, gone with the actor.
        self.pool = guard.Pool(scorer, **self._options)
        if warmup is not None:
            _shared.learn_from_warmup(scorer, self.pool, warmup)
        self.default = default
        #: Over this many seconds an item is slow; None: no timing metrics.
        self.slow_s = slow_s
        self.statuses: Counter[str] = Counter()
        self._counting = threading.Lock()  # calls in flight run on Ray's threads at once

    def score(self, batch: Sequence[_Item]) -> list[Any]:
        """One score per item, in order: the scorer's value, or ``default``."""
        return [value for value, _ in self.score_with_status(batch)]

    def score_with_status(self, batch: Sequence[_Item]) -> list[tuple[Any, str]]:
        """One ``(score, status)`` per item: ``"ok"``, or why it got ``default`` (``"timeout"``,
        ``"crashed"``, ``"memory"``, ``"error"``)."""
        return [(self._scored(out), out.status.value) for out in self._outcomes(batch)]

    def score_with_metrics(self, batch: Sequence[_Item]) -> list[tuple[Any, dict[str, float]]]:
        """One ``(score, metrics)`` per item, the metrics under the names every adapter uses:
        ``reward_hang`` and, with ``slow_s``, ``reward_seconds`` and ``reward_slow``."""
        return [
            (self._scored(out), _shared.sample_metrics(out, self.slow_s))
            for out in self._outcomes(batch)
        ]

    def _outcomes(self, batch: Sequence[_Item]) -> list[guard.Outcome]:
        items = list(batch)
        pool = self._live_pool()
        try:
            outs = pool.map(items)
        except (guard.PoolError, ValueError):
            if not pool.closed:
                raise  # a bad item (map's ValueError), not the pool
            # It failed (in this thread, which drove it; another's outcomes say pool_ended).
            _log.warning("RewardActor: the pool failed; scored %r for its batch", self.default)
            outs = [guard.Outcome(guard.Status.ERROR, pool_ended=True)] * len(items)
        return outs

    def _live_pool(self) -> guard.Pool:
        """The pool, made anew if it failed (a zygote that could not be started again)."""
        with self._counting:
            if self.pool.closed:
                self.pool = guard.Pool(self._scorer, **self._options)
            return self.pool

    def compute_score(self, **kwargs: Any) -> Any:
        """One item by keyword, as verl's remote reward manager calls its reward workers
        (``data_source``, ``solution_str``, ``ground_truth``, ``extra_info``). With ``slow_s``,
        a dict with the item's metrics, as the verl adapter answers (:func:`_shared.verl_row`)."""
        out = self._live_pool().submit(**kwargs).result()
        if self.slow_s is None:
            return self._scored(out)
        return _shared.verl_row(self._scored(out), _shared.sample_metrics(out, self.slow_s))

    def stats(self) -> dict[str, Any]:
        """This actor's process and node, and how many items ended in each status."""
        try:
            import ray

            # Asked outside Ray, the runtime context would start a whole local cluster.
            node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        except Exception:  # noqa: BLE001 - without Ray (or before it is up) there is no node
            node = None
        with self._counting:
            statuses = dict(self.statuses)
        return {"pid": os.getpid(), "node": node, "statuses": statuses}

    def _scored(self, out: guard.Outcome) -> Any:
        """The item's score (the scorer's value, or ``default``), counted by status."""
        with self._counting:
            self.statuses[out.status.value] += 1
        if out.ok:
            _shared.learn(self._scorer, out.value)
            return out.value
        return _shared.default_for(self._scorer, self.default)


def actors_per_node(
    scorer: str,
    per_node: int = 1,
    workers: int = 1,
    max_concurrency: int = 16,
    **options: Any,
) -> list[Any]:
    """``per_node`` :class:`RewardActor` actors on every alive node with ``workers`` CPUs free,
    each reserving them (``num_cpus=workers``) and pinned to its node; ``options`` go to
    :class:`RewardActor` (``budget``, ``default``, ...). Needs ``ray.init()`` first."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray_: Any = ray  # partly annotated: its untyped calls would not pass mypy --strict
    remote = ray_.remote(RewardActor)
    nodes = [n for n in ray_.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= workers]
    return [
        remote.options(
            num_cpus=workers,
            max_concurrency=max_concurrency,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
        ).remote(scorer, workers=workers, **options)
        for node in nodes
        for _ in range(per_node)
    ]
