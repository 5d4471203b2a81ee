"""A scorer's own partial sandbox, tested rather than assumed: human-eval's sets ``os.fork``,
``os.kill`` and ``subprocess.Popen`` to None before it runs the program, and kills only the
child it started. The same calls by other names (``posix.fork``, ``ctypes``'s libc,
``posix.posix_spawn``) start processes that outlive the call; the check names them."""

from __future__ import annotations

import pytest

from tests._projects import fast, reported

pytestmark = pytest.mark.timeout(180)

SANDBOX = """\
import multiprocessing
import os
import re
import subprocess

FENCE = re.compile(r"```python\\n(.*?)```", re.DOTALL)


def _sandboxed(program, results):
    os.fork = None
    os.kill = None
    os.system = None
    subprocess.Popen = None
    try:
        exec(program, {})
        results.put(1.0)
    except BaseException:
        results.put(0.0)


def check_program(solution_str, ground_truth):
    match = FENCE.search(solution_str)
    program = match.group(1) if match else solution_str
    context = multiprocessing.get_context("fork")
    results = context.SimpleQueue()
    child = context.Process(target=_sandboxed, args=(program, results))
    child.start()
    child.join(timeout=1)
    if child.is_alive():
        child.kill()  # the child only: what it started is left alone
        child.join()
    return 0.0 if results.empty() else results.get()
"""


def test_programs_that_reach_fork_by_another_name_leave_processes_the_check_names(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(sandbox=SANDBOX)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        *fast(deadline=3, max_chars=1024, family="aliases"),
        "--reward-hang-scorer=sandbox.py:check_program kind=code",
        "--reward-hang-contexts=main",
        "--reward-hang-json=r.json",
    )
    entry = reported(pytester)["sandbox.check_program"]
    assert entry["status"] == "fail", entry["status"]
    leaks = {case["id"]: case for case in entry["cases"] if case["leaked"]}
    # posix.fork, libc's fork and posix_spawn each left a process behind, named.
    assert {"aliases-posix-fork-setsid", "aliases-ctypes-fork", "aliases-posix-spawn-sleeper"} <= (
        set(leaks)
    ), sorted(leaks)
    assert any("time.sleep(10**6)" in name for name in leaks["aliases-posix-spawn-sleeper"]["left"])
    result.stdout.fnmatch_lines(["*left 1 process(es) running after it returned (killed): pid *"])
