"""The steered search: what the worker measures of a call, and mutation toward new code and cost.

The scorers are real and run under the real guard (a forked child per call); the measurement
is the one the check's workers run (``_measure.measured``), on this interpreter and, where they
are installed, on 3.12 and 3.13 (``sys.monitoring`` there, ``sys.settrace`` on 3.11).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.corpus import _format, _measure, _search, _steer
from pytest_rewardhang.guard import Outcome, Status, run
from tests._projects import fast, reported

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]
RESPONSE = "6 * 7 = 42, so the answer is 42."
#: The example in the scorer's frame: past its marker gate, with an integer ground truth.
SEEDS = [(RESPONSE, "42"), (f"<think>\n{RESPONSE}\n</think>\n{RESPONSE}", "42")]
TRUTHS = ["\\frac{3}{4}", "0.75", "Paris"]


def gated(solution_str: str, ground_truth: str, most: int | None = None) -> float:
    """Two gates before a loop as long as the square of the answer's first number: a marker,
    then a ground truth that is no integer (an integer one is compared as text). ``most``
    bounds the loop."""
    if "</think>" not in solution_str:
        return 0.0
    answer = solution_str.split("</think>")[-1]
    if ground_truth.strip().isdigit():
        return float(answer.strip() == ground_truth.strip())
    digits = re.findall(r"\d+", answer)
    steps = 0
    for _ in range(min(int(digits[0][:12]) ** 2, most or 10**30) if digits else 0):
        steps += 1
    return float(steps == 0)


def measured_gated(text: str, truth: str, measure: bool, most: int | None = None) -> dict[str, Any]:
    if not measure:
        return {"score": gated(text, truth, most)}
    value, ran = _measure.measured(lambda: gated(text, truth, most))
    return {"score": value, "measured": ran}


def steer(text: str, truth: str | None, measure: bool) -> Outcome:
    return run(measured_gated, (text, truth or "42", measure), budget=0.5)


def probe(text: str) -> Outcome:
    return steer(text, None, False)


def searched(folder: Path, seed: int, *, steered: bool) -> list[tuple[Any, Outcome]]:
    return _search.search(
        probe,
        ["</think>", "answer"],
        # Ten seeds of ten find it within this budget, most in under half of it: a busy machine
        # that re-times a call or two more does not take it past.
        120,
        seed,
        folder,
        2048,
        literals=["</think>"],
        steer=steer if steered else None,
        seeds=SEEDS,
        truths=TRUTHS,
    )


def test_the_steered_search_passes_two_gates_the_unsteered_one_does_not(tmp_path: Path) -> None:
    ran = searched(tmp_path / "steered", 2, steered=True)
    case, outcome = ran[-1]
    assert outcome.status is Status.TIMEOUT, [c.description for c, _ in ran[-5:]]
    assert case.description.startswith("steered by line events + CPU")
    assert case.ground_truth is not None
    assert not case.ground_truth.isdigit()
    assert "</think>" in case.text
    # The worst input is a corpus case that loads, with its cost curve.
    worst = tmp_path / "steered" / _search.WORST_FILE
    family = _format.load_response_file(worst)
    (saved,) = family.cases
    assert saved.ground_truth == case.ground_truth
    assert "cost in line events + CPU, as it was found, before it: " in worst.read_text()
    # The same budget without steering never changes the ground truth: the loop is not reached.
    plain = searched(tmp_path / "plain", 2, steered=False)
    assert all(outcome.status is Status.OK for _, outcome in plain)
    assert len(plain) >= len(ran)


def steered_inputs(seed: int) -> list[tuple[str, str | None]]:
    """A whole steered run's inputs, in a process of its own: what a worker has seen is kept
    per process, and decides which inputs are new."""

    def measure(given: _steer.Input) -> _steer.Reading | None:
        # Bounded: the same inputs must finish, however busy the machine.
        arguments = (given.text, given.truth or "42", True, 10_000)
        outcome = run(measured_gated, arguments, budget=30)
        return _steer.reading(outcome.value) if outcome.status is Status.OK else None

    steered = _steer.Steered(measure, ["</think>"], ["10^{10}"], TRUTHS, seed, 512)
    budget = iter(range(25, 0, -1))
    steered.run(
        [_steer.Input(text, truth, "a seed") for text, truth in SEEDS], lambda: next(budget, 0)
    )
    return [(entry.input.text, entry.input.truth) for entry in steered.queue]


def test_a_steered_run_is_the_same_for_its_seed(tmp_path: Path) -> None:
    runs = [run(steered_inputs, (seed,), budget=60) for seed in (3, 3, 4)]
    assert all(r.status is Status.OK for r in runs), runs
    first, again, other = (r.value for r in runs)
    assert first == again
    assert first != other
    assert len(first) > len(SEEDS)  # children reached something new


MEASURE_LOOPS = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from pytest_rewardhang.corpus import _measure

    def loop(n):
        total = 0
        for i in range(n):
            total += i
        if n > 50:
            total += 1
        return total

    out = []
    for n in (10, 10, 1000, 100):
        value, ran = _measure.measured(lambda: loop(n))
        out.append([value, ran["signal"], ran["cost"], len(ran["new"])])
    print(json.dumps(out))
    """
)


def interpreters() -> list[str]:
    found = [sys.executable]
    for minor in (12, 13):
        if sys.version_info[:2] != (3, minor) and (path := shutil.which(f"python3.{minor}")):
            found.append(path)
    return found


@pytest.mark.parametrize("python", interpreters())
def test_line_events_measure_cost_and_new_code(python: str, tmp_path: Path) -> None:
    # A file of its own: code run from ``-c`` ("<string>") is nobody's scorer.
    script = tmp_path / "loops.py"
    script.write_text(MEASURE_LOOPS)
    done = subprocess.run(
        [python, str(script), str(REPO)], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0 and python != sys.executable:
        pytest.skip(f"{python} does not run here: {done.stderr.strip()[:80]}")
    assert done.returncode == 0, done.stderr

    (small, again, large, middle) = json.loads(done.stdout)
    assert small[0] == sum(range(10))
    assert {small[1], large[1]} <= {_measure.LINES, _measure.INSTRUCTIONS}
    if small[1] == _measure.LINES:
        # Two line events an iteration: the cost grows with the work, not with the clock.
        assert 2 * 10 <= small[2] < 2 * 10 + 10
        assert 2 * 1000 <= large[2] < 2 * 1000 + 10
    assert small[3] > 0  # the first call reaches everything for the first time
    assert again[3] == 0  # the same call again reaches nothing new
    assert large[3] > 0  # a loop run far more often, and the branch past 50
    assert middle[3] > 0  # the loop run a number of times of a power of two not met before


GATED = """
import re


def compute_score(solution_str, ground_truth):
    if "</think>" not in solution_str:
        return 0.0
    answer = solution_str.split("</think>")[-1]
    if ground_truth.strip().isdigit():
        return float(answer.strip() == ground_truth.strip())
    digits = re.findall(r"\\d+", answer)
    steps = 0
    for _ in range(int(digits[0][:12]) ** 2 if digits else 0):
        steps += 1
    return float(steps == 0)
"""


@pytest.mark.slow  # two real check runs with a search each: the slow tier
@pytest.mark.timeout(300)
def test_the_check_steers_its_search_past_two_gates_and_says_by_what(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(gated=GATED)
    pytester.makeini("[pytest]\n")
    args = [
        "-p",
        "no:cacheprovider",
        "--reward-hang-check",
        "--reward-hang-deadline=0.5",
        "--reward-hang-confirm=2",
        "--reward-hang-scorer=gated.py:compute_score",
        "--reward-hang-family=search",
        "--reward-hang-search=80",
        "--reward-hang-seed=0",
    ]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*HANG case search-*steered by line events + CPU (*", "*with ground truth*"]
    )
    worst = pytester.path / ".reward-hang" / "search" / "gated.compute_score" / "worst.toml"
    assert "ran past its deadline" in worst.read_text()
    result.stdout.fnmatch_lines(["gated.compute_score: its search was steered by line events*"])
    plain = pytester.runpytest_subprocess(*args, "--reward-hang-steer=off")
    plain.assert_outcomes(passed=1)
    plain.stdout.fnmatch_lines(
        ["gated.compute_score: its search was not steered (--reward-hang-steer off)"]
    )


def test_a_search_that_finds_nothing_still_says_what_steered_it(pytester: pytest.Pytester) -> None:
    # The signal was said only in the cases the search reported: a clean run's report, the
    # one that says the scorer is fine, never said whether the search could see anything.
    pytester.makepyfile(clean="def compute_score(response, ground_truth):\n    return 0.0\n")
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        *fast(deadline=2, max_chars=131072, family="search"),
        "--reward-hang-scorer=clean.py:compute_score",
        "--reward-hang-search=40",
        "--reward-hang-json=r.json",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["clean.compute_score: its search was steered by line events*"])
    entry = reported(pytester)["clean.compute_score"]
    assert entry["search_signal"].startswith("steered by line events")


def test_a_retimed_call_keeps_the_lines_its_first_run_met_first() -> None:
    # A worker reports a line once: the second run of the same input reports nothing new.
    first = Outcome(Status.OK, value={"measured": {"signal": "s", "cost": 9.0, "new": [1, 2]}})
    again = Outcome(Status.OK, value={"measured": {"signal": "s", "cost": 8.0, "new": []}})
    kept = _steer.reading(_steer.with_news_of(again, first).value)
    assert kept == _steer.Reading("s", 8.0, 0.0, frozenset({1, 2}))
    slow = _steer.reading(_steer.too_slow(Outcome(Status.OK, value={"score": 0.0})).value)
    assert slow is not None
    assert slow.too_slow
    for junk in (None, {"measured": 3}, {"measured": {"cost": "x"}}, {"score": 1.0}):
        assert _steer.reading(junk) is None


def same_word_pairs(text: str, truth: str) -> float:
    words = text.split()
    return float(sum(a == b for a in words for b in words))


def measured_pairs(text: str, truth: str, measure: bool) -> dict[str, Any]:
    value, ran = _measure.measured(lambda: same_word_pairs(text, truth))
    return {"score": value, "measured": ran} if measure else {"score": value}


def test_the_worst_inputs_cost_curve_shows_how_its_cost_grows(tmp_path: Path) -> None:
    def steer(text: str, truth: str | None, measure: bool) -> Outcome:
        return run(measured_pairs, (text, truth or "42", measure), budget=10)

    search = _search._Run(lambda text: steer(text, None, False), 10, 4096, 4096, steer)
    formula = _format.Formula("<think>", ("go ",), "</think>")
    worst = _steer.Input(formula.expand(512), None, "repeated", formula)
    read = search.measure_input(worst)
    assert read is not None
    steered = _steer.Steered(search.measure_input, [], [], [], 0, 4096)
    steered.queue.append(_steer.Entry(worst, read))
    _search._worst_at_sizes(search, steered)
    (quarter, a), (half, b), (whole, c) = steered.sizes
    assert (quarter, half, whole) == (128, 256, 512)
    # Every pair of words: four times the cost at twice the size (in line events, all counted
    # below their cap, or in instructions).
    assert 3 < b / a < 5
    assert 3 < c / b < 5


def test_the_code_of_a_scorers_own_package_counts_wherever_it_is_installed() -> None:
    # The scorers people train with are installed (verl's, TRL's): site-packages was skipped
    # whole, so their lines were never counted and the search had nothing to steer by. A
    # function of the standard library stands in for one: its module's lines count as its own.
    text = "degenerate " * 400
    _, ran = _measure.measured(lambda: textwrap.fill(text, width=7), textwrap.fill)
    if ran["signal"] == _measure.LINES:
        assert ran["cost"] > 100, ran
    assert ran["new"], ran
