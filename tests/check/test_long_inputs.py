"""Inputs no family made: a long reference, and a response and a reference both long. A text
metric used as a reward (ROUGE-L, TER) costs as the response times the reference; every ground
truth a case carried was a few characters, so that cost never showed."""

from __future__ import annotations

import pytest

from pytest_rewardhang.corpus import _cases
from tests._projects import fast, reported

pytestmark = pytest.mark.timeout(180)

METRIC = '''\
def lcs_f1(response, reference):
    """ROUGE-L's shape, over characters: a longest common subsequence by dynamic programming."""
    previous = [0] * (len(reference) + 1)
    for a in response:
        current = [0]
        for j, b in enumerate(reference):
            current.append(previous[j] + 1 if a == b else max(previous[j + 1], current[j]))
        previous = current
    common = previous[-1]
    if not common:
        return 0.0
    precision, recall = common / len(response), common / len(reference)
    return 2 * precision * recall / (precision + recall)
'''


def test_a_metric_quadratic_in_the_reference_is_found_on_a_long_reference(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(metric=METRIC)
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        *fast(deadline=1, max_chars=4096, family="repetition"),
        "--reward-hang-scorer=metric.py:lcs_f1 kind=text",
        "--reward-hang-contexts=main",
        "--reward-hang-json=r.json",
    )
    entry = reported(pytester)["metric.lcs_f1"]
    # A hang where the machine is slow, slow where it is fast (a fresh run under 2x the
    # deadline, Python 3.13 here): found either way, by a long reference alone.
    assert entry["status"] in ("hang", "slow"), entry["status"]
    flagged = [case for case in entry["cases"] if case["status"] != "ok"]
    assert flagged, entry["cases"]
    for case in flagged:
        assert case["id"].endswith(("-long-reference", "-long-pair", "-shifted")), case["id"]
        assert len(case["ground_truth"]) == _cases.TRUTH_CHARS
    # Every case with a short ground truth finished: the 4 KiB responses alone cost nothing.
    short = [c for c in entry["cases"] if c["ground_truth"] and len(c["ground_truth"]) < 100]
    assert short
    assert all(case["status"] == "ok" for case in short)
    result.stdout.fnmatch_lines(["* case repetition-*-long-* (*a reference of 4096 char*"])


def test_long_references_are_as_long_as_promised_and_the_pair_is_a_near_match() -> None:
    base = _cases.Case("f-1", "f", "short response", "d", "42")
    reference, pair, _shifted = _cases.long_reference_variants([base])
    assert reference.text == "short response"
    assert len(reference.ground_truth or "") == _cases.TRUTH_CHARS
    assert len(pair.text) == _cases.TRUTH_CHARS
    assert pair.text.startswith("short response ")
    truth = (pair.ground_truth or "").split(" ")
    words = pair.text.split(" ")
    assert len(truth) == len(words)
    changed = sum(a != b for a, b in zip(words, truth, strict=True))
    assert len(words) // 6 <= changed <= len(words) // 4


def test_the_first_family_has_a_shifted_pair_and_its_longest_response_on_a_long_reference() -> None:
    # sacrebleu's TER passed on the near match at every size, and took 16 s on 4 KiB whose
    # blocks of words were reordered (each a shift to search); ROUGE-L, which aligns the two
    # texts, passed on every 4 KiB pair.
    ladder = [_cases.Case(f"f-{n}", "f", "a " * (n // 2), "d") for n in (64, 32768)]
    first = _cases.long_reference_variants(ladder)
    assert [c.id for c in first] == [
        "f-64-long-reference",
        "f-64-long-pair",
        "f-64-long-pair-shifted",
        "f-32768-against-long-reference",
    ]
    shifted = first[2]
    assert sorted(shifted.text.split(" ")) == sorted((shifted.ground_truth or "").split(" "))
    assert shifted.text != shifted.ground_truth
    assert shifted.text.split(" ")[:10] == (shifted.ground_truth or "").split(" ")[-10:]
    against = first[3]
    assert (len(against.text), len(against.ground_truth or "")) == (32768, _cases.TRUTH_CHARS)
    others = _cases.long_reference_variants(ladder, reference_alone=False)
    assert [(c.id, len(c.text)) for c in others] == [("f-64-long-pair", _cases.TRUTH_CHARS)]
    short = _cases.long_reference_variants(ladder[:1])  # a ladder within 4 KiB: none
    assert [c.id for c in short] == [c.id for c in first[:3]]


def test_a_reference_alone_is_tried_once_a_run_and_each_family_has_its_long_pair(
    pytester: pytest.Pytester,
) -> None:
    # What a long reference alone costs is the same in every family: paid in each, it was half
    # a clean math scorer's check.
    pytester.makepyfile(metric="def score(response, reference):\n    return 0.0\n")
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(
        *fast(deadline=2, max_chars=4096, family="repetition,digits-line"),
        "--reward-hang-scorer=metric.py:score kind=text",
        "--reward-hang-contexts=main",
        "--reward-hang-json=r.json",
    )
    assert result.ret == 0, result.stdout.str()
    ids = [case["id"] for case in reported(pytester)["metric.score"]["cases"]]
    alone = [i for i in ids if i.endswith("-long-reference")]
    pairs = [i for i in ids if i.endswith("-long-pair")]
    assert len(alone) == 1
    assert alone[0].startswith("repetition-")
    assert {i.split("-")[0] for i in pairs} == {"repetition", "digits"}
