"""OpenRLHF's custom reward function (``--remote_rm_url /path/to/reward.py``) on a pool.

OpenRLHF loads ``reward_func`` from that file and calls ``reward_func(queries, prompts, labels)``
once per sample, on a thread of its own (``asyncio.to_thread``), many at once; it reads
``{"rewards", "scores", "extra_logs"}`` back. In that file::

    from pytest_rewardhang.adapters.openrlhf import pooled_reward_func
    reward_func = pooled_reward_func("my_rewards.math:compute_score", budget=2.0, default=0.0)

The scorer is called per sample with what its signature takes of ``response`` (the query with
the prompt cut off, as OpenRLHF's own examples do), ``query``, ``prompt`` and ``label``. It may
return a number, or a dict with ``score`` whose other numeric values go to ``extra_logs``
(each list one number a sample: 0.0 where a sample has none, as a defaulted one). A sample
that hangs, crashes, blows its memory or cannot be pickled scores ``default`` (a number), with
one warning line and ``reward_hang`` 1.0 in ``extra_logs``; a score ``float()`` does
not take raises a ``TypeError`` naming it, as an exception the scorer raised is raised. With
``slow_s`` set, ``extra_logs`` also holds each sample's scoring time, ``reward_seconds``, and
``reward_slow``, 1.0 for a sample over ``slow_s`` seconds.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any

from pytest_rewardhang.adapters import _shared

__all__ = ["PooledRewardFunc", "pooled_reward_func"]


class PooledRewardFunc(_shared.Pooled):
    """An OpenRLHF ``reward_func`` scoring each sample on a warm guarded pool."""

    def __init__(self, scorer: _shared.Scorer, **limits: Any) -> None:
        super().__init__(scorer, **limits)
        default = self.scoring.default
        if not (isinstance(default, int | float) and not isinstance(default, bool)):
            # Checked now: found at the first hang, in training, it would cost the call.
            raise ValueError(f"default must be a number for OpenRLHF's rewards, not {default!r}")

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[Any], labels: Sequence[Any], **kwargs: Any
    ) -> dict[str, Any]:
        took = self.scoring.accepts()
        samples = []
        for query, prompt, label in zip(queries, prompts, labels, strict=True):
            where = query.find(prompt) if isinstance(prompt, str) and prompt else -1
            response = query[where + len(prompt) :] if where >= 0 else query
            sample = {"response": response, "query": query, "prompt": prompt, "label": label}
            samples.append({k: v for k, v in sample.items() if took.takes(k)})
        rewards: list[float] = []
        extras: list[dict[str, float]] = []
        for value, out in self.scoring.scored_many(samples):
            extra = self.scoring.metrics(out)
            if isinstance(value, dict):
                for key, number in value.items():
                    if key != "score" and isinstance(number, int | float):
                        extra[key] = float(number)
                value = value.get("score")
            rewards.append(_number(value, self.__name__))
            extras.append(extra)
        # One number a sample in every list, lined up with rewards: a sample without a key
        # (a default before any dict was seen, a key the scorer leaves out) logs 0.0 for it.
        keys = dict.fromkeys(key for extra in extras for key in extra)
        logs = {key: [extra.get(key, 0.0) for extra in extras] for key in keys}
        return {"rewards": rewards, "scores": list(rewards), "extra_logs": logs}


def _number(value: Any, who: str) -> float:
    """A score as OpenRLHF takes it (what ``float()`` takes: a bool, a numpy scalar); else a
    TypeError naming what the scorer returned."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        shown = reprlib.repr(value)
    raise TypeError(f"{who} returned {shown}, not a number: OpenRLHF's rewards are numbers")


#: An OpenRLHF ``reward_func`` that scores ``scorer`` per sample on a guarded pool.
pooled_reward_func = PooledRewardFunc
