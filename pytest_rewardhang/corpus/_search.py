"""``--reward-hang-search N``: a search for the inputs that make one scorer slowest.

One budget of ``N`` probes (one call each, through the guarded worker) is spent in phases, and
the search stops at the first confirmed timeout:

1. the slowest finds (and the hang) of earlier runs (``best.json``), so a run resumes there;
2. a sweep of the scorer's vocabulary, the same on every seed and at most 60% of the budget:
   the structural attacks on each regex it compiles (``_harvest.attacks``, by ``_redos``); the
   literal pieces of each regex in their order with the last one left out (``A.*B.*C``
   backtracks on runs of A then B when no C follows); each unit (the markers of its own
   source first) before a failing suffix; ordered windows of the units;
3. growth: the slowest formulas measured at the search's size cap, expanded by doublings up to
   ``max_chars`` while their time still grows faster than linearly (a quadratic scorer needs
   the largest sizes to pass a deadline);
4. the short hard values of the bundled corpus (power towers, huge factorials, the incidents),
   alone and framed by the scorer's markers and regex pieces, for scorers that evaluate what
   they extract; growth again;
5. a Hypothesis targeted search over formulas of the same vocabulary for the rest of the
   budget, maximising CPU time per character; growth again for what it found.

Noise never decides: a timeout is run again before it ends the search (when the second run
finishes, the finished one is reported), and a time that would become the best so far is
re-timed, the lower kept, before it steers Hypothesis or picks what grows. The settings are
explicit: the profile Hypothesis loads when ``CI`` is set turns the example database off, and
the search must resume from what earlier CI runs found.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from pytest_rewardhang.corpus import _format, _found, _harvest, _steer
from pytest_rewardhang.corpus._cases import Case
from pytest_rewardhang.corpus._format import Formula
from pytest_rewardhang.corpus._strategies import bundled_payloads, formulas
from pytest_rewardhang.guard._outcome import Outcome, Status

FAMILY = "search"
MIN_SIZE = 64
#: The slowest examples so far, per scorer: replayed first by the next run, so the search
#: resumes from its best finds (Hypothesis's own database keeps only failing examples).
BEST_FILE = "best.json"
KEEP_BEST = 8
#: The most of a best file read: eight formulas (each unit and affix a few kB at most).
_BEST_BYTES = 1 << 20
#: The score a confirmed hang is kept with: above any finished call's.
HUNG_SCORE = 1e12
#: Ends a pumped run so a match has to fail after the engine tried every split.
FAILING_SUFFIX = "!\x00"
#: The share of the budget the sweep may take; Hypothesis and growth get the rest.
SWEEP_SHARE = 0.6
#: How many of the slowest formulas grow past the size cap, each round.
GROW_TOP = 3
#: A call this short is not re-timed: noise at this scale cannot steer the search anywhere.
RETIME_ABOVE_S = 0.02
#: Below this (after the cheapest call is taken off) a time says nothing about growth.
FLOOR_S = 0.02
#: Growth stops once time grows no faster than n^LINEAR between two sizes ...
LINEAR = 1.3
#: ... and its projection to ``max_chars`` stays below this share of the deadline. A time too
#: small to measure growth from is projected as if it grew like n^WORST.
STOP_BELOW = 0.5
WORST = 3.0
#: Frames a hard value is put in (each value alone is tried too); patterns swept, and
#: structural attacks per pattern.
MAX_FRAMES = 8
#: Markers of the scorer's own source put before the harvested units.
MAX_MARKERS = 6
MAX_PATTERNS = 8
MAX_STRUCTURAL = 3


class _Hang(Exception):
    """Ends the search: one confirmed input past the deadline is what it looks for."""


class _Spent(Exception):
    """The budget of probes is used up."""


@dataclass
class _Measured:
    formula: Formula
    size: int
    spent: float


def search(
    probe: Callable[[str], Outcome],
    units: Sequence[str],
    examples: int,
    seed: int,
    database: Path,
    max_size: int,
    *,
    patterns: Sequence[str] = (),
    literals: Sequence[str] = (),
    max_chars: int | None = None,
    steer: Callable[[str, str | None, bool], Outcome] | None = None,
    seeds: Sequence[tuple[str, str | None]] = (),
    truths: Sequence[str] = (),
) -> list[tuple[Case, Outcome]]:
    """Run up to ``examples`` probes through ``probe``; stop at the first confirmed timeout.

    ``units``: the scorer's vocabulary; ``patterns``: the regexes it compiles, worst first;
    ``literals``: the strings of its own source (its markers go first: a library's regexes may
    crowd them out of ``units``); ``max_size``: the largest text the sweep and Hypothesis try;
    ``max_chars``: the largest growth may reach (default ``max_size``). ``steer(text, truth,
    measure)``: one call with ``truth`` as the ground truth (None: the example's), measured in
    the worker when ``measure`` is true; given, the steered phase (``_steer``) takes the place
    of Hypothesis, starting from ``seeds`` (responses in the scorer's frames, with their ground
    truths) and swapping ground truths for ``truths``. Returns every text probed, with its
    (confirmed) outcome.
    """
    limit = max(max_chars or max_size, max_size)
    run = _Run(probe, examples, max_size, limit, steer)
    markers = [s for s in literals if s.strip() and not s.isidentifier()]
    pool = list(dict.fromkeys(u for u in [*markers[:MAX_MARKERS], *units] if u)) or ["a"]
    best = _load_best(database, limit)
    database.mkdir(parents=True, exist_ok=True)
    steered = False
    with contextlib.suppress(_Hang, _Spent):
        for formula, size, _ in best:
            run.measure(formula, size, "replayed from an earlier run's slowest")
        share = SWEEP_SHARE if steer is None else STEERED_SWEEP_SHARE
        allowed = max(int(examples * share), 1)
        vocabulary, values = _sweep(pool, patterns, bundled_payloads(), max_size)
        for sweep in (vocabulary, values):
            for formula, size, origin in sweep:
                if run.calls >= allowed:
                    break
                run.measure(formula, size, origin)
            run.grow()
        if steer is not None:
            steered = bool(_steered(run, pool, patterns, seeds, truths, seed, max_size).signal)
        if not steered:  # no steering asked for, or its worker measured nothing
            _hypothesis(run, pool, patterns, examples, seed, database, max_size)
        run.grow()
    _save_best(database, best, run)
    if run.steered is not None:
        _save_worst(database, run, run.steered)
    return run.ran


#: With steering, the sweep leaves more of the budget to the steered phase.
STEERED_SWEEP_SHARE = 0.25


def _steered(
    run: _Run,
    pool: list[str],
    patterns: Sequence[str],
    seeds: Sequence[tuple[str, str | None]],
    truths: Sequence[str],
    seed: int,
    max_size: int,
) -> _steer.Steered:
    """The steered phase, over the budget growth does not keep back (``_steer``)."""
    pieces = [p for pattern in patterns[:MAX_PATTERNS] for p in _pieces(pattern)]
    dictionary = list(dict.fromkeys([*pool, *pieces]))
    values = bundled_payloads()
    steered = _steer.Steered(run.measure_input, dictionary, values, truths, seed, max_size)
    reserve = GROW_TOP * max(1, _doublings(max_size, run.max_chars)) + len(CURVE_DIVISORS)
    starts = [_steer.Input(text, truth, "the example in a frame of the scorer's") for text, truth
              in dict.fromkeys(seeds)]  # fmt: skip
    try:
        steered.run(starts, lambda: run.left() - reserve)
        _worst_at_sizes(run, steered)
    finally:
        run.steered = steered
    return steered


#: The worst input's cost curve: at these fractions of its size, when it is a formula.
CURVE_DIVISORS = (4, 2)


def _worst_at_sizes(run: _Run, steered: _steer.Steered) -> None:
    """The costliest input again at a quarter and a half of its size, where it repeats a piece:
    how its cost grows with the size (``steered.sizes``)."""
    worst = steered.worst()
    if worst is None or worst.input.formula is None:
        return
    formula, size = worst.input.formula, len(worst.input.text)
    smallest = len(formula.prefix) + len(formula.suffix) + max(map(len, formula.units))
    points = []
    for divisor in CURVE_DIVISORS:
        if size // divisor <= smallest:
            continue
        text = formula.expand(size // divisor)
        how = f"its costliest input at 1/{divisor} of its size"
        read = run.measure_input(_steer.Input(text, worst.input.truth, how, formula))
        if read is not None and not read.too_slow:
            points.append((len(text), read.cost))
    steered.sizes = [*points, (size, worst.reading.cost)]


class _Run:
    """The probes of one search: each text once, confirmed, scored, and the budget."""

    def __init__(
        self,
        probe: Callable[[str], Outcome],
        budget: int,
        max_size: int,
        max_chars: int,
        steer: Callable[[str, str | None, bool], Outcome] | None = None,
    ) -> None:
        self._probe = probe
        self.budget = budget
        self.max_size = max_size
        self.max_chars = max_chars
        self.ran: list[tuple[Case, Outcome]] = []
        self.seen: dict[tuple[str, str | None], Outcome] = {}
        self.measured: list[_Measured] = []
        self.grown: set[Formula] = set()
        #: The confirmed hang that ended the search: the next run replays it first (when it
        #: is a formula), and its case.
        self.hung: tuple[Formula, int] | None = None
        self.hung_case: Case | None = None
        #: The probe that also measures what the scorer ran (None: no steering), and the
        #: signal its worker had.
        self.steer = steer
        self.signal = ""
        self.steered: _steer.Steered | None = None
        #: The cheapest call seen: a call's fixed cost, taken off every score.
        self.fixed = math.inf
        self.best = 0.0
        self.deadline = math.inf
        self.started = time.monotonic()
        self.calls = 0

    def left(self) -> int:
        """Probes left: re-runs count, so the item's outer bound (``N + 2`` calls) holds."""
        return self.budget - self.calls

    def measure(self, formula: Formula, size: int, origin: str) -> Outcome:
        text = formula.expand(size)
        return self._record(text, None, formula, origin, lambda _: self._probe(text))

    def measure_input(self, given: _steer.Input) -> _steer.Reading | None:
        """A steered input, through the measuring probe: what the worker read of it."""
        assert self.steer is not None
        steer = self.steer
        text, truth = given.text, given.truth
        origin = f"steered by {self.signal or 'what the scorer runs'} ({given.how})"
        outcome = self._record(
            text, truth, given.formula, origin, lambda measure: steer(text, truth, measure)
        )
        if outcome.status is not Status.OK:
            return None
        read = _steer.reading(outcome.value)
        if read is not None and read.signal:
            self.signal = read.signal
        return read

    def _record(
        self,
        text: str,
        truth: str | None,
        formula: Formula | None,
        origin: str,
        call: Callable[[bool], Outcome],
    ) -> Outcome:
        """``text`` (with ``truth``) probed once, confirmed; a confirmed timeout ends the search.
        ``call(measure)``: one call, measured or not."""
        # Each text runs once: formulas often expand alike, and Hypothesis replays examples
        # and raises FlakyFailure when a replay's result differs.
        outcome = self.seen.get((text, truth))
        if outcome is not None:
            return outcome
        if self.left() <= 0:
            raise _Spent
        outcome = self.seen[text, truth] = self._confirmed(text, call)
        index = len(self.ran) + 1
        elapsed = time.monotonic() - self.started
        shown = _show(formula) if formula is not None else _printable(repr(text))
        case = Case(
            f"{FAMILY}-{index}-{len(text)}",
            FAMILY,
            text,
            f"{origin}: {shown}; probe {index}, {elapsed:.1f} s into the search",
            ground_truth=truth,
            formula=formula,
            formula_id=f"{FAMILY}-{index}",
            provenance="found by --reward-hang-search",
        )
        self.ran.append((case, outcome))
        if outcome.budget is not None and math.isfinite(outcome.budget):
            self.deadline = outcome.budget
        if outcome.status is Status.TIMEOUT:
            self.hung = (formula, len(text)) if formula is not None and truth is None else None
            self.hung_case = case
            raise _Hang
        if outcome.status is Status.OK:
            spent = _spent(outcome)
            self.fixed = min(self.fixed, spent)
            if formula is not None and truth is None:
                self.measured.append(_Measured(formula, len(text), spent))
            self.best = max(self.best, self.score(spent, len(text)))
        return outcome

    def _confirmed(self, text: str, call: Callable[[bool], Outcome]) -> Outcome:
        """The outcome of ``text``, measured twice when once could mislead.

        A timeout counts only when a second run times out too, unmeasured (counting the
        scorer's lines slows it). A finished call that would be the best so far is re-timed
        and the faster run kept: a machine that got busy for a moment must not make an
        ordinary input look like the way to a hang.
        """
        self.calls += 1
        first = call(True)
        if first.status is Status.TIMEOUT:
            self.calls += 1
            again = call(False)
            # Finished unmeasured: too slow to measure, the costliest input yet.
            return first if again.status is Status.TIMEOUT else _steer.too_slow(again)
        if (
            first.status is Status.OK
            and _spent(first) >= RETIME_ABOVE_S
            and self.score(_spent(first), len(text)) > self.best
        ):
            self.calls += 1
            again = call(True)
            if again.status is Status.OK and _spent(again) < _spent(first):
                # The lines the first run met first are its input's, not the second's news.
                return _steer.with_news_of(again, first)
        return first

    def score(self, spent: float, chars: int) -> float:
        """CPU microseconds per character, beyond the cheapest call seen.

        Without that subtraction a call's fixed cost, divided by the length, makes the shortest
        inputs look the most promising and steers the search away from hangs.
        """
        fixed = self.fixed if math.isfinite(self.fixed) else 0.0
        return max(spent - fixed, 0.0) * 1e6 / max(chars, 1)

    def grow(self) -> None:
        """Expand the slowest formulas not grown yet by doublings up to ``max_chars``."""
        ranked = sorted(self.measured, key=lambda m: -self.score(m.spent, m.size))
        chosen: list[_Measured] = []
        for m in ranked:
            if m.formula in self.grown or any(c.formula == m.formula for c in chosen):
                continue
            # Only what ran at the cap grows from it: a short text's time per character is
            # mostly the call's own noise.
            if m.size < self.max_size or not m.formula.units or m.formula.alphabet:
                continue
            chosen.append(m)
            if len(chosen) == GROW_TOP:
                break
        for m in chosen:
            self.grown.add(m.formula)
            self._grow(m)

    def _grow(self, start: _Measured) -> None:
        size, taken = start.size, self._beyond_fixed(start.spent)
        while size < self.max_chars:
            bigger = min(size * 2, self.max_chars)
            outcome = self.measure(start.formula, bigger, "grown past the search's size cap")
            if outcome.status is not Status.OK:
                return
            now = self._beyond_fixed(_spent(outcome))
            measurable = taken >= FLOOR_S and now >= FLOOR_S
            exponent = math.log(now / taken) / math.log(bigger / size) if measurable else WORST
            projected = now * (self.max_chars / bigger) ** max(exponent, 1.0)
            if exponent <= LINEAR and projected < STOP_BELOW * self.deadline:
                return
            if not measurable and projected < STOP_BELOW * self.deadline:
                return
            size, taken = bigger, now

    def _beyond_fixed(self, spent: float) -> float:
        return max(spent - (self.fixed if math.isfinite(self.fixed) else 0.0), 0.0)


def _hypothesis(
    run: _Run,
    pool: list[str],
    patterns: Sequence[str],
    examples: int,
    seed: int,
    database: Path,
    max_size: int,
) -> None:
    """The targeted search, over the budget growth does not keep back."""
    pieces = [p for pattern in patterns[:MAX_PATTERNS] for p in _pieces(pattern)]
    vocabulary = list(dict.fromkeys([*pool, *pieces]))
    budget = run.left() - GROW_TOP * max(1, _doublings(max_size, run.max_chars))
    if budget <= 0:
        return
    strategy = st.tuples(
        formulas(vocabulary, affixes=[*pieces, *bundled_payloads()[:4], FAILING_SUFFIX]),
        _sizes(max_size),
    )

    @settings(
        max_examples=budget,
        database=DirectoryBasedExampleDatabase(str(database)),
        phases=[Phase.reuse, Phase.generate, Phase.target],
        deadline=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
        derandomize=False,
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def probe_formula(drawn: tuple[Formula, int]) -> None:
        formula, size = drawn
        outcome = run.measure(formula, size, "searched formula")
        if outcome.status is Status.OK:
            target(run.score(_spent(outcome), len(formula.expand(size))), label="cpu us per char")

    probe_formula()


def _sweep(
    units: Sequence[str], patterns: Sequence[str], payloads: Sequence[str], max_size: int
) -> tuple[list[tuple[Formula, int, str]], list[tuple[Formula, int, str]]]:
    """The vocabulary's candidates, most telling first, then the hard values in its frames.

    The same on every seed. Growth runs between the two: a polynomial hang the first part
    measured below the size cap is confirmed before values are tried.
    """
    vocabulary: list[tuple[Formula, int, str]] = []
    values: list[tuple[Formula, int, str]] = []

    def add(to: list[tuple[Formula, int, str]], formula: Formula, size: int, origin: str) -> None:
        if formula.units and all(formula.units):
            to.append((formula, size, origin))

    # The scorer's own super-linear patterns come first (``_harvest.collect`` ranks them); a
    # library imported with it may compile hundreds more.
    for pattern in patterns[:MAX_PATTERNS]:
        for attack in _structural(pattern):
            add(vocabulary, attack, max_size, "a structural attack on a regex of the scorer")
        pieces = _pieces(pattern)
        if len(pieces) >= 2:
            blocks = Formula("", tuple(pieces[:-1]), FAILING_SUFFIX)
            add(vocabulary, blocks, max_size, "its regex's pieces in order, the last left out")
        if len(pieces) >= 3:
            pumped = Formula(pieces[0], ("".join(pieces[1:-1]),), FAILING_SUFFIX)
            add(vocabulary, pumped, max_size, "its regex's pieces in order, the last left out")
    for unit in units:
        add(vocabulary, Formula("", (unit,), FAILING_SUFFIX), max_size, "a unit of its vocabulary")
    for width in (2, 3):
        for i in range(len(units) - width + 1):
            window = Formula("", tuple(units[i : i + width]), FAILING_SUFFIX)
            add(vocabulary, window, max_size, "units of its vocabulary in order")
    for value in payloads:
        add(values, Formula("", (value,), ""), len(value), "a hard value of the bundled corpus")
    for before, after in _frames(units, patterns)[:MAX_FRAMES]:
        for value in payloads:
            size = len(before) + len(value) + len(after)
            framed = Formula(before, (value,), after)
            add(
                values, framed, size, "a hard value of the bundled corpus in its vocabulary's frame"
            )
    return _unique(vocabulary), _unique(values)


def _unique(found: list[tuple[Formula, int, str]]) -> list[tuple[Formula, int, str]]:
    first: dict[tuple[Formula, int], str] = {}
    for formula, size, origin in found:
        first.setdefault((formula, size), origin)
    return [(formula, size, origin) for (formula, size), origin in first.items()]


def _structural(pattern: str) -> list[Formula]:
    """The regex's own attacks, from its structure (``_harvest.attacks``, by ``_redos``)."""
    try:
        return _harvest.attacks(pattern)[:MAX_STRUCTURAL]
    except Exception:  # noqa: BLE001 - an analysis bug must not end the search
        return []


def _pieces(pattern: str) -> list[str]:
    return list(dict.fromkeys(p for p in _harvest.literal_pieces(pattern) if p))


def _frames(units: Sequence[str], patterns: Sequence[str]) -> list[tuple[str, str]]:
    """``(before, after)`` pairs that may surround an extracted value.

    Consecutive pieces of a regex frame what its groups capture (``ANSWER\\[(.*?)\\]``); a
    marker of the vocabulary (``"Final:"``) frames what follows it.
    """
    # A one-character opener ("(", ".") frames everything and says nothing.
    markers = [unit for unit in units if not unit.isidentifier() and unit.strip()]
    frames = [(a, b) for a, b in itertools.pairwise(markers) if len(a) > 1]
    for pattern in patterns[:MAX_PATTERNS]:
        pieces = _pieces(pattern)
        if "(" in pattern.replace("(?:", ""):
            frames += [(a, b) for a, b in zip(pieces, [*pieces[1:], ""], strict=True) if len(a) > 1]
    frames += [(marker, "") for marker in markers if len(marker) > 1]
    return list(dict.fromkeys(frames))


def _doublings(low: int, high: int) -> int:
    count = 0
    while low < high:
        low, count = low * 2, count + 1
    return count


def _sizes(max_size: int) -> st.SearchStrategy[int]:
    """The largest size half the time, halvings of it otherwise.

    A hang grows faster than its input, so the largest size is where it shows first; plain
    ``integers(64, max_size)`` leans to its lower bound and spent most examples at 64 chars.
    """
    top = max(MIN_SIZE, max_size)
    halvings = max((top // MIN_SIZE).bit_length() - 1, 1)
    return st.one_of(st.just(top), st.integers(1, halvings).map(lambda k: max(MIN_SIZE, top >> k)))


def _spent(outcome: Outcome) -> float:
    return outcome.cpu_s if math.isfinite(outcome.cpu_s) else outcome.wall_s


def _load_best(database: Path, limit: int) -> list[tuple[Formula, int, float]]:
    """The earlier runs' slowest finds, those that are what ``_save_best`` writes and at most
    ``limit`` characters; the file is restored from a CI cache, which anyone may have written
    (a size of 3e9 built a 3 GB text in the pytest process, ``units: []`` divided by zero)."""
    try:
        entries = json.loads(_format.read_regular(database / BEST_FILE, _BEST_BYTES))
    except (OSError, ValueError, RecursionError):  # none yet, or not ours: start afresh
        return []
    best = []
    for e in entries if isinstance(entries, list) else []:
        try:
            prefix, units, suffix, size, score = (
                e[key] for key in ("prefix", "units", "suffix", "size", "score")
            )
        except (TypeError, KeyError):
            continue
        texts = isinstance(prefix, str) and isinstance(suffix, str) and isinstance(units, list)
        if not (texts and units and all(isinstance(u, str) and u for u in units)):
            continue
        if type(size) is not int or not 1 <= size <= limit or type(score) not in (int, float):
            continue
        try:
            score = float(score)
        except OverflowError:
            continue
        if math.isfinite(score):  # an infinite score would never leave the file
            best.append((Formula(prefix, tuple(units), suffix), size, score))
    return best


def _save_best(database: Path, best: Iterable[tuple[Formula, int, float]], run: _Run) -> None:
    found = [(m.formula, m.size, run.score(m.spent, m.size)) for m in run.measured]
    if run.hung is not None:
        found.append((*run.hung, HUNG_SCORE))
    # A formula run again this time keeps its new score: the old one may be a noisy outlier.
    kept = {(formula, size): score for formula, size, score in [*best, *found]}
    ranked = sorted(kept.items(), key=lambda item: -item[1])[:KEEP_BEST]
    entries = [
        {"prefix": f.prefix, "units": list(f.units), "suffix": f.suffix, "size": n, "score": s}
        for (f, n), s in ranked
    ]
    with contextlib.suppress(OSError):
        (database / BEST_FILE).write_text(json.dumps(entries, indent=1), encoding="utf-8")


#: Where the steered phase's worst input is written, as a corpus file, in the search's folder.
WORST_FILE = "worst.toml"


def _save_worst(database: Path, run: _Run, steered: _steer.Steered) -> None:
    """The steered phase's worst input as a corpus case, with its cost curve: the hang that
    ended the search, else the input that cost the most."""
    worst = steered.worst()
    case: Case | None
    if run.hung_case is not None and run.hung_case.id.startswith(FAMILY):
        case = run.hung_case
        # Its parent's curve, then itself: it never finished, so it has no cost of its own.
        child, parent = steered.trying or (None, None)
        mine = child is not None and (child.text, child.truth) == (case.text, case.ground_truth)
        curve = parent.curve if mine and parent is not None else ()
        what, curve_how = "ran past its deadline", "as it was found, before it"
    elif worst is not None:
        text, truth = worst.input.text, worst.input.truth
        case = next((c for c, _ in run.ran if c.text == text and c.ground_truth == truth), None)
        curve, what, curve_how = tuple(worst.curve), "cost the most", "as it was found"
        if len(steered.sizes) > 1:
            curve, curve_how = tuple(steered.sizes), "at sizes of it"
    else:
        return
    if case is None:
        return
    signal = steered.signal or "no signal"
    points = ", ".join(f"{chars} chars: {cost:.3g}" for chars, cost in curve) or "none"
    why = f"the steered search's worst input ({what}); cost in {signal}, {curve_how}: {points}"
    with contextlib.suppress(OSError):
        _found.write_case(database / WORST_FILE, case, case.text, f"steered-{database.name}", why)


def _show(formula: Formula) -> str:
    body = " + ".join(f"{u!r}*n" for u in formula.units)
    return _printable(f"{formula.prefix!r} + {body} + {formula.suffix!r}")


def _printable(text: str, limit: int = 160) -> str:
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
