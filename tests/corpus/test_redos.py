"""The structural regex analysis: each backtracking shape found with its degree, safe regexes
left alone, attacks that really fail in ``re``, and a harvested attack hanging a real scorer."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from pytest_rewardhang.check._checker import harvested_cases
from pytest_rewardhang.corpus import _harvest, _redos
from pytest_rewardhang.guard import Status, run

pytestmark = pytest.mark.timeout(180)

ROLL = r"^<think>.*?</think>.*?<answer>.*?</answer>$"
PLAN = r"<plan>.*</plan>.*<verdict>.*</verdict>.*"

# pattern, flags, complexity under match, complexity under search
SHAPES = [
    (r"(a+)+$", 0, "exponential", "exponential"),
    (r"(\w+\s?)*$", 0, "exponential", "exponential"),
    (r"(a|a)*$", 0, "exponential", "exponential"),
    (r"(a|aa)+$", 0, "exponential", "exponential"),
    # No string splits two ways (``b`` only follows ``a`` inside ``ab``): linear at one offset,
    # quadratic only through the search's restarts.
    (r"(a|ab)*c", 0, "linear", "n^2"),
    (r".*A.*B.*C", 0, "n^3", "n^4"),
    (r"\s+$", 0, "linear", "n^2"),
    (r"\d+\d+x", 0, "n^2", "n^3"),
    (ROLL, re.DOTALL, "n^3", "n^3"),  # anchored: a search is a match
    (PLAN, re.DOTALL, "n^3", "n^4"),
    # The trailing ``.*`` accepts whatever follows ``}``: three loops count, not four.
    (r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL, "n^3", "n^4"),
    # Safe, or only quadratic through a search's restarts.
    (r"^\d+$", 0, "linear", "linear"),
    (r"<answer>(.*?)</answer>", re.DOTALL, "linear", "n^2"),
    (r"[a-z]+@[a-z]+\.com", 0, "linear", "n^2"),
    (r"(?i)Answer\s*:\s*([^\n]+)", 0, "linear", "linear"),
    (r"#### (\-?[0-9\.\,]+)", 0, "linear", "linear"),
    (r"^[\w.+-]+@[\w-]+\.[\w.-]+$", 0, "linear", "linear"),
    # Possessive and atomic: they give nothing back, so they only end a chain.
    (r"\d++\d+x", 0, "linear", "n^2"),
    (r"\d+\d++x", 0, "n^2", "n^3"),
    (r"(?>a+)+b", 0, "linear", "n^2"),
    (r"(?:a|a)*+b", 0, "linear", "n^2"),
]


@pytest.mark.parametrize(("pattern", "flags", "match", "search"), SHAPES)
def test_each_shape_is_found_with_its_degree(
    pattern: str, flags: int, match: str, search: str
) -> None:
    analysis = _redos.analyse(pattern, flags)
    assert not analysis.skipped
    assert (analysis.complexity("match"), analysis.complexity("search")) == (match, search)
    assert analysis.vulnerable == (search != "linear")


@pytest.mark.parametrize(("pattern", "flags"), [(p, f) for p, f, _, s in SHAPES if s != "linear"])
def test_every_attack_fails_to_match_in_re(pattern: str, flags: int) -> None:
    # The suffix forces failure, so the engine tries every path: no match may start in the
    # pumped part (a search may still match the empty string at the very end).
    compiled = re.compile(pattern, flags)
    attacks = _redos.attacks(pattern, flags)
    assert attacks
    for finding in attacks:
        assert finding.verified
        for repeats in (1, 4):
            text = finding.attack(repeats)
            if finding.semantics == "match":
                assert compiled.match(text) is None, (finding, text)
                assert compiled.fullmatch(text) is None, (finding, text)
            head = len(finding.prefix) + len(finding.pump) * repeats
            hit = compiled.search(text)
            assert hit is None or hit.start() >= head, (finding, text, hit)


def test_attack_strings_use_the_regex_literals_and_class_intersections() -> None:
    (roll, *_) = _redos.attacks(ROLL, re.DOTALL)
    assert roll.prefix.startswith("<think>")
    assert "</think>" in roll.pump
    assert "<answer>" in roll.pump
    assert "</answer>" not in roll.attack(5)
    (digits, *_) = [f for f in _redos.attacks(r"[a-f\d]+[0-9x]+y") if f.semantics == "match"]
    assert digits.pump
    assert all(c in "0123456789" for c in digits.pump)
    assert not _redos.attacks(r"^\d+$")
    assert _redos.analyse("(unclosed").skipped.startswith("unparsable")


def test_the_roll_attack_hangs_re_and_a_safe_regex_does_not() -> None:
    (roll, *_) = _redos.attacks(ROLL, re.DOTALL)
    text = roll.attack(32768 // len(roll.pump))
    out = run(re.match, (ROLL, text, re.DOTALL), budget=1.0)
    assert out.status is Status.TIMEOUT, out.describe()
    safe = run(re.match, (r"^\d+$", "1" * 32768 + "a"), budget=1.0)
    assert safe.status is Status.OK, safe.describe()


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_harvested_attack_hangs_a_scorer_with_a_cubic_format_regex(tmp_path: Path) -> None:
    scorer = tmp_path / "planner.py"
    scorer.write_text(
        "import re\n"
        "FORMAT = re.compile(r'<plan>.*</plan>.*<verdict>.*</verdict>.*', re.DOTALL)\n"
        "def compute_score(solution_str, ground_truth):\n"
        "    if not FORMAT.search(solution_str):\n"
        "        return 0.0\n"
        "    return float(ground_truth in solution_str)\n"
    )
    example = {"solution_str": "<plan>p</plan> <verdict>1</verdict>", "ground_truth": "1"}
    vocab = _harvest.collect(f"{scorer}:compute_score", str(tmp_path), example)
    assert vocab.patterns[0] == "(?s)" + PLAN  # the worst regex first, with its flags
    cases = harvested_cases(vocab, 65536, _harvest.units(vocab))
    regex_cases = [case for case in cases if case.id.startswith("harvested-regex")]
    assert regex_cases
    compute_score = _load(scorer).compute_score
    # As the check does: smallest first, the first case past the deadline is the hang.
    for case in regex_cases:
        out = run(compute_score, (case.text, "1"), budget=1.0)
        if out.status is Status.TIMEOUT:
            break
    else:
        pytest.fail("no harvested regex attack hangs the cubic format regex")
    assert len(case.text) <= 65536


def test_source_regexes_the_example_never_reached_are_harvested(tmp_path: Path) -> None:
    scorer = tmp_path / "branchy.py"
    scorer.write_text(
        "import re\n"
        "def compute_score(solution_str, ground_truth):\n"
        "    if solution_str.startswith('legacy'):\n"
        "        return float(bool(re.match(r'^(\\w+\\s?)*$', solution_str, re.I | re.M)))\n"
        "    return 0.0\n"
    )
    vocab = _harvest.collect(
        f"{scorer}:compute_score", str(tmp_path), {"solution_str": "x", "ground_truth": "1"}
    )
    assert "(?im)^(\\w+\\s?)*$" in vocab.patterns
    (attack, *_) = _harvest.attacks("(?im)^(\\w+\\s?)*$")
    out = run(_load(scorer).compute_score, ("legacy " + attack.expand(1024), "1"), budget=1.0)
    assert out.status is Status.TIMEOUT, out.describe()
