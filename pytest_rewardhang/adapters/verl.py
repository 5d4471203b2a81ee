"""verl reward functions that cannot freeze the driver.

Point ``custom_reward_function.path`` at this file and ``custom_reward_function.name`` at
``compute_score`` (or ``compute_score_batch`` with ``reward_model.reward_manager=batch``); name
the real scorer in ``custom_reward_function.reward_kwargs.scorer`` (default: verl's own
``default_compute_score``). Every call is scored by a warm worker under ``budget`` seconds; on a
timeout, crash or memory blow-up the call returns ``default`` and logs the sample, instead of
hanging the step. An exception the scorer raises is raised here, as it would be unguarded.

Or build the functions in your own reward file::

    from pytest_rewardhang.adapters.verl import guarded_compute_score
    compute_score = guarded_compute_score("my_rewards.math:compute_score", budget=2.0)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from pytest_rewardhang.adapters import _shared

__all__ = [
    "compute_score",
    "compute_score_batch",
    "guarded_compute_score",
    "guarded_compute_score_batch",
]

#: What verl scores with when no custom reward function is configured.
_VERL_DEFAULT = "verl.utils.reward_score:default_compute_score"


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    scorer: Callable[..., Any] | str = _VERL_DEFAULT,
    budget: float = 2.0,
    default: Any = 0.0,
    memory_mb: float | None = None,
    hang_log: str | None = None,
    **kwargs: Any,
) -> Any:
    """verl's per-item signature; ``kwargs`` beyond the guard's own go to the scorer."""
    sample = {
        "data_source": data_source,
        "solution_str": solution_str,
        "ground_truth": ground_truth,
        "extra_info": extra_info,
        **kwargs,
    }
    out = _shared.pool_for(scorer, budget, memory_mb, 1).map([sample])[0]
    return _shared.value_or_default(out, default, sample, hang_log, _name(scorer))


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    *,
    scorer: Callable[..., Any] | str = _VERL_DEFAULT,
    budget: float = 2.0,
    default: Any = 0.0,
    memory_mb: float | None = None,
    hang_log: str | None = None,
    workers: int = 2,
    **kwargs: Any,
) -> list[Any]:
    """verl's batch signature (``reward_manager=batch``), or a reward manager loop's helper.

    The scorer is still called once per item, with verl's per-item signature, on ``workers``
    warm workers; scores come back in order, ``default`` where an item hung.
    """
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    samples = [
        {
            "data_source": source,
            "solution_str": solution,
            "ground_truth": truth,
            "extra_info": extra,
            **kwargs,
        }
        for source, solution, truth, extra in zip(
            data_sources, solution_strs, ground_truths, extras, strict=True
        )
    ]
    outs = _shared.pool_for(scorer, budget, memory_mb, workers).map(samples)
    who = _name(scorer)
    return [
        _shared.value_or_default(out, default, sample, hang_log, who)
        for out, sample in zip(outs, samples, strict=True)
    ]


def guarded_compute_score(
    scorer: Callable[..., Any] | str,
    *,
    budget: float = 2.0,
    default: Any = 0.0,
    memory_mb: float | None = None,
    hang_log: str | None = None,
) -> Callable[..., Any]:
    """:func:`compute_score` bound to one scorer, for ``custom_reward_function.name``."""
    return functools.partial(
        compute_score,
        scorer=scorer,
        budget=budget,
        default=default,
        memory_mb=memory_mb,
        hang_log=hang_log,
    )


def guarded_compute_score_batch(
    scorer: Callable[..., Any] | str,
    *,
    budget: float = 2.0,
    default: Any = 0.0,
    memory_mb: float | None = None,
    hang_log: str | None = None,
    workers: int = 2,
) -> Callable[..., list[Any]]:
    """:func:`compute_score_batch` bound to one scorer."""
    return functools.partial(
        compute_score_batch,
        scorer=scorer,
        budget=budget,
        default=default,
        memory_mb=memory_mb,
        hang_log=hang_log,
        workers=workers,
    )


def _name(scorer: Callable[..., Any] | str) -> str:
    return scorer if isinstance(scorer, str) else getattr(scorer, "__qualname__", repr(scorer))
