"""A naive math scorer, as found in the wild: it hangs on degenerate responses.

The greedy regex backtracks quadratically on a long response, and the "numeric check" evaluates
power towers. Registered with ``expect=hang``: the check reports it as a hang caught.
"""

from __future__ import annotations

import re

_BOXED = re.compile(r".*\\boxed\{(.*)\}")
_ANSWER_IS = re.compile(r".*answer is (.*)")


def _to_number(text: str) -> float | None:
    python = text.replace("^", "**").replace("{", "(").replace("}", ")").strip(" .$")
    if not re.fullmatch(r"[0-9()*+\-/. ]+", python):
        return None
    try:
        return float(eval(python))  # noqa: S307 - the pathology this example shows
    except (ArithmeticError, ValueError, SyntaxError):
        return None


def compute_score(solution_str: str, ground_truth: str) -> float:
    match = _BOXED.search(solution_str) or _ANSWER_IS.search(solution_str)
    if match is None:
        return 0.0
    answer = match.group(1)
    if answer.strip() == ground_truth.strip():
        return 1.0
    value = _to_number(answer)
    return 1.0 if value is not None and value == _to_number(ground_truth) else 0.0
