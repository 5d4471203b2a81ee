"""The corpus format: loading, validation messages, expansion, and every bundled case at work."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_rewardhang.corpus import _cases, _harvest, _search
from pytest_rewardhang.corpus import _format as _corpus
from pytest_rewardhang.corpus._format import CorpusError
from pytest_rewardhang.guard import Outcome, Status, run
from pytest_rewardhang.guard._spec import load_callable

ROOT = Path(__file__).resolve().parents[2]


def example(name: str) -> Callable[..., Any]:
    return load_callable(f"examples/scorers/{name}.py:compute_score", ROOT)


naive_math, fixed_math = example("naive_math"), example("fixed_math")
alarm_code, fixed_code = example("alarm_code"), example("fixed_code")

GOOD = """\
corpus_version = 1
family = "mine"
description = "a family of my own"

[[case]]
prefix = "p"
units = ["ab", "cd"]
suffix = "s"
sizes = [11, 100, "max"]
ground_truth = "42"
description = "two units"
provenance = "a test"
"""


def write(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_formula_expands_to_exact_sizes_with_units_sharing_the_room(tmp_path: Path) -> None:
    family = _corpus.load_response_file(write(tmp_path, GOOD))
    case = family.cases[0]
    assert case.formula is not None
    assert case.ground_truth == "42"
    assert case.formula.expand(11) == "pababcdcdcs"
    assert _corpus.ladder(case.sizes, 64) == [11, 64]
    assert all(len(case.formula.expand(n)) == n for n in (11, 100, 4096))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("corpus_version = 1", "corpus_version = 7"), ":1: corpus_version must be 1"),
        (GOOD.replace('family = "mine"', 'family = "Mine!"'), ":2: family 'Mine!': use lower"),
        (GOOD.replace('description = "a family of my own"\n', ""), ":1: missing required key"),
        (GOOD.replace("[[case]]", "colour = 1\n[[case]]"), ":5: unknown key 'colour'"),
        (GOOD.replace('units = ["ab", "cd"]', "units = []"), ":7: units must be a list"),
        (GOOD.replace('units = ["ab", "cd"]', 'unit = "ab"'), ":7: unknown case key 'unit'"),
        (GOOD.replace('sizes = [11, 100, "max"]', "sizes = [-1]"), ":9: sizes must be a list"),
        (GOOD.replace('provenance = "a test"', ""), ":5: missing required key 'provenance'"),
        (GOOD.replace('units = ["ab", "cd"]', 'units = ["a"]\nresponse = "x"'), ":5: a case needs"),
        (GOOD.replace('description = "two units"', "description = 3"), ":11: description must be"),
        (
            GOOD + '\n[[case]]\nunits = ["x"]\ndescription = "d"\nprovenance = "p"\n',
            ":14: only one",
        ),
        (GOOD.replace('suffix = "s"', 'suffix = "s'), ":8: not valid TOML"),
        (
            GOOD + '[[case]]\nname = "f"\nresponse_file = "nope.txt"\ndescription = "d"\n'
            'provenance = "p"\n',
            ":15: cannot read nope.txt",
        ),
        (  # a device: /dev/zero was read for ever, in the pytest process
            GOOD + '[[case]]\nname = "f"\nresponse_file = "/dev/null"\ndescription = "d"\n'
            'provenance = "p"\n',
            ":15: cannot read /dev/null: not a regular file",
        ),
        (
            GOOD.replace('units = ["ab", "cd"]', 'units = ["<U+110000>"]\ncodepoints = true'),
            ":7: <U+110000> is beyond",
        ),
    ],
)
def test_each_malformed_response_file_names_file_line_and_what(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(CorpusError) as caught:
        _corpus.load_response_file(path)
    assert str(caught.value).startswith(f"{path}:"), caught.value
    assert message in str(caught.value), caught.value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# family: x\n# attacks: a\nwhile True: pass\n", ":1: the header lacks '# expected"),
        ("# family: x\n# attacks: a\n# expected: e\n# colour: red\n", ":4: unknown header key"),
        ("# family: x\n# attacks: a\n# expected: e\n\ndef f(:\n", ":5: not valid Python"),
        ("# family: X Y\n# attacks: a\n# expected: e\n", ":1: family 'X Y'"),
    ],
)
def test_each_malformed_program_names_file_line_and_what(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text, "prog.py")
    with pytest.raises(CorpusError, match=re.escape(message)):
        _corpus.load_program_file(path)


def test_a_program_whose_file_name_is_no_case_id_is_refused(tmp_path: Path) -> None:
    # The name is the case's id: printed in failures and annotations, and the name of its
    # saved file. A newline and "::error" in it started a workflow command line in CI.
    header = "# family: x\n# attacks: a\n# expected: e\n"
    for name in ("x\x1b[2J\n::error title=forged::y.py", "abc\n.py"):  # "$" let "abc\n" by
        path = write(tmp_path, header, name)
        with pytest.raises(CorpusError) as caught:
            _corpus.load_program_file(path)
        assert str(caught.value).startswith(f"{path}:1: file name "), caught.value
        assert "use lowercase letters, digits" in str(caught.value)


def test_user_directories_shadow_families_and_duplicates_are_refused(tmp_path: Path) -> None:
    write(tmp_path, GOOD.replace('"mine"', '"repetition"'))
    corpus = _corpus.load([tmp_path])
    assert [c.description for c in corpus.responses["repetition"].cases] == ["two units"]
    assert corpus.shadowed
    assert corpus.version != _corpus.load().version
    write(tmp_path, GOOD.replace('"mine"', '"repetition"'), "again.toml")
    with pytest.raises(
        CorpusError, match=r"mine.toml:2: family 'repetition' is already defined by .*again.toml"
    ):
        _corpus.load([tmp_path])


def test_bundled_corpora_cover_the_issue() -> None:
    corpus = _cases.load_corpus()
    programs = [p for found in corpus.programs.values() for p in found]
    assert len(programs) >= 25
    assert len(corpus.responses) >= 14
    texts = "".join(case.text for case in _cases.cases_for("math", 4096, 0))
    for needle in (
        "\\boxed{",
        "\\text{",
        "\\frac{",
        "\\left(",
        "x^{",
        "$",
        "\\(",
        "\\[",
        "=",
        "Answer:",
        "9**9",
        "!",
        "\\cup",
        "<think>",
        "</think>",
        "<answer>",
        "<tool_call>",
        "<response>",
        "```",
        "\u200b",
        "\u202e",
        "\u0301",
        "\ud800",
        "\x00",
        "1,",
        "\n\n",
        "\\\\",
    ):
        assert needle in texts, needle
    ids = [case.id for case in _cases.cases_for("math", 8192, 0)]
    assert "repetition-8192" in ids
    assert "digits-line-1024" in ids


def off_main_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """As a trainer's worker thread calls a scorer: where signal.alarm guards do not run."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(fn(*args)), daemon=True)
    thread.start()
    thread.join()
    return box[0] if box else None


def quadratic_set_check(solution_str: str, ground_truth: str) -> float:
    """Compares collections element by element against a list: quadratic in their size."""
    found = [part.strip(" {}()[]\\") for part in solution_str.split(",")]
    return float(sum(1 for a in found for b in found if a == b) == len(found))


VULNERABLE: dict[str, Callable[[str, str], float]] = {"collections": quadratic_set_check}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("family", list(_cases.load_corpus().responses))
def test_each_response_family_hangs_a_vulnerable_scorer_and_not_a_safe_one(family: str) -> None:
    cases = [c for c in _cases.cases_for("math", 65536, 0) if c.family == family]
    vulnerable = VULNERABLE.get(family, naive_math)
    largest: dict[str, _cases.Case] = {}
    for case in cases:
        largest[case.formula_id or case.id] = case
    statuses = []
    for case in largest.values():
        truth = case.ground_truth or "42"
        out = run(off_main_thread, (vulnerable, case.text, truth), budget=0.4)
        statuses.append(out.status)
        if out.status is Status.TIMEOUT:
            break
    assert Status.TIMEOUT in statuses, (family, statuses)
    for case in cases:
        out = run(fixed_math, (case.text, case.ground_truth or "42"), budget=1.0)
        assert out.status is Status.OK, (case.id, out.describe())
        assert out.wall_s < 0.5, (case.id, out.describe())


PROGRAMS = _cases.cases_for("code", 0, 0)


def in_process_harness(response: str) -> Any:
    """``exec`` under ``signal.alarm``, called off the main thread as trainers do."""
    return off_main_thread(alarm_code, response, TESTS)


def subprocess_harness(response: str) -> float:
    """A child process, but stdin left open, output read after wait(), exit code trusted."""
    program = response.split("```python\n", 1)[1].rsplit("```", 1)[0] + "\n" + TESTS
    child = subprocess.Popen(
        [sys.executable, "-c", program],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    code = child.wait()
    assert child.stdout is not None
    child.stdout.read()
    return 1.0 if code == 0 else 0.0


TESTS = "assert solve() == 42"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", PROGRAMS, ids=[case.id for case in PROGRAMS])
def test_each_program_defeats_an_in_process_harness_and_not_a_guarded_one(
    case: _cases.Case,
) -> None:
    response = f"```python\n{case.text}```\n"
    outcomes = []
    for harness in (in_process_harness, subprocess_harness):
        out = run(harness, (response,), budget=0.5, memory_mb=1024)
        outcomes.append(out.describe())
        # Misbehaving: stuck, dead, leaking, rewarding a program that never passed its tests,
        # or letting it take the harness's memory.
        if out.status is not Status.OK or out.leaked or out.value != 0.0 or out.max_rss_mb > 256:
            break
    else:
        pytest.fail(f"{case.id} attacks neither naive harness: {outcomes}")
    safe = run(fixed_code, (response, TESTS, 0.3), budget=5.0)
    assert safe.status is Status.OK, safe.describe()
    assert safe.value == 0.0
    assert not safe.leaked
    assert safe.wall_s < 2.0


def test_harvest_finds_literals_patterns_and_regex_attacks(tmp_path: Path) -> None:
    scorer = tmp_path / "planted.py"
    scorer.write_text(
        "import re\n_P = re.compile(r'(?:qz)*(?:qz)*(?:qz)*X')\n"
        "def compute_score(solution_str, ground_truth):\n"
        "    re.search(r'<<mark>>(\\d+)', solution_str)\n"
        "    return float(bool(_P.search(solution_str)))\n"
    )
    vocab = _harvest.collect(
        f"{scorer}:compute_score", str(tmp_path), {"solution_str": "x", "ground_truth": "1"}
    )
    assert "<<mark>>(\\d+)" in vocab.patterns
    assert {"qz", "<<mark>>"} <= set(_harvest.units(vocab))
    attacks = [a for p in vocab.patterns for a in _harvest.attacks(p)]
    assert any(a.units == ("qz",) for a in attacks)
    text = attacks[0].expand(2048)
    import importlib.util

    spec = importlib.util.spec_from_file_location("planted", scorer)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = run(module.compute_score, (text, "1"), budget=0.5)
    assert out.status is Status.TIMEOUT


def _count_pairs(text: str) -> int:
    return sum(text[i:].startswith("ab") for i in range(len(text)))


def test_search_resumes_from_its_best_finds(tmp_path: Path) -> None:
    seen: list[str] = []

    def probe(text: str) -> Outcome:
        seen.append(text)
        return run(_count_pairs, (text,), budget=2.0)

    _search.search(probe, ["ab", "x"], 8, 1, tmp_path, 512)
    best = json.loads((tmp_path / _search.BEST_FILE).read_text())
    assert 1 <= len(best) <= _search.KEEP_BEST
    assert [e["score"] for e in best] == sorted((e["score"] for e in best), reverse=True)
    seen.clear()
    _search.search(probe, ["ab", "x"], 8, 2, tmp_path, 512)
    replayed = [
        _corpus.Formula(e["prefix"], tuple(e["units"]), e["suffix"]).expand(e["size"]) for e in best
    ]
    assert set(replayed) <= set(seen[: len(replayed)])  # the next run starts from them


def test_search_probes_each_text_once(tmp_path: Path) -> None:
    # A second run of a text always times out, as on a machine that got busy. Formulas that
    # expand alike and Hypothesis's own replays must not re-run it; a re-run that changed its
    # result ended the search with Hypothesis's FlakyFailure.
    runs: dict[str, int] = {}

    def probe(text: str) -> Outcome:
        runs[text] = runs.get(text, 0) + 1
        status = Status.OK if runs[text] == 1 else Status.TIMEOUT
        return Outcome(status, wall_s=1e-3, cpu_s=len(text) * 1e-7, budget=0.5)

    ran = _search.search(probe, ["ab", "c", "X"], 150, 11, tmp_path, 2048)
    assert max(runs.values()) == 1
    assert [outcome.status for _, outcome in ran] == [Status.OK] * len(runs)


@pytest.mark.timeout(60, method="thread")  # a read that waits is in C: no signal ends it
def test_a_response_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    # Its read waited for a writer that never came: the run hung with no word.
    os.mkfifo(tmp_path / "fifo.txt")
    path = write(
        tmp_path,
        GOOD + '[[case]]\nname = "f"\nresponse_file = "fifo.txt"\ndescription = "d"\n'
        'provenance = "p"\n',
    )
    with pytest.raises(CorpusError, match=r":15: cannot read fifo.txt: not a regular file"):
        _corpus.load_response_file(path)
