"""verl reward functions that cannot freeze the step, for verl's reward loop.

Point ``reward.custom_reward_function.path`` at this file and ``reward.custom_reward_function.name``
at ``compute_score_async`` (or ``compute_score``); name the real scorer in
``+reward.custom_reward_function.reward_kwargs.scorer`` (default: verl's own
``default_compute_score``). verl's reward loop scores every sample of a batch as its own
``asyncio`` task: it awaits an ``async def`` reward function on its event loop, and runs a sync
one on a thread of ``run_in_executor``. Either way each sample is submitted to one warm pool per
process, so concurrent samples share its workers, each under ``budget`` seconds. On a timeout,
crash, memory blow-up or an argument that cannot be pickled the call returns ``default`` and
logs the sample, instead of hanging the step; when the scorer returns dicts (verl's math_dapo
returns ``{"score", "acc", "pred"}``), that default is a dict with the same keys, ``score``
being ``default`` (a dict ``default`` is returned as given): the keys are learnt in each
process from the ``warmup`` item, scored once more when the pool is up, or else from the first
answer, so give a dict scorer a ``warmup`` or a dict ``default`` (verl's reward loop indexes
every sample with the first one's keys). With ``slow_s`` set, every answer is a dict holding
``reward_hang``, ``reward_seconds`` and ``reward_slow`` too (a number ``v`` as
``{"score": v, "acc": v}``, as verl logs one). An exception the scorer raises is
raised here, as it would be unguarded. Only the arguments the scorer's signature takes are
shipped to the worker (verl may add ``reward_model_tokenizer``, a whole tokenizer); a
``reward_kwargs`` key that neither the guard nor the scorer takes (a misspelt ``budget``) is
logged once per scorer and ignored.

Or bind a scorer in your own reward file::

    from pytest_rewardhang.adapters.verl import guarded_compute_score_async
    compute_score = guarded_compute_score_async("my_rewards.math:compute_score", budget=2.0)

Legacy: ``compute_score_batch`` and ``guarded_compute_score_batch`` fit the batch reward manager
(``reward_model.reward_manager=batch``), which verl took off its default path in February 2026.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from pytest_rewardhang.adapters import _shared, _state
from pytest_rewardhang.guard import MAX_PROCESSES as _MAX_PROCESSES
from pytest_rewardhang.guard import Outcome as _Outcome

__all__ = [
    "CODE_SOURCES",
    "compute_score",
    "compute_score_async",
    "compute_score_batch",
    "guarded_compute_score",
    "guarded_compute_score_async",
    "guarded_compute_score_batch",
]

R = TypeVar("R")

#: What verl scores with when no custom reward function is configured.
_VERL_DEFAULT = "verl.utils.reward_score:default_compute_score"
_ALWAYS = frozenset({"data_source", "solution_str", "ground_truth"})
#: The data sources verl's own dispatcher (``default_compute_score``) scores by running the
#: response as a program (prime_code, or a sandbox): by default their samples are isolated, each
#: in a process of its own, so nothing a policy's program changes reaches a later sample.
CODE_SOURCES = frozenset({"codecontests", "apps", "codeforces", "taco"})
#: What verl's reward loop passes beyond verl's four (``RewardLoopManagerBase.run_single``):
#: any other keyword comes from the user's ``reward_kwargs``.
_VERL_PASSES = frozenset({"reward_router_address", "reward_model_tokenizer"})


def _sample(
    took: _shared.Accepts,
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any,
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    sample = {
        "data_source": data_source,
        "solution_str": solution_str,
        "ground_truth": ground_truth,
        "extra_info": extra_info,
        **kwargs,
    }
    # verl's first three always go (a scorer without them fails as it would unguarded); the
    # rest only when the scorer takes them.
    return {k: v for k, v in sample.items() if k in _ALWAYS or took.takes(k)}


def _say_unused(scoring: _shared.Scoring, took: _shared.Accepts, kwargs: dict[str, Any]) -> None:
    """A ``reward_kwargs`` key nothing takes is most likely misspelt (``budgte``): said once
    per scorer, not dropped in silence. Once per call: every sample of it has the same keys."""
    for key in kwargs.keys() - _VERL_PASSES:
        if not took.takes(key) and _state.STATE.say_once("verl unused", scoring.name, key):
            _shared.log.warning(
                "%s: verl's reward_kwargs %r is neither the guard's nor taken by the scorer:"
                " ignored",
                scoring.name,
                key,
            )


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
    workers: int = 2,
    warmup: _shared.Warmup = None,
    isolate: bool | None = None,
    max_processes: int | None = _MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
    slow_s: float | None = None,
    **kwargs: Any,
) -> Any:
    """verl's per-item signature; ``kwargs`` beyond the guard's own go to the scorer.

    ``isolate``: None (the default) isolates the samples of verl's code data sources
    (:data:`CODE_SOURCES`) and no others."""
    scoring = _scoring(
        scorer,
        budget,
        default,
        memory_mb,
        hang_log,
        workers,
        warmup,
        _isolates(isolate, data_source),
        max_processes,
        network,
        unprivileged,
        slow_s,
    )
    took = scoring.accepts()
    _say_unused(scoring, took, kwargs)
    sample = _sample(took, data_source, solution_str, ground_truth, extra_info, kwargs)
    return _reported(scoring, *scoring.scored(sample))


async def compute_score_async(
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
    workers: int = 2,
    warmup: _shared.Warmup = None,
    isolate: bool | None = None,
    max_processes: int | None = _MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
    slow_s: float | None = None,
    **kwargs: Any,
) -> Any:
    """:func:`compute_score` as an ``async def``, which verl's reward loop awaits."""
    scoring = _scoring(
        scorer,
        budget,
        default,
        memory_mb,
        hang_log,
        workers,
        warmup,
        _isolates(isolate, data_source),
        max_processes,
        network,
        unprivileged,
        slow_s,
    )
    took = await scoring.aaccepts()
    _say_unused(scoring, took, kwargs)
    sample = _sample(took, data_source, solution_str, ground_truth, extra_info, kwargs)
    return _reported(scoring, *await scoring.ascored(sample))


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
    warmup: _shared.Warmup = None,
    isolate: bool | None = None,
    max_processes: int | None = _MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
    slow_s: float | None = None,
    **kwargs: Any,
) -> list[Any]:
    """Legacy: verl's batch signature (``reward_model.reward_manager=batch``).

    The scorer is still called once per item, with verl's per-item signature, on ``workers``
    warm workers; scores come back in order, ``default`` where an item hung.
    """
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    rows = list(zip(data_sources, solution_strs, ground_truths, extras, strict=True))
    scores: list[Any] = [None] * len(rows)
    for isolated in (False, True):
        chosen = [i for i, row in enumerate(rows) if _isolates(isolate, row[0]) is isolated]
        if not chosen:
            continue
        scoring = _scoring(
            scorer,
            budget,
            default,
            memory_mb,
            hang_log,
            workers,
            warmup,
            isolated,
            max_processes,
            network,
            unprivileged,
            slow_s,
        )
        took = scoring.accepts()
        _say_unused(scoring, took, kwargs)
        samples = [_sample(took, *rows[i], kwargs) for i in chosen]
        for i, (score, out) in zip(chosen, scoring.scored_many(samples), strict=True):
            scores[i] = _reported(scoring, score, out)
    return scores


def guarded_compute_score(
    scorer: Callable[..., Any] | str,
    *,
    budget: float = 2.0,
    default: Any = 0.0,
    memory_mb: float | None = None,
    hang_log: str | None = None,
    workers: int = 2,
    warmup: _shared.Warmup = None,
    isolate: bool | None = None,
    max_processes: int | None = _MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
    slow_s: float | None = None,
) -> Callable[..., Any]:
    """:func:`compute_score` bound to one scorer, for ``custom_reward_function.name``."""
    return _bound(
        compute_score,
        scorer,
        budget,
        default,
        memory_mb,
        hang_log,
        workers,
        warmup,
        isolate,
        max_processes,
        network,
        unprivileged,
        slow_s,
    )


def guarded_compute_score_async(
    scorer: Callable[..., Any] | str,
    *,
    budget: float = 2.0,
    default: Any = 0.0,
    memory_mb: float | None = None,
    hang_log: str | None = None,
    workers: int = 2,
    warmup: _shared.Warmup = None,
    isolate: bool | None = None,
    max_processes: int | None = _MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
    slow_s: float | None = None,
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """:func:`compute_score_async` bound to one scorer; still a coroutine function to verl
    (``inspect.iscoroutinefunction`` sees through ``functools.partial``)."""
    return _bound(
        compute_score_async,
        scorer,
        budget,
        default,
        memory_mb,
        hang_log,
        workers,
        warmup,
        isolate,
        max_processes,
        network,
        unprivileged,
        slow_s,
    )


def guarded_compute_score_batch(
    scorer: Callable[..., Any] | str,
    *,
    budget: float = 2.0,
    default: Any = 0.0,
    memory_mb: float | None = None,
    hang_log: str | None = None,
    workers: int = 2,
    warmup: _shared.Warmup = None,
    isolate: bool | None = None,
    max_processes: int | None = _MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
    slow_s: float | None = None,
) -> Callable[..., list[Any]]:
    """Legacy: :func:`compute_score_batch` bound to one scorer."""
    return _bound(
        compute_score_batch,
        scorer,
        budget,
        default,
        memory_mb,
        hang_log,
        workers,
        warmup,
        isolate,
        max_processes,
        network,
        unprivileged,
        slow_s,
    )


def _scoring(
    scorer: Callable[..., Any] | str,
    budget: float,
    default: Any,
    memory_mb: float | None,
    hang_log: str | None,
    workers: int,
    warmup: _shared.Warmup,
    isolate: bool,
    max_processes: int | None,
    network: bool,
    unprivileged: bool,
    slow_s: float | None,
) -> _shared.Scoring:
    name = scorer if isinstance(scorer, str) else getattr(scorer, "__qualname__", repr(scorer))
    return _shared.Scoring(
        scorer,
        budget=budget,
        default=default,
        workers=workers,
        memory_mb=memory_mb,
        hang_log=hang_log,
        name=name,
        # A YAML warm-up comes as Hydra's DictConfig: its samples' dicts and lists, as a real
        # sample has them (and a pickle that needs no omegaconf).
        warmup=_plain(warmup),
        isolate=isolate,
        max_processes=max_processes,
        network=network,
        unprivileged=unprivileged,
        slow_s=slow_s,
    )


def _bound(
    fn: Callable[..., R],
    scorer: Callable[..., Any] | str,
    budget: float,
    default: Any,
    memory_mb: float | None,
    hang_log: str | None,
    workers: int,
    warmup: _shared.Warmup,
    isolate: bool | None,
    max_processes: int | None,
    network: bool,
    unprivileged: bool,
    slow_s: float | None,
) -> Callable[..., R]:
    """``fn`` bound to one scorer and the guard's keywords, checked now (a nonsense limit, a
    warm-up that cannot be pickled), not at verl's first sample."""
    _scoring(
        scorer,
        budget,
        default,
        memory_mb,
        hang_log,
        workers,
        warmup,
        False if isolate is None else isolate,  # None: chosen per sample, checked as a bool
        max_processes,
        network,
        unprivileged,
        slow_s,
    )
    return functools.partial(
        fn,
        scorer=scorer,
        budget=budget,
        default=default,
        memory_mb=memory_mb,
        hang_log=hang_log,
        workers=workers,
        warmup=warmup,
        isolate=isolate,
        max_processes=max_processes,
        network=network,
        unprivileged=unprivileged,
        slow_s=slow_s,
    )


def _reported(scoring: _shared.Scoring, value: Any, out: _Outcome) -> Any:
    """The score as verl takes it. With ``slow_s`` set, a dict, whose keys verl's reward loop
    makes ``reward_extra_info`` columns: the scorer's own (a number ``v`` as verl shows one,
    ``score`` and ``acc`` both ``v``) and the sample's metrics (``reward_hang``,
    ``reward_seconds``, ``reward_slow``), the same keys for every sample."""
    if scoring.slow_s is None:
        return value
    return _shared.verl_row(value, scoring.metrics(out))


def _isolates(isolate: bool | None, data_source: Any) -> bool:
    """Whether a sample runs isolated: as asked, or by default when verl scores its data
    source by running the response (:data:`CODE_SOURCES`)."""
    if isolate is None:
        return isinstance(data_source, str) and data_source in CODE_SOURCES
    return isolate


def _plain(value: Any) -> Any:
    """A value of verl's Hydra config as plain Python: mappings to dicts, sequences to lists."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(item) for item in value]
    return value
