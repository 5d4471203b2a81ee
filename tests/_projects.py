"""The scorer project that the check's end-to-end tests run ``pytest --reward-hang-check`` on.

The ``project`` fixture (``tests/check/conftest.py``) writes :data:`SCORERS` as ``scorers.py``
beside an empty ``[pytest]`` ini in a pytester directory; a test names the scorers it runs with
:func:`scorer_args` and keeps the run short with :func:`fast`, passing the deadline, case size
and family its assertions are about.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from typing import Any

import pytest

import pytest_rewardhang

#: Every scorer the tests need, each showing one behaviour; a run checks only those it names.
#: The first line is an import, so the file's line numbers are those of this text.
SCORERS = '''\
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

SEEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seen")


def clean(solution_str, ground_truth):
    return float(solution_str.rstrip(" .").endswith(ground_truth))


def c_hang(solution_str, ground_truth):
    if len(solution_str) > 6000:
        sum(range(10**13))  # one C call: no signal handler runs until it returns
    return 0.0


class _Alarm(Exception):
    pass


def _raise(signum, frame):
    raise _Alarm


def alarm_guarded(solution_str, ground_truth):
    """Safe on the main thread's signal path; a threaded trainer skips the guard."""
    guarded = threading.current_thread() is threading.main_thread()
    if guarded:
        signal.signal(signal.SIGALRM, _raise)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        while len(solution_str) > 6000:
            # Sleeping, not spinning: CPython 3.13 raises the alarm's exception from a tight
            # loop outside the try around it, so even the main thread's guard would fail there.
            time.sleep(0.001)
    except _Alarm:
        return 0.0
    finally:
        if guarded:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return 0.0


def leaks(solution_str, ground_truth):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    return 0.0


def errors(solution_str, ground_truth):
    if len(solution_str) > 6000:
        raise ValueError("cannot parse a response this long")
    return 0.0


def _spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def spin(solution_str, ground_truth):
    """A fixed 0.1 s of CPU per call: slow against a baseline, never a hang."""
    _spin(0.1)
    return 0.0


def noisy(solution_str, ground_truth):
    """Slow only the first time it sees a response: one noisy sample, gone on the replay."""
    os.makedirs(SEEN, exist_ok=True)
    mark = os.path.join(SEEN, hashlib.sha256(solution_str.encode("utf-8", "replace")).hexdigest())
    if not os.path.exists(mark):
        open(mark, "w").close()
        _spin(0.1)
    return 0.0
'''


def line_of(text: str, needle: str) -> int:
    """The number of the first line of ``text`` that holds ``needle``."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


#: Where ``c_hang`` hangs: the line a stack dump and a GitHub annotation point at.
C_HANG_LINE = line_of(SCORERS, "sum(range(10**13))")


def fast(
    *, deadline: float, max_chars: int, family: str | None = None, confirm: float | None = 2
) -> list[str]:
    """``--reward-hang-check`` with a short deadline and small cases, without pytest's cache.

    ``confirm``: the deadlines a timed-out case's re-run may take (``None``: the default, ten);
    two, where what is under test is not that confirmation, keep each hang's cost down.
    """
    args = [
        "--reward-hang-check",
        f"--reward-hang-deadline={deadline:g}",
        f"--reward-hang-max-chars={max_chars}",
    ]
    if confirm is not None:
        args.append(f"--reward-hang-confirm={confirm:g}")
    if family is not None:
        args.append(f"--reward-hang-family={family}")
    return [*args, "-p", "no:cacheprovider"]


def reported(pytester: pytest.Pytester, path: str = "r.json") -> dict[str, dict[str, Any]]:
    """The JSON report's scorer entries, by id."""
    report = json.loads((pytester.path / path).read_text())
    return {entry["id"]: entry for entry in report["scorers"]}


def scorer_args(*names: str) -> list[str]:
    """Register the named scorers of :data:`SCORERS` on the command line."""
    return [f"--reward-hang-scorer=scorers.py:{name}" for name in names]


#: A check run serially and on two pytest-xdist workers; the xdist run is in the slow tier.
XDIST = pytest.mark.parametrize(
    "xdist",
    [pytest.param([], id="serial"), pytest.param(["-n", "2"], id="xdist", marks=pytest.mark.slow)],
)


def usage(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest run in this process, for a run that ends at a usage error before any scorer is
    imported or called: the same exit code and stderr as a subprocess, in a tenth of the time.
    """
    return pytester.runpytest_inprocess(*args)


# Every module of the plugin, imported when the tests are collected: pytester drops the modules
# that a test or a run imported when it ends, and a module imported again brings classes of its
# own (an exception raised by one copy and caught as the other's escapes as an internal error);
# imported before any test, they stay.
for _module in pkgutil.walk_packages(pytest_rewardhang.__path__, "pytest_rewardhang."):
    importlib.import_module(_module.name)
