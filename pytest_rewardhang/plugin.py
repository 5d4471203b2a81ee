"""The pytest entry point: inert unless ``--reward-hang-check`` is given.

Without the flag it registers the ``reward_hang`` marker and its options and imports nothing
else: the checking machinery is imported only when it is asked for.
"""

from __future__ import annotations

import pytest

from .check import _options


def pytest_addoption(parser: pytest.Parser) -> None:
    _options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from .check import _hookspecs

    pluginmanager.add_hookspecs(_hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "reward_hang: a reward-function hang check added by --reward-hang-check"
    )
    if config.getoption("--reward-hang-check"):
        from .check._session import RewardHangSession

        settings = _options.load(config)
        config.pluginmanager.register(RewardHangSession(config, settings), "rewardhang-session")


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    # Scorers configured, the flag forgotten: "no tests ran" alone would leave the user guessing.
    if config.getoption("--reward-hang-check") or exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED:
        return
    registered = len(config.getini("reward_hang_scorers")) + len(
        config.getoption("--reward-hang-scorer")
    )
    if registered:
        terminalreporter.write_line(
            f"reward-hang: {registered} scorer(s) registered, but the check is off; "
            "add --reward-hang-check to run it (pytest --reward-hang-check -m reward_hang)",
            yellow=True,
        )
