"""The processes one scorer is called in: a warm worker per call context, and fresh ones.

Cases run one after another in a context's long-lived worker, as a trainer calls the scorer;
a case that timed out, ran out of memory or crashed runs again in a fresh process, to say
whether it does so on its own (``fresh``). The further contexts' pools start on a thread while
the first context's cases run (each is an interpreter importing the scorer, a third of a second
or more). Every outcome is ``settled``: the standard library's once-per-process helpers the
call said it left (``_calls.left_behind``) are taken out of its leak count.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from pytest_rewardhang.guard import PoolError
from pytest_rewardhang.guard._outcome import Outcome, Status
from pytest_rewardhang.guard._pool import Pool

from . import _calls

#: Outcomes whose worker is gone: killed at the deadline, or dead of the call.
ENDS_ITS_WORKER = (Status.TIMEOUT, Status.CRASHED)
#: The most calls a replay runs before the one it is for: each family's cases, and more.
REPLAYED = 256


class Workers:
    """A scorer's pools: one warm worker per context, and per context and budget one pool of
    fresh calls. ``materialize`` and ``example`` are set once the scorer is described."""

    def __init__(
        self, spec: str, rootdir: str, deadline: float, memory_mb: float | None, *, code: bool
    ) -> None:
        self.spec = spec
        self.rootdir = rootdir
        self.deadline = deadline
        self.memory_mb = memory_mb
        #: A code scorer runs the program it scores inside the call: each call in a child of
        #: the warm worker, so nothing that program changes reaches a later case's call.
        self.code = code
        self.materialize: tuple[tuple[str, str], ...] = ()
        #: The scorer's benign call, run first in each fresh process (not for a code scorer).
        self.example: dict[str, Any] | None = None
        self._pools: dict[str, Pool] = {}
        self._starting: dict[str, Future[Pool]] = {}
        #: Whether the last call in each context's pool ended its worker (see ``fresh``).
        self._ended: dict[str, bool] = {}
        #: Per context, the calls its warm worker answered since it started, and what its
        #: last worker to end had answered before the call that ended it (see ``replay``).
        self._history: dict[str, list[dict[str, Any]]] = {}
        self._lived: dict[str, list[dict[str, Any]]] = {}
        #: Per context and budget, the pool of fresh calls (see ``_confirming``).
        self._confirmers: dict[tuple[str, float], Pool | None] = {}

    def start(self, contexts: Iterable[str]) -> None:
        """Start each context's pool on a thread of its own, to be waited for when its first
        call comes (``_worker``)."""
        for context in contexts:
            if context in self._pools or context in self._starting:
                continue
            future: Future[Pool] = Future()

            def start(context: str = context, future: Future[Pool] = future) -> None:
                try:
                    future.set_result(self._new_pool(context))
                except BaseException as exc:  # noqa: BLE001 - raised again by _worker
                    future.set_exception(exc)

            threading.Thread(target=start, name="reward-hang-pool-start", daemon=True).start()
            self._starting[context] = future

    def call(self, context: str, kwargs: dict[str, Any]) -> Outcome:
        """One call in the context's warm worker, remembering whether it ended that worker."""
        return self._in_warm(context, [kwargs])

    def replay(self, context: str, kwargs: dict[str, Any]) -> Outcome | None:
        """A call that ended the context's warm worker, again in a new long-lived worker after
        the calls that worker had answered before it (its last :data:`REPLAYED` of them): the
        call's outcome, or None when one of those ended the new worker instead (a machine busy
        still: the replay stops there, at one deadline's cost).

        Whether earlier calls slowed the worker, or a busy machine did: only the same calls in
        the same order say. A new pool, so that nothing else ran in its worker first.
        """
        with self._new_pool(context) as pool:
            for call in self._lived.get(context, [])[-REPLAYED:]:
                if pool.map([call])[0].status in ENDS_ITS_WORKER:
                    return None
            return settled(pool.map([kwargs])[0])

    def fresh(self, kwargs: dict[str, Any], context: str, budget: float | None = None) -> Outcome:
        """The call again in a process that has run nothing since the scorer was imported but
        the scorer's own example, before it; ``budget``: in place of the deadline.

        The example first: what a scorer does on its first call only (lm-eval's ``drop``
        imports scipy there) is then not charged to the case, which on a loaded machine made a
        case that takes a second confirm as a hang. Not for a code scorer, whose calls each run
        in a child of the worker. After a call that ended the context's worker (the kill at its
        deadline, a crash), the pool's next worker is just that: no new interpreter importing
        the scorer. Otherwise, a process of its own from the context's confirming pool
        (``_confirming``), or a new pool's first worker where there is none.
        """
        warm = [self.example] if self.example is not None and not self.code else []
        if budget is None and self._ended.get(context):
            return self._in_warm(context, [*warm, kwargs])
        budget = budget or self.deadline
        confirming = self._confirming(context, budget)
        if confirming is not None:
            return settled(confirming.map([kwargs])[0])
        with self._new_pool(context, budget) as pool:
            return settled(pool.map([*warm, kwargs])[-1])

    def confirm(
        self, kwargs: dict[str, Any], context: str, bound: float, *, expected: bool
    ) -> tuple[Outcome, str]:
        """A timed-out call again in a fresh process, and why it is a hang ("" if it is not).

        It hangs when the fresh process still runs it at ``bound`` (``--reward-hang-confirm``
        deadlines). A growth projection confirms nothing: a scorer's own bound (Math-Verify's
        5 s signal alarm) holds every size of a formula at 5 s where the growth of the sizes
        below projects minutes. An ``expected`` hang is re-run for one deadline only: that it
        still hangs is all the run asks.
        """
        fresh = self.fresh(kwargs, context, None if expected else bound)
        if fresh.status is not Status.TIMEOUT:
            return fresh, ""
        if expected:
            return fresh, "a fresh worker timed out too (an expected hang)"
        factor = bound / self.deadline
        return fresh, f"a fresh worker still ran it at {bound:g} s ({factor:g}x the deadline)"

    def close(self) -> None:
        starting, self._starting = self._starting, {}
        for context, future in starting.items():
            if future.exception() is None:  # waits for it: closed below with the others
                self._pools[context] = future.result()
        pools = [*self._pools.values(), *filter(None, self._confirmers.values())]
        self._pools, self._confirmers = {}, {}
        for pool in pools:
            pool.close()

    def _in_warm(self, context: str, calls: list[dict[str, Any]]) -> Outcome:
        """``calls`` in the context's warm worker, one after another: the last one's outcome."""
        out = settled(self._worker(context).map(calls)[-1])
        history = self._history.setdefault(context, [])
        self._ended[context] = out.status in ENDS_ITS_WORKER
        if self._ended[context]:
            self._lived[context] = history + calls[:-1]
            history.clear()
        else:
            history.extend(calls)
            del history[:-REPLAYED]
        return out

    def _worker(self, context: str) -> Pool:
        if context not in self._pools:
            starting = self._starting.pop(context, None)
            self._pools[context] = (
                starting.result() if starting is not None else self._new_pool(context)
            )
        return self._pools[context]

    def _new_pool(
        self,
        context: str,
        budget: float | None = None,
        *,
        warmup: dict[str, Any] | None = None,
        isolate: bool = False,
    ) -> Pool:
        isolate = isolate or self.code
        call = _calls.ScorerCall(self.spec, self.rootdir, context, self.materialize, adopt=isolate)
        return Pool(
            call,
            workers=1,
            budget=budget or self.deadline,
            memory_mb=self.memory_mb,
            warmup=warmup,
            isolate=isolate,
        )

    def _confirming(self, context: str, budget: float) -> Pool | None:
        """The context's pool for fresh calls at ``budget``, made once and kept: each call runs
        in a process of its own, forked from a worker that has imported the scorer and (not for
        a code scorer) run its example, so it is as fresh as a new pool's first call, without
        a new interpreter importing the scorer for every confirmation. None where the example
        cannot warm a zygote (it leaves a thread running there): then a new pool each time."""
        key = (context, budget)
        if key not in self._confirmers:
            warmup = self.example if not self.code else None
            try:
                pool = self._new_pool(context, budget, warmup=warmup, isolate=True)
            except PoolError:
                if warmup is None:
                    raise
                pool = None
            self._confirmers[key] = pool
        return self._confirmers[key]


def settled(out: Outcome) -> Outcome:
    """The outcome without the standard library's once-per-process helpers in its leak count:
    the call said how many of what the guard killed after it were those (``_calls.left_behind``)."""
    called = out.value if isinstance(out.value, dict) else {}
    helpers = called.get("helpers", 0)
    if isinstance(helpers, int) and helpers > 0 and out.leaked:
        return dataclasses.replace(out, leaked=max(out.leaked - helpers, 0))
    return out
