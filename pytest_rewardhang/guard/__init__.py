"""The guard: run any callable under a fork-kill budget and get a typed :class:`Outcome` back.

In-process deadlines cannot be trusted with a reward function: SIGALRM never fires inside one
long C call, is unavailable off the main thread, and is defeated by code that swallows
``BaseException`` or re-arms the alarm; a thread cannot be killed at all. :func:`run` forks,
runs the call in the child, and SIGKILLs the child and all its descendants at the budget;
:class:`Pool` keeps warm guarded workers for batches.

This package is the public surface of the guard and imports only the standard library: a trainer
that imports it pays for nothing of pytest's. Its modules (all private):

- ``_run``: :func:`run`, :func:`guarded`, the limit checks and the no-fork fallbacks;
- ``_outcome``: :class:`Outcome`, :class:`Status`, :class:`Mechanism`, :class:`Containment`,
  :class:`Confinement`, :class:`NotStarted`, :class:`CallFailed`, building an outcome,
  stack-dump frames;
- ``_fork``: the caller's side of one forked call (wait, deadline, stack dump, kill);
- ``_child``: what runs in a guarded process (stdio, stack dump, memory limit, the call);
- ``_wire``: every frame and message that crosses a pipe or socket, both ends;
- ``_decode``: the security boundary: every decode of what a guarded process sent;
- ``_limits``: the numeric options checked at the door;
- ``_procfs``: reading ``/proc`` (stat, status, children, the walk of a process's descendants);
- ``_libc``: ``prctl`` (subreaper, death signal) and the PID namespace calls, through libc;
- ``_treekill``: the subreaper's kill of a child's tree, frozen first; ``_walkkill``: the
  kill that walks a tree that cannot fork; ``_reap``: reaping, and the sweep of the unreaped;
  ``_backoff``: the pauses of the poll loops; ``_state``: what the guard remembers for the
  life of a process, in one object, and what a fork drops of it;
- ``_contain``: how guarded processes are contained, chosen once (a cgroup, a PID namespace or
  the subreaper), and each one's cage; ``_pidns``: the PID namespace; ``_cgroup``: the cgroup;
- ``_quota``: a call's memory and process limits (``memory.max``, ``pids.max``); ``_confine``:
  its private temporary folder and ``/dev/shm``, network namespace and unprivileged user;
- ``_spec``: importing a callable from ``pkg.mod:attr`` or ``path/file.py:attr``;
- ``_pool``: :class:`Pool` (its docstring draws how an item goes through it); behind it
  ``_driver`` (which thread drives, the inbox, close), ``_engine`` (the loop: deadlines,
  kills, steals), ``_ledger`` (items to futures, cancel, finish, retries), ``_schedule`` (the
  scheduling policy), ``_handle`` (a worker's handle and its phases), ``_processes`` (the
  zygote and its workers) and ``_answers`` (answers, output, deaths); ``_launch``: how its
  workers come to exist; ``_zygote`` and ``_worker``: the pool's two kinds of process.
"""

from ._launch import PoolError
from ._outcome import (
    CallFailed,
    Confinement,
    Containment,
    Mechanism,
    NotStarted,
    Outcome,
    Status,
)
from ._pool import Pool
from ._quota import MAX_PROCESSES
from ._run import guarded, run
from ._spec import SpecError, load_callable
from ._wire import OUTPUT_LIMIT, RESULT_LIMIT

__all__ = [
    "MAX_PROCESSES",
    "OUTPUT_LIMIT",
    "RESULT_LIMIT",
    "CallFailed",
    "Confinement",
    "Containment",
    "Mechanism",
    "NotStarted",
    "Outcome",
    "Pool",
    "PoolError",
    "SpecError",
    "Status",
    "guarded",
    "load_callable",
    "run",
]

# Public objects name their public home (reprs, pickles, docs), not the private module.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
