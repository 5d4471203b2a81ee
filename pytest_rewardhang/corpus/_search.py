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

from pytest_rewardhang.guard._outcome import Outcome, Status

from ._cases import Case
from ._format import Formula
from ._strategies import formulas

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
    seen: dict[str, Outcome] = {}
    fixed = [math.inf]
    strategy = st.tuples(formulas(units), _sizes(max_size))

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
        # Each text runs once: formulas often expand alike, and Hypothesis replays some examples
        # and raises FlakyFailure when a replay's result differs, as a text that finished once
        # and timed out on a busy machine the second time did.
        outcome = seen.get(text)
        if outcome is None:
            outcome = seen[text] = probe(text)
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
        fixed[0] = min(fixed[0], _spent(outcome))
        target(_score(text, outcome, fixed[0]), label="cpu microseconds per char")

    best = _load_best(database)
    search_from = probe_formula
    for formula, size, _ in best:
        search_from = example((formula, size))(search_from)
    database.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(_Hang):
        search_from()
    _save_best(database, best, ran, fixed[0])
    return ran


def _sizes(max_size: int) -> st.SearchStrategy[int]:
    """The largest size half the time, halvings of it otherwise.

    A hang grows faster than its input, so the largest size is where it shows first; plain
    ``integers(64, max_size)`` leans to its lower bound and spent most examples at 64 chars.
    """
    top = max(MIN_SIZE, max_size)
    halvings = max((top // MIN_SIZE).bit_length() - 1, 1)
    return st.one_of(st.just(top), st.integers(1, halvings).map(lambda k: max(MIN_SIZE, top >> k)))


def _spent(outcome: Outcome) -> float:
    return outcome.cpu_s if math.isfinite(outcome.cpu_s) else outcome.wall_s


def _score(text: str, outcome: Outcome, fixed: float) -> float:
    """CPU microseconds per character, beyond ``fixed``, the cheapest call seen.

    Without that subtraction a call's fixed cost, divided by the length, makes the shortest
    inputs look the most promising and steers the search away from hangs.
    """
    return max(_spent(outcome) - fixed, 0.0) * 1e6 / max(len(text), 1)


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
    database: Path,
    best: list[tuple[Formula, int, float]],
    ran: list[tuple[Case, Outcome]],
    fixed: float,
) -> None:
    found = [
        (case.formula, len(case.text), _score(case.text, outcome, fixed))
        for case, outcome in ran
        if case.formula is not None and outcome.status is Status.OK
    ]
    # A formula run again this time keeps its new score: the old one may be a noisy outlier.
    kept = {(formula, size): score for formula, size, score in [*best, *found]}
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
