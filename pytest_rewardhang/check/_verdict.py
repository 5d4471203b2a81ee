"""What an item came to: one ``Verdict`` per scorer x family, and a scorer's, rolled up from them.

Nothing else decides: the item raises, xfails or passes by it, and the failure message, the
summary table, the JSON report, the JUnit properties and the exit status all read it (a scorer's
verdict only through ``rollup``, since xdist workers send the controller each item's verdict).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pytest_rewardhang.guard._outcome import Status

if TYPE_CHECKING:
    from pytest_rewardhang.corpus._growth import Growth

    from ._baseline import Comparison
    from ._checker import CaseResult


class Kind(StrEnum):
    """The verdict's name, as reports print it; worst first, the order ``rollup`` reads."""

    PROBLEM = "problem"  # the scorer cannot be checked at all (import, signature, example)
    HANG = "hang"
    #: Past the deadline, but not a hang: a fresh worker finished it within
    #: ``--reward-hang-confirm`` deadlines, or only its growth projects it past the deadline.
    SLOW = "slow"
    FAIL = "fail"
    REGRESSED = "regressed"
    NO_LONGER_HANGS = "no longer hangs"  # known or expected to hang, and it did not
    HANG_CAUGHT = "hang caught"  # known or expected to hang, and it did: xfailed
    OK = "ok"

    @property
    def fails(self) -> bool:
        """Whether it fails the run: everything but a pass and a hang that was expected."""
        return self not in (Kind.OK, Kind.HANG_CAUGHT)


@dataclass(frozen=True)
class Verdict:
    """One item's verdict and the evidence its messages show."""

    kind: Kind
    #: The cases that ran past the deadline, hangs and slow ones.
    timeouts: tuple[CaseResult, ...] = ()
    #: The cases whose outcome is one of ``--reward-hang-fail-on``.
    failing: tuple[CaseResult, ...] = ()
    #: Fits projected past the deadline at the largest size (slow: no run has shown it); only
    #: while no case timed out, and only when timeouts fail.
    projected: tuple[Growth, ...] = ()
    #: Fits above n^1.5, under ``--reward-hang-strict-complexity`` only.
    too_steep: tuple[Growth, ...] = ()
    #: Why a hang was expected (``HANG_CAUGHT``): ``reward_hang_known`` or ``expect=hang``.
    expected_by: str = ""
    #: What stopped the check (``PROBLEM``), one line.
    problem: str = ""
    #: The family's cases not run once a hang was confirmed (a fresh worker timed out too).
    skipped: int = 0
    #: A passing family's baseline entry (when baselines are saved or compared), its comparison
    #: (when compared) and whether a regression was run again before it counted.
    entry: dict[str, Any] | None = None
    comparison: Comparison | None = None
    replayed: bool = False

    @property
    def hang(self) -> bool:
        return self.kind is Kind.HANG


def judge(
    results: Sequence[CaseResult],
    growth: Sequence[Growth],
    *,
    deadline: float,
    fail_on: frozenset[str],
    strict_complexity: bool,
    expect_hang: bool,
    known_item: bool,
    skipped: int = 0,
) -> Verdict:
    """The verdict on a family's cases; a passing one may still regress (``against_baseline``).

    ``expect_hang``: the scorer is declared ``expect=hang`` or listed in ``reward_hang_known``;
    ``known_item``: this scorer x family is listed there; ``skipped``: the cases not run after
    the family's hang was confirmed. A growth projection past the deadline is slow, never a
    hang: only a fresh worker still running a case at ten deadlines shows one. Strictness for a
    hanging scorer is per scorer, not per family: one that hangs on no family at all is caught
    by ``rollup``.
    """
    timeouts = tuple(r for r in results if r.outcome.status is Status.TIMEOUT)
    projected: tuple[Growth, ...] = ()
    if not timeouts and fail_on & {"timeout", "slow"}:
        projected = tuple(g for g in growth if g.projects_past(deadline))
    too_steep = tuple(g for g in growth if g.superlinear) if strict_complexity else ()
    if (expect_hang or known_item) and (timeouts or projected):
        why = "reward_hang_known" if known_item else "expect=hang"
        return Verdict(
            Kind.HANG_CAUGHT, timeouts, projected=projected, expected_by=why, skipped=skipped
        )
    failing = tuple(r for r in results if failure_kinds(r) & fail_on)
    if not failing and not projected and not too_steep:
        return Verdict(Kind.NO_LONGER_HANGS if known_item else Kind.OK)
    if any(r.hangs for r in failing):
        kind = Kind.HANG
    elif projected or any(r.outcome.status is Status.TIMEOUT for r in failing):
        kind = Kind.SLOW
    else:
        kind = Kind.FAIL
    return Verdict(kind, timeouts, failing, projected, too_steep, skipped=skipped)


def problem(message: str) -> Verdict:
    """The verdict on a scorer that cannot be checked at all (``message``: what stopped it)."""
    return Verdict(Kind.PROBLEM, problem=message)


def against_baseline(
    verdict: Verdict,
    entry: dict[str, Any],
    comparison: Comparison | None,
    replayed: bool,
) -> Verdict:
    """A passing family with its baseline entry: regressed when the comparison says so.

    The comparison is the one after the replay, when the first measurement regressed: only a
    regression that holds on both runs fails.
    """
    assert verdict.kind is Kind.OK, "only a passing family is measured"
    regressed = comparison is not None and comparison.status == "regressed"
    return replace(
        verdict,
        kind=Kind.REGRESSED if regressed else Kind.OK,
        entry=entry,
        comparison=comparison,
        replayed=replayed,
    )


def rollup(kinds: Iterable[str], expect_hang: bool) -> Kind:
    """A scorer's verdict from its items': the worst of them, but an expected hang is strict.

    A scorer expected to hang (``expect=hang``, or listed whole in ``reward_hang_known``) whose
    items caught no hang at all has stopped hanging, unless something worse says why: one that
    cannot be checked (it does not import, say), or that hangs or fails unexpectedly, is that.
    """
    found = {Kind(kind) for kind in kinds}
    worst = next((kind for kind in Kind if kind in found), Kind.OK)
    if worst in (Kind.PROBLEM, Kind.HANG, Kind.SLOW, Kind.FAIL):
        return worst
    if expect_hang and Kind.HANG_CAUGHT not in found:
        return Kind.NO_LONGER_HANGS
    return worst


def failure_kinds(result: CaseResult) -> set[str]:
    """The ``--reward-hang-fail-on`` outcomes one case had (a leak, a process or a non-daemon
    thread left running, comes on top of its status; a timeout is a ``hang`` or, not shown to be
    one, ``slow``)."""
    kinds = set()
    if result.outcome.status is not Status.OK:
        kinds.add(str(result.outcome.status))
    if result.outcome.status is Status.TIMEOUT:
        kinds.add("hang" if result.hangs else "slow")
    if result.outcome.leaked or result.threads_left:
        kinds.add("leak")
    return kinds
