"""What the adapters share: the warm pools, the scorer's signature, and scoring one sample.

Every adapter turns a trainer's call into keyword arguments per sample and hands them to
:class:`Scoring`, which submits each sample to the scorer's warm pool (concurrent callers share
its workers), and turns each :class:`~pytest_rewardhang.guard.Outcome` into a score: the value,
or the default with one warning line when the sample hung, crashed, ran out of memory or could
not be shipped to a worker.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import pickle
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Self

from pytest_rewardhang.adapters._state import STATE

# Absolute imports throughout the adapters: verl loads a custom reward file as a standalone
# module ("custom_module_<hash>"), where relative imports fail. The guard's public API only.
from pytest_rewardhang.guard import (
    MAX_PROCESSES,
    Outcome,
    Pool,
    PoolError,
    SpecError,
    Status,
    load_callable,
    run,
)

log = logging.getLogger("pytest_rewardhang.adapters")

Scorer = Callable[..., Any] | str

_SNIPPET = 200
#: How long reading a scorer's signature may take: importing it in a forked child.
_PROBE_S = 120.0

#: One sample's arguments to the scorer: positional ones in a tuple, keyword ones in a mapping.
Warmup = tuple[Any, ...] | Mapping[str, Any] | None


def _pool_key(*options: Any) -> tuple[Any, ...]:
    """A pool's key in ``STATE.pools``: :func:`pool_for`'s arguments, as it takes them.

    Keyed by pid too: a trainer that forks (a ProcessPoolExecutor, a dataloader) must not
    drive its parent's workers. The scorer, an object of the user's, may be unhashable; the
    other options are numbers, bytes and flags."""
    scorer, *limits = options
    return (_key(scorer), *limits, os.getpid())


class _Same:
    """An unhashable scorer (an instance of a plain ``@dataclass`` with ``__call__``, say) as a
    key of the adapters' tables: by identity, and kept alive with the key, so that its id is
    never another object's."""

    __slots__ = ("held",)

    def __init__(self, held: object) -> None:
        self.held = held

    def __hash__(self) -> int:
        return id(self.held)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.held is self.held


def _key(value: Any) -> Any:
    """``value`` as a key of the adapters' tables: itself, or by identity if unhashable."""
    try:
        hash(value)
    except TypeError:
        return _Same(value)
    return value


def warmup_key(warmup: Warmup) -> bytes | None:
    """The warm-up item as part of a pool's key (a dict is not hashable): its pickle, after
    the pool's own check, whose one-line ValueError names what is wrong with it. Keyword
    arguments in another order are the same warm-up."""
    if warmup is None:
        return None
    warm = Pool.check_warmup(warmup)
    if isinstance(warm, dict):
        warm = dict(sorted(warm.items()))
    return pickle.dumps(warm, protocol=pickle.HIGHEST_PROTOCOL)


def pool_for(
    scorer: Scorer,
    budget: float,
    memory_mb: float | None,
    workers: int,
    warmup: bytes | None = None,
    isolate: bool = False,
    max_processes: int | None = MAX_PROCESSES,
    network: bool = True,
    unprivileged: bool = False,
    *,
    shape_of: tuple[Scorer, Any] | None = None,
) -> Pool:
    """The warm pool for this scorer, these limits and this warm-up item (its
    :func:`warmup_key`), started on the first sample in this process; once it is up, the
    warm-up is scored again to learn the shape of ``shape_of``'s scorer's answers (the pool's
    own scorer unless said: one of a :class:`Together`)."""
    budget = float(budget)
    key = _pool_key(
        scorer, budget, memory_mb, workers, warmup, isolate, max_processes, network, unprivileged
    )
    with STATE.lock:
        pool = STATE.pools.get(key)
        if pool is not None and not pool.closed:
            return pool
        starting = STATE.starting.setdefault(key, threading.Lock())
    with starting:
        with STATE.lock:
            pool = STATE.pools.get(key)
            failed = STATE.failed.get(key)
        if pool is not None and not pool.closed:
            return pool  # another thread started it meanwhile
        if failed is not None:
            raise failed[0](failed[1])
        try:
            pool = Pool(
                scorer,
                workers=workers,
                budget=budget,
                memory_mb=memory_mb,
                warmup=None if warmup is None else pickle.loads(warmup),
                isolate=isolate,
                max_processes=max_processes,
                network=network,
                unprivileged=unprivileged,
            )
        except (PoolError, SpecError, OSError) as exc:  # OSError: out of descriptors, say
            text = f"the pool of scorer {_shown(scorer)} did not start: {exc}"
            with STATE.lock:
                STATE.failed[key] = (type(exc), text)
            raise type(exc)(text) from None
        if warmup is not None:
            learned, item = shape_of or (scorer, pickle.loads(warmup))
            learn_from_warmup(learned, pool, item)
        with STATE.lock:
            STATE.pools[key] = pool
        return pool


def _shown(scorer: Scorer) -> str:
    return repr(scorer) if isinstance(scorer, str) else scorer_name(scorer)


def close_pools() -> None:
    """Close every pool the adapters started in this process (they also close at exit)."""
    with STATE.lock:
        pools = list(STATE.pools.values())
        STATE.pools.clear()
        STATE.failed.clear()  # a scorer fixed since may start now
    for pool in pools:
        pool.close()


# --- the scorer's signature ------------------------------------------------------------------


@dataclass(frozen=True)
class Accepts:
    """The keyword arguments a scorer takes: its parameter names, and whether it has ``**``."""

    names: tuple[str, ...]
    var_keyword: bool
    #: The scorer's own signature, for adapters whose trainer reads the wrapper's.
    signature: inspect.Signature

    def takes(self, name: str) -> bool:
        return self.var_keyword or name in self.names

    def named(self, name: str) -> bool:
        return name in self.names


def accepts(scorer: Scorer) -> Accepts:
    """The scorer's parameters; a spec is imported in a forked child, never in this process."""
    with STATE.lock:
        known: Accepts | None = STATE.accepts.get(_key(scorer))
    if known is not None:
        return known
    if isinstance(scorer, str):
        out = run(_parameters_of, (scorer,), budget=_PROBE_S)
        if out.ok and isinstance(out.value, str):
            reason = out.value  # the SpecError's message: it says what is wrong with the spec
            raise ValueError(f"cannot read the signature of scorer {scorer!r}: {reason}")
        if not out.ok:
            reason = (out.error or out.describe()).strip().splitlines()[-1]
            raise ValueError(f"cannot read the signature of scorer {scorer!r}: {reason}")
        params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in out.value[0]]
        if out.value[1]:
            params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
        found = Accepts(tuple(out.value[0]), out.value[1], inspect.Signature(params))
    else:
        found = _accepts_of(scorer)
    with STATE.lock:
        STATE.accepts[_key(scorer)] = found
    return found


def _accepts_of(fn: Callable[..., Any]) -> Accepts:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: pass it everything
        var = inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)
        return Accepts((), True, inspect.Signature([var]))
    names = tuple(
        name
        for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    return Accepts(names, var_keyword, signature)


def _parameters_of(spec: str) -> tuple[list[str], bool] | str:  # pragma: no cover - child only
    """The spec's parameter names and whether it takes ``**kwargs``; or why it cannot be
    imported, the :class:`SpecError`'s message."""
    try:
        found = _accepts_of(load_callable(spec))
    except SpecError as exc:
        return str(exc)
    return list(found.names), found.var_keyword


def only_accepted(
    kwargs: Mapping[str, Any], took: Accepts, never: Iterable[str] = ()
) -> dict[str, Any]:
    """The arguments the scorer takes; ``never`` ones only when it names them itself."""
    skipped = frozenset(never)
    return {
        key: value
        for key, value in kwargs.items()
        if took.named(key) or (took.var_keyword and key not in skipped)
    }


# --- what a hung sample scores ---------------------------------------------------------------


def _zero_like(value: Any) -> Any:
    # The same type as the scorer's own values, so a trainer that stacks a column into an
    # array (verl's reward_extra_info) gets one dtype.
    for kind in (bool, int, float, str, list, dict, tuple):
        if isinstance(value, kind):
            return kind()
    return None


def learn(scorer: Scorer, value: Any) -> None:
    """Remember the keys of a dict the scorer returned, for the default of a hung sample; say
    once if samples got a bare default before: the trainer may have indexed them by key."""
    if isinstance(value, dict) and _key(scorer) not in STATE.templates:
        with STATE.lock:
            STATE.templates.setdefault(_key(scorer), {k: _zero_like(v) for k, v in value.items()})
            bare = STATE.bare.pop(_key(scorer), 0)
        if bare:
            log.warning(
                "%s: %d sample(s) got a bare default before its first dict answer in this"
                " process (pid %d), where a trainer that indexes the answers' keys (verl's"
                " reward loop) fails: give the adapter warmup= (one sample, scored when the pool"
                " starts) or a dict default",
                _shown(scorer),
                bare,
                os.getpid(),
            )


def learn_from_warmup(scorer: Scorer, pool: Pool, warmup: Any) -> None:
    """Score the warm-up item once more, on the new pool, to learn the shape of the scorer's
    answers before any sample's: the zygote keeps its own warm-up's answer, and a sample that
    hangs or crashes first in this process (each of verl's reward workers is one) would get a
    bare number where the trainer indexes the dict's keys. Bounded by the pool's budget; a
    warm-up that does not answer teaches nothing."""
    if _key(scorer) in STATE.templates:
        return
    if isinstance(warmup, tuple):
        out = pool.submit(*warmup).result()
    else:
        out = pool.submit(**warmup).result()
    if out.ok:
        learn(scorer, out.value)


def default_for(scorer: Scorer, default: Any, score_key: str = "score") -> Any:
    """``default``, shaped like the scorer's dict results when it returns dicts: their keys,
    ``score_key`` (verl's ``score``, EasyR1's ``overall``) being ``default``."""
    if isinstance(default, Mapping):  # verl's Hydra hands a YAML mapping over as a DictConfig
        return dict(default)
    template = STATE.templates.get(_key(scorer))
    if template is None:
        with STATE.lock:
            STATE.bare[_key(scorer)] = STATE.bare.get(_key(scorer), 0) + 1
        return default
    return {**template, score_key: default}


# --- what each sample reports beside its score -----------------------------------------------

#: 1.0 for a sample that got the default (hung, crashed, out of memory, unshippable), else 0.0.
HANG_METRIC = "reward_hang"
#: The sample's scoring time in seconds: its wall time in the worker, up to its budget.
SECONDS_METRIC = "reward_seconds"
#: 1.0 for a sample whose scoring took over the user's ``slow_s``, else 0.0.
SLOW_METRIC = "reward_slow"


def check_slow_s(slow_s: object) -> None:
    """The one-line ValueError for a ``slow_s`` that is not None or a positive number."""
    if slow_s is None:
        return
    if (
        isinstance(slow_s, int | float)
        and not isinstance(slow_s, bool)
        and 0 < slow_s < float("inf")
    ):
        return
    raise ValueError(f"slow_s must be a positive number of seconds or None, not {slow_s!r}")


def sample_metrics(out: Outcome, slow_s: float | None) -> dict[str, float]:
    """One sample's metrics, under the names every adapter and ``serve`` use: whether it got
    the default, and, when the user set ``slow_s``, its scoring time and whether it was slow."""
    metrics = {HANG_METRIC: 0.0 if out.ok else 1.0}
    if slow_s is not None:
        metrics[SECONDS_METRIC] = float(out.wall_s)
        metrics[SLOW_METRIC] = 1.0 if out.wall_s > slow_s else 0.0
    return metrics


def verl_row(value: Any, metrics: Mapping[str, float]) -> dict[str, Any]:
    """A score and its sample's metrics as one dict, as verl's reward loop takes one (it makes
    each key a ``reward_extra_info`` column): a dict's own keys, a number ``v`` as verl shows
    one, ``score`` and ``acc`` both ``v``."""
    if isinstance(value, dict):
        return {**value, **metrics}
    return {"score": value, "acc": value, **metrics}


# --- several scorers on one pool -------------------------------------------------------------


class Together:
    """Several scorers as one pool's callable: ``Together(scorers)(i, *args, **kwargs)`` is
    ``scorers[i](*args, **kwargs)``, so that a trainer's reward functions share one zygote and
    its workers instead of starting a pool each. It travels to the zygote pickled (its class is
    importable); ``Together(scorers)(None)``, the pool's warm-up, imports every spec there, once
    for every worker, and never in the trainer's process."""

    __slots__ = ("_loaded", "scorers")

    def __init__(self, scorers: Iterable[Scorer]) -> None:
        self.scorers = tuple(scorers)
        self._loaded: dict[int, Callable[..., Any]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.scorers,))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.scorers == self.scorers

    def __hash__(self) -> int:
        return hash(tuple(_key(scorer) for scorer in self.scorers))

    def __call__(self, which: int | None, /, *args: Any, **kwargs: Any) -> Any:
        if which is None:
            for i in range(len(self.scorers)):
                self._scorer(i)
            return None
        return self._scorer(which)(*args, **kwargs)

    def _scorer(self, i: int) -> Callable[..., Any]:
        fn = self._loaded.get(i)
        if fn is None:
            scorer = self.scorers[i]
            fn = self._loaded[i] = load_callable(scorer) if isinstance(scorer, str) else scorer
        return fn


# --- one outcome, one score ------------------------------------------------------------------


def _unshippable(out: Outcome) -> bool:
    return out.not_started is not None


#: The most of an outcome's description one log line (or hang_log record) holds, as ``serve``
#: logs it: an answer's error can be megabytes, and it was logged whole for every sample.
LOG_DETAIL = 2000


def _cut(text: str) -> str:
    """``text``, cut to :data:`LOG_DETAIL` characters, saying how many more there were."""
    if len(text) <= LOG_DETAIL:
        return text
    return f"{text[:LOG_DETAIL]} [... {len(text) - LOG_DETAIL} more characters]"


def value_or_default(
    out: Outcome, default: Any, sample: Mapping[str, Any], hang_log: str | None, who: str
) -> Any:
    """The score, or ``default`` with one warning line (and a JSON line) naming the sample."""
    if out.status is Status.OK:
        return out.value
    if out.status is Status.ERROR and not (_unshippable(out) or out.pool_ended):
        raise out.to_exception()
    shown = {key: _snippet(value) for key, value in sample.items()}
    why = _cut(out.describe() if out.status is not Status.ERROR else (out.error or "").strip())
    if not out.pool_ended:
        log.warning("%s: %s; scored %r for %s", who, why, default, shown)
    elif STATE.say_once("ended", who, why):  # one line for all the samples it held
        log.warning("%s: %s; scored %r for every sample it held", who, why, default)
    if hang_log:
        record = {
            "status": "unshippable" if _unshippable(out) else str(out.status),
            "pool_ended": out.pool_ended,
            "describe": why,
            "stuck_at": out.stuck_at,
            "default": default,
            **{key: _jsonable(value) for key, value in sample.items()},
        }
        line = json.dumps(record, default=repr) + "\n"
        try:
            with STATE.lock, open(hang_log, "a", encoding="utf-8") as f:  # whole lines, any thread
                f.write(line)
        except OSError as exc:  # its folder gone, the disk full: the sample still scores
            if STATE.say_once("unlogged", hang_log, str(exc)):
                log.warning("%s: hang_log %r not written: %s", who, hang_log, exc)
    return default


def _check_hang_log(hang_log: object) -> None:
    """The one-line ValueError for a ``hang_log`` that cannot be appended to, when the adapter
    is made: found at the first hang, in training, it would have cost the batch. Opened as
    logging's FileHandler does, so an absent file is made (empty) now."""
    if hang_log is None:
        return
    if not isinstance(hang_log, str | os.PathLike):
        raise ValueError(f"hang_log must be a file's path or None, not {hang_log!r}")
    try:
        with open(hang_log, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ValueError(f"hang_log {os.fspath(hang_log)!r} cannot be appended to: {exc}") from None


def _snippet(value: Any) -> Any:
    text = value if isinstance(value, str) else None
    if text is None and not isinstance(value, int | float | bool | type(None)):
        text = repr(value)
    if text is not None and len(text) > 2 * _SNIPPET:
        return f"{text[:_SNIPPET]}...[{len(text) - 2 * _SNIPPET} chars]...{text[-_SNIPPET:]}"
    return value


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


class Scoring:
    """One scorer on its warm pool: samples in (keyword arguments), scores out, from any thread
    or coroutine at once. What the adapters build on."""

    #: The key of the reward in the scorer's dict answers, ``default`` in a default's.
    score_key = "score"

    def __init__(
        self,
        scorer: Scorer,
        *,
        budget: float = 2.0,
        default: Any = 0.0,
        workers: int = 2,
        memory_mb: float | None = None,
        hang_log: str | None = None,
        name: str | None = None,
        warmup: Warmup = None,
        isolate: bool = False,
        max_processes: int | None = MAX_PROCESSES,
        network: bool = True,
        unprivileged: bool = False,
        slow_s: float | None = None,
        via: tuple[Scorer, tuple[Any, ...]] | None = None,
    ) -> None:
        """``via``: what the pool runs instead of the scorer (a :class:`Together`), and what
        comes before each sample's arguments to it; ``warmup`` is then that pool's own."""
        # Here, not at the first sample in training, where the pool is made.
        check_slow_s(slow_s)
        Pool.check_limits(
            budget,
            memory_mb,
            max_processes,
            workers=workers,
            isolate=isolate,
            network=network,
            unprivileged=unprivileged,
        )
        _check_hang_log(hang_log)
        self.scorer = scorer
        self.budget = budget
        self.default = default
        self.workers = workers
        self.memory_mb = memory_mb
        self.hang_log = hang_log
        self.name = name or scorer_name(scorer)
        self.warmup = warmup_key(warmup)
        #: The warm-up item as the pool scores it, to learn the answers' shape from.
        self.warmup_item = None if self.warmup is None else pickle.loads(self.warmup)
        #: Each sample in a process of its own, forked from its warm worker: see Pool.
        self.isolate = isolate
        #: What confines each sample's processes besides its budget: see Pool.
        self.max_processes = max_processes
        self.network = network
        self.unprivileged = unprivileged
        #: Over this many seconds a sample is slow; None: no timing metrics.
        self.slow_s = slow_s
        #: What the pool runs, and what comes before each sample's arguments.
        self.target, self.prefix = (scorer, ()) if via is None else via

    def _pool_options(self) -> tuple[Any, ...]:
        """:func:`pool_for`'s arguments, and :func:`_pool_key`'s."""
        return (
            self.target,
            self.budget,
            self.memory_mb,
            self.workers,
            self.warmup,
            self.isolate,
            self.max_processes,
            self.network,
            self.unprivileged,
        )

    def pool(self) -> Pool:
        return pool_for(*self._pool_options(), shape_of=(self.scorer, self.warmup_item))

    def accepts(self) -> Accepts:
        return accepts(self.scorer)

    def submit(self, kwargs: Mapping[str, Any]) -> Future[Outcome]:
        return self.pool().submit(*self.prefix, **kwargs)

    def result(self, out: Outcome, kwargs: Mapping[str, Any]) -> Any:
        """The score of one sample from its outcome."""
        if out.status is Status.OK:
            learn(self.scorer, out.value)
            return out.value
        default = default_for(self.scorer, self.default, self.score_key)
        return value_or_default(out, default, kwargs, self.hang_log, self.name)

    def metrics(self, out: Outcome) -> dict[str, float]:
        """The sample's metrics (:func:`sample_metrics`) under this scoring's ``slow_s``."""
        return sample_metrics(out, self.slow_s)

    def score(self, kwargs: Mapping[str, Any]) -> Any:
        """One sample, blocking this thread only; other threads' samples run beside it."""
        return self.scored(kwargs)[0]

    def scored(self, kwargs: Mapping[str, Any]) -> tuple[Any, Outcome]:
        """One sample's score and its outcome, blocking this thread only."""
        out = self.submit(kwargs).result()
        return self.result(out, kwargs), out

    def score_many(self, samples: list[dict[str, Any]]) -> list[Any]:
        """Samples in order, all submitted at once so that they spread over every worker."""
        return [value for value, _ in self.scored_many(samples)]

    def scored_many(self, samples: list[dict[str, Any]]) -> list[tuple[Any, Outcome]]:
        """:meth:`score_many`, each score with its outcome."""
        futures = [self.submit(kwargs) for kwargs in samples]
        outs = [f.result() for f in futures]
        return [(self.result(o, s), o) for o, s in zip(outs, samples, strict=True)]

    async def ascore(self, kwargs: Mapping[str, Any]) -> Any:
        """One sample, awaited: the event loop runs on while a worker scores it."""
        return (await self.ascored(kwargs))[0]

    async def ascored(self, kwargs: Mapping[str, Any]) -> tuple[Any, Outcome]:
        """One sample's score and its outcome, awaited."""
        pool = await self._apool()
        out = await pool.asubmit(*self.prefix, **kwargs)
        return self.result(out, kwargs), out

    async def ascore_many(self, samples: list[dict[str, Any]]) -> list[Any]:
        return [value for value, _ in await self.ascored_many(samples)]

    async def ascored_many(self, samples: list[dict[str, Any]]) -> list[tuple[Any, Outcome]]:
        """:meth:`ascore_many`, each score with its outcome."""
        return list(await asyncio.gather(*(self.ascored(kwargs) for kwargs in samples)))

    async def aaccepts(self) -> Accepts:
        """:meth:`accepts` without blocking the event loop the first time (a forked probe)."""
        known: Accepts | None = STATE.accepts.get(_key(self.scorer))
        if known is not None:
            return known
        return await asyncio.to_thread(self.accepts)

    async def _apool(self) -> Pool:
        pool = STATE.pools.get(_pool_key(*self._pool_options()))
        if pool is not None and not pool.closed:
            return pool
        # Starting a pool waits for its zygote to import the scorer: not on the event loop.
        return await asyncio.to_thread(self.pool)


#: The keywords an adapter object passes on to :class:`Scoring`.
_LIMITS = frozenset(inspect.signature(Scoring).parameters) - {"scorer", "via"}


class Pooled:
    """What every adapter object is built on: one scorer's :class:`Scoring`, named as it is.

    Trainers log a reward function under its ``__name__``, so the adapter takes the scorer's.
    """

    def __init__(
        self, scorer: Scorer, via: tuple[Scorer, tuple[Any, ...]] | None = None, **limits: Any
    ) -> None:
        """``limits``: :class:`Scoring`'s keywords (budget, default, workers, warmup, ...);
        ``via``: :class:`Scoring`'s."""
        unknown = sorted(set(limits) - _LIMITS)
        if unknown:
            # Named as the user called it: Scoring is not theirs to know.
            raise TypeError(
                f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r}"
                f" (the guard's keywords are {', '.join(sorted(_LIMITS))})"
            )
        self.scoring = Scoring(scorer, via=via, **limits)
        self.__name__ = self.scoring.name

    @classmethod
    def together(cls, scorers: Sequence[Scorer], **options: Any) -> list[Self]:
        """One of these per scorer, all scoring on one pool (one zygote importing them all, and
        its ``workers``) under the same ``options``: each sample of any of them takes the next
        free worker."""
        if options.get("warmup") is not None:
            raise ValueError(
                "warmup cannot be given to scorers that share a pool: its warm-up imports every"
                " one of them"
            )
        shared = Together(scorers)
        options["warmup"] = (None,)  # Together's own: imports them all in the zygote
        return [cls(scorer, via=(shared, (i,)), **options) for i, scorer in enumerate(scorers)]


def scorer_name(scorer: Scorer) -> str:
    """What trainers log the scorer under: the function's name."""
    if isinstance(scorer, str):
        return scorer.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    return str(getattr(scorer, "__name__", type(scorer).__name__))
