"""Checking one scorer: import it once in a warm worker, call its example, then feed it cases.

Cases run one after another in a long-lived worker, as a trainer would call the scorer (some
libraries slow down as state accumulates); a case that times out, runs out of memory or crashes
is run again in a fresh worker, to say whether it does so on its own. A timeout is a hang only
when the fresh worker is still running it at ``--reward-hang-confirm`` deadlines (ten); one that
ends sooner is slow.

Each scorer is called in one or more contexts (``_calls.ScorerCall``): the first runs every case;
each further one runs the example and the slowest cases the first context finished or found
slow, which is where a context-dependent guard (an alarm that only works on the main thread)
shows.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_rewardhang.corpus import _cases, _format, _found, _frames, _growth, _harvest, _steer
from pytest_rewardhang.corpus._cases import Case
from pytest_rewardhang.corpus._format import Formula
from pytest_rewardhang.guard import run
from pytest_rewardhang.guard._limits import MAX_BUDGET_S
from pytest_rewardhang.guard._outcome import Outcome, Status
from pytest_rewardhang.guard._spec import SpecError, is_file_target, split_spec

from . import _calls, _source, _workers
from ._options import Settings
from ._scorers import ScorerSpec
from ._shown import first_line

#: Importing a scorer (sympy, torch, ...) may take far longer than one call is allowed.
IMPORT_BUDGET_S = 120.0
#: Cases of each family run again in each further context: the slowest the first one finished
#: (or found slow).
SLOWEST_AGAIN = 2
#: Families generated per scorer at run time, after the corpus families.
HARVESTED = "harvested"
#: The response a scorer is tried on after a family hangs on its smallest case: one that hangs
#: on this hangs on anything, and its further families are not run (``hangs_on_anything``).
TRIVIAL = {"math": "0", "text": "0", "code": "pass\n"}
SEARCH = "search"
#: What a code scorer's example must score above, or at least otherwise: a program that fails.
FAILING_PROGRAM = "raise SystemExit('a program that fails on purpose')\n"
#: A formula's size slow in no more than this many times the time of the size below it sends the
#: check to its largest size; that slow within this factor again, a bound holds it (_after_slow).
FLAT = 1.5


@dataclass
class CaseResult:
    case: Case
    chars: int
    outcome: Outcome
    #: The timed-out, out-of-memory or crashed case run again in a fresh worker; None when it
    #: was not re-run.
    fresh: Outcome | None = None
    saved: Path | None = None
    kwargs: dict[str, Any] = field(default_factory=dict, repr=False)
    #: Where it was called (``_options.CONTEXTS``); ``again``: in a further context, on a case
    #: the first one ran (not part of growth fits or baselines).
    context: str = "thread"
    again: bool = False
    #: What the failure line adds: why a context-only failure matters and what to do; on a
    #: formula's largest size run ahead, which cases it spared (``ScorerCheck._after_slow``).
    note: str = ""
    #: A memory or crash outcome in the long-lived worker that a fresh worker did not confirm
    #: (the call alone stayed within its limits, and ``outcome`` is the fresh one), or a
    #: timeout its replay did not (``outcome`` is the replay's: ``ScorerCheck._replay``).
    unconfirmed: Outcome | None = None
    #: A timeout only the long-lived worker had, and again when the calls that worker answered
    #: before it ran again first in a new one (``ScorerCheck._replay``).
    replayed: bool = False
    #: Why a timeout is a hang, one phrase (see ``ScorerCheck._confirm``); "" for a case that is
    #: only slow, or that timed out only in the long-lived worker.
    confirmed: str = ""

    @property
    def said(self) -> dict[str, Any]:
        """What the call said of itself (``_calls.left_behind``): its score, what it left."""
        value = self.outcome.value
        return value if isinstance(value, dict) else {}

    @property
    def threads_left(self) -> list[str]:
        """The non-daemon threads the call started and left running (they keep the process
        from exiting)."""
        return [str(name) for name in self.said.get("threads") or []]

    @property
    def processes_left(self) -> list[str]:
        """The processes the call left running, named, when the guard killed some."""
        return [str(name) for name in self.said.get("left") or []] if self.outcome.leaked else []

    @property
    def hangs(self) -> bool:
        """A timeout shown to be a hang, not a slow case (or an expected hang, re-run once)."""
        return self.outcome.status is Status.TIMEOUT and bool(self.confirmed)

    @property
    def slow(self) -> bool:
        """A timeout that is no hang: the fresh worker finished it."""
        return (
            self.outcome.status is Status.TIMEOUT
            and not self.confirmed
            and self.fresh is not None
            and self.fresh.status is Status.OK
        )

    @property
    def took(self) -> float:
        """The call's wall time; for a slow case, its fresh re-run's."""
        return self.fresh.wall_s if self.slow and self.fresh is not None else self.outcome.wall_s

    @property
    def called(self) -> str:
        """Where it was called, for the failure message: ``on the main thread (main)``."""
        return f"called {_calls.CONTEXT_NAMES[self.context]} (context {self.context})"


class ScorerProblem(Exception):
    """The scorer cannot be checked at all: import, signature, example. One line."""


class ScorerCheck:
    def __init__(self, scorer: ScorerSpec, settings: Settings, rootdir: Path) -> None:
        self.scorer = scorer
        self.settings = settings
        self.rootdir = rootdir
        self.deadline = scorer.deadline or settings.deadline
        self.memory_mb = scorer.memory_mb or settings.memory_mb
        corpus = _cases.load_corpus(settings.corpora)
        self.cases = _cases.cases_for(
            scorer.kind, settings.max_chars, settings.seed, corpus, settings.families
        )
        self._harvested: list[Case] | None = None
        self._units: list[str] = []
        self._patterns: list[str] = []
        self._literals: list[str] = []
        self._markers: list[str] = []
        self._fields: list[str] = []
        self.spec = _absolute(scorer.spec, rootdir)
        self._info: _calls.ScorerInfo | None = None
        self._example: dict[str, Any] | None = None
        self._problem: ScorerProblem | None = None
        self.problem_reported = False
        #: The scorer's processes: each context's warm worker, and the fresh ones.
        self.workers = _workers.Workers(
            self.spec, str(rootdir), self.deadline, self.memory_mb, code=scorer.kind == "code"
        )
        #: Where the scorer is called, the first context running every case; set by _prepare.
        self.contexts: tuple[str, ...] = ()
        #: The example's outcome in each further context, and whether its failure was reported.
        self._again_example: dict[str, Outcome] = {}
        self._again_reported: set[str] = set()
        #: Per family, the cases not run after its hang was confirmed (set by run_family).
        self.skipped: dict[str, int] = {}
        #: What the search's probes were measured by (``_measure``'s signal), or why none was:
        #: said in the report whether or not the search found anything. Set by _search, for
        #: the family running.
        self.search_signal: str | None = None
        #: The running family is expected to hang (``expect=hang``, ``reward_hang_known``): its
        #: timeouts are re-run for one deadline, not taken to ``--reward-hang-confirm``.
        self._expected = False
        #: Once a trivial response hung too: the family whose smallest case showed it, and what
        #: the scorer's further families are skipped with. Tried once (``_tried_trivial``).
        self.hangs_on_anything: tuple[str, str] | None = None
        self._tried_trivial = False

    @functools.cached_property
    def source(self) -> tuple[Path | None, int | None]:
        """The scorer's file and ``def`` line, found without importing it (once: each item's
        location, its annotations and its baseline's source hash read it)."""
        return _source.locate(self.spec, self.rootdir)

    def families(self) -> list[str]:
        found = _cases.families(self.cases)
        if self.scorer.kind != "code":
            generated = [HARVESTED] + ([SEARCH] if self.settings.search else [])
            chosen = self.settings.families
            found += [name for name in generated if chosen is None or name in chosen]
        return found

    def case_count(self, family: str) -> int:
        """How many cases the family runs at most (for the item's outer timeout)."""
        rungs = len(_harvest_sizes(self.settings.max_chars))
        # Each further context: its example, and the slowest cases, each maybe run twice.
        again = 2 * (1 + 2 * SLOWEST_AGAIN) + math.ceil(self.settings.confirm)
        again += math.ceil(self.settings.confirm)  # the trivial response (_try_trivial)
        if family == HARVESTED:
            return (_harvest.MAX_UNITS + _harvest.MAX_ATTACKS) * rungs + 2 + again
        if family == SEARCH:
            return self.settings.search + 2 + again
        ladder = [case for case in self.cases if case.family == family]
        if self.scorer.kind == "code":
            return len(ladder) + again
        # The plan run_family runs, at its largest: a ground truth taken, every frame made.
        frames = [_frames.Frame("", "", "")] * _frames.MAX_FRAMES
        return len(plan(ladder, frames, takes_truth=True)) + again

    @property
    def hang_bound(self) -> float:
        """The seconds a timed-out case's fresh re-run must still be running at to be a hang:
        ``--reward-hang-confirm`` deadlines."""
        return min(self.settings.confirm * self.deadline, MAX_BUDGET_S)

    @property
    def _confirm_budget(self) -> float | None:
        """What a timed-out case's fresh re-run is given: the hang bound, or None (the deadline)
        for a family expected to hang, where that it still hangs is all the run asks."""
        return None if self._expected else self.hang_bound

    @property
    def primary(self) -> str:
        return self.contexts[0] if self.contexts else "thread"

    def run_family(self, family: str, *, expect_hang: bool = False) -> list[CaseResult]:
        """Run the family's cases in order, smallest first, up to the first confirmed hang or
        the slow case its largest size shows a bound holds.

        Sizes above a response that already hangs on its own would only hang longer; the
        smallest hanging input is the useful reproduction. A slow case whose formula's time
        still grows does not stop it: the next size may be the hang (a cubic regex is slow at
        2 KiB and hung at 4 KiB). Otherwise the family's largest size of it runs at once
        (:meth:`_after_slow`), and a bound that holds that too stops the family: each further
        case would cost a deadline and its re-run to say "slow" again.
        ``expect_hang``: the family is expected to hang, and its timeouts need no confirming
        past one deadline.
        """
        info, example = self._prepare()
        self.skipped[family] = 0
        self.search_signal = None
        self._expected = expect_hang
        if family == SEARCH:
            results = self._search(info, example)
        else:
            cases = self.family_cases(family, info, example)
            results = []
            #: Largest sizes run ahead of their turn, by case id.
            ahead: dict[str, CaseResult] = {}
            for index, case in enumerate(cases):
                result = ahead.pop(case.id, None) or self._run_case(case)
                results.append(result)
                later = cases[index + 1 :]
                # A timeout its fresh re-run finished under the deadline was the long-lived
                # worker's (a busy machine): no reason to stop.
                slow = result.slow and result.took >= self.deadline
                stop = result.hangs or (slow and self._after_slow(results, later, ahead))
                if stop:
                    # Every further case would only cost a deadline more. What ran ahead of
                    # its turn is reported after it.
                    results += ahead.values()
                    self.skipped[family] = sum(c.id not in ahead for c in later)
                    if result.hangs and index == 0 and not self._tried_trivial:
                        self._try_trivial(family)
                    break
            self._save_found(results)
        for context in self.contexts[1:]:
            results += self._again(context, example, results)
        return results

    def _run_case(self, case: Case) -> CaseResult:
        """One case in the first context's warm worker, judged (see :meth:`_judge`)."""
        kwargs = self.kwargs_for(case)
        result = CaseResult(case, len(case.text), self.workers.call(self.primary, kwargs))
        return self._judge(result, kwargs, self.primary)

    def _after_slow(
        self, results: list[CaseResult], later: list[Case], ahead: dict[str, CaseResult]
    ) -> bool:
        """After a slow case (the last of ``results``): whether the family stops there.

        A formula whose time still grows (its size below took under :data:`FLAT` times less)
        goes on up its ladder: the next size may hang. Otherwise (its time flat, or its first
        size slow already) its largest size runs at once (into ``ahead``): slow too, in about as
        long (Math-Verify's 5 s signal alarm holds every size at 5 s on the main thread), a
        bound of the scorer's own holds it and the family stops; quick, hung or failed
        otherwise, the ladder goes on as it was, so the smallest size that hangs is the one
        reported, and that run is used in its turn. A slow case with no larger size of its own
        (a literal response, a ground-truth or framed variant, a formula's largest) stops the
        family: it is slow already, and every further case would cost a deadline and its
        re-run to say so again.
        """
        slow = results[-1]
        formula = slow.case.formula_id
        same = [case for case in later if formula is not None and case.formula_id == formula]
        if not same:
            if later:
                slow.note = (
                    f"stopped at this slow case: {len(later)} case(s) after it not run, each a "
                    "deadline and its re-run to say so again"
                )
            return True
        below = next((r for r in reversed(results[:-1]) if r.case.formula_id == formula), None)
        if below is not None and below.took * FLAT < slow.took:
            return False
        largest = same[-1]  # the family's cases run smallest first
        top = ahead.get(largest.id) or self._run_case(largest)
        ahead[largest.id] = top
        if not (top.slow and top.took <= FLAT * slow.took):
            return False
        top.note = (
            f"{len(later) - 1} case(s) between {slow.chars} and {top.chars} chars and after "
            f"not run: it took {top.took:.2f} s at {top.chars}, about as long as at "
            f"{slow.chars} ({slow.took:.2f} s), so a bound of the scorer's own holds it"
        )
        return True

    def _try_trivial(self, family: str) -> None:
        """After ``family`` hung on its smallest case: whether the scorer hangs on a trivial
        response too, confirmed as a case is. One that does hangs whatever it is given, and
        each further family would only cost its confirmation (ten deadlines) to say so again."""
        self._tried_trivial = True
        info, example = self._prepare()
        text = TRIVIAL[self.scorer.kind]
        kwargs = _calls.with_case(info, example, self.scorer.kind, text)
        out = self.workers.fresh(kwargs, self.primary, self._confirm_budget)
        if out.status is Status.TIMEOUT:
            self.hangs_on_anything = (
                family,
                f"it hangs on a trivial response too ({text!r}: a fresh worker still ran it at "
                f"{self._confirm_budget or self.deadline:g} s), so its other families are not run",
            )

    def family_cases(
        self, family: str, info: _calls.ScorerInfo, example: dict[str, Any]
    ) -> list[Case]:
        """The family's cases in the order they run (:func:`plan`), in the frames of the
        example's response and of the strings the scorer's source looks for."""
        if family == HARVESTED:
            return [case for case in self._harvest(example) if case.family == family]
        cases = [case for case in self.cases if case.family == family]
        if self.scorer.kind == "code":
            return cases
        self._harvest(example)  # the markers
        response = _calls.response_text(info, example)
        truth = _calls.truth_text(info, example)
        frames = _frames.frames(response, truth, self._markers, self._fields)
        first = family == self.cases[0].family  # the run's first response family
        return plan(cases, frames, takes_truth=_calls.takes_truth(info, example), first=first)

    @property
    def takes_truth(self) -> bool:
        """Whether cases' ground truths reach the scorer (False until it is described)."""
        if self._info is None or self._example is None:
            return False
        return _calls.takes_truth(self._info, self._example)

    @property
    def style(self) -> str | None:
        """The call style the check chose (None until the scorer is described)."""
        return self._info.style if self._info is not None else None

    def _again(
        self, context: str, example: dict[str, Any], first: list[CaseResult]
    ) -> list[CaseResult]:
        """The example, then the slowest cases the first context finished (or found slow), in
        ``context``."""
        out = self._again_example.get(context)
        if out is None:
            out = self.workers.call(context, example)
            if out.status in _CONFIRMED:  # a benign call: a slow start on a busy machine?
                fresh = self.workers.fresh(example, context)
                out = fresh if fresh.status is Status.OK else out
            self._again_example[context] = out
        if out.status is not Status.OK:
            if context in self._again_reported:  # said once; its cases would all fail alike
                return []
            self._again_reported.add(context)
            result = CaseResult(_example_case(self._info, example), 0, out, context=context)
            result.chars = _calls.response_length(example.get(self._response_arg()))
            result.again = True
            result.note = self._context_note(context, out)
            return [self._judge(result, example, context)]
        if any(r.hangs for r in first):
            return []  # the family already hangs on its own: more of it would only cost time
        # The slow cases too, by the time their fresh re-run took: one a signal alarm bounds on
        # the main thread (Math-Verify's) may have no bound at all off it.
        finished = [
            r
            for r in first
            if (r.outcome.status is Status.OK or r.slow) and not r.again
            if r.case.family != "example"
        ]
        slowest = sorted(finished, key=lambda r: -r.took)[:SLOWEST_AGAIN]
        results = []
        for done in sorted(slowest, key=lambda r: r.chars):
            kwargs = self.kwargs_for(done.case)
            result = CaseResult(
                done.case, done.chars, self.workers.call(context, kwargs), context=context
            )
            result.again = True
            results.append(self._judge(result, kwargs, context))
            if result.hangs:
                break  # the smaller one hangs on its own: the larger would only hang longer
        return results

    def _context_note(self, context: str, out: Outcome) -> str:
        """What a failure of the example in a further context says: that it works in the first
        context, what it raises in this one, why that matters and what to do."""
        first = _calls.CONTEXT_NAMES[self.primary]
        here = _calls.CONTEXT_NAMES[context]
        error = _first_line(out).replace(f"{self.rootdir}/", "")
        if error.startswith("raises off the main thread"):  # ScorerCall saw signal.signal fail
            detail = error.removeprefix("raises off the main thread: ")
            return f"works {first} but raises off it: {detail}{_calls.OFF_MAIN_WHY}"
        if context == "thread" and self.primary != "thread":
            return f"works {first} but raises {here}: {error}{_calls.OFF_MAIN_WHY}"
        return f"works {first} but fails {here}: {error}"

    def _response_arg(self) -> str:
        return self._info.response_arg if self._info is not None else ""

    def kwargs_for(self, case: Case) -> dict[str, Any]:
        info, example = self._prepare()
        kwargs = _calls.with_case(info, example, self.scorer.kind, case.text)
        if case.ground_truth is not None:
            kwargs = _calls.with_truth(info, kwargs, case.ground_truth)
        return kwargs

    def _judge(self, result: CaseResult, kwargs: dict[str, Any], context: str) -> CaseResult:
        """Confirm a failed case in a fresh worker, and save its input."""
        result.kwargs = kwargs
        result.context = context
        status = result.outcome.status
        if status is Status.TIMEOUT:
            self._confirm(result)
            if result.slow and result.took < self.deadline:
                self._replay(result)
        elif status in _CONFIRMED:
            result.fresh = self.workers.fresh(kwargs, context)
            if result.fresh.status is Status.OK:
                # Memory or a crash the long-lived worker had built up, not this call's own:
                # a fresh worker ran the call alone within its limits.
                result.unconfirmed, result.outcome = result.outcome, result.fresh
        if result.outcome.status is not Status.OK or result.outcome.leaked or result.threads_left:
            result.saved = self._save(result)
        return result

    def _confirm(self, result: CaseResult) -> None:
        """Run a timed-out case again in a fresh worker, and say whether it hangs
        (``Workers.confirm``). A slow case does not stop its ladder unless a bound holds it
        (:meth:`_after_slow`), so the larger sizes run on, each shown for itself."""
        result.fresh, result.confirmed = self.workers.confirm(
            result.kwargs, result.context, self.hang_bound, expected=self._expected
        )

    def _replay(self, result: CaseResult) -> None:
        """A timeout a fresh worker did not repeat (it finished under the deadline): earlier
        calls slowed the long-lived worker, or a busy machine starved it. Replayed after the
        calls that worker answered before it (``Workers.replay``): a timeout again is the earlier
        calls' doing (``replayed``); an answer in time stands for the case, and the first
        timeout was the machine's (``unconfirmed``). Where the replay's earlier calls do not all
        answer again, the case stays slow, as it was.
        """
        again = self.workers.replay(result.context, result.kwargs)
        if again is None:
            return
        if again.status is Status.OK and again.wall_s < self.deadline:
            result.unconfirmed, result.outcome = result.outcome, again
        else:
            result.replayed = True

    def _harvest(self, example: dict[str, Any]) -> list[Case]:
        """Cases from the scorer's own vocabulary, collected once in a throwaway child."""
        if self._harvested is None:
            out = run(
                _harvest.collect,
                (self.spec, str(self.rootdir), example),
                budget=IMPORT_BUDGET_S,
                objects=True,  # our own Vocabulary, built by our code in the child
            )
            vocabulary = out.value if out.status is Status.OK else _harvest.Vocabulary()
            self._units = _harvest.units(vocabulary)
            self._patterns = vocabulary.patterns
            self._literals = vocabulary.literals
            self._markers = vocabulary.markers
            self._fields = vocabulary.fields
            self._harvested = harvested_cases(vocabulary, self.settings.max_chars, self._units)
        return self._harvested

    def _search(self, info: _calls.ScorerInfo, example: dict[str, Any]) -> list[CaseResult]:
        from pytest_rewardhang.corpus import (
            _search,  # Hypothesis is imported only when a search is asked for
        )

        self._harvest(example)
        units = self._units or ["a"]

        def probe(text: str) -> Outcome:
            return self.workers.call(
                self.primary, _calls.with_case(info, example, self.scorer.kind, text)
            )

        takes_truth = _calls.takes_truth(info, example)

        def steer(text: str, truth: str | None, measure: bool) -> Outcome:
            kwargs = _calls.with_case(info, example, self.scorer.kind, text)
            if truth is not None and takes_truth:
                kwargs = _calls.with_truth(info, kwargs, truth)
            out = self.workers.call(self.primary, {**kwargs, _calls.MEASURE: measure})
            read = _steer.reading(out.value) if measure else None
            if read is not None and read.signal:
                self.search_signal = f"steered by {read.signal}"
            return out

        self.search_signal = (
            "not steered (--reward-hang-steer off)" if not self.settings.steer else None
        )

        database = self.rootdir / ".reward-hang" / "search" / self.scorer.id
        ran = _search.search(
            probe,
            units,
            self.settings.search,
            self.settings.seed,
            database,
            min(self.settings.max_chars, _SEARCH_MAX_CHARS),
            patterns=self._patterns,
            literals=self._literals,
            max_chars=self.settings.max_chars,
            steer=steer if self.settings.steer else None,
            seeds=self._steer_seeds(info, example),
            truths=[shape[1] for shape in _cases.TRUTHS] if takes_truth else [],
        )
        if self.search_signal is None:
            self.search_signal = "not steered (its worker measured nothing)"
        if any(outcome.status is Status.TIMEOUT for _, outcome in ran):
            # The search stops at its first confirmed timeout: the probes it did not spend.
            self.skipped[SEARCH] = max(self.settings.search - len(ran), 0)
        results = []
        for case, outcome in ran:
            kwargs = self.kwargs_for(case)
            if outcome.status is not Status.OK or outcome.leaked:
                result = CaseResult(case, len(case.text), outcome)
                results.append(self._judge(result, kwargs, self.primary))
        # Only the slowest examples are worth a row each; failures always are. Per character,
        # the shortest inputs would win on the call's fixed cost alone.
        slowest = sorted(ran, key=lambda pair: -pair[1].wall_s)[:3]
        for case, outcome in slowest:
            if outcome.status is Status.OK and not outcome.leaked:
                kwargs = self.kwargs_for(case)
                results.append(
                    CaseResult(case, len(case.text), outcome, kwargs=kwargs, context=self.primary)
                )
        self._save_found(results)
        return results

    def _steer_seeds(
        self, info: _calls.ScorerInfo, example: dict[str, Any]
    ) -> list[tuple[str, str | None]]:
        """Where the steered search starts: the example's response as it is, then its answer in
        each of the scorer's frames (``_frames.frames``), with the example's ground truth."""
        response = _calls.response_text(info, example)
        truth = _calls.truth_text(info, example)
        answer = _frames.payload(response)
        found = _frames.frames(response, truth, self._markers, self._fields)
        return [(response, truth), *((frame.wrap(answer), truth) for frame in found)]

    def _save_found(self, results: list[CaseResult]) -> None:
        """``--reward-hang-save``: each input past its deadline, shrunk, as a corpus file."""
        folder = self.settings.save_corpus
        if folder is None:
            return
        if not folder.is_absolute():
            folder = self.rootdir / folder
        for result in results:
            if result.outcome.status is not Status.TIMEOUT:
                continue
            case, text = result.case, result.case.text
            if case.formula is not None:
                passed = [
                    r.chars
                    for r in results
                    if r.case.formula_id == case.formula_id and r.outcome.status is Status.OK
                ]
                text = self._shrink(case, max(passed, default=0))
            _found.write(
                folder,
                case,
                text,
                scorer_id=self.scorer.id,
                kind=self.scorer.kind,
                deadline=self.deadline,
            )

    def _shrink(self, case: Case, passing: int) -> str:
        """The smallest expansion of the case's formula that still runs past the deadline."""
        assert case.formula is not None
        formula = case.formula
        low = max(passing, len(formula.prefix) + len(formula.suffix) + 1)
        high = len(case.text)
        while high > low * 1.25 and high - low > 16:
            middle = (low + high) // 2
            kwargs = self.kwargs_for(
                _replace_text(case, formula.expand(middle, self.settings.seed))
            )
            if self.workers.fresh(kwargs, self.primary).status is Status.TIMEOUT:
                high = middle
            else:
                low = middle
        return formula.expand(high, self.settings.seed)

    def close(self) -> None:
        self.workers.close()

    def _prepare(self) -> tuple[_calls.ScorerInfo, dict[str, Any]]:
        if self._problem is not None:
            raise self._problem
        if self._info is None or self._example is None:
            try:
                self._info, self._example = self._describe_and_try_example()
                self.workers.example = self._example
            except ScorerProblem as problem:
                self._problem = problem
                raise
        return self._info, self._example

    def _describe_and_try_example(self) -> tuple[_calls.ScorerInfo, dict[str, Any]]:
        out = run(
            _calls.describe,
            (self.scorer.spec, str(self.rootdir), self.scorer.response, self.scorer.style),
            budget=IMPORT_BUDGET_S,
            objects=True,  # our own ScorerInfo, built by our code in the child
        )
        if out.status is not Status.OK:
            raise ScorerProblem(_first_line(out))
        info: _calls.ScorerInfo = out.value
        self._info = info
        self.workers.materialize = info.materialize
        self.contexts = contexts_for(info, self.scorer.contexts or self.settings.contexts)
        example = self._load_example(info)
        first = self.workers.call(self.primary, example)
        if first.status is Status.OK:
            self._refuse_blind(info, example, first)
            self.workers.start(self.contexts[1:])
        else:
            where = str(self.scorer.example) if self.scorer.example else "the default example"
            raise ScorerProblem(
                f"the scorer fails on its own example ({where}) "
                f"{_calls.CONTEXT_NAMES[self.primary]}, so no case can be judged: "
                f"{_first_line(first)}; if it needs a step before use (a setup call, a model "
                "loaded), register a function that takes it and then calls the scorer; if the "
                "example does not suit it, give one with example=FILE"
            )
        return info, example

    def _refuse_blind(
        self, info: _calls.ScorerInfo, example: dict[str, Any], first: Outcome
    ) -> None:
        """A code scorer whose own example scores as a program that fails does cannot tell a
        case that reached its tests from one that did not: its sandbox may be broken (its child
        cannot import, every program scores 0), and every case would be ok for nothing."""
        if self.scorer.kind != "code":
            return
        score = _scored(first)
        if score is None:
            return
        failing = _calls.with_case(info, example, "code", FAILING_PROGRAM)
        probe = self.workers.call(self.primary, failing)
        if probe.status is not Status.OK or _scored(probe) != score:
            return
        where = str(self.scorer.example) if self.scorer.example else "the default example"
        raise ScorerProblem(
            f"the scorer's own example ({where}) scores {score:g}, as a program that fails "
            f"does ({FAILING_PROGRAM.strip()!r}): no case can be told from a broken harness "
            "(a sandbox whose child cannot start scores every program alike); fix the harness, "
            "or give an example=FILE it scores as correct"
        )

    def _load_example(self, info: _calls.ScorerInfo) -> dict[str, Any]:
        path = self.scorer.example
        if path is None:
            return _calls.default_example(info, self.scorer.kind)
        try:
            example = json.loads(_format.read_regular(path))
        except OSError as exc:
            raise ScorerProblem(f"example={path}: cannot read it: {exc.strerror}") from None
        except (ValueError, RecursionError) as exc:
            raise ScorerProblem(f"example={path}: not valid JSON: {exc}") from None
        if not isinstance(example, dict):
            raise ScorerProblem(f"example={path}: expected a JSON object of keyword arguments")
        if info.response_arg not in example:
            raise ScorerProblem(
                f"example={path}: has no {info.response_arg!r}, the argument that receives "
                "the response (set response=ARGNAME if that is wrong)"
            )
        return example

    def _save(self, result: CaseResult) -> Path | None:
        folder = self.settings.save_dir / self.scorer.id
        if not folder.is_absolute():
            folder = self.rootdir / folder
        path = folder / f"{result.case.id}.json"
        record = {
            "spec": self.scorer.spec,  # as declared: relative to the rootdir, portable
            "scorer": self.scorer.id,
            "case": result.case.id,
            "family": result.case.family,
            "kind": self.scorer.kind,
            "deadline": self.deadline,
            "memory_mb": self.memory_mb,
            "status": str(result.outcome.status),
            # What repro needs to call it as the check did, and to say how long the input is.
            "context": result.context,
            "style": self._info.style if self._info is not None else None,
            "response_arg": self._response_arg(),
            "materialize": [list(pair) for pair in self._info.materialize] if self._info else [],
            "chars": result.chars,
            "kwargs": result.kwargs,
        }
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps(record, indent=1), encoding="utf-8"
            )  # ASCII: lone surrogates too
        except (OSError, TypeError, ValueError):
            return None
        return path


def _scored(out: Outcome) -> float | None:
    """What the call scored, as ``_calls.left_behind`` said (None: not a number)."""
    score = out.value.get("score") if isinstance(out.value, dict) else None
    return score if isinstance(score, float) else None


def plan(
    ladder: list[Case], frames: list[_frames.Frame], *, takes_truth: bool, first: bool = True
) -> list[Case]:
    """A response family's cases in the order they run, for a math or text scorer: its ladder;
    then, where the scorer takes a ground truth, one of its responses under each shape of
    ground truth and against a long reference (alone too in the ``first`` response family the
    run checks: what a reference alone costs is the same for every family); then that response
    as the answer inside each frame (``_frames``), under each shape of ground truth again.
    ``case_count`` counts the same plan, so an item's outer timeout follows what it runs."""
    cases = list(ladder)
    if takes_truth:
        cases += _cases.truth_variants(ladder)
        cases += _cases.long_reference_variants(ladder, reference_alone=first)
    return cases + _frames.framed_variants(ladder, frames, with_truths=takes_truth)


def growth_of(results: Iterable[CaseResult], max_chars: int) -> list[_growth.Growth]:
    """One power-law fit per formula, over the sizes that finished (timeouts are censored)."""
    by_formula: dict[str, list[CaseResult]] = {}
    for result in results:
        if result.case.formula_id is not None:
            by_formula.setdefault(result.case.formula_id, []).append(result)
    fits = (_growth.fit(name, _points(found), max_chars) for name, found in by_formula.items())
    return sorted((g for g in fits if g is not None), key=lambda g: -g.exponent)


def _points(results: Iterable[CaseResult]) -> list[tuple[int, float]]:
    """``(chars, seconds)`` of the cases that finished in the first context (a further
    context's few cases would be a second, sparser curve)."""
    return [
        (r.chars, _spent(r.outcome))
        for r in results
        if r.outcome.status is Status.OK and not r.again
    ]


def _spent(outcome: Outcome) -> float:
    """The call's CPU time, or its wall time where the CPU time could not be read (NaN)."""
    return outcome.cpu_s if outcome.cpu_s == outcome.cpu_s else outcome.wall_s


#: A cap on search sizes: past it, every example of a linear scorer costs the run real time.
_SEARCH_MAX_CHARS = 16384


def _harvest_sizes(max_chars: int) -> list[int]:
    return _format.ladder(_format.DEFAULT_SIZES, max_chars)


def harvested_cases(
    vocabulary: _harvest.Vocabulary, max_chars: int, units: list[str]
) -> list[Case]:
    cases = []
    formulas = [
        (f"u{i}", f"{unit!r} repeated", Formula("", (unit,), "")) for i, unit in enumerate(units)
    ]
    attacks = [a for pattern in vocabulary.patterns for a in _harvest.attacks(pattern)]
    formulas += [
        (f"regex{i}", f"pumps {attack.units[0]!r} against a regex of the scorer", attack)
        for i, attack in enumerate(attacks[: _harvest.MAX_ATTACKS])
    ]
    for name, description, formula in formulas:
        stem = f"{HARVESTED}-{name}"
        for size in _harvest_sizes(max_chars):
            text = formula.expand(size)
            cases.append(
                Case(
                    f"{stem}-{size}",
                    HARVESTED,
                    text,
                    description,
                    None,
                    formula,
                    stem,
                    "harvested from the scorer's vocabulary",
                )
            )
    return sorted(cases, key=lambda case: len(case.text))


#: Outcomes a fresh worker confirms (or not) before they count as the case's own.
_CONFIRMED = (Status.TIMEOUT, Status.MEMORY, Status.CRASHED)


def contexts_for(info: _calls.ScorerInfo, chosen: tuple[str, ...] | None) -> tuple[str, ...]:
    """Where the scorer is called, in order; the first runs every case.

    Default: the main thread and a worker thread for a sync scorer, an event loop (on the main
    thread) and a worker thread for an async one. An async scorer is always awaited on a loop,
    so for it ``main`` is ``loop``.
    """
    if chosen is None:
        chosen = ("loop", "thread") if info.is_async else ("main", "thread")
    if info.is_async:
        chosen = tuple("loop" if c == "main" else c for c in chosen)
    return tuple(dict.fromkeys(chosen))


def _example_case(info: _calls.ScorerInfo | None, example: dict[str, Any]) -> Case:
    text = "" if info is None else str(example.get(info.response_arg, ""))
    return Case("example", "example", text, "the scorer's own example")


def _replace_text(case: Case, text: str) -> Case:
    return Case(case.id, case.family, text, case.description, case.ground_truth)


def _absolute(spec: str, rootdir: Path) -> str:
    """Workers may run elsewhere than the user's cwd: pin file specs to absolute paths."""
    target, attr = split_spec(spec)
    if is_file_target(target) and not Path(target).is_absolute():
        return f"{(rootdir / target).resolve()}:{attr}"
    return spec


def _first_line(out: Outcome) -> str:
    if out.status is Status.ERROR and out.error:
        line = first_line(out.error)
        for cls in (
            SpecError,
            _calls.CallStyleError,
            _calls.OffMainThread,
        ):  # our own errors speak for themselves
            for prefix in (f"{cls.__module__}.{cls.__qualname__}: ", f"{cls.__qualname__}: "):
                line = line.removeprefix(prefix)
        return line
    return out.describe()
