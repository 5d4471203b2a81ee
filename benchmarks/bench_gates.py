"""Gates: does the check reach a hang that sits behind a scorer's format gate?

Run: .venv/bin/python benchmarks/bench_gates.py [--quick] [--search 100]

Four planted scorers return 0 unless the response passes a gate, and only then reach a slow
step (a loop as long as a power tower's value, standing in for sympy): a marker gate (rllm's
and slime's deepscaler reward: ``</think>`` or ``###Response``, and a non-integer ground truth),
a ground-truth gate alone (the slow step only for a fraction or an expression), two nested gates
(TRL's whole ``<think>...</think><answer>...</answer>`` format regex, then a ``\\boxed{}``), and
a gate on a JSON field (``json.loads(response)["answer"]``). A clean scorer with the first
gate and a bounded step shows what the same work costs when nothing hangs.

Each scorer is checked twice in a fresh project, at the default deadline (2 s) with
``--reward-hang-confirm=2``: once on one bundled family (``power-tower``, whose payloads the
framed cases put where the example's answer was and inside the frames of the strings the
scorer's source looks for), once by the random search alone (``--reward-hang-family=search
--reward-hang-search=N --reward-hang-steer=off``; ``bench_steer.py`` compares it with the
steered search). The table gives each run's verdict, the case that hung and the wall
time of the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COMMON = """\
import json
import re

TOWER = re.compile(r"(\\d+)\\^\\{?(\\d+)\\^\\{?(\\d+)")


def last_boxed(text):
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


def evaluate(text):
    match = TOWER.search(text)
    if match is None:
        return text.strip()
    _, height, top = (int(group) for group in match.groups())
    steps = 0
    for _ in range(height**top):
        steps += 1
    return str(steps)


def grade(answer, truth):
    if truth.strip().lstrip("-").isdigit():
        return float(answer.strip() == truth.strip())
    return float(evaluate(answer) == evaluate(truth))
"""

SCORERS = {
    "marker_gate": (
        "a marker gate (deepscaler)",
        """
def score(solution_str, ground_truth):
    if "</think>" in solution_str:
        solution = solution_str.split("</think>")[1]
    elif "###Response" in solution_str:
        solution = solution_str.split("###Response")[1]
    else:
        return 0.0
    answer = last_boxed(solution)
    return 0.0 if answer is None else grade(answer, ground_truth)
""",
    ),
    "truth_gate": (
        "a ground-truth gate",
        """
def score(solution_str, ground_truth):
    answer = last_boxed(solution_str)
    return 0.0 if answer is None else grade(answer, ground_truth)
""",
    ),
    "nested_gates": (
        "two nested gates (R1 format, then \\boxed{})",
        """
FORMAT = re.compile(r"^<think>\\n.*?\\n</think>\\n<answer>\\n(.*?)\\n</answer>$", re.DOTALL)


def score(solution_str, ground_truth):
    match = FORMAT.match(solution_str)
    if match is None:
        return 0.0
    answer = last_boxed(match.group(1))
    return 0.0 if answer is None else grade(answer, ground_truth)
""",
    ),
    "json_gate": (
        "a gate on a JSON field",
        """
def score(solution_str, ground_truth):
    try:
        answer = json.loads(solution_str)["answer"]
    except (ValueError, KeyError, TypeError):
        return 0.0
    return grade(last_boxed(answer) or answer, ground_truth)
""",
    ),
    "clean_gate": (
        "the marker gate, a bounded step (clean)",
        """
def score(solution_str, ground_truth):
    if "</think>" not in solution_str:
        return 0.0
    answer = last_boxed(solution_str.split("</think>")[1])
    if answer is None or len(answer) > 12:
        return 0.0
    return float(answer == ground_truth)
""",
    ),
}
QUICK = ("marker_gate", "clean_gate")


def run_check(name: str, how: list[str]) -> tuple[dict[str, Any], float, list[str]]:
    """One check of one planted scorer in a fresh project: (its JSON report's entry, the
    run's wall time, the worst inputs its search wrote, ``worst.toml``)."""
    with tempfile.TemporaryDirectory(prefix="bench-gates-") as folder:
        root = Path(folder)
        (root / f"{name}.py").write_text(COMMON + SCORERS[name][1])
        (root / "pytest.ini").write_text("[pytest]\n")
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--reward-hang-check",
            "--reward-hang-confirm=2",
            f"--reward-hang-scorer={name}.py:score",
            "--reward-hang-json=r.json",
            "-q",
            *how,
        ]
        started = time.monotonic()
        subprocess.run(command, cwd=root, capture_output=True, timeout=900, check=False)
        wall = time.monotonic() - started
        report = json.loads((root / "r.json").read_text())
        worst = [p.read_text() for p in (root / ".reward-hang" / "search").rglob("worst.toml")]
    (entry,) = report["scorers"]
    return entry, wall, worst


def check(name: str, how: list[str]) -> tuple[str, str, float]:
    """One check of one planted scorer: (verdict, case that hung, wall)."""
    entry, wall, _ = run_check(name, how)
    hung = next((case["id"] for case in entry["cases"] if case["hang"]), "-")
    return entry["status"], hung, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="two scorers")
    parser.add_argument("--search", type=int, default=100, help="the search's probes")
    args = parser.parse_args()
    names = QUICK if args.quick else tuple(SCORERS)
    ways = {
        "framed cases (power-tower)": ["--reward-hang-family=power-tower"],
        f"search ({args.search} probes)": [
            "--reward-hang-family=search",
            f"--reward-hang-search={args.search}",
            "--reward-hang-steer=off",  # the random search; bench_steer.py has the steered one
        ],
    }
    started = time.monotonic()
    load = os.getloadavg()[0]
    print("| scorer | gate | run | verdict | case that hung | wall |")
    print("| --- | --- | --- | --- | --- | ---: |")
    for name in names:
        for way, how in ways.items():
            verdict, hung, wall = check(name, how)
            print(f"| {name} | {SCORERS[name][0]} | {way} | {verdict} | {hung} | {wall:.1f} s |")
    print(
        f"python {platform.python_version()}; {os.cpu_count()} CPUs; load {load:.2f} at the "
        f"start, {os.getloadavg()[0]:.2f} at the end; {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
