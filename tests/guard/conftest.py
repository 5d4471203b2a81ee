"""Fixtures of the guard's tests: how a pool's workers come to exist, and what contains them."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.guard import Pool, _cgroup


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


@pytest.fixture(params=["cgroups", "subreaper"])
def containment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each guarded process in a cgroup of its own, or (cgroups turned off, as where none can
    be made) found by its subreaper alone: where a group sweeps up what a walk missed, an
    attack on the walk shows only without it."""
    if request.param == "subreaper":
        monkeypatch.setenv(_cgroup.CGROUP_ENV, "0")
    return str(request.param)


@pytest.fixture
def readable() -> Iterator[Path]:
    """A folder of the test's that every uid may read and none but root may write: where it
    tells unprivileged guarded processes something (their own writable folders, in a sealed
    mount namespace, are theirs alone; nowhere else may they write). Removed after."""
    base = "/run" if os.path.isdir("/run") else None
    folder = Path(tempfile.mkdtemp(prefix="rewardhang-test-", dir=base))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
