"""Hooks the plugin calls; implement them in a conftest.py or a plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ._scorers import ScorerSpec


@pytest.hookspec
def pytest_reward_hang_scorers(config: pytest.Config) -> list[str | ScorerSpec] | None:
    """Scorers to check, for frameworks with dispatch tables.

    Return ``"SPEC [key=value ...]"`` lines (as in the ``reward_hang_scorers`` ini) or
    :class:`pytest_rewardhang.ScorerSpec` objects. Every implementation's result is used.
    """
