"""The structural regex analysis (``corpus/_redos``) against measured backtracking.

Run: .venv/bin/python benchmarks/bench_redos.py [--quick]

For each regex (from real reward code or the ReDoS literature, with its source and the way that
code calls it: match, fullmatch or search), the truth is measured, not assumed: Python's ``re``
runs the worst of a hand-written reference attack and the analysis's own attacks at SIZE
characters, in a subprocess killed at TIMEOUT_S. A regex is truly vulnerable when that takes
more than 1 s (a timeout counts). The analysis says found when its degree under the call's
semantics is quadratic or worse. The table gives both, the measured growth exponent between
SIZE/2 and SIZE (log2 of the time ratio), and false alarms and misses.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_rewardhang.corpus import _redos

SIZE = 65536
TIMEOUT_S = 8.0
VULNERABLE_S = 1.0
S, M = re.DOTALL, re.MULTILINE


@dataclass(frozen=True)
class Regex:
    pattern: str
    flags: int
    call: str  # match, fullmatch, search
    source: str
    #: A known attack: prefix, pump, suffix.
    reference: tuple[str, str, str]


REGEXES = [
    Regex(
        r"^<think>.*?</think>.*?<answer>.*?</answer>$",
        S,
        "match",
        "ROLL default format reward",
        ("<think>", "</think><answer>", ""),
    ),
    Regex(
        r"<think>.*</think>.*\\boxed\{.*\}.*",
        S,
        "fullmatch",
        "verl reward_score/geo3k.py format_reward (also EasyR1)",
        ("<think>", "</think>\\boxed{", ""),
    ),
    Regex(
        r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$",
        S | M,
        "match",
        "open-r1 rewards.py format_reward (TRL GRPO docs)",
        ("<think>\n", "\n</think>\n<answer>\n", ""),
    ),
    Regex(
        r"^<think>.*?</think>[\n ]<answer>.*?</answer>$",
        S,
        "match",
        "GRPO tutorials' format reward (Unsloth/TRL style)",
        ("<think>", "</think> <answer>", ""),
    ),
    Regex(
        r"^<think>(?!.*<think>)(.*?)</think>.*$",
        S,
        "match",
        "TRL rewards/format_rewards.py think_format_reward",
        ("<think>", "a", ""),
    ),
    Regex(
        r"<plan>.*</plan>.*<verdict>.*</verdict>.*",
        S,
        "search",
        "planted cubic format regex",
        ("<plan>", "</plan><verdict>", ""),
    ),
    Regex(
        r"<answer>(.*?)</answer>",
        S,
        "search",
        "verl reward_score/search_r1_like_qa_em.py extract_solution (finditer)",
        ("", "<answer>", ""),
    ),
    Regex(
        r"#### (\-?[0-9\.\,]+)",
        0,
        "search",
        "verl reward_score/gsm8k.py strict extraction",
        ("#### ", "1", "!"),
    ),
    Regex(
        r"(\-?[0-9\.\,]+)",
        0,
        "search",
        "verl reward_score/gsm8k.py flexible extraction (findall)",
        ("", "1.", "!"),
    ),
    Regex(
        r"(?i)Answer\s*:\s*([^\n]+)",
        0,
        "search",
        "verl reward_score/math_dapo.py minerva extraction (findall)",
        ("Answer:", " ", "\n"),
    ),
    Regex(
        r"(.*?)(\$)(.*?)(\$)(.*)",
        0,
        "search",
        "verl math_dapo.py / hendrycks normalize_final_answer (re.sub)",
        ("", "a", ""),
    ),
    Regex(
        r"(\\boxed\{)(.*)(\})",
        0,
        "search",
        "verl math_dapo.py normalize_final_answer (re.sub)",
        ("", "\\boxed{", ""),
    ),
    Regex(
        r"(\\text\{)(.*?)(\})",
        0,
        "search",
        "verl math_dapo.py normalize_final_answer (re.sub)",
        ("", "\\text{", ""),
    ),
    Regex(
        r"(frac)([^{])(.)",
        0,
        "search",
        "verl math_dapo.py normalize_final_answer (re.sub)",
        ("", "frac", ""),
    ),
    Regex(
        r"Final Answer: The final answer is(.*?). I hope it is correct.",
        0,
        "search",
        "lm-evaluation-harness minerva_math utils.py",
        ("", "Final Answer: The final answer is", ""),
    ),
    Regex(
        r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)",
        0,
        "search",
        "open-r1 rewards.py reasoning_steps_reward (findall)",
        ("", "Step 1", ""),
    ),
    Regex(
        r"\\boxed\{((?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*)\}",
        0,
        "search",
        "math scorers' nested-brace \\boxed extraction",
        ("\\boxed{", "{a", ""),
    ),
    Regex(r"(a+)+$", 0, "search", "OWASP ReDoS page", ("", "a", "!")),
    Regex(r"(a|a)*$", 0, "search", "recheck README", ("", "a", "\x00")),
    Regex(r"(a|aa)+$", 0, "search", "OWASP ReDoS page", ("", "a", "!")),
    Regex(r"(\w+\s?)*$", 0, "search", "regexploit examples", ("", "a", "!")),
    Regex(r"^(([a-z])+.)+[A-Z]([a-z])+$", 0, "search", "OWASP ReDoS page", ("", "aa", "!")),
    Regex(
        r"^([a-zA-Z0-9])(([\-.]|[_]+)?([a-zA-Z0-9]+))*(@){1}[a-z0-9]+[.]{1}"
        r"(([a-z]{2,3})|([a-z]{2,3}[.]{1}[a-z]{2,3}))$",
        0,
        "search",
        "OWASP validation regex repository (email)",
        ("a", "a", "!"),
    ),
    Regex(r"(a|ab)*c", 0, "match", "shape: alternation prefix", ("", "ab", "!")),
    Regex(r"^[\s\u200c]+|[\s\u200c]+$", 0, "search", "Stack Overflow outage 2016", ("a", " ", "a")),
    Regex(
        r"(?:(?:\"|'|\]|\}|\\|\d|(?:nan|infinity|true|false|null|undefined|symbol|math)"
        r"|\`|\-|\+)+[)]*;?((?:\s|-|~|!|{}|\|\||\+)*.*(?:.*=.*)))",
        0,
        "search",
        "Cloudflare WAF outage 2019-07-02",
        ("1", "a", ""),
    ),
    Regex(r".*A.*B.*C", 0, "search", "shape: cubic", ("", "AB", "")),
    Regex(r"\d+\d+x", 0, "match", "shape: quadratic", ("", "1", "!")),
    Regex(r"^\d+$", 0, "search", "safe: digits only", ("", "1", "a")),
    Regex(r"[a-z]+@[a-z]+\.com", 0, "search", "safe-looking email", ("", "a", "")),
    Regex(r"^[\w.+-]+@[\w-]+\.[\w.-]+$", 0, "match", "common email validation", ("a@a", ".a", "!")),
]

_RUNNER = r"""
import ast, re, sys, time
pattern, flags, call, prefix, pump, suffix = ast.literal_eval(sys.stdin.read())
compiled = re.compile(pattern, flags)
method = getattr(compiled, call)
for size in map(int, sys.argv[1:]):
    count = max((size - len(prefix) - len(suffix)) // max(len(pump), 1), 1)
    text = prefix + pump * count + suffix
    began = time.perf_counter()
    method(text)
    print(size, time.perf_counter() - began, flush=True)
"""


def measure(
    regex: Regex, attack: tuple[str, str, str], sizes: list[int], bound: float
) -> dict[int, float]:
    """Seconds per size; a size cut off by the bound maps to inf."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, *map(str, sizes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        out, _ = proc.communicate(
            repr((regex.pattern, int(regex.flags), regex.call, *attack)), timeout=bound
        )
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    else:
        if proc.returncode != 0:
            sys.exit(f"the runner failed on {regex.pattern!r}")
    times = {int(a): float(b) for a, b in (line.split() for line in out.splitlines())}
    return {size: times.get(size, math.inf) for size in sizes}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a few regexes, small sizes")
    args = parser.parse_args()
    size, bound, regexes = SIZE, TIMEOUT_S, REGEXES
    if args.quick:
        size, bound = 16384, 2.0
        quick = (r"^<think>.*?</think>.*?<answer>.*?</answer>$", r"(a+)+$", r"^\d+$")
        regexes = [regex for regex in REGEXES if regex.pattern in quick]
    print(f"size {size} chars, timeout {bound:.0f} s, vulnerable when > {VULNERABLE_S} s")
    print()
    print(
        "| regex | source | call | reference attack (s) | own attack (s) | growth "
        "| truly vulnerable | found | verdict |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    tally = {"ok": 0, "false alarm": 0, "miss": 0}
    own_hangs = vulnerable_count = 0
    analysis_s = 0.0
    for regex in regexes:
        began = time.perf_counter()
        analysis = _redos.analyse(regex.pattern, regex.flags)
        analysis_s += time.perf_counter() - began
        semantics = "search" if regex.call == "search" else "match"
        found = analysis.degree(semantics) >= 2
        own = [
            (f.prefix, f.pump, f.suffix)
            for f in analysis.attacks()
            if semantics == "search" or f.semantics == "match"
        ]
        reference = measure(regex, regex.reference, [size // 2, size], bound)
        best_own: dict[int, float] = {size // 2: 0.0, size: 0.0}
        for attack in dict.fromkeys(own[:3]):
            times = measure(regex, attack, [size // 2, size], bound)
            if times[size] > best_own[size]:
                best_own = times
        worst = max(reference, best_own, key=lambda times: times[size])
        slow = worst[size]
        vulnerable = slow > VULNERABLE_S
        vulnerable_count += vulnerable
        own_hangs += vulnerable and best_own[size] > VULNERABLE_S
        growth = "-"
        if math.isinf(slow):
            growth = "timeout"
        elif slow > 0.05 and worst[size // 2] > 0:
            growth = f"{math.log2(slow / worst[size // 2]):.1f}"
        verdict = "ok" if found == vulnerable else ("false alarm" if found else "miss")
        tally[verdict] += 1
        label = analysis.complexity(semantics) if not analysis.skipped else analysis.skipped
        cell = regex.pattern.replace("|", "\\|").replace("\n", "\\n")
        print(
            f"| `{cell}` | {regex.source} | {regex.call} | {_seconds(reference[size], bound)} | "
            f"{_seconds(best_own[size], bound) if own else '-'} | {growth} | "
            f"{'yes' if vulnerable else 'no'} | {label} | {verdict} |"
        )
    print()
    print(
        f"{len(regexes)} regexes, {vulnerable_count} truly vulnerable: {tally['ok']} agree, "
        f"{tally['false alarm']} false alarms, {tally['miss']} misses; the analysis's own attack "
        f"takes > {VULNERABLE_S:.0f} s on {own_hangs} of the {vulnerable_count}; analysis took "
        f"{analysis_s * 1000:.0f} ms in all"
    )


def _seconds(value: float, bound: float) -> str:
    return f"> {bound:.0f}" if math.isinf(value) else f"{value:.2f}"


if __name__ == "__main__":
    main()
