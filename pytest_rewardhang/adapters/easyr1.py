"""EasyR1's batch reward function (``worker.reward.reward_function=file.py:name``) on a pool.

EasyR1 loads the named function from that file, binds ``reward_function_kwargs`` to it, and
calls it once per batch in one reward actor, ``reward_fn(reward_inputs) -> scores``: a list of
``{"response", "response_length", "ground_truth"}`` in, a list of dicts out, whose ``overall``
is each sample's reward and whose every key is logged as a metric (``REWARD_TYPE = "batch"``).
Unguarded, one sample that hangs holds the batch, and the step, for good; nothing times it out.
In your reward file::

    from pytest_rewardhang.adapters.easyr1 import guarded_batch_reward

    REWARD_NAME = "math"
    REWARD_TYPE = "batch"
    compute_score = guarded_batch_reward("/abs/path/math.py:compute_score", budget=2.0)

The batch scorer is called once per sample, with a list of that one sample and the bound
keyword arguments, all the batch's samples at once over the pool's ``workers``, each under
``budget`` seconds. The answers come back in order, each the scorer's dict with ``reward_hang``
(1.0 for a sample that got the default) and, with ``slow_s`` set, ``reward_seconds`` and
``reward_slow`` added, which EasyR1 logs with its other keys. A sample that hangs, crashes,
blows its memory or cannot be pickled gets a dict of the keys of the scorer's answers (learnt
from ``warmup``, one sample's dict, scored once more when the pool is up, or else from the
first answer), ``overall`` being ``default`` and every other key 0.0; an exception the scorer
raises is raised here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_rewardhang.adapters import _shared
from pytest_rewardhang.guard import Outcome as _Outcome

__all__ = ["GuardedBatchReward", "guarded_batch_reward"]

#: The key of EasyR1's reward in each answer (``RewardScore``, verl/workers/reward/function.py).
_OVERALL = "overall"


class _Each(_shared.Together):
    """A batch scorer called per sample: ``_Each([scorer])(0, sample, **kwargs)`` is
    ``scorer([sample], **kwargs)[0]``; ``_Each([scorer])(None)``, the pool's warm-up without
    one of the user's, imports it in the zygote."""

    __slots__ = ()

    def __call__(self, which: int | None, /, reward_input: Any = None, **kwargs: Any) -> Any:
        if which is None:
            return super().__call__(None)
        return self._scorer(which)([reward_input], **kwargs)[0]


class GuardedBatchReward(_shared.Pooled):
    """EasyR1's ``reward_fn(reward_inputs, **kwargs) -> list[dict]``, each sample on a pool."""

    def __init__(self, scorer: _shared.Scorer, **limits: Any) -> None:
        warmup = limits.pop("warmup", None)
        if warmup is not None and not isinstance(warmup, Mapping):
            raise ValueError(f"warmup must be one sample's dict, not {warmup!r:.80}")
        limits["warmup"] = (None,) if warmup is None else (0, dict(warmup))
        super().__init__(scorer, via=(_Each([scorer]), (0,)), **limits)
        self.scoring.score_key = _OVERALL

    def __call__(self, reward_inputs: Sequence[Mapping[str, Any]], **kwargs: Any) -> list[Any]:
        samples = [{"reward_input": dict(sample), **kwargs} for sample in reward_inputs]
        return [self._answer(value, out) for value, out in self.scoring.scored_many(samples)]

    def _answer(self, value: Any, out: _Outcome) -> Any:
        if not out.ok and not isinstance(value, dict):  # before any answer: EasyR1's one key
            value = {_OVERALL: value}
        if isinstance(value, dict):
            return {**value, **self.scoring.metrics(out)}
        return value


#: EasyR1's batch ``reward_fn`` scoring ``scorer`` per sample on a guarded pool.
guarded_batch_reward = GuardedBatchReward
