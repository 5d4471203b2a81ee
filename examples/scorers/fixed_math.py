"""The naive math scorer fixed: linear in the response, and no arithmetic on the answer."""

from __future__ import annotations

_MAX_ANSWER_CHARS = 256


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    begin = start + len("\\boxed{")
    for i in range(begin, min(len(text), begin + _MAX_ANSWER_CHARS)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[begin:i]
            depth -= 1
    return None


def compute_score(solution_str: str, ground_truth: str) -> float:
    answer = last_boxed(solution_str)
    if answer is None:
        marker = solution_str.rfind("answer is ")
        start = marker + len("answer is ")
        answer = solution_str[start : start + _MAX_ANSWER_CHARS] if marker >= 0 else None
    if answer is None:
        return 0.0
    return 1.0 if answer.strip(" .$") == ground_truth.strip() else 0.0
