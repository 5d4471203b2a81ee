"""AReaL's ``AsyncRewardWrapper``, with its call shape, on a pool that kills.

AReaL's workflows wrap the reward function as ``AsyncRewardWrapper(reward_fn)`` and await
``wrapper(prompt, completions, prompt_ids, completion_ids, **task_data)``
(``areal/workflow/rlvr.py``). Its wrapper runs the call on a ``ProcessPoolExecutor`` and stops
waiting at ``timeout_seconds``, but never stops the call: the hung process holds its worker for
good, the same sample is tried again (``max_retries``), and the pool fills with hangs.
:class:`GuardedRewardWrapper` takes the same arguments and is awaited the same way; each call
runs on a warm guarded pool, is killed at ``timeout_seconds`` and scores ``default`` (0.0, what
AReaL's wrapper returns after its retries), with one warning line. A hang is not tried again
(it would hang again); ``max_retries`` is taken for the call's sake only. Put it in AReaL's
place before the workflow is made::

    import areal.workflow.rlvr
    from pytest_rewardhang.adapters.areal import GuardedRewardWrapper

    areal.workflow.rlvr.AsyncRewardWrapper = GuardedRewardWrapper

or make one yourself in a workflow of your own:
``self.async_reward_fn = GuardedRewardWrapper(reward_fn, timeout_seconds=15)``. ``max_workers``
is the pool's ``workers`` (2 unless given); the guard's other keywords (``memory_mb``,
``warmup``, ``hang_log``, ``slow_s``, ...) are taken too.

Awaited in an AReaL workflow, each sample's metrics go where the workflow records its
``reward``: AReaL's ``stats_tracker``, in the workflow's scope (``rollout``, or
``eval-rollout``): ``reward_hang`` (1.0 for a sample that got the default) and, with ``slow_s``
set, ``reward_seconds`` and ``reward_slow`` (``areal/workflow/rlvr.py:135``).
"""

from __future__ import annotations

import sys
from typing import Any

from pytest_rewardhang.adapters import _shared, _state, generic

__all__ = ["GuardedRewardWrapper"]


class GuardedRewardWrapper(generic.PooledScorer):
    """``AsyncRewardWrapper(reward_fn, timeout_seconds, max_workers, max_retries)``, guarded."""

    def __init__(
        self,
        reward_fn: Any,
        timeout_seconds: float = 15,
        max_workers: int | None = None,
        max_retries: int = 3,
        **limits: Any,
    ) -> None:
        limits.setdefault("default", 0.0)
        super().__init__(reward_fn, budget=timeout_seconds, workers=max_workers or 2, **limits)
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries  # never used: a hang is not tried again

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value, metrics = await self.score_with_metrics(*args, **kwargs)
        _record(metrics, self.scoring)
        return value


def _record(metrics: dict[str, float], scoring: _shared.Scoring) -> None:
    """Into AReaL's stats tracker, as the workflow records its reward, where AReaL runs: the
    workflow's context (a ``contextvars`` value) is this coroutine's. Never imported here."""
    if "areal" not in sys.modules:
        if scoring.slow_s is not None and _state.STATE.say_once("areal unreported", scoring.name):
            _shared.log.warning(
                "%s: slow_s is set, but AReaL is not loaded in this process: its metrics are"
                " not recorded",
                scoring.name,
            )
        return
    from areal import workflow_context
    from areal.utils import stats_tracker

    stats_tracker.get(workflow_context.stat_scope()).scalar(**metrics)
