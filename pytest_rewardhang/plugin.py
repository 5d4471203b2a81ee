"""The pytest entry point. Inert for now: the hang check itself arrives with the plugin issue."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("reward-hang", "reward function hang checks (pytest-rewardhang)")
