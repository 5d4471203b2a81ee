"""Fixtures of the check's end-to-end tests; scorers and options are in ``tests/_projects.py``."""

from __future__ import annotations

import pytest

from tests._projects import SCORERS


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory with ``scorers.py`` (all of ``SCORERS``) and an empty ini."""
    pytester.makepyfile(scorers=SCORERS)
    pytester.makeini("[pytest]\n")
    return pytester
