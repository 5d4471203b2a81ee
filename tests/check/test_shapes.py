"""Scorers of the shapes real reward code has, end to end: the call style each gets, batch
functions, rubric objects, modules that need a step or start threads at import, a hang that
needs a ground truth of another shape, and a family stopped at its confirmed hang."""

from __future__ import annotations

from typing import Any

import pytest

from tests._projects import fast, reported

pytestmark = pytest.mark.timeout(180)

SHAPES = '''\
import re
import time
from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(max_workers=2)
POOL.submit(lambda: None).result()  # warmed at import: its threads exist before any fork

TOWER = re.compile(r"(\\d+)\\^\\{?(\\d+)\\^\\{?(\\d+)")


def _evaluate(text):
    """Stands in for sympy evaluating a power tower: its work grows as the tower's value."""
    match = TOWER.search(text)
    if match is None:
        return text.strip()
    _, height, top = (int(group) for group in match.groups())
    steps = 0
    for _ in range(height**top):
        steps += 1
    return str(steps)


def tower_truth(solution_str, ground_truth):
    if ground_truth.strip().lstrip("-").isdigit():  # an integer answer: a string compare
        return float(solution_str.strip().endswith(ground_truth))
    return float(_evaluate(solution_str) == _evaluate(ground_truth))


def always_hangs(solution_str, ground_truth):
    if "6 * 7" not in solution_str:  # every input but its own example
        time.sleep(3600)
    return 0.0


def odd_names(text_in, gold):
    return float(gold in text_in)


class Rubric:
    def __init__(self, funcs):
        self.funcs = funcs
        self.weights = [1.0] * len(funcs)


def correct(completion, answer, **kwargs):
    return 1.0


RUBRIC = Rubric([correct])


def verl_batch(data_sources, solution_strs, ground_truths, extra_infos=None):
    assert len(solution_strs) == len(ground_truths) == len(data_sources)
    return [float(s.endswith(g)) for s, g in zip(solution_strs, ground_truths)]


def plain_batch(responses, references):
    if any(len(r) > 40 and not isinstance(g, str) for r, g in zip(responses, references)):
        raise TypeError("lists of strings expected")
    return [float(r.endswith(g)) for r, g in zip(responses, references)]


_TABLE = None


def setup():
    global _TABLE
    _TABLE = {"42": 1.0}


def needs_setup(solution_str, ground_truth):
    return _TABLE.get(ground_truth, 0.0)


def via_executor(solution_str, ground_truth):
    return POOL.submit(lambda: float(solution_str.endswith(ground_truth))).result()
'''

FAST = fast(deadline=1, max_chars=4096, family="power-tower")


@pytest.fixture
def shapes(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(shapes=SHAPES)
    pytester.makeini("[pytest]\n")
    return pytester


def run(
    pytester: pytest.Pytester, *names: str
) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    specs = [f"--reward-hang-scorer=shapes.py:{name}" for name in names]
    result = pytester.runpytest_subprocess(*FAST, *specs, "--reward-hang-json=r.json")
    return result, reported(pytester)


@pytest.mark.slow  # 15 s of real check runs, one per shape: the slow tier
def test_each_shape_is_called_or_refused_in_one_line(shapes: pytest.Pytester) -> None:
    names = ("verl_batch", "plain_batch", "via_executor", "odd_names", "RUBRIC", "needs_setup")
    result, by_id = run(shapes, *names)
    out = result.stdout.str()
    assert "Traceback" not in out
    assert "INTERNALERROR" not in out
    result.assert_outcomes(passed=3, failed=3)
    # Batch functions get lists of one; an executor started at import works in every worker.
    assert by_id["shapes.verl_batch"]["style"] == "batch"
    assert by_id["shapes.plain_batch"]["style"] == "batch"
    for name in ("verl_batch", "plain_batch", "via_executor"):
        assert by_id[f"shapes.{name}"]["status"] == "ok", by_id[f"shapes.{name}"]
        assert len(by_id[f"shapes.{name}"]["cases"]) >= 10
    # The rest fail, each with one line saying what to add.
    result.stdout.fnmatch_lines(
        [
            "shapes.odd_names (shapes.py:odd_names): cannot tell which parameter of "
            "('text_in', 'gold') receives the response; name it with response=ARGNAME*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "shapes.RUBRIC (shapes.py:RUBRIC): 'shapes.py:RUBRIC' is a rubric (Rubric of "
            "correct), not a function: register each reward function as a scorer, e.g. "
            "shapes.py:correct style=verifiers",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "shapes.needs_setup (shapes.py:needs_setup): the scorer fails on its own example*"
            "AttributeError*; if it needs a step before use*example=FILE",
        ]
    )
    for name in ("odd_names", "RUBRIC", "needs_setup"):
        assert by_id[f"shapes.{name}"]["status"] == "problem"
    # The style is in the table too, for every scorer ("-" where none could be chosen).
    result.stdout.fnmatch_lines(["scorer*style*cases*skipped*verdict*"])
    result.stdout.re_match_lines([r"shapes\.verl_batch +batch +\d+ +0 .* ok"])
    result.stdout.re_match_lines([r"shapes\.needs_setup +single +0 .* problem"])
    result.stdout.re_match_lines([r"shapes\.RUBRIC +- +0 .* problem"])


def test_a_hang_behind_a_ground_truth_of_another_shape_is_found_and_named(
    shapes: pytest.Pytester,
) -> None:
    """The corpus's power towers come with an integer answer, which this scorer compares as
    text; only a fraction, a decimal, an expression... sends it to its slow evaluation."""
    result, by_id = run(shapes, "tower_truth")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*hangs: case power-tower-*-truth1-given (* chars) ran past the 1 s deadline",
            "HANG case power-tower-*-truth1-given (*a ground truth of a fraction the response "
            "gives)*",
            "  with ground truth '\\\\frac{3}{4}'",
            "  hangs: a fresh worker still ran it at 2 s (2x the deadline)",
            "*shapes.py:* in _evaluate",
        ]
    )
    entry = by_id["shapes.tower_truth"]
    assert entry["status"] == "hang"
    assert entry["style"] == "single"
    hang = next(case for case in entry["cases"] if case["status"] == "timeout")
    assert hang["ground_truth"] == "\\frac{3}{4}"
    # Every case before it, the integer truths among them, finished.
    before = [case for case in entry["cases"] if case["context"] == "main"][:-1]
    assert before
    assert all(case["status"] == "ok" for case in before)
    assert any(case["ground_truth"] == "42" for case in before)


@pytest.mark.slow  # a check run that waits out a hang and its confirmation: the slow tier
def test_a_confirmed_hang_stops_its_family_and_says_how_many_cases_it_skipped(
    shapes: pytest.Pytester,
) -> None:
    result, by_id = run(shapes, "always_hangs")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "hangs: case power-tower-* ran past the 1 s deadline",
            "stopped after the confirmed hang: 24 case(s) skipped*",
        ]
    )
    result.stdout.re_match_lines([r"shapes\.always_hangs +single +1 +24 .* hang"])
    entry = by_id["shapes.always_hangs"]
    # The family's 3 other cases, its 12 ground-truth variants, its 3 long references (alone,
    # the pair, the pair shifted) and its response in the example's frame under 6 ground truths.
    assert entry["skipped"] == 24
    # The hang and its one confirmation, not a deadline per case.
    assert len(entry["cases"]) == 1
    assert entry["cases"][0]["fresh_status"] == "timeout"
