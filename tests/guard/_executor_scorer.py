"""A scorer whose module makes a process pool at import, as a verifiers ``MathRubric`` made at
module level, or verl's math_verify wrapper, do. The standard library only (see _scorers)."""

from __future__ import annotations

import concurrent.futures
import multiprocessing

EXECUTOR = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))


def _length(text: str) -> int:
    if text == "hang":
        return sum(range(10**13))  # one C call: the item is killed at its deadline
    return len(text)


def uses_its_executor(text: str) -> int:
    return EXECUTOR.submit(_length, text).result(timeout=60)
