"""``--reward-hang-search N``: a Hypothesis targeted search for the slowest inputs per character.

Formulas are built from the scorer's harvested vocabulary; every example runs through the
guarded worker. Its settings are explicit: the profile Hypothesis loads when ``CI`` is set turns
the example database off, and the search must resume from what earlier CI runs found.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from ._cases import Case
from ._corpus import Formula
from ._outcome import Outcome, Status
from .strategies import formulas

FAMILY = "search"
MIN_SIZE = 64


class _Hang(Exception):
    """Ends the search: one confirmed input past the deadline is what it looks for."""


def search(
    probe: Callable[[str], Outcome],
    units: Sequence[str],
    examples: int,
    seed: int,
    database: Path,
    max_size: int,
) -> list[tuple[Case, Outcome]]:
    """Run up to ``examples`` formulas through ``probe``; stop at the first timeout."""
    ran: list[tuple[Case, Outcome]] = []
    strategy = st.tuples(formulas(units), st.integers(MIN_SIZE, max(MIN_SIZE, max_size)))

    @settings(
        max_examples=examples,
        database=DirectoryBasedExampleDatabase(str(database)),
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
        deadline=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
        derandomize=False,
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def probe_formula(drawn: tuple[Formula, int]) -> None:
        formula, size = drawn
        text = formula.expand(size)
        for case, outcome in ran:  # Hypothesis replays the failing example: run it once
            if case.text == text and outcome.status is Status.TIMEOUT:
                raise _Hang
        outcome = probe(text)
        index = len(ran) + 1
        case = Case(
            f"{FAMILY}-{index}-{len(text)}",
            FAMILY,
            text,
            f"searched formula {_show(formula)}",
            formula=formula,
            formula_id=f"{FAMILY}-{index}",
            provenance="found by --reward-hang-search",
        )
        ran.append((case, outcome))
        if outcome.status is Status.TIMEOUT:
            raise _Hang
        spent = outcome.cpu_s if math.isfinite(outcome.cpu_s) else outcome.wall_s
        target(spent * 1e6 / max(len(text), 1), label="cpu microseconds per char")

    database.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(_Hang):
        probe_formula()
    return ran


def _show(formula: Formula) -> str:
    return (
        f"{formula.prefix!r} + {' + '.join(f'{u!r}*n' for u in formula.units)} + {formula.suffix!r}"
    )
