"""A scorer whose module starts a thread pool at import and warms it there, so its threads
exist before any fork. The standard library only (see _scorers)."""

from __future__ import annotations

import concurrent.futures

EXECUTOR = concurrent.futures.ThreadPoolExecutor(2)
EXECUTOR.submit(len, "warm").result()


def uses_its_threads(text: str) -> int:
    return EXECUTOR.submit(len, text).result(timeout=60)
