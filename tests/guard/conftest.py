"""Fixtures of the guard's tests: how a pool's workers come to exist."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_rewardhang.guard import Pool


class Launch:
    """One way for a pool's workers to come to exist, as CPython's multiprocessing tests run
    under each start method: forked from a zygote that imports the scorer by name, or forked
    from the caller, which serves the scorer wrapped in a closure no fresh interpreter imports.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def pool(self, fn: Callable[..., Any], **options: Any) -> Pool:
        target = fn
        if self.name == "caller":

            def target(*args: Any, **kwargs: Any) -> Any:
                return fn(*args, **kwargs)

        pool = Pool(target, **options)
        zygote = pool._engine.zygote
        if zygote is None or zygote.forked != (self.name == "caller"):
            pool.close()
            pytest.fail(f"the pool was meant to fork its workers from the {self.name}")
        return pool


@pytest.fixture(params=["zygote", "caller"])
def launch(request: pytest.FixtureRequest) -> Launch:
    return Launch(request.param)
