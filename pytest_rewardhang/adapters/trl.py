"""TRL reward functions (``reward_func(prompts, completions, **kwargs) -> list[float]``) on a pool.

Wrap a per-sample scorer and pass the result in ``GRPOTrainer(reward_funcs=[...])``::

    from pytest_rewardhang.adapters.trl import async_pooled_reward, pooled_reward
    accuracy = pooled_reward("my_rewards.math:accuracy", budget=2.0, default=0.0)
    accuracy = async_pooled_reward("my_rewards.math:accuracy")  # TRL awaits it, beside others
    accuracy, fmt = pooled_rewards(["my_rewards.math:accuracy", "my_rewards.fmt:ok"], workers=4)

TRL calls a reward function with the batch: ``prompts``, ``completions``, ``completion_ids``,
every dataset column as a list, and batch-wide objects (``trainer_state``, ``log_extra``,
``log_metric``, ``environments``). The scorer is called once per sample, with that sample's
``completion``, ``prompt`` and column values, only those its signature takes (all of them if it
has ``**kwargs``); the batch-wide arguments and ``completion_ids`` are never shipped to a worker.
All samples are submitted at once and spread over the pool's warm workers, each under
``budget`` seconds. A sample that hangs, crashes, blows its memory or cannot be pickled scores
``default`` with one warning line; an exception the scorer raises is raised here. ``None`` is
the default to give: TRL turns it into NaN and leaves the sample out of its group's baseline
(a sample every reward function left unscored gets no advantage), where ``0.0`` would count
as a wrong answer.

Through TRL's ``log_metric``, each call logs per sample ``reward_hang`` (1.0 for a sample that
got the default) and, with ``slow_s`` set, ``reward_seconds`` and ``reward_slow``: TRL averages
each over the logging step beside its own metrics.

``AsyncGRPOTrainer`` pickles its reward functions into a spawned process and calls a sync one
through ``asyncio.to_thread``: give it :func:`pooled_reward` (picklable; its pool starts in that
process), not :func:`async_pooled_reward` (a closure, which does not pickle).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any

from pytest_rewardhang.adapters import _shared
from pytest_rewardhang.guard import MAX_PROCESSES as _MAX_PROCESSES
from pytest_rewardhang.guard import Outcome as _Outcome

__all__ = ["PooledReward", "async_pooled_reward", "pooled_reward", "pooled_rewards"]

#: What TRL passes for the whole batch, or that is no use to a per-sample scorer: never shipped.
_BATCH_WIDE = frozenset(
    {"completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)


class PooledReward(_shared.Pooled):
    """A TRL reward function scoring each sample on a warm guarded pool."""

    def __init__(
        self,
        scorer: Callable[..., Any] | str,
        *,
        columns: Collection[str] | None = None,
        **limits: Any,
    ) -> None:
        """``limits``: :class:`~pytest_rewardhang.adapters._shared.Scoring`'s keywords."""
        super().__init__(scorer, **limits)
        self.columns = None if columns is None else frozenset(columns)

    def samples(
        self, took: _shared.Accepts, completions: Sequence[Any], kwargs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """One dict of keyword arguments per completion, holding what the scorer takes."""
        count = len(completions)
        per_sample: dict[str, Sequence[Any]] = {"completion": completions}
        for key, value in kwargs.items():
            name = "prompt" if key == "prompts" else key
            if key in _BATCH_WIDE or (self.columns is not None and key not in self.columns):
                continue
            if (
                took.takes(name)
                and isinstance(value, Sequence)
                and not isinstance(value, str)
                and len(value) == count
            ):
                per_sample[name] = value
        return [{key: value[i] for key, value in per_sample.items()} for i in range(count)]

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[Any]:
        samples = self.samples(self.scoring.accepts(), completions, kwargs)
        return self._logged(self.scoring.scored_many(samples), kwargs.get("log_metric"))

    async def ascore(self, completions: Sequence[Any], **kwargs: Any) -> list[Any]:
        """The batch's scores, awaited: TRL's event loop runs on while the workers score."""
        samples = self.samples(await self.scoring.aaccepts(), completions, kwargs)
        scored = await self.scoring.ascored_many(samples)
        return self._logged(scored, kwargs.get("log_metric"))

    def _logged(self, scored: list[tuple[Any, _Outcome]], log_metric: Any) -> list[Any]:
        """The scores; each sample's metrics through TRL's ``log_metric(name, value)``."""
        if callable(log_metric):
            for _, out in scored:
                for name, value in self.scoring.metrics(out).items():
                    log_metric(name, value)
        return [value for value, _ in scored]


#: A TRL ``reward_funcs`` entry that scores ``scorer`` per sample on a guarded pool.
pooled_reward = PooledReward
#: ``reward_funcs`` entries, one per scorer, all on one pool: one zygote imports every scorer,
#: and the samples of all of them share its ``workers``.
pooled_rewards = PooledReward.together


def async_pooled_reward(
    scorer: Callable[..., Any] | str,
    *,
    budget: float = 2.0,
    default: float | None = 0.0,
    workers: int = 2,
    memory_mb: float | None = None,
    columns: Collection[str] | None = None,
    hang_log: str | None = None,
    name: str | None = None,
    warmup: _shared.Warmup = None,
    isolate: bool = False,
    max_processes: int | None = _MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
    slow_s: float | None = None,
) -> Callable[..., Coroutine[Any, Any, list[Any]]]:
    """:func:`pooled_reward` as an ``async def`` TRL reward function.

    TRL runs the reward functions it finds to be coroutine functions
    (``inspect.iscoroutinefunction``) together on its event loop, with ``asyncio.gather``; this
    one awaits its samples on the pool without holding that loop.
    """
    inner = PooledReward(
        scorer,
        budget=budget,
        default=default,
        workers=workers,
        memory_mb=memory_mb,
        columns=columns,
        hang_log=hang_log,
        name=name,
        warmup=warmup,
        isolate=isolate,
        max_processes=max_processes,
        network=network,
        unprivileged=unprivileged,
        slow_s=slow_s,
    )

    async def reward(completions: Sequence[Any], **kwargs: Any) -> list[Any]:
        return await inner.ascore(completions, **kwargs)

    reward.__name__ = reward.__qualname__ = inner.__name__
    return reward
