"""Where a hang is reported: the scorer's own line, wherever it is installed, and the innermost.

Real pytest runs on a scorer package installed in a folder named ``site-packages`` (outside the
rootdir, on ``sys.path`` through the ``pythonpath`` ini), real hangs, real faulthandler dumps:
one stuck in a catastrophic regex under two of the package's frames, one recursing deeper than
the 100 frames faulthandler keeps, in its own code and in a library's (as sympy does).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.check import _report
from pytest_rewardhang.check._report import NO_DUMP
from pytest_rewardhang.guard._outcome import find_stuck
from tests._projects import fast, line_of

pytestmark = pytest.mark.timeout(180)

FAST = fast(deadline=0.5, max_chars=8192, family="repetition")

#: ``rewardpkg/__init__.py``: the registered ``rewardpkg:compute_score`` is a re-export.
INIT = "from rewardpkg.score import compute_score, deep_score, sym_score\n"

NORM = """\
import re


def normalize(text):
    if len(text) > 6000:
        re.match(r"(a+)+$", "a" * 40 + "!")  # exponential backtracking, in one C call
    return text.strip()
"""

SCORE = """\
import fakesym

from rewardpkg._norm import normalize


def compute_score(solution_str, ground_truth):
    return float(normalize(solution_str) == ground_truth)


def _depth(n):
    if n == 0:
        sum(range(10**13))
    return 1 + _depth(n - 1)


def deep_score(solution_str, ground_truth):
    if len(solution_str) > 6000:
        return _depth(300)
    return 0.0


def sym_score(solution_str, ground_truth):
    if len(solution_str) > 6000:
        return float(fakesym.simplify(solution_str) == ground_truth)
    return 0.0
"""

#: A library that recurses as sympy's printers and simplifiers do, and spins at the bottom.
FAKESYM = """\
def simplify(expr, depth=300):
    if depth == 0:
        sum(range(10**13))
        return expr
    return simplify(expr, depth - 1)
"""


@pytest.fixture
def installed(pytester: pytest.Pytester) -> Path:
    """``rewardpkg`` and ``fakesym`` in a ``site-packages`` folder outside the rootdir."""
    site = pytester.path.parent / f"{pytester.path.name}-env" / "lib" / "site-packages"
    (site / "rewardpkg").mkdir(parents=True)
    (site / "rewardpkg" / "__init__.py").write_text(INIT)
    (site / "rewardpkg" / "_norm.py").write_text(NORM)
    (site / "rewardpkg" / "score.py").write_text(SCORE)
    (site / "fakesym").mkdir()
    (site / "fakesym" / "__init__.py").write_text(FAKESYM)
    pytester.makeini(f"[pytest]\npythonpath = {site}\n")
    return site


def check(pytester: pytest.Pytester, spec: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run the check on ``spec`` under GitHub Actions: the result, and its timed-out case.

    The stack dump is what these tests read; on a starved machine the worker can miss the
    window between the dump signal and the kill and leave none (the report says so, as
    ``NO_DUMP``). Only then is the check run again, at most twice more.
    """
    for _ in range(3):
        result = _run_check(pytester, spec)
        if NO_DUMP not in result.stdout.str():
            break
    report = json.loads((pytester.path / "r.json").read_text())
    (entry,) = report["scorers"]
    case = next(c for c in entry["cases"] if c["status"] == "timeout")
    out = result.stdout.str()
    assert "Traceback" not in out
    assert "INTERNALERROR" not in out
    return result, case


def _run_check(pytester: pytest.Pytester, spec: str) -> pytest.RunResult:
    summary = pytester.path / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return pytester.runpytest_subprocess(
            *FAST, f"--reward-hang-scorer={spec}", "--reward-hang-json=r.json"
        )
    finally:
        for key, value in saved.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value


def test_installed_scorer_is_reported_at_its_own_line(
    pytester: pytest.Pytester, installed: Path
) -> None:
    result, case = check(pytester, "rewardpkg:compute_score")
    norm, score = installed / "rewardpkg" / "_norm.py", installed / "rewardpkg" / "score.py"
    hang, call = line_of(NORM, "re.match"), line_of(SCORE, "normalize(solution_str)")
    result.stdout.fnmatch_lines(
        [
            "*stuck in the scorer at (innermost first):",
            f"    {norm}:{hang} in normalize",
            f"    {score}:{call} in compute_score",
            "  innermost frame: */re/__init__.py:* in match",
        ]
    )
    assert case["stuck_at"] == [str(norm), hang, "normalize"]
    assert case["innermost"][0].endswith(os.path.join("re", "__init__.py"))
    assert case["innermost"][2] == "match"
    assert case["stack_truncated"] is False
    result.stdout.fnmatch_lines(
        [
            f"::error file={norm},line={hang},title=reward hang::* hangs on "
            f"repetition-* stuck at {norm}:{hang} in normalize; innermost frame */re/__init__.py:*"
        ]
    )
    for wrong in ("<string>", "threading.py", "<frozen runpy>"):
        assert wrong not in result.stdout.str()


#: Why the outer frames are missing: faulthandler's 100-frame limit, or, on a starved machine,
#: a dump cut short by the kill (the dump signal leads the kill by a few milliseconds). The
#: report must say one of the two; which one is up to the scheduler.
MISSING = ("faulthandler keeps a thread's innermost 100 frames", "the dump was cut short")


def test_recursion_deeper_than_the_dump_in_the_scorer(
    pytester: pytest.Pytester, installed: Path
) -> None:
    result, case = check(pytester, "rewardpkg.score:deep_score")
    score = installed / "rewardpkg" / "score.py"
    bottom, recurse = line_of(SCORE, "sum(range(10**13))"), line_of(SCORE, "1 + _depth(n - 1)")
    result.stdout.fnmatch_lines(
        [
            "*stuck in the scorer at (innermost first):",
            f"    {score}:{bottom} in _depth",
            f"    {score}:{recurse} in _depth (x*, recursion)",
            "  (outer frames are missing: *",
        ]
    )
    note = next(line for line in result.stdout.lines if "(outer frames are missing" in line)
    assert any(reason in note for reason in MISSING), note
    assert case["stuck_at"] == [str(score), bottom, "_depth"]
    assert case["stack_truncated"] is True
    result.stdout.fnmatch_lines([f"::error file={score},line={bottom},title=reward hang::*"])


def test_recursion_deeper_than_the_dump_in_a_library_says_so(
    pytester: pytest.Pytester, installed: Path
) -> None:
    result, case = check(pytester, "rewardpkg.score:sym_score")
    score, fakesym = installed / "rewardpkg" / "score.py", installed / "fakesym" / "__init__.py"
    bottom = line_of(FAKESYM, "sum(range")
    result.stdout.fnmatch_lines(
        [
            "*the scorer's own frames are not in the stack dump: *",
            f"  innermost frame: {fakesym}:{bottom} in simplify",
        ]
    )
    note = next(line for line in result.stdout.lines if "own frames are not in" in line)
    assert any(reason in note for reason in MISSING), note
    assert case["stuck_at"] is None
    assert case["stack_truncated"] is True
    assert case["innermost"] == [str(fakesym), bottom, "simplify"]
    # No frame to point at: the annotation goes on the scorer's def line and says why.
    result.stdout.fnmatch_lines(
        [
            f"::error file={score},line={line_of(SCORE, 'def sym_score')},title=reward hang::"
            "* hangs on repetition-* the scorer's own frames are not in the "
            f"stack dump*; innermost frame {fakesym}:{bottom} in simplify"
        ]
    )


def test_repro_names_the_installed_scorers_line(pytester: pytest.Pytester, installed: Path) -> None:
    check(pytester, "rewardpkg:compute_score")
    saved = next((pytester.path / ".reward-hang" / "cases").rglob("*.json"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest_rewardhang", "repro", str(saved)],
        cwd=pytester.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    norm = installed / "rewardpkg" / "_norm.py"
    shown = textwrap.indent(done.stdout + done.stderr, "  ")
    assert f"stuck at {norm}:{line_of(NORM, 're.match')} in normalize" in done.stdout, shown
    described = next(line for line in done.stdout.splitlines() if "stuck at" in line)
    assert "<frozen runpy>" not in described, shown


def _dump(*threads: tuple[str, list[tuple[str, int, str]]]) -> str:
    """A dump in faulthandler's format: (header, frames innermost first) per thread."""
    blocks = []
    for header, frames in threads:
        lines = [f"{header} (most recent call first):"]
        lines += [f'  File "{file}", line {line} in {func}' for file, line, func in frames]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


WORKER = [
    ("/site/rewardpkg/score.py", 7, "compute_score"),
    (f"{Path(_report.__file__).parent}/_calls.py", 60, "call"),
    (threading.__file__, 982, "run"),
    (threading.__file__, 1002, "_bootstrap"),
]
MAIN = [
    (threading.__file__, 327, "wait"),
    (f"{Path(_report.__file__).parent}/_calls.py", 65, "__call__"),
    ("<string>", 1, "<module>"),
]


def test_the_thread_that_ran_the_scorer_is_read_not_the_one_waiting() -> None:
    stuck = find_stuck(_dump(("Thread 0x1", WORKER), ("Current thread 0x2", MAIN)))
    assert stuck.at == ("/site/rewardpkg/score.py", 7, "compute_score")
    assert stuck.entry == stuck.at
    assert (stuck.truncated, stuck.cut) == (False, False)


def test_a_dump_cut_short_by_the_kill_says_so() -> None:
    # The dump ends inside the scorer's thread: the main thread's block never came.
    cut = _dump(("Thread 0x1", WORKER[:1]))
    stuck = find_stuck(cut)
    assert stuck.cut
    assert stuck.at == WORKER[0]
    lines = _report.stuck_lines(_report.find_stuck_in(cut, "/site/rewardpkg/score.py:x", Path("/")))
    assert any("the dump was cut short" in line for line in lines), lines
    assert _report.stuck_lines(_report.find_stuck_in(None, "x.py:f", Path("/"))) == [f"  {NO_DUMP}"]


def test_every_json_the_check_writes_is_strict_json() -> None:
    # A call whose rusage could not be read (its worker killed with its parent) has a NaN CPU
    # time: the JUnit property held the literal NaN, which a strict parser refuses.
    text = _report.as_json({"cases": [{"cpu_s": math.nan, "wall_s": 0.5}], "worst": math.inf})
    assert json.loads(text, parse_constant=lambda name: pytest.fail(name)) == {
        "cases": [{"cpu_s": None, "wall_s": 0.5}],
        "worst": None,
    }
    # A scorer's problem holding a lone surrogate: "\ud800" in JSON, which jq refuses.
    text = _report.as_json({"problem": "bad \ud800 input", "\udcff": 1})
    read = json.loads(text)
    assert read == {"problem": "bad \\ud800 input", "\\udcff": 1}
    json.dumps(read, ensure_ascii=False).encode("utf-8")  # no lone surrogate left to encode


#: A scorer whose errors and stuck frames carry what the policy wrote: workflow commands, a
#: terminal's escapes, a lone surrogate, two megabytes on one line.
HOSTILE = r"""
import sys

_FORGED = type("::error file=README.md,line=1,title=INJECTED::pwned", (Exception,), {})
_FORGED.__module__ = "builtins"
_SPIN = compile(
    "def spin():\n    sum(range(10**13))\n",
    "evil.py,line=7,title=FORGED::x\n::add-mask::secret",
    "exec",
)
_NS = {}
exec(_SPIN, _NS)


def compute_score(solution_str, ground_truth):
    n = len(solution_str)
    if n > 6000:
        _NS["spin"]()
    if n > 3000:
        raise _FORGED("boom ##[error]legacy \x1b[2J\x1b[1A\rfake \ud800 " + "A" * (2 << 20))
    return 0.0
"""


def test_what_a_scorer_raises_or_names_cannot_command_the_ci_log_or_the_terminal(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(hostile=HOSTILE)
    pytester.makeini("[pytest]\n")
    result = _run_check(pytester, "hostile.py:compute_score")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-2000:]
    assert "INTERNALERROR" not in out
    # GitHub runs a line that starts with "::" after its indentation; ours are the only ones.
    commands = [line for line in out.splitlines() if line.lstrip().startswith("::")]
    assert commands, out[-2000:]
    assert all(line.startswith("::error file=") for line in commands), commands
    for line in commands:
        properties = line.split("::")[1].split(",")  # "error file=...", "line=N", "title=..."
        assert [p.split("=")[0] for p in properties] == ["error file", "line", "title"], line
        assert "FORGED" not in properties[-1], line
        assert "INJECTED" not in line.split("::")[1], line
    assert "##[" not in out
    assert "\x1b" not in out
    assert "\r" not in out
    assert "\\::error file=README.md" in out  # shown, and broken
    assert len(out) < 2 << 20  # the 2 MiB line is cut, on every case it failed
    # The JSON report and the JUnit properties: UTF-8 a strict parser reads.
    report = (pytester.path / "r.json").read_bytes()
    assert b"\\ud800" not in report
    report.decode("utf-8")


def test_repro_says_what_it_runs_and_refuses_a_file_it_cannot_read(tmp_path: Path) -> None:
    def repro(case: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "case.json"
        path.write_text(json.dumps(case))
        return subprocess.run(
            [sys.executable, "-m", "pytest_rewardhang", "repro", str(path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )

    # The spec runs, whatever the file calls the scorer: the first line says which.
    case = {"spec": "os:getcwd", "scorer": "scorer.compute_score", "kwargs": {}, "deadline": 5}
    done = repro({**case, "case": "x\n::error::forged"})
    assert done.stdout.startswith("os:getcwd (scorer.compute_score) case x\n\\::error"), done
    # Each was a traceback: one line naming the file, exit 2.
    bad_cases: list[dict[str, Any]] = [
        {"spec": None},
        {"kwargs": [1]},
        {"deadline": float("nan")},
        {"deadline": 10**400},
        {"memory_mb": "lots"},
    ]
    for bad in bad_cases:
        done = repro({**case, **bad})
        assert done.returncode == 2, done
        (line,) = done.stderr.splitlines()  # no usage: the command line was right
        assert line.startswith("python -m pytest_rewardhang repro: error: "), done
        assert "not a saved case" in line, done
    done = repro({key: value for key, value in case.items() if key != "spec"})
    assert done.stderr.endswith("not a saved case: it has no 'spec'\n"), done
    # The command line's own mistake is said as one (0 had silently meant the saved deadline).
    for deadline in ("0", "-1"):
        done = repro(case, "--deadline", deadline)
        assert done.returncode == 2, done
        assert "repro: error: --deadline must be a positive number of seconds" in done.stderr


def test_shown_breaks_a_command_behind_any_whitespace_the_runner_trims() -> None:
    from pytest_rewardhang.check._shown import LINE_LIMIT, first_line, shown

    for space in (" ", "\t", "\xa0", "\u2003", "\u2028", "\u3000"):
        text = shown(f"x\n{space}::add-mask::secret\n##[error]y")
        assert not [line for line in text.split("\n") if line.strip().startswith("::")], text
        assert "##[" not in text
    # Cut after escaping: 300 lone surrogates are 1,800 characters once shown.
    assert len(first_line("\ud800" * 1000)) < LINE_LIMIT + 40
