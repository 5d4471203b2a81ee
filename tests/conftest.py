from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_rewardhang.guard import _reap
from pytest_rewardhang.guard._state import STATE
from tests._lazy import SOURCE

# Re-exported (the redundant aliases say so): the tests import them from here.
from tests._procs import assert_dead as assert_dead
from tests._procs import children as children
from tests._procs import dead_or_dying as dead_or_dying
from tests._procs import join_a_lingering_thread as join_a_lingering_thread
from tests._procs import pipes as pipes
from tests._procs import reaped_or_inits as reaped_or_inits
from tests._procs import state as state

pytest_plugins = ["pytester"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers() -> int | None:
    """``-n auto``: three workers for every two cores. The tests wait on deadlines, budgets
    and the pytest runs they start more than they compute: a worker a core left about a third
    of the machine idle (1.3 of 2 cores busy). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides
    where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    return max(cores * 3 // 2, 1)


def kill_everything_below(proc: subprocess.Popen[str]) -> None:
    """SIGKILL ``proc`` and every descendant (setsid ones too: found before the kill)."""
    found, frontier = [proc.pid], [proc.pid]
    while frontier:
        with contextlib.suppress(OSError):
            for pid in children(frontier.pop()):
                found.append(pid)
                frontier.append(pid)
    for signum in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: nothing forks meanwhile
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
    proc.communicate()


def sigint_storm(args: list[str], stop: Path, timeout: float) -> tuple[int, str, str]:
    """Run ``python -c`` ``args``, a caller that prints "ready" and then calls the guard in a
    loop until ``stop`` exists; send it SIGINT every millisecond for 3 s, then create ``stop``.
    Its exit code, stdout and stderr; it and all below it are killed if it does not end."""
    proc = subprocess.Popen(
        [sys.executable, "-c", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        end = time.monotonic() + 3
        while time.monotonic() < end:
            os.kill(proc.pid, signal.SIGINT)
            time.sleep(0.001)
        stop.touch()
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            kill_everything_below(proc)
    return proc.returncode, out, err


@pytest.fixture(scope="session", autouse=True)
def private_tempdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A temp dir of the suite's own, so the leak check never sees other programs' files."""
    path = str(tmp_path_factory.mktemp("tempdir"))
    # Ray puts its sockets under its temp dir, and an AF_UNIX path holds 107 bytes at most:
    # under pytest's (with xdist's popen-gw1/, or once pytest-of-root/pytest-1000/ is reached)
    # Ray could not start. A short one of its own, removed at the end.
    ray = tempfile.mkdtemp(prefix="rh-ray-")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tempfile, "tempdir", path)
            patch.setenv("TMPDIR", path)
            patch.setenv("RAY_TMPDIR", ray)
            yield
    finally:
        shutil.rmtree(ray, ignore_errors=True)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, its runs without Hypothesis's pytest plugin: loading it imports all of
    Hypothesis, most of a second at every start of a run, and no run here has a Hypothesis test
    (the check's search imports Hypothesis itself, when it is asked for)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    return pytester


@pytest.fixture
def lazy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The name of a module nobody has imported, which records the pid that imported it (see
    tests/_lazy.py)."""
    name = f"lazy_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fails the test if it leaves a child process, an open descriptor or a temp file."""
    fds = set(os.listdir("/proc/self/fd"))
    kids = children()
    temps = set(os.listdir(tempfile.gettempdir()))
    yield
    # A killed child slower to exit than the guard's bounded reap is left to the next call's
    # sweep (a busy machine's teardown): it must be dead and gone by that sweep, within 10 s.
    deadline = time.monotonic() + 10
    while (children() - kids) & STATE.unreaped and time.monotonic() < deadline:
        _reap.sweep_unreaped()
        time.sleep(0.02)
    assert children() - kids == set(), "child processes left behind"
    # listdir's own descriptor shows up in both listings, so the sets compare like for like.
    assert set(os.listdir("/proc/self/fd")) == fds, "descriptors left open"
    assert set(os.listdir(tempfile.gettempdir())) - temps == set(), "temp files left behind"


#: The optional dependency groups that tests mark with ``needs_extra(name)``, and the module
#: whose presence shows the group is installed.
_EXTRA_MODULES = {
    "ray": ("ray",),
    "bench": ("sympy", "numpy", "aiohttp"),
    "serve": ("uvicorn",),
    "trl": ("trl", "torch"),
    "verl": ("verl", "tensordict", "omegaconf"),
    "openrlhf": ("openrlhf", "aiohttp"),
    "areal": ("areal", "httpx", "numba", "colorlog", "tenacity"),
    "gym": ("nemo_gym",),
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs_extra("ray")`` skips, saying how to install the group, where it is
    missing; where ``REWARDHANG_REQUIRE_EXTRAS`` names the group (CI does), it fails instead."""
    for marker in item.iter_markers("needs_extra"):
        (name,) = marker.args
        if all(importlib.util.find_spec(module) for module in _EXTRA_MODULES[name]):
            continue
        required = os.environ.get("REWARDHANG_REQUIRE_EXTRAS", "").split(",")
        text = f"needs the {name!r} extra: pip install -e '.[{name}]'"
        if name in required:
            pytest.fail(f"{text} (REWARDHANG_REQUIRE_EXTRAS={','.join(required)})")
        pytest.skip(text)
