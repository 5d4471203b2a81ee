"""Bad input to the check never passes silently: one clear line, before any scorer runs."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from pytest_rewardhang.check import _report
from tests._projects import fast, scorer_args, usage

pytestmark = pytest.mark.timeout(120)

FAST = [*fast(deadline=0.5, max_chars=2048, family="repetition"), "-p", "no:cacheprovider"]


def usage_error(result: pytest.RunResult, *lines: str) -> None:
    """pytest's usage error (exit 4) with the line, and no traceback of ours."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(list(lines))
    assert "Traceback" not in result.stderr.str()


def test_an_empty_fail_on_is_refused(project: pytest.Pytester) -> None:
    result = usage(project, *FAST, *scorer_args("clean"), "--reward-hang-fail-on=")
    usage_error(result, "ERROR: --reward-hang-fail-on: name at least one outcome from *")
    project.makeini("[pytest]\nreward_hang_fail_on = ,\n")
    result = usage(project, *FAST, *scorer_args("clean"))
    usage_error(result, "ERROR: reward_hang_fail_on (ini): name at least one outcome from *")


def test_a_decorated_file_that_does_not_parse_is_reported(project: pytest.Pytester) -> None:
    project.makepyfile(
        rewards="import pytest_rewardhang\n\n"
        "@pytest_rewardhang.scorer(kind='math')\n"
        "def compute_score(solution_str, ground_truth)\n"  # the colon is missing
        "    return 0.0\n"
    )
    result = usage(project, *FAST)
    usage_error(result, "ERROR: rewards.py:4: cannot read this file for @pytest_rewardhang.scorer*")


def test_a_decorated_file_nested_past_the_parsers_depth_is_reported(
    project: pytest.Pytester,
) -> None:
    # RecursionError (or MemoryError) from the parser was an INTERNALERROR.
    nested = "x = " + "-" * 200_000 + "1\n"
    project.makepyfile(rewards="import pytest_rewardhang\n# @pytest_rewardhang.scorer()\n" + nested)
    result = usage(project, *FAST)
    usage_error(result, "ERROR: rewards.py: cannot read this file for *: *Error*")


def test_a_fifo_named_like_a_python_file_is_passed_over(project: pytest.Pytester) -> None:
    # The scan for decorated scorers read it, waiting for a writer for ever.
    os.mkfifo(project.path / "pipe.py")
    result = project.runpytest_subprocess(*FAST, *scorer_args("clean"), timeout=100)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


CONFLICTED = """{
<<<<<<< HEAD
  "format": 1,
=======
  "format": 1, "scorers": {}
>>>>>>> theirs
}
"""


def test_an_unreadable_baseline_is_refused_not_replaced(project: pytest.Pytester) -> None:
    baseline = project.path / "baseline.json"
    baseline.write_text(CONFLICTED)
    result = usage(
        project, *FAST, *scorer_args("clean"), "--reward-hang-save-baseline=baseline.json"
    )
    usage_error(result, "ERROR: --reward-hang-save-baseline: *baseline.json: cannot read the*")
    assert baseline.read_text() == CONFLICTED


def test_a_baseline_entry_without_its_calibration_is_a_usage_error(
    project: pytest.Pytester,
) -> None:
    entry = {"corpus_version": "1:abc", "cpu_p95_s": 0.1}
    document = {"format": 1, "scorers": {"scorers.clean": {"repetition": entry}}}
    (project.path / "baseline.json").write_text(json.dumps(document))
    result = project.runpytest_subprocess(
        *FAST, *scorer_args("clean"), "--reward-hang-compare=baseline.json"
    )
    usage_error(
        result,
        "ERROR: --reward-hang-compare: *scorers.clean::repetition: entry lacks calibration_s",
    )


def test_saving_writes_atomically_and_keeps_other_entries(project: pytest.Pytester) -> None:
    kept = {"calibration_s": 0.02, "corpus_version": "1:abc", "cpu_p95_s": 0.1}
    document = {"format": 1, "scorers": {"elsewhere.score": {"repetition": kept}}}
    (project.path / "baseline.json").write_text(json.dumps(document))
    result = project.runpytest_subprocess(
        *FAST, *scorer_args("clean"), "--reward-hang-save-baseline=baseline.json"
    )
    result.assert_outcomes(passed=1)
    saved = json.loads((project.path / "baseline.json").read_text())
    assert saved["scorers"]["elsewhere.score"]["repetition"] == kept
    assert "repetition" in saved["scorers"]["scorers.clean"]
    assert sorted(p.name for p in project.path.glob(".baseline.json*")) == []


def test_an_expected_hang_that_cannot_import_says_why(project: pytest.Pytester) -> None:
    project.makepyfile(
        broken="import does_not_exist_anywhere\n\ndef score(solution_str):\n    pass\n"
    )
    result = project.runpytest_subprocess(
        *FAST, "--reward-hang-scorer=broken.py:score expect=hang", "--reward-hang-json=r.json"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*No module named 'does_not_exist_anywhere'*"])
    assert "none of its families hung" not in result.stdout.str()
    (entry,) = json.loads((project.path / "r.json").read_text())["scorers"]
    assert entry["status"] == "problem"
    assert "does_not_exist_anywhere" in entry["problem"]


@pytest.mark.parametrize(
    ("target", "why"),
    [("afile/r.json", "a part of *afile is a file"), ("adir", "*adir is a directory")],
)
def test_an_unwritable_json_report_is_refused_before_the_run(
    project: pytest.Pytester, target: str, why: str
) -> None:
    (project.path / "afile").write_text("")
    (project.path / "adir").mkdir()
    # A scorer that would take the whole timeout: refused up front, it never runs.
    result = usage(project, *FAST, *scorer_args("c_hang"), f"--reward-hang-json={target}")
    usage_error(result, f"ERROR: --reward-hang-json: cannot write the report: {why}")


def test_the_json_report_is_valid_json_where_a_time_is_unreadable() -> None:
    document = _report._jsonable({"cpu_s": math.nan, "cases": [{"wall_s": math.inf, "n": 1}]})
    assert document == {"cpu_s": None, "cases": [{"wall_s": None, "n": 1}]}
    json.dumps(document, allow_nan=False)


def test_a_missing_json_folder_is_made_up_front(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(
        *FAST, *scorer_args("clean"), "--reward-hang-json=reports/deep/r.json"
    )
    result.assert_outcomes(passed=1)
    assert json.loads(Path(project.path, "reports/deep/r.json").read_text())["scorers"]


def test_a_response_size_past_what_the_process_can_hold_is_refused(
    project: pytest.Pytester,
) -> None:
    # Every case is built in the pytest process: 2e9 had the OOM killer end it without a word.
    result = usage(project, *FAST, *scorer_args("clean"), "--reward-hang-max-chars=2000000000")
    usage_error(
        result,
        "ERROR: --reward-hang-max-chars: expected a positive number of characters of at most "
        "4,194,304, got '2000000000'",
    )


def test_a_steer_value_that_is_not_on_or_off_names_its_source(project: pytest.Pytester) -> None:
    result = usage(project, *FAST, *scorer_args("clean"), "--reward-hang-steer=yes")
    usage_error(result, "ERROR: --reward-hang-steer: expected on or off, got 'yes'")
    project.makeini("[pytest]\nreward_hang_steer = maybe\n")
    result = usage(project, *FAST, *scorer_args("clean"))
    usage_error(result, "ERROR: reward_hang_steer (ini): expected on or off, got 'maybe'")


@pytest.mark.parametrize("key", ["reward_hang_compare", "reward_hang_strict_complexity"])
def test_a_bool_ini_value_that_is_not_one_names_its_key(project: pytest.Pytester, key: str) -> None:
    project.makeini(f"[pytest]\n{key} = maybe\n")
    result = usage(project, *FAST, *scorer_args("clean"))
    usage_error(result, f"ERROR: {key} (ini): invalid truth value 'maybe', expected true or false")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("return 5", "returned int 5: expected a list of scorer lines or ScorerSpec objects"),
        ("return 'scorers.py:clean'", "returned str 'scorers.py:clean': expected a list of *"),
        ("raise RuntimeError('boom')", "raised RuntimeError: boom"),
        ("return [['scorers.py:clean']]", "a scorer line is a string, not *"),
    ],
)
def test_a_scorers_hook_that_returns_no_list_or_raises_is_one_line(
    project: pytest.Pytester, body: str, message: str
) -> None:
    # Each was an INTERNALERROR, or (a string) a scorer a character.
    project.makeconftest(f"def pytest_reward_hang_scorers(config):\n    {body}\n")
    result = usage(project, *FAST)
    usage_error(result, f"ERROR: pytest_reward_hang_scorers hook*{message}")


def test_a_scorer_line_that_is_not_a_string_is_one_line(project: pytest.Pytester) -> None:
    project.makefile(
        ".toml",
        pyproject='[tool.pytest.ini_options]\nreward_hang_scorers = [["scorers.py:clean"]]\n',
    )
    (project.path / "tox.ini").unlink(missing_ok=True)
    (project.path / "pytest.ini").unlink(missing_ok=True)
    result = usage(project, *FAST)
    usage_error(result, "ERROR: reward_hang_scorers (ini): a scorer line is a string, not *")
