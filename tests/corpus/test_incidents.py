"""The ``incidents`` family: inputs from real incidents, each with where it was seen, at work.

Each case is fed, under the real guard, to a small scorer written the way the code it came from
is, and must end as that code did: past its deadline (or over its memory limit).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest

from pytest_rewardhang.corpus import _cases
from pytest_rewardhang.guard import Status, run

pytestmark = pytest.mark.timeout(120)
MAX_CHARS = 131072
HUNG = (Status.TIMEOUT, Status.MEMORY)


def incident(name: str, max_chars: int = MAX_CHARS) -> list[_cases.Case]:
    cases = _cases.cases_for("math", max_chars, 0, families=["incidents"])
    found = [c for c in cases if c.id == f"incidents-{name}" or c.formula_id == f"incidents-{name}"]
    assert found, name
    return found


def test_every_case_parses_with_its_provenance() -> None:
    family = _cases.load_corpus().responses["incidents"]
    assert family.kinds == ("math", "text")
    names = {case.name for case in family.cases}
    assert {
        "roll-format-regex",
        "maxtext-boxed-scan",
        "factorial-10-7",
        "power-3-1500000000",
        "sympy-sin-cos-exp",
        "math-verify-tower-2",
        "math-verify-tower-10",
        "math-verify-issue-65",
    } <= names
    for case in family.cases:
        assert len(case.provenance) > 30, case.name  # where it was seen, not a placeholder
    roll = incident("roll-format-regex")
    assert [len(c.text) for c in roll] == [2048, 8192, 32768]
    assert roll[0].text.startswith("<think></think><answer></think><answer>")
    boxed = incident("maxtext-boxed-scan")
    assert len(boxed[-1].text) == MAX_CHARS
    assert boxed[-1].text == ("\\boxed{" * 20000)[:MAX_CHARS]


def roll_format(response: str) -> float:
    # ROLL's format_reward_fn default (roll/pipeline/rlvr/rewards/math_rule_reward_worker.py)
    pattern = r"^<think>.*?</think>.*?<answer>.*?</answer>$"
    return 0.0 if re.match(pattern, response, re.DOTALL | re.MULTILINE) else -1.0


def maxtext_normalize(response: str) -> str:
    # maxtext's normalize_final_answer (src/MaxText/rl/utils_rl.py)
    return re.sub(r"(\\boxed\{)(.*)(\})", "\\2", response)


def evaluates(response: str) -> str:
    """An eval-based numeric check: carets are powers, braces group."""
    expression = response.replace("^", "**").replace("{", "(").replace("}", ")")
    return type(eval(expression, {"factorial": math.factorial})).__name__


def sympy_parses(response: str) -> str:
    from sympy.parsing.sympy_parser import parse_expr

    return type(parse_expr(response)).__name__


@pytest.mark.parametrize(
    ("name", "scorer", "budget"),
    [
        ("roll-format-regex", roll_format, 1.0),
        ("maxtext-boxed-scan", maxtext_normalize, 1.0),
        ("factorial-10-7", evaluates, 1.0),
        ("power-3-1500000000", evaluates, 1.0),
        ("math-verify-tower-2", evaluates, 1.0),
        ("math-verify-tower-10", evaluates, 1.0),
        pytest.param(
            "sympy-sin-cos-exp", sympy_parses, 2.0, marks=pytest.mark.needs_extra("bench")
        ),
    ],
)
def test_each_case_hangs_the_code_it_came_from(
    name: str, scorer: Callable[[str], Any], budget: float
) -> None:
    if scorer is sympy_parses:
        import sympy  # noqa: F401 - imported before the fork, so the budget is the call's own
    largest = incident(name)[-1]
    out = run(scorer, (largest.text,), budget=budget, memory_mb=512)
    assert out.status in HUNG, out.describe()


def test_the_roll_shape_is_cheap_when_small() -> None:
    # Cubic, not broken: the smallest rung finishes, so growth is fit over the ladder.
    smallest = incident("roll-format-regex")[0]
    out = run(roll_format, (smallest.text,), budget=10.0)
    assert out.status is Status.OK, out.describe()
    assert out.value == -1.0
