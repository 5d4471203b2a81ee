"""Hypothesis strategies for your own ``@given`` tests of reward functions.

>>> from hypothesis import given
>>> from pytest_rewardhang.strategies import degenerate_responses
>>> @given(degenerate_responses(max_size=8192))
... def test_score_is_fast(response): ...

``degenerate_responses()`` draws from the bundled response families and from formulas over
their units; ``pathological_programs()`` from the bundled programs; ``formulas(units)`` builds
``prefix + units * n + suffix`` formulas over any vocabulary (the plugin's search uses it with
the vocabulary harvested from a scorer). Importing this module imports Hypothesis.
"""

from .corpus._strategies import (
    degenerate_responses,
    expanded,
    formulas,
    pathological_programs,
)

__all__ = ["degenerate_responses", "expanded", "formulas", "pathological_programs"]

# Public objects name their public home (reprs, docs), not the private module.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
