"""Hangs behind a scorer's format gate, end to end: rllm's and slime's deepscaler reward and
TRL's ``reasoning_accuracy_reward`` return 0 unless the response holds ``</think>``, and only
then reach the slow step (sympy on a power tower, here a loop as long as the tower's value).
A case that replaces the whole response never gets there; a payload inside the example's frame,
after the string the scorer looks for, does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests._projects import fast, reported

pytestmark = pytest.mark.timeout(180)

GATED = '''\
import re

THOUGHT_DELIMITER_END = "</think>"
TOWER = re.compile(r"(\\d+)\\^\\{?(\\d+)\\^\\{?(\\d+)")


def _last_boxed(text):
    start = text.rfind("\\\\boxed{")
    if start < 0:
        return None
    depth, first = 0, start + len("\\\\boxed")
    for index in range(first, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return text[first + 1 : index]
    return None


def _evaluate(text):
    """Stands in for sympy evaluating a power tower: its work grows as the tower's value."""
    match = TOWER.search(text)
    if match is None:
        return text.strip()
    _, height, top = (int(group) for group in match.groups())
    steps = 0
    for _ in range(height**top):
        steps += 1
    return str(steps)


def _grade(answer, truth):
    if truth.strip().lstrip("-").isdigit():  # an integer answer: a string compare
        return float(answer.strip() == truth.strip())
    return float(_evaluate(answer) == _evaluate(truth))


def deepscaler(solution_str, ground_truth):
    """0 unless the response holds the end of its thought or a response header."""
    if THOUGHT_DELIMITER_END in solution_str:
        solution = solution_str.split(THOUGHT_DELIMITER_END)[1]
    elif "###Response" in solution_str:
        solution = solution_str.split("###Response")[1]
    else:
        return 0.0
    answer = _last_boxed(solution)
    if answer is None:
        return 0.0
    return _grade(answer, ground_truth)


def deepscaler_bounded(solution_str, ground_truth):
    """The same gate, and an evaluation that caps the tower: clean."""
    if THOUGHT_DELIMITER_END not in solution_str:
        return 0.0
    answer = _last_boxed(solution_str.split(THOUGHT_DELIMITER_END)[1])
    if answer is None or len(answer) > 12:
        return 0.0
    return float(answer == ground_truth)


def reasoning_accuracy_reward(completions, solution, reasoning_delimiters=None, **kwargs):
    """TRL's shape: chat completions, the reasoning cut at the first delimiter found."""
    if reasoning_delimiters is None:
        reasoning_delimiters = ["</think>"]
    rewards = []
    for completion, truth in zip(completions, solution):
        content = completion[0]["content"]
        answer = None
        for delimiter in reasoning_delimiters:
            if delimiter in content:
                answer = content.split(delimiter, 1)[1]
                break
        boxed = _last_boxed(answer) if answer is not None else None
        rewards.append(0.0 if boxed is None else _grade(boxed, truth))
    return rewards
'''

#: A scorer of its own module (the harvest reads the scorer's own files): TRL's R1 format
#: regex as the gate, the same slow step behind it.
R1 = """\
import re

from gated import _grade, _last_boxed

FORMAT = re.compile(r"^<think>\\n.*?\\n</think>\\n<answer>\\n(.*?)\\n</answer>$", re.DOTALL)


def format_then_grade(solution_str, ground_truth):
    match = FORMAT.match(solution_str)
    if match is None:
        return 0.0
    answer = _last_boxed(match.group(1))
    return 0.0 if answer is None else _grade(answer, ground_truth)
"""

#: A scorer that wants its answer as a JSON object's field.
JSON_ANSWER = """\
import json

from gated import _grade, _last_boxed


def json_answer(solution_str, ground_truth):
    try:
        answer = json.loads(solution_str)["answer"]
    except (ValueError, KeyError, TypeError):
        return 0.0
    boxed = _last_boxed(answer) or answer
    return _grade(boxed, ground_truth)
"""

TRL_EXAMPLE = {
    "completions": [
        [{"role": "assistant", "content": "6 * 7 = 42, so the answer is \\boxed{42}."}]
    ],
    "solution": ["42"],
}


@pytest.fixture
def gated(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(gated=GATED, r1=R1, json_answer=JSON_ANSWER)
    pytester.makeini("[pytest]\n")
    (pytester.path / "trl_example.json").write_text(json.dumps(TRL_EXAMPLE))
    return pytester


def check(
    pytester: pytest.Pytester, *specs: str
) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    args = fast(deadline=1, max_chars=4096, family="power-tower")
    named = [f"--reward-hang-scorer={spec}" for spec in specs]
    result = pytester.runpytest_subprocess(*args, *named, "--reward-hang-json=r.json")
    return result, reported(pytester)


def test_a_hang_behind_a_think_gate_and_an_integer_truth_is_found_inside_the_frame(
    gated: pytest.Pytester,
) -> None:
    result, by_id = check(gated, "gated.py:deepscaler")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*hangs: case power-tower-*-frame*-truth* (* chars) ran past the 1 s deadline",
            "HANG case power-tower-*-frame*-truth* (*after a string the scorer looks for "
            "(*)*; a ground truth of *",
            "*gated.py:* in _evaluate",
        ]
    )
    entry = by_id["gated.deepscaler"]
    assert entry["status"] == "hang"
    hang = next(case for case in entry["cases"] if case["status"] == "timeout")
    assert not hang["ground_truth"].isdigit()
    saved = json.loads((gated.path / hang["saved"]).read_text())
    response = saved["kwargs"]["solution_str"]
    # The input passes the gate: the marker, then the tower inside a \boxed{} after it.
    assert "</think>" in response or "###Response" in response
    assert "\\boxed{10^{10^" in response
    # Every case that replaced the whole response finished: the gate sent it back with 0.
    plain = [c for c in entry["cases"] if "-frame" not in c["id"] and c["context"] == "main"]
    assert plain
    assert all(case["status"] == "ok" for case in plain)


def test_a_gated_scorer_without_the_slow_step_is_clean_on_inputs_past_its_gate(
    gated: pytest.Pytester,
) -> None:
    result, by_id = check(gated, "gated.py:deepscaler_bounded")
    result.assert_outcomes(passed=1)
    entry = by_id["gated.deepscaler_bounded"]
    assert entry["status"] == "ok"
    framed = [c["id"] for c in entry["cases"] if "-frame1-" in c["id"] and c["context"] == "main"]
    assert len(framed) == 6  # after '</think>', under each shape of ground truth


def test_trls_reasoning_accuracy_reward_is_reached_past_its_delimiter(
    gated: pytest.Pytester,
) -> None:
    """Its delimiter is a default inside the function: a tag-like literal of the source."""
    result, by_id = check(
        gated, "gated.py:reasoning_accuracy_reward example=trl_example.json kind=math"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "HANG case power-tower-*-frame*-truth* (*after a string the scorer looks for "
            "('</think>')*"
        ]
    )
    entry = by_id["gated.reasoning_accuracy_reward"]
    assert entry["style"] == "trl"
    assert entry["status"] == "hang"


def test_a_hang_behind_an_r1_format_regex_is_found_inside_the_whole_format(
    gated: pytest.Pytester,
) -> None:
    """The regex wants the reasoning and the answer each in its tags, in order, whole: the
    tags its pattern holds make one frame of the two."""
    result, by_id = check(gated, "r1.py:format_then_grade")
    entry = by_id["r1.format_then_grade"]
    assert entry["status"] == "hang", entry["status"]
    result.stdout.fnmatch_lines(
        ["HANG case power-tower-*-frame1-truth* (*inside <think>...</think> then <answer>*"]
    )


def test_a_hang_behind_a_json_field_is_found_inside_a_json_object(gated: pytest.Pytester) -> None:
    result, by_id = check(gated, "json_answer.py:json_answer")
    entry = by_id["json_answer.json_answer"]
    assert entry["status"] == "hang", entry["status"]
    result.stdout.fnmatch_lines(
        ["HANG case power-tower-*-frame1-truth* (*in a JSON object's field 'answer'*"]
    )
