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

Each sample's metrics go into its ``metadata``: ``reward_hang`` (1.0 for a sample that got the
default) and, with ``slow_s`` set, ``reward_seconds`` and ``reward_slow``. slime logs them as
``rollout/reward_hang`` and so on, a mean over the rollout, with
``--custom-rollout-log-function-path pytest_rewardhang.adapters.slime.log_reward_metrics``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from pytest_rewardhang.adapters import _shared, _state

__all__ = ["PooledGroupRM", "PooledRM", "log_reward_metrics", "pooled_group_rm", "pooled_rm"]

_METRICS = (_shared.HANG_METRIC, _shared.SECONDS_METRIC, _shared.SLOW_METRIC)

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
        value, out = await self.scoring.ascored(self.sample_kwargs(took, args, sample))
        _note(sample, self.scoring.metrics(out))
        return value


class PooledGroupRM(PooledRM):
    """slime's group form, ``async def batched_rm(args, samples) -> list``."""

    async def __call__(self, args: Any, samples: Sequence[Any], **kwargs: Any) -> list[Any]:  # type: ignore[override]
        took = await self.scoring.aaccepts()
        scored = await self.scoring.ascored_many(
            [self.sample_kwargs(took, args, sample) for sample in samples]
        )
        for sample, (_, out) in zip(samples, scored, strict=True):
            _note(sample, self.scoring.metrics(out))
        return [value for value, _ in scored]


def _note(sample: Any, metrics: dict[str, float]) -> None:
    """Into the sample's ``metadata`` (a dict on slime's ``Sample``), for
    :func:`log_reward_metrics`."""
    metadata = getattr(sample, "metadata", None)
    if isinstance(metadata, dict):
        metadata.update(metrics)


def log_reward_metrics(
    rollout_id: int,
    args: Any,
    samples: Sequence[Any],
    rollout_extra_metrics: dict[str, Any] | None,
    rollout_time: float,
) -> bool:
    """slime's custom rollout log function (``--custom-rollout-log-function-path``): the mean
    of each sample metric over the rollout, as ``rollout/reward_hang`` and so on, added to the
    rollout's extra metrics, which slime's own log then carries (so this returns False:
    ``slime/observability/rollout_metrics.py:256-271`` at 624b824a). A rollout function that
    returns no metrics dict leaves nothing to add them to: said once."""
    found = {
        name: [s.metadata[name] for s in samples if name in (getattr(s, "metadata", None) or {})]
        for name in _METRICS
    }
    means = {f"rollout/{name}": statistics.fmean(v) for name, v in found.items() if v}
    if isinstance(rollout_extra_metrics, dict):
        rollout_extra_metrics.update(means)
    elif means and _state.STATE.say_once("slime: no metrics dict"):
        _shared.log.warning(
            "log_reward_metrics: this rollout function returns no metrics dict, so the reward"
            " metrics are not logged (%s)",
            ", ".join(sorted(means)),
        )
    return False


#: slime's per-sample ``rm(args, sample)`` scoring ``scorer`` on a guarded pool.
pooled_rm = PooledRM
#: slime's ``--group-rm`` form, ``batched_rm(args, samples)``.
pooled_group_rm = PooledGroupRM
