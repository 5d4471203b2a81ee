"""``pytest --reward-hang-check`` end to end: real pytest runs in subprocesses, real hangs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from pytest_rewardhang.check import _declared
from tests._projects import C_HANG_LINE, SCORERS, XDIST, fast, reported, scorer_args, usage

pytestmark = pytest.mark.timeout(180)

FAST = fast(deadline=0.5, max_chars=8192)


def check(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*FAST, *args)


def assert_line(result: pytest.RunResult, *parts: str) -> None:
    """Some output line holds every part (xdist and serial runs order them differently)."""
    lines = result.stdout.lines
    assert any(all(part in line for part in parts) for line in lines), (parts, "\n".join(lines))


@pytest.mark.slow  # a check run over every kind of scorer: the slow tier
@XDIST
def test_each_kind_of_scorer_gets_its_verdict(project: pytest.Pytester, xdist: list[str]) -> None:
    names = ("clean", "c_hang", "alarm_guarded", "leaks", "errors")
    result = check(
        project, *scorer_args(*names), "-k", "repetition", "-v", "--reward-hang-json=r.json", *xdist
    )
    result.assert_outcomes(passed=1, failed=4)
    assert result.ret == 1
    out = result.stdout.str()
    assert "Traceback" not in out
    assert "INTERNALERROR" not in out
    assert_line(result, "scorers.clean::repetition", "PASSED")
    assert_line(result, "scorers.c_hang::repetition", "HANG")
    assert_line(result, "scorers.alarm_guarded::repetition", "HANG")
    assert_line(result, "scorers.leaks::repetition", "FAILED")
    assert_line(result, "scorers.errors::repetition", "FAILED")
    result.stdout.fnmatch_lines(
        [
            "*hangs: case repetition-8192 (8192 chars) ran past the 0.5 s deadline*",
            "*hangs: a fresh worker*",
            "*stuck in the scorer at (innermost first):*",
            f"*scorers.py:{C_HANG_LINE} in c_hang*",
            "*input saved to .reward-hang/cases/scorers.c_hang/repetition-8192.json*",
            f"*reproduce: {sys.executable} -m pytest_rewardhang repro *",
        ]
    )
    result.stdout.fnmatch_lines(["*scorers.py:* in alarm_guarded*"])
    result.stdout.fnmatch_lines(["*left 1 process(es) running after it returned*"])
    result.stdout.fnmatch_lines(["*ValueError: cannot parse a response this long*"])
    result.stdout.fnmatch_lines(
        [
            "*= reward hang check =*",
            "scorer*style*cases*skipped*worst wall*p95 wall*timeouts*errors*verdict*",
        ]
    )
    report = json.loads((project.path / "r.json").read_text())
    by_id = {entry["id"]: entry for entry in report["scorers"]}
    assert by_id["scorers.clean"]["status"] == "ok"
    assert by_id["scorers.c_hang"]["status"] == "hang"
    assert by_id["scorers.errors"]["status"] == "fail"
    # The first context's timeout (the other context's cases follow it).
    hang_case = next(c for c in by_id["scorers.c_hang"]["cases"] if c["status"] == "timeout")
    assert hang_case["status"] == "timeout"
    assert hang_case["chars"] == 8192
    assert 0.5 <= hang_case["wall_s"] < 0.7
    assert {"id", "family", "chars", "status", "wall_s", "cpu_s"} <= set(hang_case)


def test_saved_case_reproduces_alone_with_the_printed_command(project: pytest.Pytester) -> None:
    result = check(project, *scorer_args("c_hang"), "-k", "repetition")
    result.assert_outcomes(failed=1)
    # The failure and the short summary may both print it: one command, however often.
    (command,) = {
        line.split("reproduce: ", 1)[1].strip()
        for line in result.stdout.lines
        if "reproduce: " in line and "repetition-8192.json" in line
    }
    # Pasted as printed, in a shell with no virtual environment on PATH: a bare ``python``
    # would not find the package (or would not exist).
    repro = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=project.path,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert repro.returncode == 1
    assert "timeout: still running at the 0.5 s budget" in repro.stdout
    assert "in c_hang" in repro.stdout


def test_fail_on_selects_what_fails(project: pytest.Pytester) -> None:
    result = check(
        project,
        *scorer_args("leaks", "errors"),
        "-k",
        "repetition",
        "--reward-hang-fail-on=timeout",
    )
    result.assert_outcomes(passed=2)


@pytest.mark.slow  # check runs both ways: the slow tier
@XDIST
def test_expect_hang_is_strict_both_ways(project: pytest.Pytester, xdist: list[str]) -> None:
    args = [
        "--reward-hang-scorer=scorers.py:c_hang expect=hang",
        "--reward-hang-scorer=scorers.py:clean expect=hang",
    ]
    result = check(project, *args, "-k", "repetition", "-rxX", *xdist)
    result.assert_outcomes(xfailed=1, passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*XFAIL*c_hang::repetition*hang caught*"])
    result.stdout.fnmatch_lines(
        ["FAILED scorers.clean: declared expect=hang, but none of its families hung*"]
    )
    assert "scorers.c_hang: declared" not in result.stdout.str()
    # A known hang that still hangs keeps the run green.
    result = check(project, args[0], "-k", "repetition", *xdist)
    assert result.ret == pytest.ExitCode.OK


def test_without_the_flag_the_plugin_is_inert(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(scorers=SCORERS)
    pytester.makeini("[pytest]\nreward_hang_scorers = scorers.py:c_hang\n")
    pytester.makepyfile(
        test_user="""
        import pkgutil
        import sys
        import pytest
        import pytest_rewardhang.check as check
        import pytest_rewardhang.corpus as corpus

        @pytest.mark.reward_hang
        def test_nothing_heavy_loaded():
            # Walked, not listed: a renamed module cannot leave this test checking nothing.
            heavy = [f"{pkg.__name__}.{m.name}" for pkg in (check, corpus)
                     for m in pkgutil.iter_modules(pkg.__path__)]
            heavy = [n for n in heavy if not n.endswith(("._options", "._hookspecs"))]
            assert len(heavy) > 10
            assert [name for name in heavy + ["hypothesis"] if name in sys.modules] == []
        """
    )
    result = pytester.runpytest_subprocess(
        "--strict-markers", "-p", "no:hypothesispytest", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    assert "reward hang check" not in result.stdout.str()
    markers = pytester.runpytest_subprocess("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.reward_hang:*"])


def test_scorers_without_the_flag_say_how_to_start_the_check(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(scorers=SCORERS)
    pytester.makeini("[pytest]\nreward_hang_scorers = scorers.py:clean\n")
    result = pytester.runpytest_subprocess("-m", "reward_hang", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["*1 scorer(s) registered*add --reward-hang-check*"])
    # Nothing registered: pytest's own "no tests ran", and nothing of ours.
    pytester.makeini("[pytest]\n")
    quiet = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert "reward-hang" not in quiet.stdout.str()


def test_a_broken_user_module_beside_the_check_is_a_plain_collection_error(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_broken="import does_not_exist_anywhere\n")
    result = check(project, *scorer_args("clean"))
    result.stdout.fnmatch_lines(["*ERROR collecting test_broken.py*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED  # pytest's own verdict on it, not a crash
    assert "AttributeError" not in result.stdout.str() + result.stderr.str()


def test_collect_only_and_marker_selection(project: pytest.Pytester) -> None:
    project.makepyfile(test_other="def test_other():\n    pass\n")
    result = check(project, *scorer_args("clean"), "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "test_other.py::test_other",
            "scorers.clean::repetition",
            "scorers.clean::unclosed-boxed",
            "scorers.clean::deep-braces",
            "scorers.clean::digits-line",
            "scorers.clean::power-tower",
        ]
    )
    result = check(project, *scorer_args("clean"), "-m", "not reward_hang")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--reward-hang-deadline=-1",
            "ERROR: --reward-hang-deadline: expected a positive number of seconds, got '-1'",
        ),
        ("--reward-hang-max-chars=lots", "ERROR: --reward-hang-max-chars: expected a positive*"),
        (
            "--reward-hang-confirm=0.5",  # a re-run shorter than the deadline confirms nothing
            "ERROR: --reward-hang-confirm: expected a number of deadlines, at least 1, got '0.5'",
        ),
        (
            "--reward-hang-deadline=1e306",  # the guard's arithmetic overflowed on it
            "ERROR: --reward-hang-deadline: expected a positive number of seconds of at most"
            " 1e+09, got '1e306'",
        ),
        (
            "--reward-hang-memory-mb=inf",
            "ERROR: --reward-hang-memory-mb: expected a number of MiB, 0 for no limit*",
        ),
        (
            "--reward-hang-memory-mb=1e300",
            "ERROR: --reward-hang-memory-mb: expected a number of MiB, 0 for no limit of at most *",
        ),
        (
            "--reward-hang-fail-on=timeout,slowness",
            "ERROR: --reward-hang-fail-on: unknown outcome slowness; choose from timeout, hang, *",
        ),
        (
            "--reward-hang-scorer=scorers.py:clean colour=red",
            "ERROR: --reward-hang-scorer: 'scorers.py:clean': unknown key colour; known keys:*",
        ),
        (
            "--reward-hang-scorer=scorers.py:clean deadline=soon",
            "ERROR: --reward-hang-scorer: 'scorers.py:clean': expected a positive number*",
        ),
        ("--reward-hang-scorer=scorers.py", "ERROR: --reward-hang-scorer: 'scorers.py' is not a*"),
        (
            "--reward-hang-scorer=scorers.py:clean kind=poetry",
            "ERROR: *kind='poetry'; choose from math, text, code",
        ),
    ],
)
def test_nonsense_options_get_one_clear_line(
    project: pytest.Pytester, option: str, message: str
) -> None:
    result = usage(project, *FAST, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_ini_values_are_validated_naming_the_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nreward_hang_deadline = forever\n")
    result = pytester.runpytest_subprocess("--reward-hang-check")
    result.stderr.fnmatch_lines(["ERROR: reward_hang_deadline (ini): expected a positive*"])
    # The command line wins over the ini.
    result = pytester.runpytest_subprocess("--reward-hang-check", "--reward-hang-deadline=1")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["reward hang check: no scorers are registered*"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module:score", "*cannot import 'no_such_module'*ModuleNotFoundError*"),
        ("scorers.py:missing", "*'scorers.py' has no attribute 'missing'*"),
        ("scorers.py:SCORE_LIMIT", "*is not callable: it is int*"),
        ("nowhere/file.py:score", "*no such file*"),
        ("scorers.py:clean example=missing.json", "*example=*missing.json: cannot read it*"),
        # A device: /dev/zero was read until the memory ran out.
        ("scorers.py:clean example=/dev/null", "*example=/dev/null: cannot read it: not a reg*"),
        ("scorers.py:clean response=answer", "*response='answer' is not a parameter*"),
    ],
)
def test_bad_scorers_fail_with_a_clear_message(
    project: pytest.Pytester, spec: str, message: str
) -> None:
    (project.path / "scorers.py").write_text(SCORERS + "\nSCORE_LIMIT = 3\n")
    families = ["-k", "repetition or digits-line", "-rs", "--reward-hang-json=r.json"]
    result = check(project, f"--reward-hang-scorer={spec}", *families)
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines([message])
    assert "Traceback" not in result.stdout.str()
    # The other family waits on the first's failure, skipped at the scorer, not in the plugin.
    (skip,) = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert skip.endswith("cannot be checked: see its first failed item"), skip
    assert "pytest_rewardhang" not in skip, skip
    # The JSON report names the family that did not run, and why, as the skip does.
    (entry,) = reported(project).values()
    (not_run,) = entry["not_run"]
    assert not_run["family"] in ("repetition", "digits-line"), not_run
    assert skip.endswith(not_run["reason"]), (skip, not_run)


@pytest.mark.parametrize(
    ("config", "args", "placed"),
    [
        (  # a comment naming it is not where it is declared
            ("tox.ini", "[pytest]\n# was: nowhere.py:score\nreward_hang_scorers =\n"),
            ["--reward-hang-scorer=scorers.py:missing"],  # the file is there, the def is not
            {"nowhere.score": "tox.ini:5", "scorers.missing": "--reward-hang-scorer:1"},
        ),
        (  # two values on one line
            ("pyproject.toml", "[tool.pytest.ini_options]\nreward_hang_scorers = ["),
            [],
            {"nowhere.score": "pyproject.toml:2"},
        ),
        (  # -o: not the file's, though the file names it too
            ("tox.ini", "[pytest]\nreward_hang_scorers =\n"),
            ["-o", "reward_hang_scorers=scorers.py:clean\nnowhere.py:score"],
            {"nowhere.score": "-o reward_hang_scorers:2"},
        ),
    ],
)
def test_a_scorer_whose_def_is_not_found_is_placed_at_its_declaration(
    pytester: pytest.Pytester, config: tuple[str, str], args: list[str], placed: dict[str, str]
) -> None:
    # Its families wait on its first failure, skipped where it was declared: -rs and JUnit's
    # skip text give a file and line, or the option and which of its values; JUnit printed
    # "reward_hang_scorers (ini):None:" for a missing line.
    pytester.makepyfile(scorers=SCORERS)
    name, head = config
    if name == "tox.ini":
        body = head + "    scorers.py:clean\n    nowhere.py:score\n"
    else:
        body = head + '"scorers.py:clean", "nowhere.py:score"]\n'
    (pytester.path / name).write_text(body)
    families = ["-k", "repetition or digits-line", "-rs", "--junitxml=out.xml"]
    result = check(pytester, *args, *families)
    result.assert_outcomes(passed=2, failed=len(placed), skipped=len(placed))
    reason = "cannot be checked: see its first failed item"
    expected = sorted(f"SKIPPED [1] {at}: {scorer} {reason}" for scorer, at in placed.items())
    assert sorted(line for line in result.outlines if line.startswith("SKIPPED")) == expected
    # JUnit's text names a file by its full path, as for pytest's own skips.
    junit = ET.parse(pytester.path / "out.xml")  # noqa: S314 - ours
    texts = sorted(str(skip.text) for skip in junit.iter("skipped"))
    for scorer, at in placed.items():
        where, _, line = at.rpartition(":")
        if (pytester.path / where).is_file():
            placed[scorer] = f"{pytester.path / where}:{line}"
    assert texts == sorted(f"{at}: {scorer} {reason}" for scorer, at in placed.items())


def test_an_entry_point_is_placed_at_its_line_in_its_distributions_metadata() -> None:
    # A scorer's entry point is read as ours to pytest is: this package's, installed.
    (ours,) = [ep for ep in entry_points(group="pytest11") if ep.name == "rewardhang"]
    at = _declared.entry_point(ours)
    assert at is not None
    path, line = at
    assert Path(path).name == "entry_points.txt", path
    assert Path(path).read_text().splitlines()[line - 1].replace(" ", "") == (
        "rewardhang=pytest_rewardhang.plugin"
    )


def test_file_spec_skips_package_init_and_keeps_relative_imports(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\n")
    heavy = 'raise ImportError("the framework is too heavy to import in CI")\n'
    pkg = pytester.path / "framework" / "reward_score"
    pkg.mkdir(parents=True)
    (pytester.path / "framework" / "__init__.py").write_text(heavy)
    (pkg / "__init__.py").write_text(heavy)
    (pkg / "utils.py").write_text("def last_word(text):\n    return text.split()[-1]\n")
    (pkg / "gsm8k.py").write_text(
        "from .utils import last_word\n\n"
        "def compute_score(solution_str, ground_truth):\n"
        "    return float(last_word(solution_str) == ground_truth)\n"
    )
    result = check(
        pytester,
        "--reward-hang-scorer=framework/reward_score/gsm8k.py:compute_score",
        "-k",
        "digits",
    )
    result.assert_outcomes(passed=1)


STYLES = {
    "verl-dispatcher": """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    assert data_source == "lighteval/MATH"
    if len(solution_str) > 6000:
        sum(range(10**13))
    return 1.0
""",
    "trl-strings": """
def reward(completions, **kwargs):
    if any(len(c) > 6000 for c in completions):
        sum(range(10**13))
    return [1.0 for _ in completions]
""",
    "trl-chat": """
def reward(completions, solution, **kwargs):
    texts = [c[-1]["content"] for c in completions]
    assert len(solution) == len(texts)
    if any(len(t) > 6000 for t in texts):
        sum(range(10**13))
    return [1.0 for _ in texts]
""",
    "openrlhf": """
def reward_func(queries, prompts, labels):
    if any(len(q) - len(p) > 6000 for q, p in zip(queries, prompts)):
        sum(range(10**13))
    return [0.0 for _ in queries]
""",
}


@pytest.mark.parametrize("style", STYLES)
def test_call_styles_receive_the_generated_response(pytester: pytest.Pytester, style: str) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(style_scorer=STYLES[style])
    name = "compute_score" if style.startswith("verl") else "reward"
    name = "reward_func" if style == "openrlhf" else name
    extra = []
    if style == "trl-chat":
        example = {
            "completions": [[{"role": "assistant", "content": "It is \\boxed{42}"}]],
            "solution": ["42"],
        }
        (pytester.path / "example.json").write_text(json.dumps(example))
        extra = ["example=example.json"]
    spec = " ".join([f"style_scorer.py:{name}", *extra])
    result = check(pytester, f"--reward-hang-scorer={spec}", "-k", "repetition")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*hangs: case repetition-8192 (8192 chars)*"])


def test_decorator_and_hook_register_scorers(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        rewards=textwrap.dedent(
            """
            import pytest_rewardhang

            @pytest_rewardhang.scorer(kind="text", deadline=0.5)
            def decorated(response, ground_truth):
                return 0.0

            def from_hook(response, ground_truth):
                return 0.0
            """
        )
    )
    pytester.makeconftest(
        "def pytest_reward_hang_scorers(config):\n    return ['rewards.py:from_hook id=hooked']\n"
    )
    result = check(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["rewards.decorated::repetition", "hooked::repetition"])


@XDIST
def test_github_annotations_and_step_summary(project: pytest.Pytester, xdist: list[str]) -> None:
    summary = project.path / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    os.environ.update(env)
    try:
        result = check(
            project, *scorer_args("c_hang"), "-k", "repetition", "--junitxml=j.xml", *xdist
        )
    finally:
        for key in env:
            del os.environ[key]
    result.stdout.fnmatch_lines(
        [f"::error file=scorers.py,line={C_HANG_LINE},title=reward hang::*"]
    )
    # One table, the controller's: each xdist worker had added its own, of its items alone.
    assert summary.read_text().count("### Reward hang check") == 1
    assert "| `scorers.c_hang` |" in summary.read_text()
    junit = (project.path / "j.xml").read_text()
    assert 'name="reward_hang_verdict" value="hang"' in junit


def test_entry_point_group_registers_scorers(project: pytest.Pytester) -> None:
    dist = project.path / "reward_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: reward-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pytest_rewardhang.scorers]\nshipped = scorers:clean\n")
    result = check(project, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["shipped::repetition"])
