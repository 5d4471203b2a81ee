"""Any trainer's scorer on a pool, awaited or called: SkyRL, rllm, NeMo Gym and the rest.

Where the trainer scores inside its own code (an environment's ``step``, a reward function
object, a resources server's ``async def verify``), call the scorer through a
:class:`PooledScorer` instead of directly::

    from pytest_rewardhang.adapters.generic import PooledScorer
    math_score = PooledScorer("my_rewards.math:compute_score", budget=2.0, default=0.0)
    reward = await math_score.score(response, ground_truth)        # in a coroutine
    reward = math_score.score_sync(response, ground_truth)         # in a thread

Arguments go to the scorer as given. Every call, from any thread or coroutine of the process,
is submitted to one warm pool, so concurrent calls share its workers, each under ``budget``
seconds; ``score`` never blocks the event loop. A call that hangs, crashes, blows its memory or
cannot be pickled returns ``default`` (shaped like the scorer's dicts, when it returns dicts)
with one warning line; an exception the scorer raises is raised here. ``score_with_metrics``
and ``score_sync_with_metrics`` give each sample's metrics too, for the trainer's own log (an
environment's ``metadata``, say): ``reward_hang`` and, with ``slow_s``, ``reward_seconds`` and
``reward_slow``.
"""

from __future__ import annotations

from typing import Any

from pytest_rewardhang.adapters import _shared

__all__ = ["PooledScorer"]


class PooledScorer(_shared.Pooled):
    """A scorer on a warm guarded pool: ``await score(...)`` or ``score_sync(...)``."""

    async def score(self, *args: Any, **kwargs: Any) -> Any:
        """``scorer(*args, **kwargs)`` in a worker, awaited."""
        return (await self.score_with_metrics(*args, **kwargs))[0]

    def score_sync(self, *args: Any, **kwargs: Any) -> Any:
        """``scorer(*args, **kwargs)`` in a worker; blocks this thread only."""
        return self.score_sync_with_metrics(*args, **kwargs)[0]

    async def score_with_metrics(self, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, float]]:
        """:meth:`score`, and the sample's metrics (``reward_hang``; with ``slow_s``,
        ``reward_seconds`` and ``reward_slow``) for the trainer's own log."""
        pool = await self.scoring._apool()
        out = await pool.asubmit(*self.scoring.prefix, *args, **kwargs)
        return self.scoring.result(out, _logged(args, kwargs)), self.scoring.metrics(out)

    def score_sync_with_metrics(self, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, float]]:
        """:meth:`score_sync`, and the sample's metrics as :meth:`score_with_metrics` gives them."""
        out = self.scoring.pool().submit(*self.scoring.prefix, *args, **kwargs).result()
        return self.scoring.result(out, _logged(args, kwargs)), self.scoring.metrics(out)


def _logged(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {**{f"arg{i}": value for i, value in enumerate(args)}, **kwargs}
