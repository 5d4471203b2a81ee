"""slime's custom reward model (``--custom-rm-path module.rm``) on a pool.

slime awaits ``rm(args, sample)`` for each sample, or, with ``--group-rm``,
``batched_rm(args, samples)`` for a group; in your module::

    from pytest_rewardhang.adapters.slime import pooled_group_rm, pooled_rm
    rm = pooled_rm("my_rewards.math:compute_score", budget=2.0, default=0.0)
    batched_rm = pooled_group_rm("my_rewards.math:compute_score", budget=2.0)

The scorer is called per sample with what its signature takes of the sample's ``response``,
``label``, ``prompt`` and ``metadata`` (``sample`` and ``args`` themselves only when it names
them). Samples are awaited on one warm pool per process, so the rollout's concurrent samples
share its workers, each under ``budget`` seconds; the event loop never blocks. A sample that
hangs, crashes, blows its memory or cannot be pickled scores ``default`` (shaped like the
scorer's dicts, when it returns dicts) with one warning line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_rewardhang.adapters import _shared

__all__ = ["PooledGroupRM", "PooledRM", "pooled_group_rm", "pooled_rm"]

_FIELDS = ("response", "label", "prompt", "metadata")


class PooledRM(_shared.Pooled):
    """slime's ``async def rm(args, sample)``, scoring on a warm guarded pool."""

    def sample_kwargs(self, took: _shared.Accepts, args: Any, sample: Any) -> dict[str, Any]:
        found = {name: getattr(sample, name, None) for name in _FIELDS if took.takes(name)}
        if took.named("sample"):
            found["sample"] = sample
        if took.named("args"):
            found["args"] = args
        return found

    async def __call__(self, args: Any, sample: Any, **kwargs: Any) -> Any:
        took = await self.scoring.aaccepts()
        return await self.scoring.ascore(self.sample_kwargs(took, args, sample))


class PooledGroupRM(PooledRM):
    """slime's group form, ``async def batched_rm(args, samples) -> list``."""

    async def __call__(self, args: Any, samples: Sequence[Any], **kwargs: Any) -> list[Any]:  # type: ignore[override]
        took = await self.scoring.aaccepts()
        return await self.scoring.ascore_many(
            [self.sample_kwargs(took, args, sample) for sample in samples]
        )


#: slime's per-sample ``rm(args, sample)`` scoring ``scorer`` on a guarded pool.
pooled_rm = PooledRM
#: slime's ``--group-rm`` form, ``batched_rm(args, samples)``.
pooled_group_rm = PooledGroupRM
