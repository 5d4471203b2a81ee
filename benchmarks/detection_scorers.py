"""Planted slow scorers and clean ones, for the detection benchmark (``bench_detection.py``).

Each planted scorer hangs only on inputs built from its own vocabulary, which no bundled corpus
holds (``<plan>``, ``<claim>``, ``{%`` ...): only a search that reads the scorer finds them.
Each is written as reward code is: a format regex, a marker scan, an extracted expression
evaluated with sympy. The benchmark copies every scorer into a file of its own, so the check
harvests one scorer's vocabulary at a time; ``PLANTED`` and ``CLEAN`` name them with their
shape. Regexes are written inside the functions, as most reward code does: the check records
them while the scorer scores its example.
"""

from __future__ import annotations

import asyncio
import re
import sys

#: name -> the shape of its hang, as the benchmark's table prints it.
PLANTED = {
    "poly2_claims": "regex n^2: findall <claim>(.*?)</claim>",
    "poly3_plan": "regex n^3: <plan>.*</plan>.*<verdict>.*</verdict>",
    "poly3_reason_final": "regex n^3: ^<reason>.*?</reason>.*?<final>.*?</final>$",
    "poly4_chain": "regex n^4: [A].*[B].*[C].*[D]",
    "exp_ok_tags": "regex 2^n: ^(?:<ok>|<ok>\\s?)+$",
    "exp_words_end": "regex 2^n: ^(?:\\w+\\s?)+<end>$",
    "scan_markers": "Python n^2: every @@step against every earlier one",
    "sympy_extract": "sympy: evaluates the last ANSWER[...] (found in linear time)",
    "recursive_blocks": "recursion 2^n: {% blocks retried as text",
    "async_evidence": "async regex n^3: <evidence>.*</evidence>.*<conclusion>",
}
CLEAN = {
    "clean_tags": "linear regexes over the planted tags",
    "clean_sympy": "sympy on a bounded, checked ANSWER[...]",
    "clean_async": "async marker counts",
    "clean_linear_loop": "a Python loop over every character (linear)",
}


def poly2_claims(solution_str: str, ground_truth: str) -> float:
    claims = re.findall(r"<claim>(.*?)</claim>", solution_str, re.DOTALL)
    return float(any(c.strip() == ground_truth for c in claims))


def poly3_plan(solution_str: str, ground_truth: str) -> float:
    found = re.search(r"<plan>.*</plan>.*<verdict>.*</verdict>", solution_str, re.DOTALL)
    return 0.5 if found else 0.0


def poly3_reason_final(solution_str: str, ground_truth: str) -> float:
    found = re.match(r"^<reason>.*?</reason>.*?<final>.*?</final>$", solution_str, re.DOTALL)
    return 1.0 if found else 0.0


def poly4_chain(solution_str: str, ground_truth: str) -> float:
    found = re.search(r"\[A\].*\[B\].*\[C\].*\[D\]", solution_str, re.DOTALL)
    return 1.0 if found else 0.0


def exp_ok_tags(solution_str: str, ground_truth: str) -> float:
    return float(re.match(r"^(?:<ok>|<ok>\s?)+$", solution_str) is not None)


def exp_words_end(solution_str: str, ground_truth: str) -> float:
    return float(re.match(r"^(?:\w+\s?)+<end>$", solution_str) is not None)


def scan_markers(solution_str: str, ground_truth: str) -> float:
    """Rewards distinct steps: each @@step is compared with every earlier one, in Python."""
    starts = []
    at = solution_str.find("@@step")
    while at >= 0:
        starts.append(at)
        at = solution_str.find("@@step", at + 1)
    repeats = 0
    for i, a in enumerate(starts):
        for b in starts[:i]:
            repeats += solution_str[a : a + 12] == solution_str[b : b + 12]
    return 1.0 / (1 + repeats)


def sympy_extract(solution_str: str, ground_truth: str) -> float:
    """Extracts the last ANSWER[...] in linear time; evaluating it with sympy is the hang."""
    import sympy  # imported here so only this scorer's harvest sees sympy's own regexes

    start = solution_str.rfind("ANSWER[")
    if start < 0:
        return 0.0
    end = solution_str.find("]", start)
    answer = solution_str[start + len("ANSWER[") : end if end >= 0 else len(solution_str)]
    try:
        difference = sympy.sympify(answer) - sympy.sympify(ground_truth)
        return float(sympy.simplify(difference) == 0)
    except Exception:  # unparsable answers score 0, as reward code does
        return 0.0


sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))


def _block(text: str, at: int) -> int | None:
    """Where the text from ``at`` ends: ``{%`` opens a block that ``%}`` closes; an unclosed one
    is read again as plain text, which is what makes this exponential."""
    if text.startswith("{%", at):
        inner = _block(text, at + 2)
        if inner is not None and text.startswith("%}", inner):
            return _block(text, inner + 2)
        return _block(text, at + 2)
    if at >= len(text) or text.startswith("%}", at):
        return at
    nxt = text.find("{%", at)
    close = text.find("%}", at)
    stops = [i for i in (nxt, close) if i >= 0]
    return _block(text, min(stops)) if stops else len(text)


def recursive_blocks(solution_str: str, ground_truth: str) -> float:
    end = _block(solution_str, 0)
    return float(end == len(solution_str) and ground_truth in solution_str)


async def async_evidence(solution_str: str, ground_truth: str) -> float:
    await asyncio.sleep(0)
    pattern = r"<evidence>.*</evidence>.*<conclusion>.*</conclusion>"
    return 1.0 if re.search(pattern, solution_str, re.DOTALL) else 0.0


def clean_tags(solution_str: str, ground_truth: str) -> float:
    plan = re.search(r"<plan>([^<]*)</plan>", solution_str)
    claim = re.search(r"<claim>([^<]{0,200})</claim>", solution_str)
    verdict = solution_str.rfind("<verdict>")
    return float(bool(plan) + bool(claim) + (verdict >= 0)) / 3


def clean_sympy(solution_str: str, ground_truth: str) -> float:
    import sympy

    found = re.search(r"ANSWER\[([-0-9/ ]{1,20})\]", solution_str)
    if found is None:
        return 0.0
    try:
        return float(sympy.Rational(found.group(1).strip()) == sympy.Rational(ground_truth))
    except (TypeError, ValueError):
        return 0.0


async def clean_async(solution_str: str, ground_truth: str) -> float:
    await asyncio.sleep(0)
    opened, closed = solution_str.count("<evidence>"), solution_str.count("</evidence>")
    return float(opened == closed and ground_truth in solution_str)


def clean_linear_loop(solution_str: str, ground_truth: str) -> float:
    score = 0
    for char in solution_str:
        if char.isdigit():
            score += int(char) % 3
        elif char in "<>{}[]":
            score -= 1
    return float(score > 0)
