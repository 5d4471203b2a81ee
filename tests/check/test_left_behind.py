"""What a call leaves running, named: a process (killed by the guard), a non-daemon thread that
keeps the process from exiting; and the standard library's once-per-process helpers, which are
no leak of the call's."""

from __future__ import annotations

import pytest

from tests._projects import fast, reported

pytestmark = pytest.mark.timeout(180)

LEFT = '''\
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import shared_memory


def tracker(solution_str, ground_truth):
    """Shared memory starts multiprocessing's resource tracker, once per process."""
    block = shared_memory.SharedMemory(create=True, size=16)
    block.close()
    block.unlink()
    return 0.0


def sleeper(solution_str, ground_truth):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)  # left-behind"])
    return 0.0


STOP = threading.Event()


def lingers(solution_str, ground_truth):
    threading.Thread(target=STOP.wait, args=(60,), name="lingering-reader").start()
    return 0.0


EXECUTOR = []


def executor(solution_str, ground_truth):
    """An executor's idle workers outlive the call, and end at exit: no leak."""
    if not EXECUTOR:
        EXECUTOR.append(ThreadPoolExecutor(2))
    return EXECUTOR[0].submit(float, 1).result()
'''


def test_what_a_call_leaves_running_is_named_and_the_stdlibs_helpers_are_not(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(left=LEFT)
    pytester.makeini("[pytest]\n")
    specs = [f"--reward-hang-scorer=left.py:{n}" for n in ("tracker", "sleeper", "lingers")]
    specs.append("--reward-hang-scorer=left.py:executor")
    result = pytester.runpytest_subprocess(
        *fast(deadline=2, max_chars=1024, family="repetition"), *specs, "--reward-hang-json=r.json"
    )
    result.assert_outcomes(passed=2, failed=2)
    by_id = reported(pytester)
    assert by_id["left.tracker"]["status"] == "ok"
    assert by_id["left.executor"]["status"] == "ok"
    # The tracker was killed after each call (the guard leaves nothing running), yet no case
    # counts it.
    assert all(case["leaked"] == 0 for case in by_id["left.tracker"]["cases"])
    # Named by its command line, cut to a bound: how much of the sleeper's shows past the
    # interpreter's path depends on where the checkout is.
    result.stdout.fnmatch_lines(
        ["*left 1 process(es) running after it returned (killed): pid * (*python*"]
    )
    assert by_id["left.sleeper"]["status"] == "fail"
    sleeper = by_id["left.sleeper"]["cases"][0]
    assert sleeper["leaked"] == 1
    assert "time.sleep(120)" in sleeper["left"][0]
    result.stdout.fnmatch_lines(
        ["*left non-daemon thread(s) running after it returned ('lingering-reader'): *exit*"]
    )
    lingers = by_id["left.lingers"]
    assert lingers["status"] == "fail"
    assert lingers["cases"][0]["left"] == ["thread lingering-reader"]
