"""TRL-style reward functions (``reward_func(completions, **kwargs) -> list[float]``) on a pool.

Wrap a per-sample scorer and pass the result in ``GRPOTrainer(reward_funcs=[...])``::

    from pytest_rewardhang.adapters.trl import pooled_reward
    accuracy = pooled_reward("my_rewards.math:accuracy", budget=2.0, default=0.0)

TRL calls it with the batch's completions and every dataset column as a list; the scorer is
called once per sample as ``scorer(completion=..., <column>=<that sample's value>, ...)`` on
warm workers, each under ``budget`` seconds. A sample that hangs, crashes or blows its memory
scores ``default`` (``None`` tells TRL to ignore it) with one warning line; an exception the
scorer raises is raised here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from pytest_rewardhang.adapters import _shared

__all__ = ["PooledReward", "pooled_reward"]

#: Batch-wide arguments TRL passes that are not per-sample dataset columns worth shipping.
_NOT_COLUMNS = frozenset({"completion_ids", "trainer_state"})


class PooledReward:
    """A TRL reward function scoring each sample on a warm guarded pool."""

    def __init__(
        self,
        scorer: Callable[..., Any] | str,
        *,
        budget: float = 2.0,
        default: float | None = 0.0,
        workers: int = 2,
        memory_mb: float | None = None,
        columns: Collection[str] | None = None,
        hang_log: str | None = None,
        name: str | None = None,
    ) -> None:
        self.scorer = scorer
        self.budget = budget
        self.default = default
        self.workers = workers
        self.memory_mb = memory_mb
        self.columns = None if columns is None else frozenset(columns)
        self.hang_log = hang_log
        # TRL logs each reward function under its __name__.
        self.__name__ = name or (
            scorer.rsplit(":", 1)[-1] if isinstance(scorer, str) else scorer.__name__
        )

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        count = len(completions)
        columns = {
            key: value
            for key, value in kwargs.items()
            if (key in self.columns if self.columns is not None else key not in _NOT_COLUMNS)
            and isinstance(value, Sequence)
            and not isinstance(value, str)
            and len(value) == count
        }
        samples = [
            {"completion": completion, **{key: value[i] for key, value in columns.items()}}
            for i, completion in enumerate(completions)
        ]
        pool = _shared.pool_for(self.scorer, self.budget, self.memory_mb, self.workers)
        outs = pool.map(samples)
        return [
            _shared.value_or_default(out, self.default, sample, self.hang_log, self.__name__)
            for out, sample in zip(outs, samples, strict=True)
        ]


#: A TRL ``reward_funcs`` entry that scores ``scorer`` per sample on a guarded pool.
pooled_reward = PooledReward
