"""The two scorers the pool benchmark runs, in their own module so every peer can import them.

``fast`` normalises a response the way verl's gsm8k/math scorers do (~50 µs); ``symbolic``
checks an answer with sympy (~5 ms). Either hangs inside one C call on a response of
``"HANG"``, as degenerate responses make real scorers do.
"""

from __future__ import annotations

import re
import string
import unicodedata

# At module level, as real scorers do: the pool's zygote imports it once for every worker.
import sympy

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_STRIP = str.maketrans("", "", string.punctuation.replace("-", "").replace(".", ""))
_LATEX = re.compile(r"\\(?:text|mathrm|boxed|left|right|[a-z]+)\b")
_SPACE = re.compile(r"\s+")


def fast(solution_str: str, ground_truth: str) -> float:
    if solution_str == "HANG":
        return float(sum(range(10**13)))
    text = unicodedata.normalize("NFKC", solution_str).lower()
    text = _LATEX.sub(" ", text).translate(_STRIP)
    words = _SPACE.sub(" ", text).strip()
    answer = words.rsplit("answer is", 1)[-1]
    numbers = _NUMBER.findall(answer) or _NUMBER.findall(words)
    if not numbers:
        return 0.0
    return float(numbers[-1].replace(",", "").rstrip(".") == ground_truth.replace(",", ""))


def symbolic(solution_str: str, ground_truth: str) -> float:
    if solution_str == "HANG":
        return float(sum(range(10**13)))
    answer = solution_str.rsplit("=", 1)[-1]
    try:
        difference = sympy.expand(sympy.sympify(answer) - sympy.sympify(ground_truth))
    except (sympy.SympifyError, TypeError, SyntaxError):
        return 0.0
    return float(difference == 0)


def fast_items(count: int, hang_every: int = 0) -> list[tuple[str, str]]:
    items = []
    for i in range(count):
        if hang_every and i % hang_every == hang_every // 2:
            items.append(("HANG", "0"))
            continue
        truth = f"{(i * 7919) % 100_000:,}"
        filler = "Let me think step by step, \\text{carefully}: " * (32 + i % 32)
        items.append((f"{filler} so the final answer is {truth if i % 3 else '17'}.", truth))
    return items


def symbolic_items(count: int, hang_every: int = 0) -> list[tuple[str, str]]:
    items = []
    for i in range(count):
        if hang_every and i % hang_every == hang_every // 2:
            items.append(("HANG", "0"))
            continue
        # Different coefficients for every item, so sympy's cache does not do the work.
        a, b, c = i % 97 + 1, i // 97 + 2, i % 5 + 1
        truth = f"({a}*x + {b})**4 * (y - {c})**2"
        shown = truth if i % 4 else f"({a}*x + {b})**4 * (y + {c})**2"
        items.append((f"so we get f = {shown}", f"expand({truth})"))
    return items


#: How many times ``medium`` does ``fast``'s work: about 1 ms a call.
MEDIUM_REPEATS = 22


def medium(solution_str: str, ground_truth: str) -> float:
    """``fast``'s work done ``MEDIUM_REPEATS`` times: a ~1 ms scorer of the same shape."""
    score = 0.0
    for _ in range(MEDIUM_REPEATS):
        score = fast(solution_str, ground_truth)
    return score


def fast_dict(solution_str: str, ground_truth: str) -> dict[str, object]:
    """``fast``'s score in a small dict with a reason, as reward functions with extra info
    return it: an answer the caller checks opcode by opcode (see guard._decode)."""
    score = fast(solution_str, ground_truth)
    return {"score": score, "reason": "matched" if score else "no match"}


def fast_list(solution_str: str, ground_truth: str) -> list[float]:
    """``fast``'s score and 1,000 per-token rewards: an answer over 4 KiB, which a pool decodes
    beside its loop."""
    return [fast(solution_str, ground_truth)] * 1000
