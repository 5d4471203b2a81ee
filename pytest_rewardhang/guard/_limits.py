"""The guard's options, checked where they are given.

A nonsense value fails at once with one ``ValueError`` naming the argument, never later in the
middle of training: a boolean (``budget=True`` is an ``int`` to Python, and meant nothing), NaN,
an infinity, a negative or zero amount, or one too large for the kernel's limits and timers
(``memory_mb=math.inf`` made every call crash, ``budget=1e306`` raised ``OverflowError``); a
switch that is not a bool (``network="false"`` is a true string, and meant the opposite).
"""

from __future__ import annotations

import math
from typing import TypeGuard

#: The longest budget: 31 years, past any a user means, and short of every overflow in the
#: deadlines' arithmetic (poll timeouts in milliseconds, monotonic clocks plus the budget).
MAX_BUDGET_S = 1e9
#: The largest memory limit: 1 EiB, whose bytes plus what a process maps still fit the kernel's
#: 63-bit resource limit.
MAX_MEMORY_MB = float(1 << 40)


def _real(value: object) -> TypeGuard[int | float]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)  # an int of any size is finite


def _shown(value: object) -> str:
    """The value as the message shows it: an int too long for ``repr`` by its size."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    return repr(value)


def seconds(name: str, value: object) -> float:
    """A finite positive number of seconds, at most a lifetime."""
    if not (_real(value) and value > 0):
        raise ValueError(f"{name} must be a positive number of seconds, not {_shown(value)}")
    return _at_most_a_lifetime(name, value)


def wait(name: str, value: object) -> float | None:
    """None (no bound) or a finite number of seconds >= 0, at most a lifetime."""
    if value is None:
        return None
    if not (_real(value) and value >= 0):
        raise ValueError(f"{name} must be >= 0 seconds or None, not {_shown(value)}")
    return _at_most_a_lifetime(name, value)


def _at_most_a_lifetime(name: str, value: float) -> float:
    if value > MAX_BUDGET_S:
        raise ValueError(f"{name} must be at most {MAX_BUDGET_S:g} seconds, not {_shown(value)}")
    return float(value)


def mebibytes(name: str, value: object) -> float | None:
    """None (no limit) or a finite positive number of MiB the kernel can enforce."""
    if value is None:
        return None
    if not (_real(value) and value > 0):
        raise ValueError(f"{name} must be a positive number of MiB or None, not {_shown(value)}")
    if value > MAX_MEMORY_MB:
        raise ValueError(f"{name} must be at most {MAX_MEMORY_MB:g} MiB, not {_shown(value)}")
    return float(value)


def count(name: str, value: object) -> int:
    """A positive int (not a bool, not a float that happens to be whole)."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be a positive int, not {_shown(value)}")
    return value


def function(value: object, *, spec: bool) -> None:
    """``fn``: a callable, or where ``spec``, a ``"pkg.mod:attr"`` / ``"file.py:attr"`` string
    (else every call would come back an ERROR, each the same ``TypeError``)."""
    if callable(value) or (spec and isinstance(value, str)):
        return
    what = "callable or a spec string" if spec else "callable"
    hint = ": give the function itself (load_callable(spec) loads one)" * isinstance(value, str)
    raise TypeError(f"fn must be {what}, not {type(value).__name__} {value!r:.80}{hint}")


def switch(name: str, value: object) -> bool:
    """True or False, and nothing that Python merely reads as one."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, not {_shown(value)}")
    return value
