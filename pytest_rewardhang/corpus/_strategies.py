"""The Hypothesis strategies behind :mod:`pytest_rewardhang.strategies` (imports Hypothesis)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from pytest_rewardhang.corpus import _cases
from pytest_rewardhang.corpus._format import Formula

__all__ = [
    "bundled_payloads",
    "degenerate_responses",
    "expanded",
    "formulas",
    "pathological_programs",
]


#: Characters that glue units together: brackets, operators, spacing and a few letters.
_FILLER = " \n\t{}[]()<>\\$^_*+-=/.,:;!?|#abcxyz0123456789"


def _bundled_units() -> list[str]:
    corpus = _cases.load_corpus()
    units: list[str] = []
    for family in corpus.responses.values():
        for case in family.cases:
            if case.formula is not None and not case.formula.alphabet:
                units += case.formula.units
    return list(dict.fromkeys(units))


#: A literal response this short is a value to evaluate, not a degenerate response.
_PAYLOAD_CHARS = 100


def bundled_payloads() -> list[str]:
    """The short literal responses of the bundled corpus: power towers, huge numbers and the
    expressions of real incidents, which a scorer that evaluates what it extracts chokes on."""
    corpus = _cases.load_corpus()
    found = [
        case.response
        for family in corpus.responses.values()
        if "math" in family.kinds
        for case in family.cases
        if case.response is not None and 0 < len(case.response) <= _PAYLOAD_CHARS
    ]
    return sorted(dict.fromkeys(found), key=len)  # bare values first: they fit any frame


def formulas(
    units: Sequence[str],
    *,
    affixes: Sequence[str] = (),
    max_units: int = 3,
) -> st.SearchStrategy[Formula]:
    """Formulas whose repeated units (and prefix/suffix) come from ``units`` or ``affixes``."""
    pool = list(dict.fromkeys(u for u in units if u))
    if not pool:
        raise ValueError("formulas() needs at least one non-empty unit")
    pieces = st.sampled_from(pool)
    around = st.sampled_from(["", *dict.fromkeys([*affixes, *pool, "!", "\x00", " "])])
    unit = st.one_of(
        pieces,
        st.tuples(pieces, pieces).map("".join),
        # A fixed alphabet: st.text()'s first draw builds Hypothesis's unicode tables (about a
        # second), which fails a user's first @given run on a busy machine as too slow.
        st.tuples(pieces, st.text(alphabet=_FILLER, max_size=3)).map("".join),
    )
    return st.builds(
        Formula,
        prefix=around,
        units=st.lists(unit, min_size=1, max_size=max_units).map(tuple),
        suffix=around,
    )


def expanded(
    formula_strategy: st.SearchStrategy[Formula], *, min_size: int = 16, max_size: int = 8192
) -> st.SearchStrategy[str]:
    """Texts expanded from drawn formulas, at a drawn size."""
    return st.builds(lambda f, n: f.expand(n), formula_strategy, st.integers(min_size, max_size))


def degenerate_responses(*, max_size: int = 8192) -> st.SearchStrategy[str]:
    """Degenerate model responses: bundled cases, and formulas over the bundled units."""
    bundled = [
        case.text for case in _cases.cases_for("math", max_size, 0) if len(case.text) <= max_size
    ]
    return st.one_of(
        st.sampled_from(bundled),
        expanded(formulas(_bundled_units()), max_size=max_size),
    )


def pathological_programs() -> st.SearchStrategy[str]:
    """The bundled pathological programs, for ``kind=code`` harnesses. Run them under a guard."""
    return st.sampled_from([case.text for case in _cases.cases_for("code", 0, 0)])
