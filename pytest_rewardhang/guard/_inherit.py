"""What a process that forks the guard's processes (a pool's zygote, an isolating worker) hands
down, that another process of the same user may change from outside it: its resource limits
(``prlimit``), its nice value, its CPUs, its scheduling policy (``SCHED_IDLE``) and its timer
slack (``/proc/PID/timerslack_ns``, which root may write: every later sleep 0.5 s late). Read once,
put back before each fork, so that what one item did to its parent reaches no later item;
and by a warm worker, put back at its full check between items (see ``_worker._State``).
"""

from __future__ import annotations

import os
import resource

#: Every resource limit this platform has.
_RLIMITS = sorted(getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_"))

Inherited = tuple[list[tuple[int, int]], int, set[int], tuple[int, os.sched_param], bytes]
#: This process's timer slack, which its children inherit (none without /proc).
_SLACK = "/proc/self/timerslack_ns"


def _slack() -> bytes:  # pragma: no cover - zygote and worker only
    try:
        with open(_SLACK, "rb") as f:
            return f.read()
    except OSError:
        return b""


def read() -> Inherited:  # pragma: no cover - zygote and worker only
    """What this process hands down now."""
    limits = [resource.getrlimit(which) for which in _RLIMITS]
    policy = os.sched_getscheduler(0), os.sched_getparam(0)
    cpus = os.sched_getaffinity(0)
    return limits, os.getpriority(os.PRIO_PROCESS, 0), cpus, policy, _slack()


def put_back(saved: Inherited) -> bool:  # pragma: no cover - zygote and worker only
    """Put back what was changed of ``saved``; False where it cannot be (a hard limit lowered,
    the nice value raised or the policy changed, and this process is not privileged to undo
    it)."""
    limits, nice, cpus, (policy, param), slack = saved
    try:
        for which, want in zip(_RLIMITS, limits, strict=True):
            if resource.getrlimit(which) != want:
                resource.setrlimit(which, want)
        if os.getpriority(os.PRIO_PROCESS, 0) != nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        if os.sched_getaffinity(0) != cpus:
            os.sched_setaffinity(0, cpus)
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, param)
        if slack and _slack() != slack:
            with open(_SLACK, "wb") as f:
                f.write(slack)
    except (OSError, ValueError):
        return False
    return True
