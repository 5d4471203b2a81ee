"""A code scorer whose own sandbox is broken scores every program alike, its benign example
included: every case would be ok for nothing. It is a problem, saying so, never ok."""

from __future__ import annotations

import pytest

from tests._projects import fast, reported

pytestmark = pytest.mark.timeout(180)

HARNESS = '''\
import re
import subprocess
import sys


def _run(code, prelude):
    match = re.search(r"```python\\n(.*?)```", code, re.DOTALL)
    program = prelude + (match.group(1) if match else code)
    try:
        done = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=1
        )
    except subprocess.TimeoutExpired:
        return 0.0
    return float(done.returncode == 0 and done.stdout.strip() == "42")


def broken(solution_str, ground_truth):
    """Its child imports a module the sandbox lacks: every program fails."""
    return _run(solution_str, "import sandbox_helpers_not_installed\\n")


def working(solution_str, ground_truth):
    return _run(solution_str, "")
'''


def test_a_code_scorer_that_scores_its_example_as_a_failing_program_is_a_problem(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(harness=HARNESS)
    pytester.makeini("[pytest]\n")
    specs = [f"--reward-hang-scorer=harness.py:{name} kind=code" for name in ("broken", "working")]
    result = pytester.runpytest_subprocess(
        *fast(deadline=3, max_chars=1024, family="python-loop"), *specs, "--reward-hang-json=r.json"
    )
    by_id = reported(pytester)
    assert by_id["harness.broken"]["status"] == "problem"
    result.stdout.fnmatch_lines(
        [
            "*the scorer's own example (the default example) scores 0, as a program that fails "
            "does (*): no case can be told from a broken harness*example=FILE*"
        ]
    )
    # The same harness, working: its example scores 1, a failing program 0.
    assert by_id["harness.working"]["status"] != "problem"
