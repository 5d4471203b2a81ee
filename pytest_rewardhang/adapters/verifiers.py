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

verifiers logs every rubric function's value under its name, and a function of weight 0 is a
metric only (``Rubric.add_metric``). The function's ``metrics`` are three such functions,
``reward_hang`` (1.0 for a rollout whose guarded functions gave a default), ``reward_seconds``
(their scoring time) and ``reward_slow`` (1.0 over ``slow_s``; with ``slow_s`` only), each
read from the rollout's ``state``, where the guarded function notes its sample::

    correct = pooled_rubric_func("my_rewards.math:correct_answer", budget=2.0, slow_s=1.0)
    rubric = vf.Rubric(funcs=[correct], weights=[1.0])
    for metric in correct.metrics:
        rubric.add_metric(metric)

Rubric functions run in the order added, so the metrics come after every guarded function.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

from pytest_rewardhang.adapters import _shared
from pytest_rewardhang.guard import MAX_PROCESSES as _MAX_PROCESSES

__all__ = ["RubricFunc", "pooled_rubric_func"]

#: The whole rollout state (clients, responses, timing): shipped only when the scorer names it.
_NOT_SHIPPED = frozenset({"state", "states"})
#: Where a guarded function notes its sample's metrics in the rollout's state, by its name.
_STATE_KEY = "reward_hang_metrics"

_Metric = Callable[..., Coroutine[Any, Any, float]]


class RubricFunc(Protocol):
    """What :func:`pooled_rubric_func` returns: an ``async def`` rubric function, named as the
    scorer is, with its metric-only rubric functions."""

    __name__: str
    metrics: list[_Metric]

    def __call__(self, **kwargs: Any) -> Coroutine[Any, Any, Any]: ...


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
    slow_s: float | None = None,
) -> RubricFunc:
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
        slow_s=slow_s,
    )
    took = scoring.accepts()

    async def rubric_func(**kwargs: Any) -> Any:
        value, out = await scoring.ascored(_shared.only_accepted(kwargs, took, _NOT_SHIPPED))
        state = kwargs.get("state")
        if isinstance(state, dict):
            state.setdefault(_STATE_KEY, {})[scoring.name] = scoring.metrics(out)
        return value

    rubric_func.__name__ = rubric_func.__qualname__ = scoring.name
    rubric_func.__signature__ = _with_state(took.signature)  # type: ignore[attr-defined]
    names = [_shared.HANG_METRIC]
    if slow_s is not None:
        names += [_shared.SECONDS_METRIC, _shared.SLOW_METRIC]
    rubric_func.metrics = [_metric(name) for name in names]  # type: ignore[attr-defined]
    return cast(RubricFunc, rubric_func)


def _with_state(signature: inspect.Signature) -> inspect.Signature:
    """The scorer's signature with ``state`` in it, so that verifiers passes the rollout's state
    (it passes only what a signature names); shipped to the scorer only if it names it."""
    params = list(signature.parameters.values())
    if "state" in signature.parameters:
        return signature
    state = inspect.Parameter("state", inspect.Parameter.KEYWORD_ONLY, default=None)
    var_keyword = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    rest = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    return signature.replace(parameters=[*rest, state, *var_keyword])


def _metric(name: str) -> _Metric:
    """A metric-only rubric function: ``name`` over the guarded functions that noted the rollout
    in its ``state``: seconds added up, the flags 1.0 if any is."""

    async def metric(state: Any = None) -> float:
        noted = state.get(_STATE_KEY, {}) if isinstance(state, dict) else {}
        values = [metrics[name] for metrics in noted.values() if name in metrics]
        if name == _shared.SECONDS_METRIC:
            return float(sum(values))
        return max(values, default=0.0)

    metric.__name__ = metric.__qualname__ = name
    return metric
