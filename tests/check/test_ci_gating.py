"""Adopting the gate: known hangs (``reward_hang_known``) and ``--reward-hang-changed``."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests._projects import SCORERS, XDIST, fast, line_of, scorer_args, usage

pytestmark = pytest.mark.timeout(120)

FAST = fast(deadline=0.5, max_chars=8192, family="repetition")
SCORER_ARGS = scorer_args("clean", "c_hang")


def known(pytester: pytest.Pytester, *entries: str) -> None:
    lines = "".join(f"\n    {entry}" for entry in entries)
    pytester.makeini(f"[pytest]\nreward_hang_known ={lines}\n")


@XDIST
def test_known_items_xfail_while_they_hang_and_fail_once_they_stop(
    project: pytest.Pytester, xdist: list[str]
) -> None:
    known(project, "scorers.c_hang::repetition", "scorers.clean::repetition")
    result = project.runpytest_subprocess(*FAST, *SCORER_ARGS, "-rxX", *xdist)
    result.assert_outcomes(xfailed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*XFAIL*scorers.c_hang::repetition*hang caught: 1 case(s) past the deadline*"]
    )
    result.stdout.fnmatch_lines(
        [
            "*no longer hangs: scorers.clean::repetition is listed in reward_hang_known but none "
            "of its cases ran past the deadline*"
        ]
    )
    # Said once, as the item: the scorer was never declared expect=hang as a whole.
    result.stdout.no_fnmatch_line("FAILED scorers.clean: *")


def test_gate_annotations_name_the_scorers_def_line_and_why(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They had no file (never in the pull request's diff) and said only the item's name.
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    known(project, "scorers.clean::repetition", "whole")
    whole = "--reward-hang-scorer=scorers.py:clean id=whole"
    result = project.runpytest_subprocess(*FAST, *scorer_args("clean"), whole)
    result.assert_outcomes(failed=1, passed=1)
    clean = line_of(SCORERS, "def clean(")
    result.stdout.fnmatch_lines(
        [
            f"::error file=scorers.py,line={clean},title=reward hang fixed::scorers.clean::"
            "repetition no longer hangs: if it is fixed, remove it from reward_hang_known",
            f"::error file=scorers.py,line={clean},title=reward hang fixed::whole: listed in "
            "reward_hang_known, but none of its families hung: if the scorer is fixed, remove "
            "the entry",
        ]
    )


@pytest.mark.slow  # four check runs: the slow tier
def test_known_scorers_are_strict_per_scorer(project: pytest.Pytester) -> None:
    # Two spellings: the spec as registered and the scorer id.
    known(project, "scorers.py:c_hang", "scorers.clean")
    result = project.runpytest_subprocess(*FAST, *SCORER_ARGS)
    result.assert_outcomes(xfailed=1, passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "FAILED scorers.clean: listed in reward_hang_known, but none of its families hung: "
            "if the scorer is fixed, remove the entry"
        ]
    )
    # Listing only what hangs turns the run green.
    known(project, "scorers.py:c_hang")
    result = project.runpytest_subprocess(*FAST, *SCORER_ARGS)
    result.assert_outcomes(xfailed=1, passed=1)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "scorers.py:missing",
            "ERROR: reward_hang_known (ini): 'scorers.py:missing' names no registered scorer; "
            "registered: scorers.c_hang, scorers.clean",
        ),
        (
            "scorers.clean::nonsense",
            "ERROR: reward_hang_known (ini): 'scorers.clean::nonsense': unknown family "
            "'nonsense'; known: *",
        ),
    ],
)
def test_known_entries_naming_nothing_are_refused(
    project: pytest.Pytester, entry: str, message: str
) -> None:
    known(project, entry)
    result = usage(project, *FAST, *SCORER_ARGS, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_known_entries_that_are_not_lines_are_refused(project: pytest.Pytester) -> None:
    # A TOML array of anything: an INTERNALERROR ("'int' object has no attribute 'strip'").
    (project.path / "tox.ini").unlink()
    project.makepyprojecttoml("[tool.pytest.ini_options]\nreward_hang_known = [1]\n")
    result = usage(project, *FAST, *SCORER_ARGS, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: reward_hang_known (ini): expected lines, got 1"])


def test_a_scorer_id_names_no_folder_above_its_own(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(
        *FAST, "--reward-hang-scorer=scorers.py:spin id=..", "--collect-only", "-q"
    )
    assert any(line.startswith("_::") for line in result.stdout.lines), result.stdout.str()


# --- --reward-hang-changed ---------------------------------------------------------------------

GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],  # noqa: S607
        cwd=repo,
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
        timeout=30,
    )


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def repo(pytester: pytest.Pytester) -> pytest.Pytester:
    """Three scorers: one imports an in-repo helper package, one a relative sibling, one stdlib."""
    root = pytester.path
    pytester.makeini(
        """
        [pytest]
        reward_hang_scorers =
            rewards/math.py:compute_score
            rewards/code.py:compute_score
            rewards/plain.py:compute_score
        """
    )
    write(root / "rewards/__init__.py", "")
    write(
        root / "rewards/math.py",
        """
        from helpers.normalize import normalize


        def compute_score(solution_str, ground_truth):
            return float(normalize(solution_str) == ground_truth)
        """,
    )
    write(root / "helpers/__init__.py", "")
    write(root / "helpers/normalize.py", "def normalize(s):\n    return s.strip()\n")
    write(
        root / "rewards/code.py",
        """
        from . import _sandbox


        def compute_score(solution_str, ground_truth):
            return _sandbox.run(solution_str)
        """,
    )
    write(root / "rewards/_sandbox.py", "def run(code):\n    return 0.0\n")
    write(
        root / "rewards/plain.py",
        """
        import re


        def compute_score(solution_str, ground_truth):
            return float(re.sub(r"\\s+", "", solution_str) == ground_truth)
        """,
    )
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "scorers")
    return pytester


def selected(pytester: pytest.Pytester, *args: str) -> set[str]:
    result = pytester.runpytest_subprocess(*FAST, "--collect-only", "-q", *args)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stderr
    return {line.split("::")[0] for line in result.stdout.lines if "::" in line}


def test_changed_selects_scorers_whose_sources_or_imports_changed(
    repo: pytest.Pytester,
) -> None:
    root = repo.path
    assert selected(repo) == {"math.compute_score", "code.compute_score", "plain.compute_score"}
    assert selected(repo, "--reward-hang-changed") == set()
    write(root / "helpers/normalize.py", "def normalize(s):\n    return s.strip().lower()\n")
    assert selected(repo, "--reward-hang-changed") == {"math.compute_score"}
    git(root, "commit", "-q", "-am", "lowercase")
    write(root / "rewards/_sandbox.py", "def run(code):\n    return 1.0\n")
    # Against the commit before: the committed helper change and the uncommitted sandbox one.
    changed = selected(repo, "--reward-hang-changed=HEAD~1")
    assert changed == {"math.compute_score", "code.compute_score"}
    result = repo.runpytest_subprocess(*FAST, "--collect-only", "--reward-hang-changed")
    result.stdout.fnmatch_lines(["collected 3 items / 2 deselected / 1 selected"])


@XDIST
def test_a_change_that_touches_no_scorer_passes(repo: pytest.Pytester, xdist: list[str]) -> None:
    write(repo.path / "docs.md", "words only\n")
    # Exit 5 ("no tests ran") had turned every such pull request red.
    result = repo.runpytest_subprocess(*FAST, "--reward-hang-changed", "-m", "reward_hang", *xdist)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["reward hang check: no registered scorer changed since HEAD: nothing to check"]
    )
    # Only then: a -k past every changed scorer, or no scorer registered, still ran nothing,
    # and the run says so by its exit.
    write(repo.path / "rewards/plain.py", "def compute_score(s, g):\n    return 1.0\n")
    result = repo.runpytest_subprocess(*FAST, "--reward-hang-changed", "-k", "math", *xdist)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout.str()
    (repo.path / "tox.ini").write_text("[pytest]\n")
    git(repo.path, "commit", "-q", "-am", "no scorers")
    result = repo.runpytest_subprocess(*FAST, "--reward-hang-changed", *xdist)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout.str()


def test_a_change_to_the_configuration_checks_every_scorer(repo: pytest.Pytester) -> None:
    root = repo.path
    # The ini file (registrations, known hangs, limits) and the baseline check every scorer:
    # a pull request that listed a scorer's hang as known had checked none.
    everything = {"math.compute_score", "code.compute_score", "plain.compute_score"}
    ini = root / "tox.ini"
    ini.write_text(ini.read_text() + "\n# reward_hang_known, say\n")
    assert selected(repo, "--reward-hang-changed") == everything
    git(root, "checkout", "--", "tox.ini")
    write(root / "baseline.json", '{"format": 1, "scorers": {}}\n')
    git(root, "add", "baseline.json")
    git(root, "commit", "-q", "-m", "baseline")
    write(root / "baseline.json", '{"format": 1, "scorers": {}, "refreshed": true}\n')
    compare = "--reward-hang-compare=baseline.json"
    assert selected(repo, "--reward-hang-changed") == set()
    assert selected(repo, "--reward-hang-changed", compare) == everything


def test_a_new_untracked_scorer_counts_as_changed(repo: pytest.Pytester) -> None:
    write(
        repo.path / "rewards/fresh.py",
        "def compute_score(solution_str, ground_truth):\n    return 0.0\n",
    )
    assert selected(
        repo, "--reward-hang-scorer=rewards/fresh.py:compute_score", "--reward-hang-changed"
    ) == {"fresh.compute_score"}


def test_a_changed_scorer_whose_path_git_quotes_is_selected(repo: pytest.Pytester) -> None:
    # git quotes and escapes a name that is not plain ASCII ("rewards/gr\303\266..."): read as
    # a path, it matched no scorer's file, and the changed scorer was deselected, its hang
    # unchecked, the run green.
    names = ("größe.py", "tab\tname.py", 'quote"name.py')
    for name in names:
        write(repo.path / "rewards" / name, "def compute_score(s, g):\n    return 0.0\n")
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "-m", "odd names")
    for name in names:
        write(repo.path / "rewards" / name, "def compute_score(s, g):\n    return 1.0\n")
    # A spec line holds no whitespace or quote: those two change beside the scorer's file.
    scorer = "--reward-hang-scorer=rewards/größe.py:compute_score"
    assert selected(repo, scorer, "--reward-hang-changed") == {"gr_e.compute_score"}


def test_a_ref_that_would_be_a_git_option_is_refused(repo: pytest.Pytester) -> None:
    target = repo.path / "written-by-git"
    result = usage(repo, *FAST, f"--reward-hang-changed=--output={target}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --reward-hang-changed: '--output=*' is not a git ref*"])
    assert not target.exists()


def test_changed_without_git_or_with_a_bad_ref_says_so_in_one_line(
    repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkout somewhere above the temporary directory must not be found instead.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(repo.path.parent))
    result = usage(repo, *FAST, "--reward-hang-changed=no-such-ref")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --reward-hang-changed: git cannot diff against 'no-such-ref': fatal: *"]
    )
    (repo.path / ".git").rename(repo.path / "not-git")
    result = usage(repo, *FAST, "--reward-hang-changed")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --reward-hang-changed: * is not in a git repository: fatal: not a git repository*"]
    )
    assert "Traceback" not in result.stderr.str()
