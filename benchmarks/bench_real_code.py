"""What the check finds in real reward code: verl's bundled scorers and TRL/open-r1-style ones.

Run: .venv/bin/python benchmarks/bench_real_code.py [--venv DIR] [--light-deps] [--only NAME]
     [--dry]

Optional, needs the network to the package index, and is never run by the test suite. It makes
a virtual environment (in a temporary folder, or ``--venv DIR``, kept and reused), installs
``verl==0.9.1`` without its dependencies (no torch, no ray), ``math-verify`` and this checkout,
then runs ``pytest --reward-hang-check`` at the default settings, one scorer at a time, on:

- every ``compute_score`` (and ``compute_score_*``, ``default_compute_score``) that verl ships
  in ``verl/utils/reward_score/``, registered by file as a verl user would (the check loads a
  file without verl's ``__init__``, which imports torch); those whose own imports are missing
  here cannot be imported, and the table says which module they need;
- reward functions written the way TRL's GRPOTrainer and open-r1 write them: ``accuracy_reward``
  with Math-Verify's ``parse``/``verify`` at their default timeouts, on chat messages and on
  plain strings, ``format_reward`` with a ``^<think>\\n.*?\\n</think>\\n<answer>...`` regex, and
  ``tag_count_reward``.

The table: scorer, importable, the check's verdict, the hangs it found, then its slow cases
(past the deadline, finished by a fresh worker under ten deadlines) (case, status, where it was
stuck in the scorer's own code), false timeouts (a case that timed out once and that a fresh
worker finished under the deadline), errors and leaks (cases that left processes running), and
the scorer's wall time. ``--light-deps`` also installs the small packages some of verl's
scorers import first (numpy, pylatexenc, mathruler and tqdm, requests; never torch). ``--dry``
prints the plan and the commands without installing or running anything.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _checked import case_kind

REPO = Path(__file__).resolve().parent.parent
VERL = "verl==0.9.1"
MATH_VERIFY = "math-verify"
#: ``--light-deps``: what verl's scorers that fail to import here import first; none is torch.
LIGHT_DEPS = ("numpy", "pylatexenc", "mathruler", "tqdm", "requests")
#: One scorer's check never takes longer than this; one that does is reported as such.
SCORER_BOUND_S = 1800

#: The kind of input each of verl's modules gets (default math), and their examples: a call
#: the scorer scores as intended, in the shape its trainer passes.
VERL_KINDS = {"prime_code": "code", "sandbox_fusion": "code", "search_r1_like_qa_em": "text"}
VERL_EXAMPLES: dict[str, dict[str, Any]] = {
    "search_r1_like_qa_em": {
        "solution_str": "<think>The capital of France.</think> <answer>Paris</answer>",
        "ground_truth": {"target": ["Paris"]},
    },
    "rlla": {
        "data_source": "rlla",
        "solution_str": (
            "<|im_start|>assistant\n<think>I should look it up.</think>\n<tool_call>\n"
            '{"name": "search", "parameters": {"query": "capital of France"}}\n'
            "</tool_call><|im_end|>"
        ),
        "ground_truth": (
            '<tool_call>\n{"name": "search", "parameters": {"query": "capital of France"}}\n'
            "</tool_call>"
        ),
        "extra_info": {"experiment_name": "qwen"},
    },
    "prime_code": {
        "completion": "```python\nprint(int(input()) * 2)\n```",
        "test_cases": {"inputs": ["21\n"], "outputs": ["42\n"]},
    },
    "sandbox_fusion": {
        "sandbox_fusion_url": "http://127.0.0.1:9/run_code",
        "concurrent_semaphore": None,
        "memory_limit_mb": 1024,
        "completion": "```python\nprint(int(input()) * 2)\n```",
        "test_cases": {"inputs": ["21\n"], "outputs": ["42\n"]},
    },
    "math_batch": {
        "data_sources": ["lighteval/MATH"],
        "solution_strs": ["6 * 7 = 42, so the answer is \\boxed{42}."],
        "ground_truths": ["42"],
        "extra_infos": [{}],
    },
}

#: Reward functions as TRL's GRPOTrainer and open-r1 write them (written for this benchmark,
#: after the shapes in open-r1's ``rewards.py`` and TRL's documentation).
TRL_REWARDS = '''\
"""Reward functions in the TRL/open-r1 style: a batch of completions in, one float each out."""

import re

from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify


def _answer_config():
    # Boxed answers first, in well-formed LaTeX, as open-r1 asks of the policy's answer.
    return [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(
                nits=False,
                malformed_operators=False,
                basic_latex=True,
                equations=True,
                boxed="all",
                units=True,
            ),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]


def _accuracy(content, sol):
    gold = parse(sol, extraction_mode="first_match")
    if not gold:
        return None  # an unparsable reference: the trainer skips the sample
    answer = parse(content, extraction_config=_answer_config(), extraction_mode="first_match")
    try:
        return float(verify(gold, answer))
    except Exception:
        return None


def accuracy_reward(completions, solution, **kwargs):
    """open-r1: conversational completions, Math-Verify at its default (alarm) timeouts."""
    return [_accuracy(c[0]["content"], s) for c, s in zip(completions, solution)]


def accuracy_reward_text(completions, solution, **kwargs):
    """The same on plain-text completions (a standard, not conversational, dataset)."""
    return [_accuracy(c, s) for c, s in zip(completions, solution)]


def format_reward(completions, **kwargs):
    """open-r1: reasoning in <think>, the answer in <answer>, nothing else."""
    pattern = r"^<think>\\n.*?\\n</think>\\n<answer>\\n.*?\\n</answer>$"
    contents = [c[0]["content"] for c in completions]
    return [1.0 if re.match(pattern, c, re.DOTALL | re.MULTILINE) else 0.0 for c in contents]


def tag_count_reward(completions, **kwargs):
    """open-r1: a quarter point per tag that appears exactly once, where it should."""

    def count(text):
        score = 0.0
        score += 0.25 if text.count("<think>\\n") == 1 else 0.0
        score += 0.25 if text.count("\\n</think>\\n") == 1 else 0.0
        score += 0.25 if text.count("\\n<answer>\\n") == 1 else 0.0
        score += 0.25 if text.count("\\n</answer>") == 1 else 0.0
        return score

    return [count(c[0]["content"]) for c in completions]
'''

_CHAT = [
    {
        "role": "assistant",
        "content": "<think>\n6 * 7 = 42\n</think>\n<answer>\n$\\boxed{42}$\n</answer>",
    }
]
TRL_EXAMPLES: dict[str, dict[str, Any]] = {
    "accuracy_reward": {"completions": [_CHAT], "solution": ["$42$"]},
    "accuracy_reward_text": {
        "completions": ["6 * 7 = 42, so the answer is $\\boxed{42}$."],
        "solution": ["$42$"],
    },
    "format_reward": {"completions": [_CHAT]},
    "tag_count_reward": {"completions": [_CHAT]},
}


@dataclass
class Scorer:
    name: str
    spec: str
    kind: str = "math"
    example: dict[str, Any] | None = None


@dataclass
class Row:
    scorer: Scorer
    importable: str = ""
    verdict: str = ""
    hangs: list[str] = field(default_factory=list)
    #: Cases past the deadline that a fresh worker finished under ten deadlines: slow, not hung.
    slow: list[str] = field(default_factory=list)
    false_timeouts: int = 0
    errors: int = 0
    leaks: int = 0
    cases: int = 0
    wall_s: float = 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, help="the virtual environment (kept; made if missing)")
    parser.add_argument("--checkout", type=Path, default=REPO, help="pytest-rewardhang to install")
    parser.add_argument("--only", action="append", default=[], help="scorers whose name has this")
    parser.add_argument("--no-install", action="store_true", help="use --venv as it is")
    parser.add_argument(
        "--light-deps",
        action="store_true",
        help=f"also install {', '.join(LIGHT_DEPS)}, so more of verl's scorers import",
    )
    parser.add_argument(
        "--dry", action="store_true", help="print the plan, install and run nothing"
    )
    parser.add_argument(
        "pytest_args", nargs="*", help="more arguments for each check (after --), e.g. -n 2"
    )
    args = parser.parse_args()
    if args.venv is not None:
        venv = args.venv.resolve()
    elif args.dry:
        venv = Path(tempfile.gettempdir()) / "bench-real-code-XXXX" / "venv"
    else:
        venv = Path(tempfile.mkdtemp(prefix="bench-real-code-")) / "venv"
    python = venv / "bin" / "python"
    installs = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--no-deps", VERL],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-warn-conflicts",
            MATH_VERIFY,
            str(args.checkout),
        ],
    ]
    if args.light_deps:
        installs.append(
            [str(python), "-m", "pip", "install", "-q", "--no-warn-conflicts", *LIGHT_DEPS]
        )
    if args.dry:
        print("would run:")
        for command in installs:
            print("  " + shlex.join(command))
        print(
            "then, per scorer: python -m pytest --reward-hang-check --reward-hang-scorer=SPEC ..."
        )
        print("on verl/utils/reward_score/*: compute_score, compute_score_*, default_compute_score")
        print(f"and the TRL/open-r1-style rewards: {', '.join(TRL_EXAMPLES)}")
        return 0
    started = time.monotonic()
    if not args.no_install:
        if python.exists():
            installs = installs[1:]
        for command in installs:
            print("$ " + shlex.join(command), flush=True)
            subprocess.run(command, check=True, timeout=1800)
    project = Path(tempfile.mkdtemp(prefix="bench-real-code-project-"))
    scorers = verl_scorers(python, project) + trl_scorers(project)
    if args.only:
        scorers = [s for s in scorers if any(word in s.name for word in args.only)]
    (project / "pytest.ini").write_text("[pytest]\n")
    rows = []
    for scorer in scorers:
        print(f"checking {scorer.name} ...", flush=True)
        rows.append(check(python, project, scorer, args.pytest_args))
    print()
    print(table(rows))
    print()
    print(
        f"{len(rows)} scorers, {sum(r.importable == 'yes' for r in rows)} importable, "
        f"{sum(bool(r.hangs) for r in rows)} with hangs found, "
        f"{sum(bool(r.slow) and not r.hangs for r in rows)} only slow, "
        f"{sum(r.false_timeouts for r in rows)} false timeouts; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    print(f"verl {VERL.split('==')[1]}, {versions(python)}; {machine()}")
    print(f"venv: {venv}  project: {project}")
    return 0


def verl_scorers(python: Path, project: Path) -> list[Scorer]:
    """Every scoring function verl ships in ``verl/utils/reward_score``, by file."""
    found = subprocess.run(
        [
            str(python),
            "-c",
            # find_spec of a top-level package reads no code of it: verl's __init__ imports torch.
            "import importlib.util as u; print(u.find_spec('verl').submodule_search_locations[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    folder = Path(found.stdout.strip()) / "utils" / "reward_score"
    scorers = []
    for path in sorted([*folder.glob("*.py"), *folder.glob("*/__init__.py")]):
        module = path.parent.name if path.name == "__init__.py" else path.stem
        if path.parent == folder and path.name == "__init__.py":
            module = "reward_score"
        for name in _scoring_functions(path):
            example = VERL_EXAMPLES.get(module)
            kind = VERL_KINDS.get(module, "math")
            scorers.append(Scorer(f"verl {module}.{name}", f"{path}:{name}", kind, example))
    return scorers


def _scoring_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.name.startswith("compute_score") or node.name == "default_compute_score")
    ]


def trl_scorers(project: Path) -> list[Scorer]:
    (project / "trl_rewards.py").write_text(TRL_REWARDS)
    return [
        Scorer(f"TRL/open-r1 {name}", f"trl_rewards.py:{name}", "math", example)
        for name, example in TRL_EXAMPLES.items()
    ]


def check(python: Path, project: Path, scorer: Scorer, extra: list[str]) -> Row:
    row = Row(scorer)
    slug = scorer.name.replace(" ", "_").replace("/", "_")
    line = f"{scorer.spec} kind={scorer.kind} id={slug}"
    if scorer.example is not None:
        example = project / f"{slug}.example.json"
        example.write_text(json.dumps(scorer.example))
        line += f" example={example.name}"
    report = project / f"{slug}.json"
    command = [
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--reward-hang-check",
        f"--reward-hang-scorer={line}",
        f"--reward-hang-json={report}",
        *extra,
    ]
    start = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=project, capture_output=True, text=True, timeout=SCORER_BOUND_S
        )
    except subprocess.TimeoutExpired:
        row.importable, row.verdict = "?", f"check over {SCORER_BOUND_S} s"
        return row
    row.wall_s = time.monotonic() - start
    (project / f"{slug}.log").write_text(done.stdout + done.stderr)
    if not report.exists():
        row.importable, row.verdict = "?", f"no report (exit {done.returncode})"
        return row
    read_report(row, json.loads(report.read_text()))
    return row


def read_report(row: Row, data: dict[str, Any]) -> None:
    """The row's verdict, hangs, slow cases and counts, from the check's JSON report."""
    (entry,) = data["scorers"]
    deadline = float(data["settings"]["deadline"])
    row.verdict = entry["status"]
    problem = entry.get("problem", "")
    if row.verdict == "problem" and ("cannot import" in problem or "import" in problem.lower()):
        row.importable = "no: " + _missing_module(problem)
    else:
        row.importable = "yes"
        if row.verdict == "problem":
            row.verdict += ": " + _short(problem)
    row.cases = len(entry["cases"])
    for case in entry["cases"]:
        kind = case_kind(case, deadline)
        if kind == "false":
            row.false_timeouts += 1
        elif kind in ("hang", "slow", "memory", "crashed"):
            context = f" [{case['context']}]" if case.get("context") else ""
            shown = "slow" if kind == "slow" else case["status"]
            found = f"{case['id']} {shown}{context}{_where(case)}"
            (row.slow if kind == "slow" else row.hangs).append(found)
        elif kind == "error":
            row.errors += 1
        elif case.get("leaked"):
            row.leaks += 1


def _where(case: dict[str, Any]) -> str:
    """Where a case was stuck: the scorer's own line, else the innermost frame, else why not."""
    own, innermost = case.get("stuck_at"), case.get("innermost")
    if own:
        return f" at {Path(own[0]).name}:{own[1]} {own[2]}"
    if innermost:
        return f" (own frames not in the dump; innermost {Path(innermost[0]).name}:{innermost[1]})"
    return " (no stack dump)" if case["status"] == "timeout" else ""


def _missing_module(problem: str) -> str:
    marker = "No module named "
    if marker in problem:
        return "needs " + problem.split(marker, 1)[1].split()[0].strip("'\"():,")
    return _short(problem)


def _short(text: str, width: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def table(rows: list[Row]) -> str:
    lines = [
        "| scorer | importable | verdict | hangs found, then slow cases (case, status, stuck at) "
        "| false timeouts "
        "| errors / leaks | cases | wall |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        found = row.hangs + row.slow
        hangs = "; ".join(found[:3]) + (f"; +{len(found) - 3} more" if len(found) > 3 else "")
        lines.append(
            f"| {row.scorer.name} | {row.importable} | {row.verdict} | {hangs or '-'} | "
            f"{row.false_timeouts} | {row.errors} / {row.leaks} | {row.cases} | "
            f"{row.wall_s:.0f} s |"
        )
    return "\n".join(lines)


def versions(python: Path) -> str:
    done = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in "
            "('math-verify', 'sympy', 'pytest-rewardhang')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip() or "versions unknown"


def machine() -> str:
    with open("/proc/meminfo") as f:
        total_kib = int(f.readline().split()[1])
    return (
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"{total_kib / (1 << 20):.0f} GiB RAM"
    )


if __name__ == "__main__":
    sys.exit(main())
