"""Fixtures of the adapter tests: every test closes the pools the adapters started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_rewardhang.adapters import close_pools


@pytest.fixture
def closed_pools() -> Iterator[None]:
    yield
    close_pools()  # before no_leaks looks for leftover processes
