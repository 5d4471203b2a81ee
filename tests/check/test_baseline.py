"""Baselines: save, compare (normalised by the machine calibration), replay before failing.

Comparisons run against the stored fixture ``fixtures/baseline.json``; the calibration figure is
pinned with ``--reward-hang-calibration`` and the slow scorer spins a fixed amount of CPU time, so
what passes and what fails does not depend on how fast or busy the machine is.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.check import _baseline, _options
from pytest_rewardhang.corpus import _cases
from tests._projects import SCORERS, XDIST, fast, line_of, scorer_args, usage

pytestmark = pytest.mark.timeout(120)

FIXTURE = Path(__file__).parent / "fixtures" / "baseline.json"

FAST = fast(deadline=1, max_chars=2048, family="repetition")


def stored_baseline(project: pytest.Pytester, **changes: dict[str, Any]) -> Path:
    """The fixture, stamped with this checkout's corpus version and the scorers' source hash."""
    text = FIXTURE.read_text()
    text = text.replace("@corpus_version@", _cases.load_corpus().version)
    found = _baseline.source_hash(project.path / "scorers.py", project.path)
    text = text.replace("@source_hash@", str(found))
    document = json.loads(text)
    for scorer_id, fields in changes.items():
        if fields:
            document["scorers"][scorer_id]["repetition"].update(fields)
        else:
            del document["scorers"][scorer_id]
    path = project.path / "baseline.json"
    path.write_text(json.dumps(document, indent=2, sort_keys=True))
    return path


def report(project: pytest.Pytester) -> dict[str, Any]:
    document = json.loads((project.path / "r.json").read_text())
    return {entry["id"]: entry for entry in document["scorers"]}


@pytest.mark.slow  # check runs with a replay: the slow tier
def test_a_regressed_scorer_fails_only_its_item_after_a_replay(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored_baseline(project)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = project.runpytest_subprocess(
        *FAST,
        *scorer_args("clean", "spin", "noisy"),
        "--reward-hang-compare=baseline.json",
        "--reward-hang-compare-fail=cpu_p95:50%",
        "--reward-hang-calibration=0.02",
        "--junitxml=junit.xml",
        "--reward-hang-json=r.json",
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*regressed against the baseline *baseline.json (confirmed on a replay):",
            "*cpu_p95 0.01 s -> 0.1* s normalised*over the limit cpu_p95:50%",
            "*scorers.spin*regressed*",
            "*- reward hang baseline -*",
            "regressed scorers.spin::repetition: cpu_p95 0.01 s -> *",
            "FAILED scorers.spin::repetition - regressed against the baseline*",
        ]
    )
    # On the scorer's def line (in the pull request's diff), saying what regressed.
    spin = line_of(SCORERS, "def spin(")
    result.stdout.fnmatch_lines(
        [
            f"::error file=scorers.py,line={spin},title=reward hang regressed::scorers.spin::"
            "repetition regressed against the baseline: cpu_p95 0.01 s -> 0.1* s normalised*"
        ]
    )
    failed = [
        case.get("classname")
        for case in ET.parse(project.path / "junit.xml").iter("testcase")  # noqa: S314 - ours
        if case.find("failure") is not None
    ]
    assert failed == ["scorers.spin"]
    found = report(project)
    noisy = found["scorers.noisy"]["baseline"]["repetition"]["comparison"]
    # Slow on the first run, fast on the replay: the replay's times stand and it passes.
    assert noisy == {
        "status": "ok",
        "reason": "",
        "regressions": [],
        "elsewhere": "",
        "replayed": True,
    }
    assert found["scorers.clean"]["baseline"]["repetition"]["comparison"]["replayed"] is False
    assert found["scorers.spin"]["status"] == "regressed"


@pytest.mark.slow  # three check runs, each calibrating the machine: the slow tier
def test_a_slower_machine_does_not_fail(project: pytest.Pytester) -> None:
    """Ten times the baseline's calibration: 0.1 s measured is the baseline's 0.01 s."""
    stored_baseline(project)
    project.makeini(
        """
        [pytest]
        reward_hang_baseline = baseline.json
        reward_hang_compare = true
        reward_hang_compare_fail = cpu_p95:50% cpu_max:0.05
        reward_hang_calibration = 0.2
        """
    )
    result = project.runpytest_subprocess(*FAST, *scorer_args("spin"), "--reward-hang-json=r.json")
    result.assert_outcomes(passed=1)
    comparison = report(project)["scorers.spin"]["baseline"]["repetition"]["comparison"]
    assert comparison == {
        "status": "ok",
        "reason": "",
        "regressions": [],
        "elsewhere": "",  # the fixture predates recording the interpreter and the CPU
        "replayed": False,
    }
    # The command line wins over the ini: the same run on a machine as fast as the baseline's.
    result = project.runpytest_subprocess(
        *FAST, *scorer_args("spin"), "--reward-hang-calibration=0.02"
    )
    result.assert_outcomes(failed=1)


@pytest.mark.slow  # three check runs: the slow tier
def test_a_baseline_from_another_interpreter_or_cpu_is_compared_and_says_so(
    project: pytest.Pytester,
) -> None:
    here = _baseline.environment()
    stored_baseline(project, **{"scorers.spin": {"python": "CPython 3.0.0", "cpu": here["cpu"]}})
    result = project.runpytest_subprocess(
        *FAST,
        *scorer_args("spin"),
        "--reward-hang-compare=baseline.json",
        "--reward-hang-json=r.json",
        "--reward-hang-calibration=0.2",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"*the baseline was measured elsewhere (python CPython 3.0.0 -> {here['python']})*"]
    )
    comparison = report(project)["scorers.spin"]["baseline"]["repetition"]["comparison"]
    assert comparison["elsewhere"] == f"python CPython 3.0.0 -> {here['python']}"
    # And a saved entry records both, so the next comparison can tell.
    saved = project.runpytest_subprocess(
        *FAST, *scorer_args("spin"), "--reward-hang-save-baseline=new.json"
    )
    saved.assert_outcomes(passed=1)
    entry = json.loads((project.path / "new.json").read_text())["scorers"]["scorers.spin"]
    assert {entry["repetition"]["python"], entry["repetition"]["cpu"]} == set(here.values())


@pytest.mark.slow  # four check runs: the slow tier
def test_changed_source_or_corpus_is_a_new_entry_and_a_changed_scorer_is_still_gated(
    project: pytest.Pytester,
) -> None:
    stored_baseline(
        project,
        **{
            "scorers.spin": {"source_hash": "sha256:0000000000000000"},
            "scorers.clean": {"source_hash": "sha256:0000000000000000"},
            "scorers.noisy": {"corpus_version": "1:000000000000"},
        },
    )
    result = project.runpytest_subprocess(
        *FAST,
        *scorer_args("clean", "spin", "noisy"),
        "--reward-hang-compare",
        "baseline.json",
        "--reward-hang-compare-fail=cpu_p95:1%",
        "--reward-hang-calibration=0.02",
    )
    # The PR that made spin slower changed its source: a new entry, and still a regression.
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*regressed against the baseline *baseline.json (scorer source changed "
            "(sha256:0000000000000000 -> sha256:*)) (confirmed on a replay):",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "new baseline entry scorers.clean::repetition: scorer source changed "
            "(sha256:0000000000000000 -> sha256:*)",
            "new baseline entry scorers.noisy::repetition: corpus version changed (1:000000000000"
            " -> *)",
        ]
    )


@pytest.mark.slow  # check runs saving a baseline: the slow tier
@XDIST
def test_save_writes_one_sorted_file_from_the_controller(
    project: pytest.Pytester, xdist: list[str]
) -> None:
    target = project.path / "ci" / "baseline.json"
    target.parent.mkdir()
    old = {"cpu_p95_s": 1.0, "calibration_s": 0.02, "corpus_version": "1:abc"}
    kept = {"old.scorer": {"repetition": old}}
    target.write_text(json.dumps({"format": 1, "scorers": kept}))
    result = project.runpytest_subprocess(
        *FAST, *scorer_args("clean", "spin"), "--reward-hang-save-baseline=ci/baseline.json", *xdist
    )
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("baseline written:") == 1
    result.stdout.fnmatch_lines(["baseline written: *ci/baseline.json (2 entries)"])
    text = target.read_text()
    document = json.loads(text)
    assert text == json.dumps(document, indent=2, sort_keys=True) + "\n"
    assert document["scorers"]["old.scorer"] == kept["old.scorer"]  # not run: left alone
    spin = document["scorers"]["scorers.spin"]["repetition"]
    assert set(spin) == {
        "calibration_s",
        "cases",
        "corpus_version",
        "cpu",
        "cpu_max_s",
        "cpu_p50_s",
        "cpu_p95_s",
        "growth_exponent",
        "peak_mb",
        "plugin_version",
        "python",
        "source_hash",
        "worst_case",
    }
    assert 0.09 <= spin["cpu_p50_s"] <= spin["cpu_p95_s"] <= spin["cpu_max_s"] < 0.5
    assert spin["worst_case"].startswith("repetition")
    assert spin["source_hash"] == _baseline.source_hash(project.path / "scorers.py", project.path)
    assert spin["corpus_version"] == _cases.load_corpus().version
    assert spin["calibration_s"] > 0


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (
            ["--reward-hang-compare-fail=cpu_p95:5x"],
            "",
            "ERROR: --reward-hang-compare-fail: expected FIELD:N% or FIELD:N*, got 'cpu_p95:5x'",
        ),
        (
            ["--reward-hang-compare-fail=cpu_p95:25%"],
            "",
            "ERROR: --reward-hang-compare-fail: limits need a baseline to compare with*",
        ),
        (
            [],
            "reward_hang_compare_fail = wall:5%",
            "ERROR: reward_hang_compare_fail (ini): unknown field wall; choose from cpu_p50, *",
        ),
        (
            ["--reward-hang-calibration=fast"],
            "",
            "ERROR: --reward-hang-calibration: expected 0.0001 to 1000 seconds, got 'fast'",
        ),
        (
            [],
            "reward_hang_calibration = 5e-324",
            "ERROR: reward_hang_calibration (ini): expected 0.0001 to 1000 seconds, got '5e-324'",
        ),
        (
            ["--reward-hang-calibration=2000"],
            "",
            "ERROR: --reward-hang-calibration: expected 0.0001 to 1000 seconds, got '2000'",
        ),
        (
            ["--reward-hang-compare"],
            "",
            "ERROR: --reward-hang-compare: no baseline at *reward-hang-baseline.json: write one "
            "with --reward-hang-save-baseline",
        ),
        (
            [],
            "reward_hang_compare = true\nreward_hang_baseline = nowhere.json",
            "ERROR: --reward-hang-compare: no baseline at *nowhere.json*",
        ),
    ],
)
def test_bad_baseline_options_get_one_clear_line(
    project: pytest.Pytester, args: list[str], ini: str, message: str
) -> None:
    project.makeini(f"[pytest]\n{ini}\n")
    result = usage(project, *FAST, *scorer_args("clean"), *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


# --- the arithmetic, on stored entries: no process, no timing ---------------------------------

ENTRY = {
    "calibration_s": 0.02,
    "corpus_version": "1:abc",
    "source_hash": "sha256:1",
    "cpu_p50_s": 0.05,
    "cpu_p95_s": 0.1,
    "cpu_max_s": 0.2,
    "peak_mb": 100.0,
    "growth_exponent": 1.0,
}


@pytest.mark.parametrize(
    ("now", "limit", "status"),
    [
        ({"cpu_p95_s": 0.14}, "cpu_p95:50%", "ok"),
        ({"cpu_p95_s": 0.16}, "cpu_p95:50%", "regressed"),
        # Twice as slow a machine measures twice the time: the same normalised time.
        ({"cpu_p95_s": 0.3, "calibration_s": 0.04}, "cpu_p95:50%", "ok"),
        ({"cpu_p95_s": 0.3, "calibration_s": 0.02}, "cpu_p95:50%", "regressed"),
        ({"cpu_max_s": 0.29}, "cpu_max:0.1", "ok"),
        ({"cpu_max_s": 0.31}, "cpu_max:0.1", "regressed"),
        # 100% slower, but by less than the noise floor of a worker round trip.
        ({"cpu_p50_s": 0.055}, "cpu_p50:5%", "ok"),
        # Memory and growth are not scaled by the calibration.
        ({"peak_mb": 130.0, "calibration_s": 0.04}, "peak_mb:25%", "regressed"),
        ({"growth_exponent": 1.4}, "growth:0.5", "ok"),
        ({"growth_exponent": 2.0}, "growth:0.5", "regressed"),
        ({"growth_exponent": None}, "growth:0.5", "ok"),
    ],
)
def test_compare_normalises_cpu_by_the_calibration(
    now: dict[str, Any], limit: str, status: str
) -> None:
    comparison = _baseline.compare({**ENTRY, **now}, ENTRY, [_options.parse_limit(limit)])
    assert comparison.status == status, comparison
    assert bool(comparison.regressions) == (status == "regressed")


def test_compare_reports_new_entries_with_the_reason() -> None:
    limits = [_options.parse_limit("cpu_p95:1%")]
    assert _baseline.compare(ENTRY, None, limits).reason == "no baseline entry"
    moved = _baseline.compare({**ENTRY, "source_hash": "sha256:2"}, ENTRY, limits)
    assert (moved.status, moved.reason) == ("new", "scorer source changed (sha256:1 -> sha256:2)")
    corpus = _baseline.compare({**ENTRY, "corpus_version": "1:def"}, ENTRY, limits)
    assert corpus.reason == "corpus version changed (1:abc -> 1:def)"


def test_load_refuses_files_that_are_not_baselines(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text('{"scorers": {}}')
    with pytest.raises(_baseline.BaselineError, match="not a reward hang baseline"):
        _baseline.load(path)
    path.write_text("{")
    with pytest.raises(_baseline.BaselineError, match="cannot read the baseline"):
        _baseline.load(path)
    assert _baseline.load(FIXTURE)["scorers.spin"]["repetition"]["cpu_p95_s"] == 0.01


CALIBRATION = "must be 0.0001 to 1000 seconds (of the fixed workload)"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # Each was a silent pass (NaN, infinity, a calibration of 0 or below: every comparison
        # false, or every CPU time scaled to nothing), a pytest traceback (a string), or an
        # INTERNALERROR (nesting past Python's depth).
        ({"cpu_p95_s": float("nan")}, "cpu_p95_s must be a finite number, not nan"),
        ({"cpu_p95_s": float("inf")}, "cpu_p95_s must be a finite number, not inf"),
        ({"cpu_p95_s": "fast"}, "cpu_p95_s must be a finite number, not 'fast'"),
        ({"peak_mb": [1]}, "peak_mb must be a finite number, not [1]"),
        ({"cpu_max_s": -1}, "cpu_max_s must be at least 0, not -1"),
        ({"calibration_s": 0}, f"calibration_s {CALIBRATION}, not 0"),
        # A figure no machine measures: every CPU time compared with it scaled to nothing.
        ({"calibration_s": 5e-324}, f"calibration_s {CALIBRATION}, not 5e-324"),
        ({"calibration_s": 1e9}, f"calibration_s {CALIBRATION}, not 1000000000.0"),
        ({"calibration_s": "x"}, "calibration_s must be a finite number, not 'x'"),
        # An OverflowError from the check itself: INTERNALERROR.
        (
            {"calibration_s": 10**400},
            "calibration_s must be a finite number, not an int too large for a float",
        ),
    ],
)
def test_load_refuses_numbers_it_could_not_compare(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    document = json.loads(FIXTURE.read_text())
    document["scorers"]["scorers.spin"]["repetition"].update(change)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(document))
    with pytest.raises(_baseline.BaselineError) as raised:
        _baseline.load(path)
    assert str(raised.value) == f"{path}: scorers.spin::repetition: {message}"


def test_load_refuses_a_baseline_nested_past_pythons_depth(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(
        _baseline.BaselineError, match="cannot read the baseline: maximum recursion"
    ):
        _baseline.load(path)
