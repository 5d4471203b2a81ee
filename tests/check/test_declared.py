"""Where a scorer's declaration is found in a config file: the lines a person would point at."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_rewardhang.check import _declared

KEY = "reward_hang_scorers"


def lines_of(tmp_path: Path, name: str, text: str, values: list[str]) -> list[int | None]:
    path = tmp_path / name
    path.write_text(text)
    return [at and at[1] for at in _declared.in_config(path, KEY, values)]


@pytest.mark.parametrize(
    ("name", "text", "values", "expected"),
    [
        (  # another table's key first, an array of tables, a comment after the header
            "pyproject.toml",
            '[tool.other]\nreward_hang_scorers = ["a.py:f"]\n[[tool.more]]\n'
            'reward_hang_scorers = ["a.py:f"]\n[tool.pytest.ini_options]  # ours\n'
            'reward_hang_scorers = ["a.py:f_fast", "a.py:f",  # "c.py:g"\n'
            "    'b.py:g deadline=5',\n]\n",
            ["a.py:f_fast", "a.py:f", "b.py:g deadline=5", "c.py:g"],
            [6, 6, 7, None],
        ),
        (  # a colon after the key inside a string of pytest's table: not the key
            "pyproject.toml",
            '[tool.pytest.ini_options]\naddopts = """\nreward_hang_scorers: x\n"""\n',
            ["x"],
            [None],
        ),
        (  # an indented key in another section, a commented-out value, a blank line
            "tox.ini",
            "[testenv]\nsetenv =\n    reward_hang_scorers = x\n[pytest]\n"
            "reward_hang_scorers = a.py:f\n    # nowhere.py:g\n    nowhere.py:g\n\n    a.py:f\n",
            ["a.py:f", "nowhere.py:g", "a.py:f"],
            [5, 7, 9],
        ),
        (  # a section pytest does not read in this file first; a comment at the margin
            "setup.cfg",
            "[pytest]\nreward_hang_scorers = b.py:g\n[tool:pytest]\nreward_hang_scorers:\n"
            "  a.py:f\n# a.py:g\n  a.py:h\n",
            ["a.py:f", "a.py:h"],
            [5, 7],
        ),
        (  # an indented bracket continues the value; a byte-order mark
            "tox.ini",
            "\ufeff[tool:pytest]\nreward_hang_scorers = b.py:g\n[pytest]\nreward_hang_scorers =\n"
            "    [x]\n    a.py:f\n",
            ["[x]", "a.py:f"],
            [5, 6],
        ),
        (
            "pyproject.toml",
            '[pytest]\nreward_hang_scorers = ["b.py:g"]\n[tool.pytest]\n'
            'reward_hang_scorers = ["a.py:f"]\n',
            ["a.py:f"],
            [4],
        ),
        (
            "pytest.toml",
            '[tool.pytest]\nreward_hang_scorers = ["b.py:g"]\n[pytest]\n'
            'reward_hang_scorers = [\n  "a.py:f",\n]\n',
            ["a.py:f"],
            [5],
        ),
        ("pyproject.toml", '[tool.pytest.ini_options]\nreward_hang_scorers = ["a', ["a"], [2]),
    ],
)
def test_each_value_is_found_on_its_own_line_in_pytests_section(
    tmp_path: Path, name: str, text: str, values: list[str], expected: list[int | None]
) -> None:
    assert lines_of(tmp_path, name, text, values) == expected


def test_a_file_that_is_not_text_gives_no_line(tmp_path: Path) -> None:
    assert lines_of(tmp_path, "tox.ini", "", ["a.py:f"]) == [None]
    (tmp_path / "pytest.ini").write_bytes(b"[pytest]\nreward_hang_scorers = \xff\n")
    assert _declared.in_config(tmp_path / "pytest.ini", KEY, ["a.py:f"]) == [None]
