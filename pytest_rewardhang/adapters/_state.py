"""Everything the adapters remember for the life of a process, in one object: :data:`STATE`.

The pools they started (one per scorer and options, shared by every reward function that names
them), the starts that failed, what each scorer takes and answers, and what was said once. A
forked child starts pools of its own (they are keyed by its pid): :meth:`AdapterState.forked`
drops the locks a thread of its parent's may have held at the fork.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_rewardhang.guard import Pool


class AdapterState:
    """What the adapters remember for the life of one process (see the module's docstring)."""

    def __init__(self) -> None:
        #: The pools the adapters started, by ``_shared._pool_key``.
        self.pools: dict[tuple[Any, ...], Pool] = {}
        #: The starts that failed, by the same key, and what they raised: each pool is tried
        #: once per process (until ``close_pools``), so the samples after a failed start fail
        #: at once instead of trying again one at a time, each up to the pool's start bound.
        self.failed: dict[tuple[Any, ...], tuple[type[Exception], str]] = {}
        #: What each scorer takes (``_shared.Accepts``), by scorer.
        self.accepts: dict[Any, Any] = {}
        #: The keys each dict-answering scorer's answers have, zeroed: its default's shape.
        self.templates: dict[Any, dict[str, Any]] = {}
        #: How many samples of each scorer got a bare default before its keys were known.
        self.bare: dict[Any, int] = {}
        #: What was said once: a pool that ended under the samples, a hang log not written,
        #: a verl key the scorer does not take, an AReaL metric with no AReaL, slime's missing
        #: metrics dict. Each a tuple whose first item says which.
        self.said: set[tuple[str, ...]] = set()
        self._own()

    def _own(self) -> None:
        #: Guards all the above, and the writes to a hang log (whole lines, any thread).
        self.lock = threading.Lock()
        #: One lock per pool being started: its start (the import, the warm-up) holds up only
        #: the samples of that pool.
        self.starting: dict[tuple[Any, ...], threading.Lock] = {}

    def forked(self) -> None:
        """In a forked child: locks a thread of the parent's may have held, for good here."""
        self._own()

    def say_once(self, *what: str) -> bool:
        """Whether ``what`` is new (and now said)."""
        if what in self.said:
            return False
        self.said.add(what)
        return True


#: This process's (see :class:`AdapterState`).
STATE = AdapterState()
os.register_at_fork(after_in_child=STATE.forked)
