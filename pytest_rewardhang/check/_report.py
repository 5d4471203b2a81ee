"""What a run tells people, from the verdicts: messages, tables, JSON, JUnit, GitHub annotations."""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_rewardhang.corpus._growth import SUPERLINEAR
from pytest_rewardhang.guard._outcome import (
    Frame,
    Outcome,
    Status,
    Stuck,
    find_stuck,
    is_library,
    is_machinery,
    is_stdlib,
    package_root,
    under,
)

from ._shown import first_line, shown, strict
from ._source import locate
from ._verdict import Kind, Verdict, rollup

if TYPE_CHECKING:
    from pytest_rewardhang.corpus._growth import Growth

    from ._checker import CaseResult, ScorerCheck

#: The item's JSON record (``item_record``), carried to the xdist controller in the report.
PROPERTY = "reward_hang"
#: The item's baseline entry and comparison, carried to the controller like ``PROPERTY``.
BASELINE_PROPERTY = "reward_hang_baseline"
#: The item's verdict, for JUnit readers and the terminal's HANG status.
VERDICT_PROPERTY = "reward_hang_verdict"
#: A family not run for its scorer's sake (see :func:`not_run_properties`), carried likewise.
NOT_RUN_PROPERTY = "reward_hang_not_run"


#: faulthandler's MAX_FRAME_DEPTH: a deeper stack keeps only its innermost frames.
DUMP_DEPTH = 100


#: What a timeout without a stack dump says: the dump signal leads the kill by
#: guard._wire.dump_lead, and a process the machine does not schedule in that window is killed
#: before it writes a line.
NO_DUMP = (
    "no stack dump: the process was killed before faulthandler wrote one (a starved machine "
    "runs it too late)"
)


def scorer_roots(spec: str, rootdir: Path, defined_in: str | None = None) -> tuple[str, ...]:
    """Where the scorer's own code is, wherever it is installed: the package (or the lone
    module) of the file that defines it, found from the spec without importing anything, and
    of ``defined_in``, the file the scorer's import reported (a re-export's real home)."""
    files = [defined_in] if defined_in else []
    located, _ = locate(spec, rootdir)
    if located is not None:
        files.append(str(located))
    roots: list[str] = []
    for file in files:
        for variant in (os.path.abspath(file), os.path.realpath(file)):
            root = package_root(variant)
            if root not in roots:
                roots.append(root)
    return tuple(roots)


def own_code(roots: tuple[str, ...], rootdir: Path) -> Callable[[str], bool]:
    """Whether a frame's file is the scorer's own code: inside its package (``roots``), or the
    project's code under the rootdir. Never the standard library, the check's machinery or
    code the scorer ``exec``s (``<string>``): those are where it was, not the line to fix."""
    root = str(rootdir) + os.sep

    def own(file: str) -> bool:
        if file.startswith("<") or is_machinery(file) or is_stdlib(file):
            return False
        if under(file, roots) or under(os.path.realpath(file), roots):
            return True
        project = file.startswith(root) or not os.path.isabs(file)
        return project and not is_library(file)

    return own


def find_stuck_in(
    stack: str | None, spec: str, rootdir: Path, defined_in: str | None = None
) -> Stuck:
    """Where a timed-out call of the scorer ``spec`` was, frames relative to the rootdir.

    When the spec's file cannot be found without importing it, the scorer's own code is that
    of the callable the dump reaches (see :func:`find_stuck`).
    """
    roots = scorer_roots(spec, rootdir, defined_in)
    found = find_stuck(stack, own_code(roots, rootdir) if roots else None)

    def rel(frame: Frame | None) -> Frame | None:
        return None if frame is None else (_relative(frame[0], rootdir), frame[1], frame[2])

    return Stuck(
        own=tuple((_relative(f, rootdir), line, func) for f, line, func in found.own),
        innermost=rel(found.innermost),
        truncated=found.truncated,
        cut=found.cut,
        entry=rel(found.entry),
    )


def stuck_lines(stuck: Stuck, indent: str = "  ") -> list[str]:
    """The failure message's (and ``repro``'s) lines on where a call was stuck.

    The scorer's own frames, innermost first, recursion folded; then the innermost frame
    overall when it is elsewhere; and, when the thread's stack was cut at faulthandler's
    frame limit before reaching the scorer's own code, a line that says so.
    """
    lines = []
    if stuck.own:
        lines.append(f"{indent}stuck in the scorer at (innermost first):")
        lines += [f"{indent}  {text}" for text in _folded(stuck.own)[:8]]
    elif stuck.truncated or stuck.cut:
        lines.append(
            f"{indent}the scorer's own frames are not in the stack dump: {_missing(stuck)}"
        )
    elif stuck.innermost is not None:
        lines.append(f"{indent}no frame of the scorer's own code in the stack dump")
    else:
        lines.append(f"{indent}{NO_DUMP}")
    innermost = stuck.innermost
    if innermost is not None and (not stuck.own or innermost != stuck.own[0]):
        lines.append(f"{indent}innermost frame: {_frame(innermost)}")
    if stuck.own and (stuck.truncated or stuck.cut):
        lines.append(f"{indent}(outer frames are missing: {_missing(stuck)})")
    return lines


def _missing(stuck: Stuck) -> str:
    """Why a stack dump lacks its outer frames."""
    if stuck.truncated:
        return (
            f"faulthandler keeps a thread's innermost {DUMP_DEPTH} frames, and this stack is "
            "deeper (deep recursion)"
        )
    return "the dump was cut short (the process was killed while faulthandler wrote it)"


def _frame(frame: Frame) -> str:
    return f"{frame[0]}:{frame[1]} in {frame[2]}"


def _folded(frames: tuple[Frame, ...]) -> list[str]:
    """One line per frame, a run of the same frame (recursion) as one line with its count."""
    lines: list[str] = []
    previous, count = None, 0
    for frame in (*frames, None):
        if frame == previous:
            count += 1
            continue
        if previous is not None:
            text = _frame(previous)
            lines.append(text if count == 1 else f"{text} (x{count}, recursion)")
        previous, count = frame, 1
    return lines


def _relative(file: str, rootdir: Path) -> str:
    try:
        return Path(file).relative_to(rootdir).as_posix()
    except ValueError:
        return file


def item_message(
    check: ScorerCheck,
    family: str,
    verdict: Verdict,
    growth: list[Growth],
    baseline: Path | None,
) -> str:
    """What the item says: its failure, its xfail reason, or "" for a pass.

    ``baseline`` is the file compared with, named in a regression's message.
    """
    scorer = check.scorer
    anything = check.hangs_on_anything
    also = f"; {anything[1]}" if anything is not None and anything[0] == family else ""
    if verdict.kind is Kind.OK:
        return ""
    if verdict.kind is Kind.PROBLEM:
        return f"{scorer.id} ({scorer.spec}): {verdict.problem}"
    if verdict.kind is Kind.HANG_CAUGHT:
        timeouts = len(verdict.timeouts)
        count = f"{timeouts} case(s) past the deadline" if timeouts else "projected"
        return f"hang caught: {count} ({verdict.expected_by}){_skipped(verdict, '; ')}{also}"
    if verdict.kind is Kind.NO_LONGER_HANGS:
        return (
            f"no longer hangs: {scorer.id}::{family} is listed in reward_hang_known but none of "
            "its cases ran past the deadline; if the scorer is fixed, remove the entry"
        )
    if verdict.kind is Kind.REGRESSED:
        assert verdict.comparison is not None  # a regression is a comparison's verdict
        assert verdict.entry is not None
        moved = f" ({verdict.comparison.reason})" if verdict.comparison.reason else ""
        return (
            f"regressed against the baseline {baseline}{moved} (confirmed on a replay):\n"
            + "\n".join(f"  {line}" for line in verdict.comparison.regressions)
            + f"\nworst case now: {verdict.entry['worst_case']}; if the slowdown is intended, "
            "save a new baseline with --reward-hang-save-baseline"
        )
    if verdict.failing:
        message = failure_message(check, list(verdict.failing))
        if verdict.skipped or also:
            head, _, rest = message.partition("\n")
            stopped = _skipped(verdict) or _STOPPED
            message = f"{head}\n{stopped}{also}\n{rest}"
    else:
        steep = list(verdict.projected or verdict.too_steep)
        message = growth_message(check, steep, verdict)
    return message + growth_lines(growth)


#: What a failure says of its family once a hang was confirmed.
_STOPPED = "stopped after the confirmed hang"


def _skipped(verdict: Verdict, lead: str = "") -> str:
    """The line on the cases a confirmed hang, or a slow case, spared ("" when none were)."""
    if not verdict.skipped:
        return ""
    stopped = "stopped after a slow case" if verdict.kind is Kind.SLOW else _STOPPED
    return f"{lead}{stopped}: {verdict.skipped} case(s) skipped"


def failure_message(check: ScorerCheck, failing: list[CaseResult]) -> str:
    scorer, rootdir = check.scorer, check.rootdir
    timeouts = [r for r in failing if r.outcome.status is Status.TIMEOUT]
    hangs = [r for r in timeouts if r.hangs]
    if hangs or timeouts:
        first = (hangs or timeouts)[0]
        head = (
            f"{'hangs' if hangs else 'slow'}: case {first.case.id} ({first.chars} chars) ran "
            f"past the {check.deadline:g} s deadline"
        )
        if not hangs:
            head += f", but is no hang: {_not_a_hang(first, check)}"
    else:
        head = (
            f"{len(failing)} case(s) failed: {failing[0].case.id}: {failing[0].outcome.describe()}"
        )
    lines = [head, f"scorer {scorer.id} = {scorer.spec} (declared in {scorer.declared_in})"]
    for result in failing:
        out = result.outcome
        word = str(out.status).upper()
        if out.status is Status.TIMEOUT:
            word = "HANG" if result.hangs else "SLOW"
        word = "LEAK" if out.status is Status.OK else word
        lines.append("")
        lines.append(
            f"{word} case {result.case.id} ({result.chars} chars: {result.case.description}): "
            f"wall {out.wall_s:.2f} s, cpu {out.cpu_s:.2f} s, deadline {check.deadline:g} s"
        )
        lines.append(f"  {result.called}")
        if result.case.ground_truth is not None and check.takes_truth:
            lines.append(f"  with ground truth {result.case.ground_truth!r}")
        if out.status is Status.TIMEOUT:
            lines.append(
                f"  hangs: {result.confirmed}"
                if result.hangs
                else f"  {_not_a_hang(result, check)}"
            )
            if result.note:
                lines.append(f"  {result.note}")
            lines += stuck_lines(stuck_of(out, check))
        else:
            lines.append("  " + (result.note or _problem(result)))
        if result.saved is not None:
            saved = _relative(str(result.saved), rootdir)
            lines.append(f"  input saved to {saved}")
            python = shlex.quote(_relative(sys.executable, rootdir))
            lines.append(f"  reproduce: {python} -m pytest_rewardhang repro {shlex.quote(saved)}")
    return "\n".join(lines)


def _not_a_hang(result: CaseResult, check: ScorerCheck) -> str:
    """Why a timeout is not a hang: what the fresh worker that ran it again came to."""
    fresh, deadline = result.fresh, check.deadline
    if fresh is None:
        return "not run again in a fresh worker"
    if fresh.status is Status.OK and fresh.wall_s > deadline:
        return (
            f"a fresh worker finished it in {fresh.wall_s:.2f} s, under "
            f"{check.settings.confirm:g}x the deadline (raise the deadline above that, or make "
            "the scorer faster)"
        )
    if fresh.status is Status.OK and result.replayed:
        return (
            f"only in a long-lived worker: a fresh worker finished it in {fresh.wall_s:.2f} s, "
            "and it timed out again in a new one after the calls that ran before it there "
            "(earlier calls slow it)"
        )
    if fresh.status is Status.OK:
        return (
            f"only in a long-lived worker: a fresh worker finished it in {fresh.wall_s:.2f} s "
            "(earlier calls slowed it, or a busy machine did)"
        )
    return f"a fresh worker ended it otherwise: {fresh.describe()}"


def growth_message(check: ScorerCheck, growths: list[Growth], verdict: Verdict) -> str:
    scorer = check.scorer
    worst = growths[0]
    if verdict.projected:
        worst = max(growths, key=lambda g: g.projected_s)
        head = (
            f"slow (projected): time grows as n^{worst.exponent:.2f}, "
            f"{worst.projected_s:.3g} s at {worst.max_chars} chars, past the "
            f"{check.deadline:g} s deadline; no case that long ran, so none is called a hang"
        )
    else:
        head = (
            f"super-linear: time grows as n^{worst.exponent:.2f} "
            f"(above n^{SUPERLINEAR:g}, --reward-hang-strict-complexity)"
        )
    return f"{head}\nscorer {scorer.id} = {scorer.spec} (declared in {scorer.declared_in})"


def growth_lines(growths: list[Growth]) -> str:
    if not growths:
        return ""
    return "\n\ngrowth (power-law fit over the size ladder):\n" + "\n".join(
        f"  {g.describe()}" for g in growths
    )


def _problem(result: CaseResult) -> str:
    out = result.outcome
    if out.status is Status.OK and out.leaked:
        named = result.processes_left
        shown = f": {'; '.join(first_line(n) for n in named)}" if named else ""
        more = f" and {out.leaked - len(named)} more" if named and out.leaked > len(named) else ""
        return f"left {out.leaked} process(es) running after it returned (killed){shown}{more}"
    if out.status is Status.OK and result.threads_left:
        names = ", ".join(repr(first_line(n)) for n in result.threads_left)
        return (
            f"left non-daemon thread(s) running after it returned ({names}): the interpreter "
            "waits for them at exit, so a trainer calling it cannot end"
        )
    if out.error:
        return first_line(out.error)
    return out.describe()


def item_properties(
    check: ScorerCheck,
    family: str,
    results: list[CaseResult],
    verdict: Verdict,
    growth: list[Growth],
) -> list[tuple[str, object]]:
    """The item's ``user_properties``: JUnit properties, and what the controller's summary reads."""
    record = item_record(check, family, results, verdict, growth)
    timeouts = sum(r.outcome.status is Status.TIMEOUT for r in results)
    properties: list[tuple[str, object]] = [
        (PROPERTY, as_json(record)),
        (VERDICT_PROPERTY, verdict.kind.value),
        ("reward_hang_cases", len(results)),
        ("reward_hang_timeouts", timeouts),
    ]
    if verdict.entry is not None:
        carried: dict[str, Any] = {"id": check.scorer.id, "family": family, "entry": verdict.entry}
        comparison = verdict.comparison
        if comparison is not None:
            carried["comparison"] = {
                "status": comparison.status,
                "reason": comparison.reason,
                "regressions": list(comparison.regressions),
                "elsewhere": comparison.elsewhere,
                "replayed": verdict.replayed,
            }
            properties.append(("reward_hang_compare", comparison.status))
        properties.append((BASELINE_PROPERTY, as_json(carried)))
    return properties


def not_run_properties(check: ScorerCheck, family: str, reason: str) -> list[tuple[str, object]]:
    """The ``user_properties`` of an item skipped for its scorer's sake (it hangs on anything,
    or cannot be checked): the JSON report lists the family under its scorer's ``not_run``."""
    record = {"id": check.scorer.id, "family": family, "reason": reason}
    return [(NOT_RUN_PROPERTY, as_json(record))]


def item_record(
    check: ScorerCheck,
    family: str,
    results: list[CaseResult],
    verdict: Verdict,
    growth: list[Growth],
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": check.scorer.id,
        "spec": check.scorer.spec,
        "family": family,
        "verdict": verdict.kind.value,
        "style": check.style,
        "skipped": verdict.skipped,
        "expect_hang": check.scorer.expect_hang,
        "deadline": check.deadline,
        "cases": [
            {
                "id": r.case.id,
                "family": r.case.family,
                "chars": r.chars,
                "status": str(r.outcome.status),
                "wall_s": round(r.outcome.wall_s, 4),
                "cpu_s": round(r.outcome.cpu_s, 4),
                "leaked": r.outcome.leaked,
                "left": r.processes_left + [f"thread {name}" for name in r.threads_left],
                "fresh_status": str(r.fresh.status) if r.fresh else None,
                "fresh_wall_s": round(r.fresh.wall_s, 4) if r.fresh else None,
                "first_status": str(r.unconfirmed.status) if r.unconfirmed else None,
                "hang": r.hangs,
                "confirmed": r.confirmed or None,
                "context": r.context,
                "ground_truth": r.case.ground_truth if check.takes_truth else None,
                **_where(r, check),
                "saved": str(r.saved) if r.saved else None,
            }
            for r in results
        ],
        "growth": [g.as_dict() for g in growth],
    }
    # Where an annotation goes when no frame says better: a timeout, or a gate's verdict.
    gated = verdict.kind in (Kind.REGRESSED, Kind.NO_LONGER_HANGS) or check.scorer.expect_hang
    if gated or any(r.outcome.status is Status.TIMEOUT for r in results):
        file, line = check.source
        if file is not None and line is not None:
            record["defined_at"] = [_relative(str(file), check.rootdir), line]
    if "known" in check.scorer.extra:
        record["known_from"] = check.scorer.extra["known"]
    if check.search_signal is not None:  # the search family's, set as it ran
        record["search_signal"] = check.search_signal
    if verdict.problem:
        record["problem"] = verdict.problem
    return record


def stuck_of(outcome: Outcome, check: ScorerCheck) -> Stuck:
    """Where one of ``check``'s calls was stuck (nothing for a call that did not time out)."""
    if outcome.status is not Status.TIMEOUT:
        return Stuck()
    return find_stuck_in(outcome.stack, check.scorer.spec, check.rootdir, _defined_in(check))


def _defined_in(check: ScorerCheck) -> str | None:
    """The file the scorer's import reported defining it, once the check has imported it."""
    info = getattr(check, "info", None) or getattr(check, "_info", None)
    file = getattr(info, "file", None)
    return file if isinstance(file, str) else None


def _where(result: CaseResult, check: ScorerCheck) -> dict[str, Any]:
    """A case's ``stuck_at`` (the scorer's own innermost frame), ``innermost`` (the innermost
    frame overall) and ``stack_truncated``, as its JSON record says them."""
    stuck = stuck_of(result.outcome, check)
    return {
        "stuck_at": list(stuck.own[0]) if stuck.own else None,
        "innermost": list(stuck.innermost) if stuck.innermost else None,
        "stack_truncated": stuck.truncated or stuck.cut,
    }


class Summary:
    """Per-scorer results gathered from item reports (so xdist workers' results count too)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        #: ``{id, family, entry, comparison?}`` per item that measured a baseline entry.
        self.baselines: list[dict[str, Any]] = []
        #: ``{id, family, reason}`` per item skipped for its scorer's sake.
        self.not_run: list[dict[str, Any]] = []

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def add_not_run(self, record: dict[str, Any]) -> None:
        self.not_run.append(record)

    def add_baseline(self, carried: dict[str, Any]) -> None:
        self.baselines.append(carried)

    def baseline_entries(self) -> list[tuple[str, str, dict[str, Any]]]:
        """What ``--reward-hang-save-baseline`` writes: entries of the items that passed."""
        passed = {(r["id"], r["family"]) for r in self.records if r["verdict"] == Kind.OK}
        return [
            (b["id"], b["family"], b["entry"])
            for b in self.baselines
            if (b["id"], b["family"]) in passed
        ]

    def baseline_lines(self) -> list[str]:
        """New entries (and why) and confirmed regressions, one line each (:func:`shown`: they
        quote the baseline file's strings)."""
        return [shown(line) for line in self._baseline_lines()]

    def _baseline_lines(self) -> list[str]:
        lines = []
        compared = [b for b in self.baselines if b.get("comparison") is not None]
        within = sum(b["comparison"]["status"] == "ok" for b in compared)
        if compared:  # so a gate that compared and passed says so
            lines.append(
                f"compared {len(compared)} entries with the baseline: {within} within limits"
            )
        for elsewhere in sorted({b["comparison"].get("elsewhere") or "" for b in compared} - {""}):
            lines.append(
                f"the baseline was measured elsewhere ({elsewhere}): CPU times are scaled by "
                "each machine's calibration, which cannot make up for every difference"
            )
        for carried in sorted(self.baselines, key=lambda b: (b["id"], b["family"])):
            comparison = carried.get("comparison")
            if comparison is None or comparison["status"] == "ok":
                continue
            name = f"{carried['id']}::{carried['family']}"
            if comparison["status"] == "new":
                lines.append(f"new baseline entry {name}: {comparison['reason']}")
            else:
                lines.append(f"regressed {name}: " + "; ".join(comparison["regressions"]))
        return lines

    def scorers(self) -> list[dict[str, Any]]:
        merged: dict[str, dict[str, Any]] = {}
        for record in sorted(self.records, key=lambda r: (r["id"], r["family"])):
            entry = merged.setdefault(
                record["id"],
                {
                    "id": record["id"],
                    "spec": record["spec"],
                    "style": None,
                    "cases": [],
                    "skipped": 0,
                    "not_run": [],
                    "verdicts": [],
                    "growth": [],
                },
            )
            entry["cases"] += record["cases"]
            entry["skipped"] += record.get("skipped", 0)
            entry["style"] = entry["style"] or record.get("style")
            entry["growth"] += [{**g, "family": record["family"]} for g in record.get("growth", [])]
            entry["verdicts"].append(record["verdict"])
            entry["expect_hang"] = record.get("expect_hang", False)
            if "known_from" in record:
                entry["known_from"] = record["known_from"]
            if "search_signal" in record:
                entry["search_signal"] = record["search_signal"]
            if "problem" in record:  # why it could not be checked, as the failure says
                entry.setdefault("problem", record["problem"])
        for skipped in sorted(self.not_run, key=lambda r: (r["id"], r["family"])):
            if skipped["id"] in merged:
                entry = merged[skipped["id"]]
                entry["not_run"].append({"family": skipped["family"], "reason": skipped["reason"]})
        for carried in self.baselines:
            if carried["id"] in merged:
                found = {**carried["entry"], "comparison": carried.get("comparison")}
                merged[carried["id"]].setdefault("baseline", {})[carried["family"]] = found
        for entry in merged.values():
            entry["status"] = rollup(entry.pop("verdicts"), entry["expect_hang"]).value
        return list(merged.values())

    def fails(self) -> bool:
        """Whether some scorer's verdict fails the run (``expect=hang`` ones with passing items)."""
        return any(Kind(entry["status"]).fails for entry in self.scorers())

    def no_longer_hanging(self) -> list[tuple[str, str]]:
        """``(scorer id, why it fails)`` for each scorer expected to hang (``expect=hang``, or
        listed whole in ``reward_hang_known``) that hung on none of the families that ran. An
        item listed alone fails as that item, and says so itself."""
        found = []
        for entry in self.scorers():
            if entry["status"] != Kind.NO_LONGER_HANGS or not entry["expect_hang"]:
                continue
            where, fix = (
                ("listed in reward_hang_known", "remove the entry")
                if "known_from" in entry
                else ("declared expect=hang", "remove expect=hang")
            )
            why = f"{where}, but none of its families hung: if the scorer is fixed, {fix}"
            found.append((entry["id"], why))
        return found

    def table(self) -> list[str]:
        """The terminal's table, a row per scorer; then, for each scorer whose search ran,
        what steered it."""
        entries = self.scorers()
        rows = [
            (
                "scorer",
                "style",
                "cases",
                "skipped",
                "worst wall",
                "p95 wall",
                "timeouts",
                "errors",
                "verdict",
                "growth",
            )
        ]
        for entry in entries:
            walls = sorted(case["wall_s"] for case in entry["cases"]) or [0.0]
            timeouts = sum(case["status"] == "timeout" for case in entry["cases"])
            errors = sum(
                case["status"] in ("error", "crashed", "memory") for case in entry["cases"]
            )
            p95 = walls[min(len(walls) - 1, int(0.95 * len(walls)))]
            steepest = max(entry["growth"], key=lambda g: g["exponent"], default=None)
            growth = f"n^{steepest['exponent']:.1f} ({steepest['family']})" if steepest else "-"
            rows.append(
                (
                    entry["id"],
                    entry["style"] or "-",
                    str(len(entry["cases"])),
                    str(entry["skipped"]),
                    f"{walls[-1]:.2f} s",
                    f"{p95:.2f} s",
                    str(timeouts),
                    str(errors),
                    entry["status"],
                    growth,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        return [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            for row in rows
        ] + [
            f"{entry['id']}: its search was {entry['search_signal']}"
            for entry in entries
            if "search_signal" in entry
        ]

    def write_json(self, path: Path, settings: dict[str, Any]) -> None:
        document = {"settings": settings, "scorers": self.scorers()}
        path.write_text(as_json(document, indent=2) + "\n", encoding="utf-8")

    def github(self, step_summary: str | None) -> list[str]:
        """``::error`` annotations at each stuck line, and the table for the step summary."""
        lines = []
        regressions = {
            (b["id"], b["family"]): "; ".join(b["comparison"]["regressions"])
            for b in self.baselines
            if b.get("comparison")
        }
        for record in self.records:
            name = f"{record['id']}::{record['family']}"
            if record["verdict"] == Kind.REGRESSED:
                why = regressions.get((record["id"], record["family"]))
                text = f"{name} regressed against the baseline" + (f": {why}" if why else "")
                lines.append(_error("reward hang regressed", text, record.get("defined_at")))
            if record["verdict"] == Kind.NO_LONGER_HANGS:
                text = f"{name} no longer hangs: if it is fixed, remove it from reward_hang_known"
                lines.append(_error("reward hang fixed", text, record.get("defined_at")))
            if record["verdict"] not in (Kind.HANG, Kind.SLOW):
                continue
            for case in record["cases"]:
                if case["status"] == "timeout":
                    lines.append(_annotation(record, case))
        for scorer_id, why in self.no_longer_hanging():
            places = (r.get("defined_at") for r in self.records if r["id"] == scorer_id)
            place = next((found for found in places if found), None)
            lines.append(_error("reward hang fixed", f"{scorer_id}: {why}", place))
        if step_summary:
            with open(step_summary, "a", encoding="utf-8") as f:
                f.write("### Reward hang check\n\n" + _markdown_table(self.scorers()) + "\n")
        return lines


def _annotation(record: dict[str, Any], case: dict[str, Any]) -> str:
    """One ``::error`` at the scorer's own innermost frame, naming the innermost frame too.

    When the dump holds no frame of the scorer's own code (a recursion deeper than
    faulthandler's 100 frames), it goes on the scorer's ``def`` line and says why.
    """
    what, title = ("hangs", "reward hang") if case["hang"] else ("is slow", "reward slow")
    text = f"{record['id']} {what} on {case['id']} ({case['chars']} chars)"
    stuck, innermost = case.get("stuck_at"), case.get("innermost")
    place = stuck or record.get("defined_at")
    if stuck:
        text += f": stuck at {_frame(tuple(stuck))}"
    elif case.get("stack_truncated"):
        text += (
            ": the scorer's own frames are not in the stack dump (a recursion deeper than the "
            f"{DUMP_DEPTH} frames faulthandler keeps, or a dump cut short)"
        )
    if innermost and innermost != stuck:
        text += f"; innermost frame {_frame(tuple(innermost))}"
    return _error(title, text, place)


def _error(title: str, text: str, place: list[Any] | tuple[Any, ...] | None) -> str:
    """An ``::error`` annotation, on ``place`` (``[file, line]``) when there is one."""
    if place:
        file, line = _property(shown(str(place[0]))), int(place[1])
        return f"::error file={file},line={line},title={_property(title)}::{_data(shown(text))}"
    return f"::error title={_property(title)}::{_data(shown(text))}"


def _data(text: str) -> str:
    """An annotation's message, escaped as GitHub's toolkit does: one line."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """An annotation's property (``file=``, ``title=``), escaped as GitHub's toolkit does: a
    file name with ``,`` or ``:`` set other properties of its own (``line=``, ``title=``)."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _markdown_table(scorers: list[dict[str, Any]]) -> str:
    rows = [
        "| scorer | style | cases | skipped | timeouts | verdict |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for entry in scorers:
        timeouts = sum(case["status"] == "timeout" for case in entry["cases"])
        rows.append(
            f"| `{entry['id']}` | {entry['style'] or '-'} | {len(entry['cases'])} | "
            f"{entry['skipped']} | {timeouts} | {entry['status']} |"
        )
    return "\n".join(rows)


def as_json(value: Any, indent: int | None = None) -> str:
    """``value`` as strict JSON, NaN and infinities as null: the JSON report, and the JUnit
    properties (a killed call's CPU time, NaN, made them unreadable to a strict parser)."""
    return json.dumps(_jsonable(value), indent=indent, sort_keys=True, allow_nan=False)


def _jsonable(value: Any) -> Any:
    """``value`` with NaN and infinities as null (JSON has no such numbers: unreadable times),
    and its strings as UTF-8 can hold them (:func:`strict`: a lone surrogate a scorer raised)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return strict(value)
    if isinstance(value, dict):
        return {_jsonable(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value
