"""Corpora, harvesting, growth, search and saving, end to end through pytest subprocess runs."""

from __future__ import annotations

import json
import tomllib

import pytest

from tests._projects import usage

FAST = ["--reward-hang-check", "--reward-hang-deadline=0.5", "-p", "no:cacheprovider"]

SCORERS = '''
import re

_CUBIC = re.compile(r"(?:qz)*(?:qz)*(?:qz)*X")


def c_hang(solution_str, ground_truth):
    if len(solution_str) > 6000:
        sum(range(10**13))
    return 0.0


def planted(solution_str, ground_truth):
    """Cubic on runs of 'qz', a vocabulary no bundled corpus holds."""
    return float(bool(_CUBIC.search(solution_str)))


def quadratic(solution_str, ground_truth):
    n = len(solution_str) // 2
    total = 0
    for i in range(n):
        for j in range(n):
            total += 1
    return 0.0


def truth_seen(solution_str, ground_truth):
    # The default example's truth with a corpus response: the case's own was not passed.
    # (A response inside a \\boxed{} carries a truth of its own shapes.)
    if "abab" in solution_str and ground_truth == "42" and "boxed{" not in solution_str:
        raise ValueError(f"ground truth not passed: {ground_truth!r}")
    return 0.0
'''

MINE = """\
corpus_version = 1
family = "{family}"
description = "mine"

[[case]]
units = ["ab"]
sizes = {sizes}
ground_truth = "1/2"
description = "ab repeated"
provenance = "a test"
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(scorers=SCORERS)
    pytester.makeini("[pytest]\n")
    return pytester


@pytest.mark.timeout(120)
def test_user_corpus_shadows_and_family_selection(project: pytest.Pytester) -> None:
    mine = project.mkdir("mine")
    (mine / "a.toml").write_text(MINE.format(family="repetition", sizes="[64, 128]"))
    (mine / "b.toml").write_text(MINE.format(family="halves", sizes="[64]"))
    result = project.runpytest_subprocess(
        *FAST,
        "--reward-hang-scorer=scorers.py:truth_seen",
        "--reward-hang-corpus=mine",
        "--reward-hang-family=repetition,halves",
        "-v",
        "--reward-hang-json=r.json",
    )
    result.assert_outcomes(passed=2)
    report = json.loads((project.path / "r.json").read_text())
    assert report["settings"]["corpus_version"].startswith("1:")
    # Each case once per context it was called in (contexts run the slowest cases again).
    ids = {case["id"] for case in report["scorers"][0]["cases"]}
    assert sorted(i for i in ids if "-truth" not in i and "-long-" not in i) == [
        "halves-64",
        "repetition-128",
        "repetition-64",
    ]
    # And each family's longest case under the other shapes of ground truth, plain and framed
    # (the example's own frame, and after a string the scorer's source looks for).
    assert {i.rsplit("-truth", 1)[0] for i in ids if "-truth" in i} == {
        "halves-64",
        "halves-64-frame0",
        "halves-64-frame1",
        "repetition-128",
        "repetition-128-frame0",
        "repetition-128-frame1",
    }
    # And against long references: a long reference alone in the first family only.
    assert {i for i in ids if "-long-" in i} == {
        "halves-64-long-pair",
        "repetition-128-long-pair",
        "repetition-128-long-pair-shifted",
        "repetition-128-long-reference",
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (
            'corpus_version = 1\nfamily = "x"\ndescription = "d"\n\n[[case]]\nunits = 3\n'
            'description = "d"\nprovenance = "p"\n',
            [],
            "ERROR: corpus: */bad/x.toml:6: units must be a list*",
        ),
        (None, ["--reward-hang-family=nonesuch"], "ERROR: --reward-hang-family: unknown family*"),
        (None, ["--reward-hang-corpus=nowhere"], "ERROR: --reward-hang-corpus: no such corpus*"),
    ],
)
def test_bad_corpora_and_selections_are_one_clean_line(
    project: pytest.Pytester, content: str | None, args: list[str], message: str
) -> None:
    if content is not None:
        (project.mkdir("bad") / "x.toml").write_text(content)
        args = ["--reward-hang-corpus=bad"]
    result = usage(project, *FAST, "--reward-hang-scorer=scorers.py:c_hang", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.slow  # a check run, a shrink and a replay: the slow tier
@pytest.mark.timeout(180)
def test_saved_hang_is_shrunk_and_replays_as_a_corpus(project: pytest.Pytester) -> None:
    args = [*FAST, "--reward-hang-scorer=scorers.py:c_hang", "--reward-hang-max-chars=8192"]
    result = project.runpytest_subprocess(
        *args, "--reward-hang-family=repetition", "--reward-hang-save=found"
    )
    result.assert_outcomes(failed=1)
    [saved] = (project.path / "found").iterdir()
    data = tomllib.loads(saved.read_text())
    assert data["family"] == "found-repetition-scorers-c-hang"
    [size] = data["case"][0]["sizes"]
    assert 6000 < size < 8192, size  # shrunk from 8192 towards the 6000-char threshold
    replay = project.runpytest_subprocess(
        *args, "--reward-hang-corpus=found", f"--reward-hang-family={data['family']}", "-v"
    )
    replay.assert_outcomes(failed=1)
    replay.stdout.fnmatch_lines([f"*hangs: case {data['family']}-*-{size} ({size} chars)*"])


@pytest.mark.slow  # a seeded search of a hundred probes: the slow tier
@pytest.mark.timeout(180)
def test_seeded_search_finds_a_planted_cubic_regex(project: pytest.Pytester) -> None:
    args = [*FAST, "--reward-hang-scorer=scorers.py:planted", "--reward-hang-max-chars=8192"]
    bundled = project.runpytest_subprocess(*args, "-k", "not harvested")
    assert bundled.ret == pytest.ExitCode.OK, bundled.stdout.str()
    result = project.runpytest_subprocess(
        *args, "--reward-hang-family=search", "--reward-hang-search=40", "--reward-hang-seed=3"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*hangs: case search-*ran past the 0.5 s deadline*"])
    assert (project.path / ".reward-hang" / "search" / "scorers.planted").is_dir()
    harvested = project.runpytest_subprocess(*args, "--reward-hang-family=harvested")
    harvested.assert_outcomes(failed=1)
    harvested.stdout.fnmatch_lines(["*hangs: case harvested-*"])


@pytest.mark.slow  # a growth fit over every size, seconds a size: the slow tier
@pytest.mark.timeout(180)
def test_growth_projects_a_quadratic_scorer_past_its_deadline(project: pytest.Pytester) -> None:
    mine = project.mkdir("mine")
    (mine / "a.toml").write_text(MINE.format(family="ladder", sizes="[1024, 2048, 4096, 8192]"))
    args = [*FAST, "--reward-hang-deadline=2", "--reward-hang-scorer=scorers.py:quadratic"]
    args += ["--reward-hang-corpus=mine", "--reward-hang-family=ladder"]
    result = project.runpytest_subprocess(*args, "--reward-hang-max-chars=131072")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*slow (projected): time grows as n^*at 131072 chars, past the 2 s deadline*"]
    )
    # Measured up to max_chars and under the deadline: fine, unless complexity is strict.
    result = project.runpytest_subprocess(*args, "--reward-hang-max-chars=8192")
    result.assert_outcomes(passed=1)
    result = project.runpytest_subprocess(
        *args, "--reward-hang-max-chars=8192", "--reward-hang-strict-complexity"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*super-linear: time grows as n^*"])
