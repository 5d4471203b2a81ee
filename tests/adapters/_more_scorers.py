"""A second scorer module, for reward functions that share one pool (``pooled_rewards``)."""

from __future__ import annotations

import os
from typing import Any

#: Which process imported this module: a pool's zygote, or (lazily) a worker itself.
IMPORTED_BY = os.getpid()


def length_ok(completion: Any, **kwargs: Any) -> Any:
    """1.0 in a worker forked after this module was imported (in its zygote)."""
    return float(os.getpid() != IMPORTED_BY)
