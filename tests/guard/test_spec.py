"""Specs of files: each loaded as a module of its own, never in another module's place."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_rewardhang.guard import Pool, Status, load_callable

#: A scorer whose imports read ``math`` as the standard library has it (fractions: ``math.gcd``).
FRACTIONS = (
    "import fractions\n\n"
    "def score(text='', truth=''):\n"
    "    return float(fractions.Fraction(1, 2))\n"
)


@pytest.fixture
def fresh_modules() -> Iterator[None]:
    """``sys.modules`` after the test as before it: what a load added or replaced is undone."""
    before = dict(sys.modules)
    yield
    for name in set(sys.modules) - set(before):
        del sys.modules[name]
    sys.modules.update(before)


@pytest.mark.usefixtures("fresh_modules")
@pytest.mark.parametrize("stem", ["math", "code", "json"])
def test_a_file_named_like_a_standard_module_does_not_take_its_place(
    tmp_path: Path, stem: str
) -> None:
    # Registered under its bare name, the docs' own `my_rewards/math.py` was the `math` of
    # every later import in the process (`fractions`: "module 'math' has no attribute 'gcd'").
    held = sys.modules.get(stem)
    (tmp_path / f"{stem}.py").write_text(FRACTIONS)
    score = load_callable(f"{tmp_path / stem}.py:score")
    assert score() == 0.5
    assert sys.modules.get(stem) is held
    assert score.__module__ != stem
    assert load_callable(f"{tmp_path / stem}.py:score") is score  # loaded once


@pytest.mark.usefixtures("fresh_modules")
def test_two_files_of_one_name_are_two_modules(tmp_path: Path) -> None:
    specs = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "reward.py").write_text(f"def score():\n    return {folder!r}\n")
        specs.append(f"{tmp_path / folder / 'reward.py'}:score")
    first, second = (load_callable(spec) for spec in specs)
    assert (first(), second()) == ("a", "b")
    # Each still its own module: the second had replaced the first, which loaded again.
    assert [load_callable(spec) for spec in specs] == [first, second]


@pytest.mark.usefixtures("fresh_modules")
def test_a_package_named_like_a_standard_module_keeps_its_relative_imports(
    tmp_path: Path,
) -> None:
    package = tmp_path / "code"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('the heavy __init__ never runs')\n")
    (package / "helpers.py").write_text("ANSWER = 42\n")
    (package / "scorer.py").write_text(
        "from .helpers import ANSWER\n\ndef score():\n    return ANSWER\n"
    )
    held = sys.modules.get("code")
    assert load_callable(f"{package / 'scorer.py'}:score")() == 42
    assert sys.modules.get("code") is held


@pytest.mark.usefixtures("no_leaks")
def test_a_pool_scores_a_file_named_like_a_standard_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In the pool's fresh interpreter the file was `math` before `fractions` imported it:
    # every item an ERROR, every reward the trainer's 0.0.
    (tmp_path / "my_rewards").mkdir()
    (tmp_path / "my_rewards" / "math.py").write_text(FRACTIONS)
    monkeypatch.chdir(tmp_path)
    with Pool("my_rewards/math.py:score", workers=1, budget=30.0) as pool:
        (out,) = pool.map([("x", "y")])
    assert out.status is Status.OK, out.error
    assert out.value == 0.5


@pytest.mark.usefixtures("no_leaks", "fresh_modules")
def test_a_file_has_one_name_whatever_its_process_loaded_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The name had depended on what was imported: the caller, having loaded another reward.py
    # first, named this one privately; the pool's fresh interpreter gave it the bare name, and
    # the value it pickled by reference came back as an object of the other file's class.
    for folder in ("p1", "p2"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "reward.py").write_text(
            "class Val:\n    def __init__(self, x):\n        self.x = x\n\n"
            "def score(x):\n    return Val(x)\n"
        )
    monkeypatch.chdir(tmp_path)
    load_callable("p1/reward.py:score")
    mine = load_callable("p2/reward.py:score")
    with Pool("p2/reward.py:score", workers=1, budget=30.0, objects=True) as pool:
        (out,) = pool.map([(7,)])
    assert out.status is Status.OK, out.error
    assert type(out.value) is mine.__globals__["Val"]


@pytest.mark.usefixtures("fresh_modules")
def test_a_package_on_a_symlinked_path_keeps_its_own_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its folder seen through a link had read as another module's: the private name sent the
    # scorer's absolute import of its own package to the package's heavy __init__.py.
    package = tmp_path / "proj" / "rewardpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the heavy __init__ ran')\n")
    (package / "helpers.py").write_text("ANSWER = 42\n")
    (package / "scorer.py").write_text(
        "from rewardpkg.helpers import ANSWER\n\ndef score():\n    return ANSWER\n"
    )
    (tmp_path / "link").symlink_to(tmp_path / "proj")
    monkeypatch.syspath_prepend(str(tmp_path / "link"))
    score = load_callable(f"{package / 'scorer.py'}:score")
    assert score() == 42
    assert score.__module__ == "rewardpkg.scorer"


@pytest.mark.usefixtures("fresh_modules")
def test_a_file_whose_name_holds_a_dot_imports_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Asked whether "reward.v2" was another module's, the import system imported "reward".
    (tmp_path / "reward.py").write_text("SIDE_EFFECT = True\n")
    (tmp_path / "reward.v2.py").write_text("def score():\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_callable(f"{tmp_path / 'reward.v2.py'}:score")() == 2
    assert "reward" not in sys.modules
