"""The alarm-guarded code scorer fixed with the guard: the program runs in a killable child."""

from __future__ import annotations

import re

from pytest_rewardhang.guard import Status, run

_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.DOTALL)


def _execute(program: str, tests: str) -> bool:
    exec(program + "\n" + tests, {})
    return True


def compute_score(solution_str: str, ground_truth: str, timeout_s: float = 1.0) -> float:
    match = _FENCE.search(solution_str)
    program = match.group(1) if match else solution_str
    out = run(_execute, (program, ground_truth), budget=timeout_s, memory_mb=512)
    return 1.0 if out.status is Status.OK else 0.0
