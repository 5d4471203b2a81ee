"""Collection nodes: one collector per scorer, one item per scorer x corpus family."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_rewardhang.corpus import _growth
from pytest_rewardhang.guard._outcome import Status

from . import _report, _verdict
from ._checker import SEARCH, CaseResult, ScorerProblem, growth_of
from ._shown import shown
from ._verdict import Kind, Verdict

if TYPE_CHECKING:
    from ._baseline import BaselineRun
    from ._checker import ScorerCheck
    from ._options import Settings


class RewardHangFailure(Exception):
    """A failed check; ``str()`` is the whole report, shown as is."""

    def __init__(self, message: str, hang: bool) -> None:
        super().__init__(message)
        self.hang = hang


class ScorerNode(pytest.Collector):
    """Groups one scorer's items; its node id is the scorer id."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:  # pragma: no cover - prebuilt
        return []


class RewardHangItem(pytest.Item):
    """The shared base: string failures, and locations at the scorer's own ``def``."""

    check: ScorerCheck

    @property
    def source(self) -> tuple[Path | None, int | None]:
        return self.check.source

    def reportinfo(self) -> tuple[Path | str, int | None, str]:
        path, line = self.source
        # Not a suffix of the node id, which pytest would rewrite dots-to-colons in.
        scorer = self.check.scorer
        headline = f"{self.nodeid} ({scorer.spec})"
        if path is not None and line:
            return path, line - 1, headline
        # Its def is not to be found (it does not import, say): where it was declared, which
        # JUnit's skip text names with a line.
        where, at = scorer.declared_at or (scorer.declared_in, None)
        return where, (at - 1 if at else None), headline

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str | Any:
        if isinstance(excinfo.value, RewardHangFailure | ScorerProblem):
            return shown(str(excinfo.value))  # it quotes what the scorer raised or named
        return super().repr_failure(excinfo, style=style)


class FamilyItem(RewardHangItem):
    """Every case of one corpus family against one scorer.

    It is given what it needs (the settings, and the baseline run when a baseline is saved or
    compared) and never calls back into the session plugin.
    """

    def __init__(
        self,
        *,
        family: str,
        settings: Settings,
        baseline: BaselineRun | None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.family = family
        self.settings = settings
        self.baseline = baseline
        self.growth: list[_growth.Growth] = []
        #: Listed as ``scorer-id::family`` in ``reward_hang_known``: strict for this item alone.
        self.known_hang = False

    @property
    def expect_hang(self) -> bool:
        """Whether this item is expected to hang: its scorer is ``expect=hang``, or it is
        listed in ``reward_hang_known``."""
        return self.check.scorer.expect_hang or self.known_hang

    def runtest(self) -> None:
        anything = self.check.hangs_on_anything
        if anything is not None and anything[0] != self.family:
            self._skip(f"not run: {self.check.scorer.id}::{anything[0]} failed: {anything[1]}")
        verdict, results = self._judge()
        self.user_properties += _report.item_properties(
            self.check, self.family, results, verdict, self.growth
        )
        message = _report.item_message(
            self.check, self.family, verdict, self.growth, self.settings.compare_baseline
        )
        if verdict.kind is Kind.HANG_CAUGHT:
            pytest.xfail(message)
        if verdict.kind is Kind.PROBLEM:
            if self.check.problem_reported:  # one failure says it; the other families wait
                self._skip(f"{self.check.scorer.id} cannot be checked: see its first failed item")
            self.check.problem_reported = True
            raise ScorerProblem(message)
        if verdict.kind.fails:
            raise RewardHangFailure(message, hang=verdict.hang)

    def _skip(self, reason: str) -> NoReturn:
        """Skip this family for its scorer's sake; the JSON report lists it as not run."""
        self.user_properties += _report.not_run_properties(self.check, self.family, reason)
        pytest.skip(reason)

    def _judge(self) -> tuple[Verdict, list[CaseResult]]:
        """The verdict, and the case results it was reached on."""
        try:
            results = self.check.run_family(self.family, expect_hang=self.expect_hang)
        except ScorerProblem as problem:
            return _verdict.problem(str(problem)), []
        self.growth = growth_of(results, self.settings.max_chars)
        verdict = _verdict.judge(
            results,
            self.growth,
            deadline=self.check.deadline,
            fail_on=self.settings.fail_on,
            strict_complexity=self.settings.strict_complexity,
            expect_hang=self.check.scorer.expect_hang,
            known_item=self.known_hang,
            skipped=self.check.skipped.get(self.family, 0),
        )
        # Only a passing family is measured; the search's inputs change from run to run, so
        # there is nothing there to compare.
        if verdict.kind is not Kind.OK or self.baseline is None or self.family == SEARCH:
            return verdict, results
        return self._against_baseline(verdict, results, self.baseline)

    def _against_baseline(
        self, verdict: Verdict, results: list[CaseResult], baseline: BaselineRun
    ) -> tuple[Verdict, list[CaseResult]]:
        """Measure this family's baseline entry and compare it, replaying a regression once.

        The first measurement is only a soft limit: a regressed family runs again, each case
        keeps its faster time, and only a regression that holds on both runs fails.
        """
        scorer_id, source = self.check.scorer.id, self.source[0]
        # Measured on the first context's cases: those every run has, at every size.
        again = [r for r in results if r.again]
        results = [r for r in results if not r.again]
        now = baseline.entry(scorer_id, results, self.growth, source)
        if now is None:  # no case finished: nothing measured
            return verdict, results + again
        comparison = baseline.compare(scorer_id, self.family, now)
        replayed = False
        if comparison is not None and comparison.status == "regressed":
            replay = [
                r
                for r in self.check.run_family(self.family, expect_hang=self.expect_hang)
                if not r.again
            ]
            results = _faster(results, replay)
            self.growth = growth_of(results, self.settings.max_chars)
            now = baseline.entry(scorer_id, results, self.growth, source) or now
            comparison = baseline.compare(scorer_id, self.family, now)
            replayed = True
        return _verdict.against_baseline(verdict, now, comparison, replayed), results + again


def _faster(first: list[CaseResult], again: list[CaseResult]) -> list[CaseResult]:
    """Each case with the lower CPU time of its two runs: noise only ever adds time."""
    replayed = {r.case.id: r for r in again if r.outcome.status is Status.OK}
    merged = []
    for result in first:
        other = replayed.get(result.case.id)
        if other is not None and (
            result.outcome.status is not Status.OK or other.outcome.cpu_s < result.outcome.cpu_s
        ):
            result = replace(result, outcome=other.outcome)
        merged.append(result)
    return merged
