"""What the adapters share: one warm pool per scorer and process, and the fallback report."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

# Absolute imports throughout the adapters: verl loads a custom reward file as a standalone
# module ("custom_module"), where relative imports fail.
from pytest_rewardhang.guard import Outcome, Pool, Status
from pytest_rewardhang.guard._run import _reraisable

log = logging.getLogger("pytest_rewardhang.adapters")

_pools: dict[tuple[Any, ...], Pool] = {}
_lock = threading.Lock()
_SNIPPET = 200


def pool_for(
    scorer: Callable[..., Any] | str, budget: float, memory_mb: float | None, workers: int
) -> Pool:
    """The warm pool for this scorer and these limits, started on first use in this process."""
    # Keyed by pid too: a trainer that forks (a ProcessPoolExecutor, a dataloader) must not
    # drive its parent's workers.
    key = (scorer, float(budget), memory_mb, workers, os.getpid())
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:
            pool = _pools[key] = Pool(scorer, workers=workers, budget=budget, memory_mb=memory_mb)
        return pool


def close_pools() -> None:
    """Close every pool the adapters started in this process (they also close at exit)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


def value_or_default(
    out: Outcome, default: Any, sample: Mapping[str, Any], hang_log: str | None, who: str
) -> Any:
    """The score, or ``default`` with one warning line (and a JSON line) naming the sample."""
    if out.status is Status.OK:
        return out.value
    if out.status is Status.ERROR:
        raise _reraisable(out)
    shown = {key: _snippet(value) for key, value in sample.items()}
    log.warning("%s: %s; scored %r for %s", who, out.describe(), default, shown)
    if hang_log:
        record = {
            "status": str(out.status),
            "describe": out.describe(),
            "stuck_at": out.stuck_at,
            "default": default,
            **{key: _jsonable(value) for key, value in sample.items()},
        }
        with open(hang_log, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=repr) + "\n")
    return default


def _snippet(value: Any) -> Any:
    if isinstance(value, str) and len(value) > 2 * _SNIPPET:
        return f"{value[:_SNIPPET]}...[{len(value) - 2 * _SNIPPET} chars]...{value[-_SNIPPET:]}"
    return value


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
