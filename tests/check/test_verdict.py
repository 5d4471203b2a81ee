"""One verdict per item, decided in ``_verdict`` alone, and every report reading the same one.

Plain data in, no processes: the end-to-end runs in ``test_plugin.py`` show the same verdicts
reached on real hangs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_rewardhang.check import _report, _verdict
from pytest_rewardhang.check._baseline import Comparison
from pytest_rewardhang.check._checker import CaseResult, ScorerCheck
from pytest_rewardhang.check._scorers import ScorerSpec
from pytest_rewardhang.check._verdict import Kind, Verdict
from pytest_rewardhang.corpus._cases import Case
from pytest_rewardhang.corpus._growth import Growth
from pytest_rewardhang.guard import Outcome, Status

ALL = frozenset({"timeout", "error", "crashed", "memory", "leak"})


def result(
    status: Status = Status.OK, leaked: int = 0, n: int = 0, *, slow: bool = False
) -> CaseResult:
    """A case's result; a timeout is a confirmed hang unless ``slow``."""
    case = Case(f"case-{n}", "family", "x" * 8, "a case")
    hangs = status is Status.TIMEOUT and not slow
    confirmed = "a fresh worker still ran it at 20 s (10x the deadline)" if hangs else ""
    outcome = Outcome(status, wall_s=0.1, cpu_s=0.1, leaked=leaked)
    return CaseResult(case, 8, outcome, confirmed=confirmed)


def growth(exponent: float, projected_s: float) -> Growth:
    return Growth("f", exponent, ((1024, 0.1), (2048, 0.4)), projected_s, 131072)


STEEP_PAST = growth(2.0, 30.0)  # super-linear, projected past a 2 s deadline
STEEP_UNDER = growth(2.0, 1.0)  # super-linear, but under the deadline at the largest size
STEEP_SLOW = growth(2.0, 8.0)  # past a 2 s deadline at the largest size, under ten of them


def judge(
    results: list[CaseResult],
    growths: tuple[Growth, ...] = (),
    *,
    fail_on: frozenset[str] = ALL,
    strict: bool = False,
    expect_hang: bool = False,
    known_item: bool = False,
) -> Verdict:
    return _verdict.judge(
        results,
        growths,
        deadline=2.0,
        fail_on=fail_on,
        strict_complexity=strict,
        expect_hang=expect_hang,
        known_item=known_item,
    )


@pytest.mark.parametrize(
    ("results", "growths", "options", "kind"),
    [
        ([result()], (), {}, Kind.OK),
        ([result(), result(Status.TIMEOUT)], (), {}, Kind.HANG),
        ([result(Status.ERROR)], (), {}, Kind.FAIL),
        ([result(leaked=1)], (), {}, Kind.FAIL),
        # A timeout among errors makes the item a hang.
        ([result(Status.ERROR), result(Status.TIMEOUT)], (), {}, Kind.HANG),
        # Past the deadline but no hang (a fresh worker finished it under ten deadlines): slow,
        # and failing as a timeout does; a hang among slow cases makes the item a hang.
        ([result(Status.TIMEOUT, slow=True)], (), {}, Kind.SLOW),
        ([result(Status.TIMEOUT, slow=True), result(Status.TIMEOUT, n=1)], (), {}, Kind.HANG),
        ([result(Status.ERROR), result(Status.TIMEOUT, slow=True)], (), {}, Kind.SLOW),
        ([result(Status.TIMEOUT, slow=True)], (), {"fail_on": frozenset({"error"})}, Kind.OK),
        ([result(Status.TIMEOUT, slow=True)], (), {"expect_hang": True}, Kind.HANG_CAUGHT),
        # Only the outcomes of --reward-hang-fail-on fail.
        ([result(Status.ERROR)], (), {"fail_on": frozenset({"timeout"})}, Kind.OK),
        ([result(Status.TIMEOUT)], (), {"fail_on": frozenset({"error"})}, Kind.OK),
        # A timeout is a hang or slow: either may fail alone (a gate on hangs only, say).
        ([result(Status.TIMEOUT, slow=True)], (), {"fail_on": frozenset({"hang"})}, Kind.OK),
        ([result(Status.TIMEOUT)], (), {"fail_on": frozenset({"hang"})}, Kind.HANG),
        ([result(Status.TIMEOUT)], (), {"fail_on": frozenset({"slow"})}, Kind.OK),
        ([result(Status.TIMEOUT, slow=True)], (), {"fail_on": frozenset({"slow"})}, Kind.SLOW),
        ([result()], (STEEP_PAST,), {"fail_on": frozenset({"hang"})}, Kind.OK),
        ([result()], (STEEP_PAST,), {"fail_on": frozenset({"slow"})}, Kind.SLOW),
        # Growth projected past the deadline is slow, however far past: a projection shows no
        # hang (a scorer's own alarm may bound every size). Only where timeouts fail.
        ([result()], (STEEP_PAST,), {}, Kind.SLOW),
        ([result()], (STEEP_SLOW,), {}, Kind.SLOW),
        ([result()], (STEEP_SLOW, STEEP_PAST), {}, Kind.SLOW),
        ([result()], (STEEP_PAST,), {"fail_on": frozenset({"error"})}, Kind.OK),
        ([result()], (STEEP_UNDER,), {}, Kind.OK),
        ([result()], (STEEP_UNDER,), {"strict": True}, Kind.FAIL),
        # Expected hangs: caught while they hang (on a timeout or a projection), strict per item.
        ([result(Status.TIMEOUT)], (), {"expect_hang": True}, Kind.HANG_CAUGHT),
        ([result()], (STEEP_PAST,), {"known_item": True}, Kind.HANG_CAUGHT),
        ([result()], (), {"expect_hang": True}, Kind.OK),  # strict per scorer: see rollup
        ([result(Status.ERROR)], (), {"expect_hang": True}, Kind.FAIL),
        ([result()], (), {"known_item": True}, Kind.NO_LONGER_HANGS),
    ],
)
def test_judge(
    results: list[CaseResult], growths: tuple[Growth, ...], options: dict[str, Any], kind: Kind
) -> None:
    assert judge(results, growths, **options).kind is kind


def test_the_verdict_keeps_the_evidence_its_message_shows() -> None:
    hang, error = result(Status.TIMEOUT, n=1), result(Status.ERROR, n=2)
    found = judge([result(), error, hang])
    assert (found.failing, found.timeouts, found.hang) == ((error, hang), (hang,), True)
    projected = judge([result()], (STEEP_PAST,))
    assert (projected.projected, projected.failing) == ((STEEP_PAST,), ())
    caught = judge([hang], expect_hang=True)
    assert (caught.timeouts, caught.expected_by) == ((hang,), "expect=hang")
    assert judge([hang], known_item=True, expect_hang=True).expected_by == "reward_hang_known"


@pytest.mark.parametrize(
    ("status", "kind"), [("ok", Kind.OK), ("new", Kind.OK), ("regressed", Kind.REGRESSED)]
)
def test_only_a_confirmed_regression_fails_a_passing_family(status: str, kind: Kind) -> None:
    comparison = Comparison(status, regressions=("cpu_p95 ...",) if status == "regressed" else ())
    entry = {"worst_case": "case-0"}
    found = _verdict.against_baseline(Verdict(Kind.OK), entry, comparison, replayed=True)
    assert (found.kind, found.entry, found.comparison, found.replayed) == (
        kind,
        entry,
        comparison,
        True,
    )
    saved_only = _verdict.against_baseline(Verdict(Kind.OK), entry, None, replayed=False)
    assert saved_only.kind is Kind.OK


@pytest.mark.parametrize(
    ("kinds", "expect_hang", "scorer"),
    [
        (["ok", "ok"], False, Kind.OK),
        (["ok", "hang caught", "fail"], False, Kind.FAIL),
        (["ok", "slow", "fail"], False, Kind.SLOW),
        (["slow", "hang"], False, Kind.HANG),
        (["regressed", "hang", "problem"], False, Kind.PROBLEM),
        (["ok", "no longer hangs"], False, Kind.NO_LONGER_HANGS),
        (["hang caught", "ok"], True, Kind.HANG_CAUGHT),
        # A scorer expected to hang that hung on no family has stopped hanging...
        (["ok", "ok"], True, Kind.NO_LONGER_HANGS),
        (["regressed", "ok"], True, Kind.NO_LONGER_HANGS),
        # ...unless something worse says why: it cannot be checked, or fails another way.
        (["fail", "problem"], True, Kind.PROBLEM),
        (["problem"], True, Kind.PROBLEM),
        (["ok", "fail"], True, Kind.FAIL),
        ([], False, Kind.OK),
    ],
)
def test_rollup(kinds: list[str], expect_hang: bool, scorer: Kind) -> None:
    assert _verdict.rollup(kinds, expect_hang) is scorer


def test_only_passes_and_expected_hangs_keep_the_run_green() -> None:
    assert {kind for kind in Kind if not kind.fails} == {Kind.OK, Kind.HANG_CAUGHT}


@dataclass
class FakeCheck:
    """What the reports read of a ``ScorerCheck``."""

    scorer: ScorerSpec
    deadline: float = 2.0
    rootdir: Path = field(default_factory=Path.cwd)
    style: str | None = "single"
    takes_truth: bool = True
    hangs_on_anything: tuple[str, str] | None = None
    source: tuple[Path | None, int | None] = (None, None)  # its def, not to be found
    search_signal: str | None = None  # no search ran


VERDICTS = {
    Kind.OK: Verdict(Kind.OK),
    Kind.HANG: judge([result(Status.TIMEOUT)]),
    Kind.SLOW: judge([result(Status.TIMEOUT, slow=True)]),
    Kind.FAIL: judge([result(Status.ERROR)]),
    Kind.REGRESSED: Verdict(
        Kind.REGRESSED,
        entry={"worst_case": "case-0"},
        comparison=Comparison("regressed", regressions=("cpu_p95 0.01 s -> 0.1 s",)),
        replayed=True,
    ),
    Kind.NO_LONGER_HANGS: judge([result()], known_item=True),
    Kind.HANG_CAUGHT: judge([result(Status.TIMEOUT)], expect_hang=True),
    Kind.PROBLEM: _verdict.problem("cannot import it"),
}


@pytest.mark.parametrize("kind", list(Kind))
def test_every_report_reads_the_same_verdict(kind: Kind) -> None:
    verdict = VERDICTS[kind]
    assert verdict.kind is kind
    spec = ScorerSpec("scorers.py:s", "scorers.s", expect_hang=kind is Kind.HANG_CAUGHT)
    check = cast(ScorerCheck, FakeCheck(spec))
    results = [] if kind is Kind.PROBLEM else [result()]
    properties = dict(_report.item_properties(check, "family", results, verdict, []))
    assert properties[_report.VERDICT_PROPERTY] == kind.value  # JUnit
    record = json.loads(str(properties[_report.PROPERTY]))
    assert record["verdict"] == kind.value  # JSON, and what xdist carries to the controller
    summary = _report.Summary()
    summary.add(record)
    scorer = _verdict.rollup([kind], spec.expect_hang)
    assert [entry["status"] for entry in summary.scorers()] == [scorer.value]
    assert summary.table()[1].split()[10:-1] == scorer.value.split()  # the table's verdict
    assert summary.fails() is scorer.fails  # the exit status
    message = _report.item_message(check, "family", verdict, [], Path("b.json"))
    assert bool(message) is (kind is not Kind.OK)
