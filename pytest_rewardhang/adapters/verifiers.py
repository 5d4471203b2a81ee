"""A verifiers rubric function (``vf.Rubric(funcs=[...])``) that scores on a pool.

verifiers calls each reward function with the keyword arguments its signature names, chosen
from the rollout's ``prompt``, ``completion`` (a list of messages, for chat), ``answer``,
``state``, ``task``, ``info`` and the dataset's columns, and awaits it when it is async::

    from pytest_rewardhang.adapters.verifiers import pooled_rubric_func
    correct = pooled_rubric_func("my_rewards.math:correct_answer", budget=2.0, default=0.0)
    rubric = vf.Rubric(funcs=[correct], weights=[1.0])

The function returned is an ``async def`` carrying the scorer's own signature and name, so
verifiers passes it just what the scorer takes (a sync or an async scorer: the worker awaits
an async one). A scorer with ``**kwargs`` gets everything but ``state``, unless it names it.
Each call is awaited on one warm pool per process, so concurrent rollouts share its workers;
a sample that hangs, crashes, blows its memory or cannot be pickled scores ``default`` with one
warning line.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from pytest_rewardhang.adapters import _shared
from pytest_rewardhang.guard import MAX_PROCESSES as _MAX_PROCESSES

__all__ = ["pooled_rubric_func"]

#: The whole rollout state (clients, responses, timing): shipped only when the scorer names it.
_NOT_SHIPPED = frozenset({"state", "states"})


def pooled_rubric_func(
    scorer: Callable[..., Any] | str,
    *,
    budget: float = 2.0,
    default: float = 0.0,
    workers: int = 2,
    memory_mb: float | None = None,
    hang_log: str | None = None,
    name: str | None = None,
    warmup: _shared.Warmup = None,
    isolate: bool = False,
    max_processes: int | None = _MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """An ``async def`` rubric function scoring ``scorer`` on a warm guarded pool.

    A spec's signature is read now, in a forked child (nothing is imported here), because
    verifiers reads the rubric function's signature before its first call.
    """
    scoring = _shared.Scoring(
        scorer,
        budget=budget,
        default=default,
        workers=workers,
        memory_mb=memory_mb,
        hang_log=hang_log,
        name=name,
        warmup=warmup,
        isolate=isolate,
        max_processes=max_processes,
        network=network,
        unprivileged=unprivileged,
    )
    took = scoring.accepts()

    async def rubric_func(**kwargs: Any) -> Any:
        return await scoring.ascore(_shared.only_accepted(kwargs, took, _NOT_SHIPPED))

    rubric_func.__name__ = rubric_func.__qualname__ = scoring.name
    rubric_func.__signature__ = took.signature  # type: ignore[attr-defined]
    return rubric_func
