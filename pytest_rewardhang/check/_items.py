"""Collection nodes: one collector per scorer, one item per scorer x corpus family."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rewardhang.corpus import _growth
from pytest_rewardhang.guard._outcome import Status

from . import _report
from ._checker import SEARCH, CaseResult, ScorerProblem

if TYPE_CHECKING:
    from ._baseline import Comparison
    from ._checker import ScorerCheck
    from ._session import RewardHangSession

PROPERTY = "reward_hang"
#: The item's baseline entry and comparison, carried to the controller like ``PROPERTY``.
BASELINE_PROPERTY = "reward_hang_baseline"


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
    source: tuple[Path | None, int | None] = (None, None)

    def reportinfo(self) -> tuple[Path | str, int | None, str]:
        path, line = self.source
        # Not a suffix of the node id, which pytest would rewrite dots-to-colons in.
        headline = f"{self.nodeid} ({self.check.scorer.spec})"
        return (path or self.check.scorer.declared_in), (line - 1 if line else None), headline

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str | Any:
        if isinstance(excinfo.value, RewardHangFailure | ScorerProblem):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)


class FamilyItem(RewardHangItem):
    """Every case of one corpus family against one scorer."""

    def __init__(self, *, family: str, session_plugin: RewardHangSession, **kw: Any) -> None:
        super().__init__(**kw)
        self.family = family
        self.session_plugin = session_plugin
        self.growth: list[_growth.Growth] = []
        #: Listed as ``scorer-id::family`` in ``reward_hang_known``: strict for this item alone.
        self.known_hang = False

    def runtest(self) -> None:
        scorer = self.check.scorer
        try:
            results = self.check.run_family(self.family)
        except ScorerProblem as problem:
            self._record([], "problem")
            if self.check.problem_reported:  # one failure says it; the other families wait
                pytest.skip(f"{scorer.id} cannot be checked: see its first failed item")
            self.check.problem_reported = True
            raise ScorerProblem(f"{scorer.id} ({scorer.spec}): {problem}") from None
        timeouts = [r for r in results if r.outcome.status is Status.TIMEOUT]
        settings = self.session_plugin.settings
        self.growth = growth_of(results, settings.max_chars)
        # Super-linear growth projected past the deadline at max_chars is a hang not yet run.
        projected = [
            g for g in self.growth if g.projects_past(self.check.deadline) and not timeouts
        ]
        projected = projected if "timeout" in settings.fail_on else []
        too_steep = [g for g in self.growth if g.superlinear] if settings.strict_complexity else []
        if (scorer.expect_hang or self.known_hang) and (timeouts or projected):
            # Strictness is per scorer, not per family: a known-hanging scorer that hangs on
            # no family at all fails the run (see the session's sessionfinish).
            self._record(results, "hang caught")
            count = f"{len(timeouts)} case(s) past the deadline" if timeouts else "projected"
            why = "reward_hang_known" if self.known_hang else "expect=hang"
            pytest.xfail(f"hang caught: {count} ({why})")
        failing = [r for r in results if _failure_kinds(r) & settings.fail_on]
        if not failing and not projected and not too_steep:
            if self.known_hang:
                self._record(results, "no longer hangs")
                raise RewardHangFailure(
                    f"no longer hangs: {self.nodeid} is listed in reward_hang_known but none of "
                    "its cases ran past the deadline; if the scorer is fixed, remove the entry",
                    hang=False,
                )
            self._against_baseline(results)
            return
        hang = any(r.outcome.status is Status.TIMEOUT for r in failing) or bool(projected)
        self._record(results, "hang" if hang else "fail")
        rootpath = self.config.rootpath
        if failing:
            message = _report.failure_message(self.check, self.family, failing, rootpath)
        else:
            message = _report.growth_message(self.check, projected or too_steep, bool(projected))
        raise RewardHangFailure(message + _report.growth_lines(self.growth), hang=hang)

    def _against_baseline(self, results: list[CaseResult]) -> None:
        """Record this family's baseline entry; fail on a regression the replay confirms.

        The first measurement is only a soft limit: a regressed family runs again, each case
        keeps its faster time, and only a regression that holds on both runs fails.
        """
        plugin = self.session_plugin
        source = self.source[0]
        # The search's inputs change from run to run: nothing there to compare.
        now = (
            None
            if self.family == SEARCH
            else plugin.baseline_entry(self.check, results, self.growth, source)
        )
        if now is None:
            self._record(results, "ok")
            return
        comparison = plugin.compare(self.check.scorer.id, self.family, now)
        replayed = False
        if comparison is not None and comparison.status == "regressed":
            results = _faster(results, self.check.run_family(self.family))
            self.growth = growth_of(results, plugin.settings.max_chars)
            now = plugin.baseline_entry(self.check, results, self.growth, source) or now
            comparison = plugin.compare(self.check.scorer.id, self.family, now)
            replayed = True
        regressed = comparison is not None and comparison.status == "regressed"
        self._record(results, "regressed" if regressed else "ok")
        self._record_baseline(now, comparison, replayed)
        if comparison is not None and regressed:
            path = plugin.settings.compare_baseline
            moved = f" ({comparison.reason})" if comparison.reason else ""
            raise RewardHangFailure(
                f"regressed against the baseline {path}{moved} (confirmed on a replay):\n"
                + "\n".join(f"  {line}" for line in comparison.regressions)
                + f"\nworst case now: {now['worst_case']}; if the slowdown is intended, "
                "save a new baseline with --reward-hang-save-baseline",
                hang=False,
            )

    def _record_baseline(
        self, entry: dict[str, Any], comparison: Comparison | None, replayed: bool
    ) -> None:
        carried = {"id": self.check.scorer.id, "family": self.family, "entry": entry}
        if comparison is not None:
            carried["comparison"] = {
                "status": comparison.status,
                "reason": comparison.reason,
                "regressions": list(comparison.regressions),
                "replayed": replayed,
            }
            self.user_properties.append(("reward_hang_compare", comparison.status))
        self.user_properties.append((BASELINE_PROPERTY, json.dumps(carried, sort_keys=True)))

    def _record(self, results: list[CaseResult], verdict: str) -> None:
        record = _report.item_record(self.check, self.family, results, verdict)
        record["growth"] = [g.as_dict() for g in self.growth]
        if "known" in self.check.scorer.extra:
            record["known_from"] = self.check.scorer.extra["known"]
        self.user_properties.append((PROPERTY, json.dumps(record, sort_keys=True)))
        timeouts = sum(r.outcome.status is Status.TIMEOUT for r in results)
        self.user_properties.append(("reward_hang_verdict", verdict))
        self.user_properties.append(("reward_hang_cases", len(results)))
        self.user_properties.append(("reward_hang_timeouts", timeouts))


def growth_of(results: list[CaseResult], max_chars: int) -> list[_growth.Growth]:
    """One power-law fit per formula, over the sizes that finished (timeouts are censored)."""
    points: dict[str, list[tuple[int, float]]] = {}
    for result in results:
        out = result.outcome
        if result.case.formula_id is None or out.status is not Status.OK:
            continue
        spent = out.cpu_s if out.cpu_s == out.cpu_s else out.wall_s  # NaN when unreadable
        points.setdefault(result.case.formula_id, []).append((result.chars, spent))
    fits = (_growth.fit(formula, found, max_chars) for formula, found in points.items())
    return sorted((g for g in fits if g is not None), key=lambda g: -g.exponent)


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


def _failure_kinds(result: CaseResult) -> set[str]:
    kinds = set()
    if result.outcome.status is not Status.OK:
        kinds.add(str(result.outcome.status))
    if result.outcome.leaked:
        kinds.add("leak")
    return kinds
