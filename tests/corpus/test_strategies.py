"""The public Hypothesis strategies, used as a user would in their own ``@given`` tests."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_rewardhang.corpus._strategies import _FILLER
from pytest_rewardhang.guard import Status, run
from pytest_rewardhang.strategies import (
    degenerate_responses,
    expanded,
    formulas,
    pathological_programs,
)

pytestmark = pytest.mark.timeout(120)
FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def linear_scorer(solution_str: str, ground_truth: str) -> float:
    start = solution_str.rfind("\\boxed{")
    return float(start >= 0 and solution_str[start + 7 :].startswith(ground_truth))


@FEW
@given(degenerate_responses(max_size=8192))
def test_a_linear_scorer_survives_every_degenerate_response(response: str) -> None:
    assert isinstance(response, str)
    assert len(response) <= 8192
    out = run(linear_scorer, (response, "42"), budget=2.0)
    assert out.status is Status.OK, out.describe()


def exec_harness(program: str) -> None:
    exec(program, {"__name__": "__candidate__"})


@settings(max_examples=8, deadline=None)
@given(pathological_programs())
def test_the_guard_bounds_every_pathological_program(program: str) -> None:
    start = time.perf_counter()
    out = run(exec_harness, (program,), budget=0.5, memory_mb=256)
    # A hang must end; how soon is the lateness benchmark's to say. 0.1 s of slack failed on a
    # loaded machine (0.61 s beside a CPU burner and a second test run).
    assert time.perf_counter() - start < 0.5 + 5.0, (out.describe(), program)
    assert program.startswith("# family: ")


UNITS, AFFIXES = ["(a+)+", "\\frac{", "}"], ["\\boxed{"]


@FEW
@given(expanded(formulas(UNITS, affixes=AFFIXES), max_size=2048))
def test_formulas_expand_from_the_given_units(text: str) -> None:
    assert 16 <= len(text) <= 2048
    # At the smallest sizes a unit's share may be one character of it; the glue a unit may
    # carry is a few characters of _FILLER; "!", NUL and space may stand around the body.
    assert set(text) <= set("".join(UNITS + AFFIXES) + _FILLER + "!\x00 ")
    if len(text) >= 200:  # every share then repeats its unit whole
        assert any(unit in text for unit in UNITS)


def test_formulas_need_a_unit() -> None:
    with pytest.raises(ValueError, match="at least one non-empty unit"):
        formulas([""])
    assert isinstance(formulas(["x"]), st.SearchStrategy)
