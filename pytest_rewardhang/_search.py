"""``--reward-hang-search N``: a Hypothesis targeted search for the slowest inputs per character.

Formulas are built from the scorer's harvested vocabulary; every example runs through the
guarded worker. Its settings are explicit: the profile Hypothesis loads when ``CI`` is set turns
the example database off, and the search must resume from what earlier CI runs found.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import HealthCheck, Phase, example, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from ._cases import Case
from ._corpus import Formula
from ._outcome import Outcome, Status
from .strategies import formulas

FAMILY = "search"
MIN_SIZE = 64
#: The slowest examples so far, per scorer: replayed first by the next run, so the search
#: resumes from its best finds (Hypothesis's own database keeps only failing examples).
BEST_FILE = "best.json"
KEEP_BEST = 8


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
        target(_score(text, outcome), label="cpu microseconds per char")

    best = _load_best(database)
    search_from = probe_formula
    for formula, size, _ in best:
        search_from = example((formula, size))(search_from)
    database.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(_Hang):
        search_from()
    _save_best(database, best, ran)
    return ran


def _score(text: str, outcome: Outcome) -> float:
    spent = outcome.cpu_s if math.isfinite(outcome.cpu_s) else outcome.wall_s
    return spent * 1e6 / max(len(text), 1)


def _load_best(database: Path) -> list[tuple[Formula, int, float]]:
    try:
        entries = json.loads((database / BEST_FILE).read_text(encoding="utf-8"))
        return [
            (
                Formula(e["prefix"], tuple(e["units"]), e["suffix"]),
                int(e["size"]),
                float(e["score"]),
            )
            for e in entries
        ]
    except (OSError, ValueError, TypeError, KeyError):  # none yet, or not ours: start afresh
        return []


def _save_best(
    database: Path, best: list[tuple[Formula, int, float]], ran: list[tuple[Case, Outcome]]
) -> None:
    found = [
        (case.formula, len(case.text), _score(case.text, outcome))
        for case, outcome in ran
        if case.formula is not None and outcome.status is Status.OK
    ]
    kept: dict[tuple[Formula, int], float] = {}
    for formula, size, score in [*best, *found]:
        kept[(formula, size)] = max(score, kept.get((formula, size), 0.0))
    ranked = sorted(kept.items(), key=lambda item: -item[1])[:KEEP_BEST]
    entries = [
        {"prefix": f.prefix, "units": list(f.units), "suffix": f.suffix, "size": n, "score": s}
        for (f, n), s in ranked
    ]
    with contextlib.suppress(OSError):
        (database / BEST_FILE).write_text(json.dumps(entries, indent=1), encoding="utf-8")


def _show(formula: Formula) -> str:
    return (
        f"{formula.prefix!r} + {' + '.join(f'{u!r}*n' for u in formula.units)} + {formula.suffix!r}"
    )
