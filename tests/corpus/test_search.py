"""``--reward-hang-search``: the vocabulary sweep, growth past the size cap, and confirmation.

Noise must never decide: a timeout counts only when it repeats, and a slow time is re-timed
before it steers the search. The probes that stand in for a busy machine are plain functions;
everything else runs real scorers under the real guard, or the real check in a subprocess.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.corpus import _search
from pytest_rewardhang.corpus._cases import Case
from pytest_rewardhang.guard import Outcome, Status, run

pytestmark = pytest.mark.timeout(180)
PLAN = r"<plan>.*</plan>.*<verdict>.*</verdict>"


def cubic_plan(solution_str: str, ground_truth: str) -> float:
    return 1.0 if re.search(PLAN, solution_str, re.DOTALL) else 0.0


def quadratic_claims(solution_str: str, ground_truth: str) -> float:
    return float(len(re.findall(r"<claim>(.*?)</claim>", solution_str, re.DOTALL)))


def evaluates_answer(solution_str: str, ground_truth: str) -> float:
    found = re.search(r"ANSWER\[(.*?)\]", solution_str)
    if found is None:
        return 0.0
    try:
        value = eval(found.group(1).replace("^", "**"), {"factorial": math.factorial})
    except Exception:
        return 0.0
    return float(value == int(ground_truth))


def guarded(fn: Callable[..., Any], budget: float) -> Callable[[str], Outcome]:
    def probe(text: str) -> Outcome:
        return run(fn, (text, "42"), budget=budget)

    return probe


def statuses(ran: list[tuple[Case, Outcome]]) -> list[Status]:
    return [outcome.status for _, outcome in ran]


def test_the_sweep_finds_a_cubic_regex_from_its_pieces(tmp_path: Path) -> None:
    ran = _search.search(
        guarded(cubic_plan, 0.5), ["<plan>"], 20, 0, tmp_path, 4096, patterns=[f"(?s){PLAN}"]
    )
    case, outcome = ran[-1]
    assert outcome.status is Status.TIMEOUT
    assert "<plan>" in case.text
    assert "probe " in case.description
    assert len(ran) <= 5  # the sweep's first candidates, on any seed


def test_growth_takes_a_quadratic_scorer_past_the_size_cap(tmp_path: Path) -> None:
    ran = _search.search(
        guarded(quadratic_claims, 0.5),
        ["<claim>", "</claim>"],
        40,
        3,
        tmp_path,
        4096,
        patterns=[r"(?s)<claim>(.*?)</claim>"],
        max_chars=131072,
    )
    case, outcome = ran[-1]
    assert outcome.status is Status.TIMEOUT, [c.description for c, _ in ran]
    assert case.description.startswith("grown past the search's size cap")
    assert len(case.text) > 4096
    assert max(len(c.text) for c, _ in ran) <= 131072


def test_hard_values_are_tried_in_the_scorers_frames(tmp_path: Path) -> None:
    ran = _search.search(
        guarded(evaluates_answer, 0.5),
        ["ANSWER[", "]"],
        60,
        0,
        tmp_path,
        2048,
        patterns=[r"ANSWER\[(.*?)\]"],
    )
    case, outcome = ran[-1]
    assert outcome.status is Status.TIMEOUT, [c.description for c, _ in ran]
    assert case.text.startswith("ANSWER[")
    assert "hard value" in case.description


def test_a_timeout_that_does_not_repeat_is_not_reported(tmp_path: Path) -> None:
    # Every text's first run times out, as on a machine busy at that moment; its re-run ends.
    runs: dict[str, int] = {}

    def probe(text: str) -> Outcome:
        runs[text] = runs.get(text, 0) + 1
        if runs[text] == 1:
            return Outcome(Status.TIMEOUT, wall_s=0.5, cpu_s=0.01, budget=0.5)
        return Outcome(Status.OK, wall_s=1e-3, cpu_s=1e-3, budget=0.5)

    ran = _search.search(probe, ["ab", "c"], 30, 5, tmp_path, 1024)
    assert ran
    assert set(statuses(ran)) == {Status.OK}
    assert sum(runs.values()) <= 30 + 1  # re-runs count against the budget
    assert max(runs.values()) == 2


def test_a_slow_time_is_retimed_before_it_steers(tmp_path: Path) -> None:
    # The first run of each text is slow once (a busy moment); the re-time is fast. The fast
    # one is what the search keeps, so nothing ranks first on noise.
    runs: dict[str, int] = {}

    def probe(text: str) -> Outcome:
        runs[text] = runs.get(text, 0) + 1
        cpu = 0.3 if runs[text] == 1 else 1e-3
        return Outcome(Status.OK, wall_s=cpu, cpu_s=cpu, budget=2.0)

    ran = _search.search(probe, ["ab", "c"], 30, 7, tmp_path, 1024)
    retimed = [case.text for case, _ in ran if runs[case.text] == 2]
    assert retimed  # a new best was re-timed ...
    kept = {case.text: outcome.cpu_s for case, outcome in ran}
    assert all(kept[text] == 1e-3 for text in retimed)  # ... and its fast time kept
    best = json.loads((tmp_path / _search.BEST_FILE).read_text())
    assert best[0]["score"] < 100  # microseconds per character: no 0.3 s outlier


def test_a_confirmed_hang_is_replayed_first_next_time(tmp_path: Path) -> None:
    def probe(text: str) -> Outcome:
        if "qz" * 50 in text:
            return Outcome(Status.TIMEOUT, wall_s=0.5, cpu_s=0.5, budget=0.5)
        return Outcome(Status.OK, wall_s=1e-3, cpu_s=1e-3, budget=0.5)

    ran = _search.search(probe, ["ab", "qz"], 40, 1, tmp_path, 1024)
    assert statuses(ran)[-1] is Status.TIMEOUT
    again = _search.search(probe, ["ab", "qz"], 40, 2, tmp_path, 1024)
    assert statuses(again) == [Status.TIMEOUT]
    assert again[0][0].description.startswith("replayed")


SLOW_ONCE = '''
import os


def compute_score(solution_str, ground_truth):
    """Hangs on the first long response it ever sees, then never again."""
    mark = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slowed")
    if len(solution_str) > 1000 and not os.path.exists(mark):
        open(mark, "w").close()
        while True:
            pass
    return 0.0
'''


def test_a_scorer_slow_only_once_is_not_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(once=SLOW_ONCE)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--reward-hang-check",
        "--reward-hang-deadline=0.5",
        "--reward-hang-scorer=once.py:compute_score",
        "--reward-hang-family=search",
        "--reward-hang-search=12",
        "--reward-hang-json=r.json",
    )
    assert (pytester.path / "slowed").exists()  # it did hang once, in the search
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    cases = report["scorers"][0]["cases"]
    assert all(case["status"] != "timeout" for case in cases), cases


CUBIC = f'''
import re


def compute_score(solution_str, ground_truth):
    return 1.0 if re.search(r"{PLAN}", solution_str, re.DOTALL) else 0.0
'''


@pytest.mark.slow  # a search per seed: the slow tier
@pytest.mark.parametrize("seed", [0, 1])
def test_the_check_finds_a_planted_cubic_regex_on_every_seed(
    pytester: pytest.Pytester, seed: int
) -> None:
    pytester.makepyfile(planted=CUBIC)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--reward-hang-check",
        "--reward-hang-deadline=0.5",
        "--reward-hang-scorer=planted.py:compute_score",
        "--reward-hang-family=search",
        "--reward-hang-search=10",
        f"--reward-hang-seed={seed}",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*HANG case search-*<plan>*probe *s into the search*"])


@pytest.mark.parametrize(
    "entry",
    [
        # Each reached the search from a best file restored from a CI cache: an OverflowError,
        # a ZeroDivisionError, a 3 GB text built in the pytest process.
        {"prefix": "", "units": ["a"], "suffix": "", "size": 1e400, "score": 1.0},
        {"prefix": "", "units": [], "suffix": "", "size": 100, "score": 1.0},
        {"prefix": "", "units": ["a"], "suffix": "", "size": 3_000_000_000, "score": 1.0},
        {"prefix": "", "units": [""], "suffix": "", "size": 100, "score": 1.0},
        {"prefix": 3, "units": ["a"], "suffix": "", "size": 100, "score": 1.0},
        {"prefix": "", "units": ["a"], "suffix": "", "size": 100, "score": float("inf")},
        {"prefix": "", "units": ["a"], "suffix": "", "size": 100, "score": 10**400},
        "not an entry",
    ],
)
def test_a_best_file_entry_that_is_not_one_is_passed_over(tmp_path: Path, entry: object) -> None:
    good = {"prefix": "x", "units": ["ab"], "suffix": "!", "size": 200, "score": 5.0}
    (tmp_path / _search.BEST_FILE).write_text(json.dumps([entry, good]))
    probed: list[str] = []

    def probe(text: str) -> Outcome:
        probed.append(text)
        return Outcome(Status.OK, wall_s=1e-3, cpu_s=1e-3, budget=2.0)

    _search.search(probe, ["ab"], 3, 7, tmp_path, 1024)
    assert probed[0] == "x" + "ab" * 99 + "!"  # the good entry, replayed first
    assert max(map(len, probed)) <= 1024
