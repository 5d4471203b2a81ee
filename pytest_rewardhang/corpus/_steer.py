"""The steered phase of ``--reward-hang-search``: mutate toward new code and a higher cost.

As PerfFuzz and SlowFuzz do for C programs: a queue of inputs (a response, and a ground truth
where the scorer takes one), each kept because it reached code of the scorer no input had
reached before or cost more than any before it (the cost and the code come from
``_measure``, in the worker); a parent is drawn by how many lines it was first to run. A
child is its parent with one or two mutations of the kinds a degenerate policy output has: a
line, a word or an open delimiter repeated; a span nested in brackets; a number, or every
number, lengthened; the scorer's own strings (its markers, its regexes' pieces) and the bundled
hard values spliced in; and in about a third of the children the ground truth swapped for
another shape or a hard value, or its number lengthened.
It starts from the example's response in each of the scorer's frames (``_frames``): the
gates a format check puts before the costly work are passed from the first probe.

Deterministic for a seed: one ``random.Random(seed)`` makes every choice, and what the scorer
answered decides only which inputs are kept.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_rewardhang.guard._outcome import Outcome

from ._format import Formula

#: Mutations stacked on a child, at most.
MAX_STACK = 2
#: The children whose ground truth changes (where the scorer takes one).
TRUTH_SHARE = 0.35
#: How many times a repeat mutation repeats its piece: a few, or as many as the size allows.
REPEATS = (2, 4, 16, 64, 512, 4096)
#: A parent's weight per line it was first to run, and for a loop run more often than before
#: (at most MAX_BUCKETS of those count: a longer text runs every loop more often).
NEW_LINE_WEIGHT = 4.0
MAX_BUCKETS = 2
#: Points of a cost curve kept (the worst input's ancestors, and itself).
CURVE_POINTS = 8
_OPEN = ("(", "[", "{", "<think>", "\\boxed{", "\\frac{", "```", '{"a": ', "$", "\\left(")
_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"), ("\\frac{", "}{1}"), ("<b>", "</b>"), ('["', '"]'))
_NUMBER = re.compile(r"\d+")
_WORD = re.compile(r"\S+\s*")
_LINE = re.compile(r"[^\n]*\n|[^\n]+")


@dataclass(frozen=True)
class Input:
    text: str
    #: The ground truth in the example's place (None: the example's own, or none taken).
    truth: str | None
    #: How it was made, for the case's description.
    how: str
    #: ``prefix + unit * n + suffix`` when its last mutation repeated a piece: growth can take it
    #: further, and a saved case keeps it as a formula.
    formula: Formula | None = None


@dataclass(frozen=True)
class Reading:
    """What the worker measured of one call (``_measure.measured``)."""

    signal: str
    cost: float
    cpu_s: float
    new: frozenset[int]
    #: It ran past the deadline measured and finished unmeasured: costlier than any that
    #: finished measured, whatever its numbers.
    too_slow: bool = False


@dataclass
class Entry:
    input: Input
    reading: Reading
    #: ``(chars, cost)`` of its ancestors and of itself: how the cost grew as it was found.
    curve: tuple[tuple[int, float], ...] = ()
    #: How often it is drawn as a parent, relatively: lines no input had run before weigh
    #: most, a loop run more often than before next.
    weight: float = 1.0


def reading(outcome_value: Any) -> Reading | None:
    """The measurement in a call's answer, or None where there is none (or it is not one)."""
    found = outcome_value.get("measured") if isinstance(outcome_value, dict) else None
    if not isinstance(found, dict):
        return None
    if found.get("too_slow") is True:
        return Reading("", 0.0, 0.0, frozenset(), too_slow=True)
    signal, cost, cpu, new = (found.get(k) for k in ("signal", "cost", "cpu_s", "new"))
    if not (isinstance(signal, str) and isinstance(cost, int | float)):
        return None
    keys = frozenset(k for k in new if isinstance(k, int)) if isinstance(new, list) else frozenset()
    return Reading(signal, float(cost), float(cpu) if isinstance(cpu, int | float) else 0.0, keys)


def too_slow(outcome: Outcome) -> Outcome:
    """A call that finished only unmeasured, marked so (see :attr:`Reading.too_slow`)."""
    called = outcome.value if isinstance(outcome.value, dict) else {}
    return dataclasses.replace(outcome, value={**called, "measured": {"too_slow": True}})


def with_news_of(kept: Outcome, first: Outcome) -> Outcome:
    """``kept`` (a re-timed call), with the features ``first`` reported first: its worker
    reported each once, and the same input met them both times."""
    old, new = (reading(o.value) for o in (first, kept))
    if old is None or new is None or not isinstance(kept.value, dict):
        return kept
    measured = {**kept.value["measured"], "new": sorted(old.new | new.new)}
    return dataclasses.replace(kept, value={**kept.value, "measured": measured})


@dataclass
class Steered:
    """One steered run: ``measure`` probes an input and answers what the worker read (None for a
    call that did not finish, or that carried no measurement); it raises to end the run."""

    measure: Callable[[Input], Reading | None]
    #: The scorer's own strings (markers, units, its regexes' pieces).
    dictionary: Sequence[str]
    #: Hard values (the bundled corpus's power towers, huge numbers): an answer or a truth.
    values: Sequence[str]
    #: Ground truths of other shapes (a fraction, text, a list); empty: none is taken.
    truths: Sequence[str]
    seed: int
    max_size: int
    queue: list[Entry] = field(default_factory=list)
    #: The features (a line and its count's power of two) and the lines any input reached.
    reached: set[int] = field(default_factory=set)
    places: set[int] = field(default_factory=set)
    signal: str = ""
    #: The child being measured, and its parent: a hang ends the run inside ``measure``.
    trying: tuple[Input, Entry | None] | None = None
    #: ``(chars, cost)`` of the costliest input at smaller sizes, and itself (the search
    #: measures them: ``_search._worst_at_sizes``).
    sizes: list[tuple[int, float]] = field(default_factory=list)

    def run(self, seeds: Sequence[Input], left: Callable[[], int]) -> None:
        """The seeds, then children of the queue while ``left()`` probes remain."""
        rng = random.Random(self.seed)  # noqa: S311 - a reproducible search, not a secret
        for start in seeds:
            if left() <= 0:
                return
            self._try(start, None)
        while left() > 0 and self.queue:
            parent = self._parent(rng)
            self._try(self.mutated(rng, parent.input), parent)

    def worst(self) -> Entry | None:
        return max(self.queue, key=lambda e: e.reading.cost, default=None)

    def _try(self, child: Input, parent: Entry | None) -> None:
        self.trying = child, parent
        read = self.measure(child)
        if read is None:
            return
        top = max((e.reading.cost for e in self.queue), default=-1.0)
        if read.too_slow:
            read = Reading(self.signal, 2 * max(top, 1.0), 0.0, frozenset(), too_slow=True)
        self.signal = read.signal
        new = read.new - self.reached
        self.reached |= read.new
        places = {feature >> 6 for feature in new} - self.places
        self.places |= places
        if new or read.cost > top or parent is None:
            before = parent.curve if parent is not None else ()
            curve = (*before, (len(child.text), read.cost))[-CURVE_POINTS:]
            weight = 1.0 + NEW_LINE_WEIGHT * len(places) + min(len(new - places), MAX_BUCKETS)
            self.queue.append(Entry(child, read, curve, weight))

    def _parent(self, rng: random.Random) -> Entry:
        """By weight most of the time (what reached new lines), else the costliest."""
        if rng.random() < 0.9:
            return rng.choices(self.queue, weights=[e.weight for e in self.queue])[0]
        return max(self.queue, key=lambda e: e.reading.cost)

    def mutated(self, rng: random.Random, parent: Input) -> Input:
        """``parent`` with one to :data:`MAX_STACK` mutations, within ``max_size``."""
        text, truth, hows = parent.text, parent.truth, []
        formula: Formula | None = None
        # The ground truth is half of what the scorer reads, and a gate on its shape (an
        # integer compared as a string, anything else evaluated) guards many a costly path.
        if truth is not None and self.truths and rng.random() < TRUTH_SHARE:
            truth, how = self._truth(rng, truth)
            hows.append(how)
            if rng.random() < 0.5:
                return Input(text, truth, how, parent.formula)
        for _ in range(rng.randint(1, MAX_STACK)):
            text, how, formula = _MUTATIONS[rng.choice(list(_MUTATIONS))](self, rng, text)
            hows.append(how)
        if len(text) > self.max_size:
            text, formula = text[: self.max_size], None
        if formula is not None and formula.expand(len(text)) != text:
            formula = None
        return Input(text, truth, ", ".join(hows), formula)

    def _truth(self, rng: random.Random, truth: str) -> tuple[str, str]:
        if _NUMBER.search(truth) and rng.random() < 0.5:
            return _lengthen(rng, truth)[0], "its ground truth's number lengthened"
        chosen = rng.choice([*self.truths, *self.values])
        return chosen, f"ground truth {_short(chosen)}"

    def _repeat(self, rng: random.Random, text: str) -> tuple[str, str, Formula | None]:
        """A line, a word or an open delimiter, repeated: what a looping policy emits."""
        what = rng.choice(("line", "word", "delimiter"))
        if what == "delimiter":
            piece = rng.choice([*_OPEN, *(d for d in self.dictionary if len(d) <= 12)])
            at = _position(rng, text)
            start = end = at
        else:
            spans = [m.span() for m in (_LINE if what == "line" else _WORD).finditer(text)]
            if not spans:
                return text, "nothing to repeat", None
            start, end = rng.choice(spans)
            piece = text[start:end]
        room = max(self.max_size - len(text), 0) // max(len(piece), 1)
        times = min(rng.choice(REPEATS), room)
        if times < 1:
            return text, f"a {what} not repeated (no room)", None
        body = piece * (times + (what != "delimiter"))
        grown = text[:start] + body + text[end:]
        formula = Formula(text[:start], (piece,), text[end:])
        return grown, f"{_short(piece)} repeated {times}x ({what})", formula

    def _nest(self, rng: random.Random, text: str) -> tuple[str, str, Formula | None]:
        opening, closing = rng.choice(_PAIRS)
        start = _position(rng, text)
        end = _position(rng, text[start:]) + start
        depth = min(rng.choice(REPEATS), max(self.max_size - len(text), 0) // 8 or 1)
        nested = opening * depth + text[start:end] + closing * depth
        return text[:start] + nested + text[end:], f"nested {depth} deep in {opening}", None

    def _number(self, rng: random.Random, text: str) -> tuple[str, str, Formula | None]:
        lengthened, ok = _lengthen(rng, text)
        return lengthened, "a number lengthened" if ok else "no number to lengthen", None

    def _splice(self, rng: random.Random, text: str) -> tuple[str, str, Formula | None]:
        """One of the scorer's strings or a hard value, in place of a number or at a boundary."""
        strings = self.values if rng.random() < 0.5 else self.dictionary
        if not strings:
            return text, "no string to splice", None
        piece = rng.choice(strings)
        numbers = list(_NUMBER.finditer(text))
        if numbers and rng.random() < 0.5:
            start, end = rng.choice(numbers).span()
            return text[:start] + piece + text[end:], f"a number replaced by {_short(piece)}", None
        at = _position(rng, text)
        return text[:at] + piece + text[at:], f"{_short(piece)} spliced in", None

    def _cross(self, rng: random.Random, text: str) -> tuple[str, str, Formula | None]:
        other = rng.choice(self.queue).input.text if self.queue else text
        cut, other_cut = _position(rng, text), _position(rng, other)
        return text[:cut] + other[other_cut:], "spliced with an earlier find", None

    def _delete(self, rng: random.Random, text: str) -> tuple[str, str, Formula | None]:
        start = _position(rng, text)
        end = min(start + rng.choice((1, 4, 16, 64)), len(text))
        return text[:start] + text[end:], "a span deleted", None


_Mutation = Callable[[Steered, random.Random, str], tuple[str, str, Formula | None]]
_MUTATIONS: dict[str, _Mutation] = {
    "repeat": Steered._repeat,
    "nest": Steered._nest,
    "number": Steered._number,
    "splice": Steered._splice,
    "splice-again": Steered._splice,  # the scorer's own strings pass its gates: twice the odds
    "cross": Steered._cross,
    "delete": Steered._delete,
}


def _lengthen(rng: random.Random, text: str) -> tuple[str, bool]:
    """A digit run made two to eight times as long (``42`` to ``424242``); half the time every
    run of the text, as a policy that pads every number does."""
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return text, False
    times = rng.choice((2, 3, 8))
    if rng.random() < 0.5:
        return _NUMBER.sub(lambda m: m.group() * times, text), True
    start, end = rng.choice(numbers).span()
    return text[:start] + text[start:end] * times + text[end:], True


def _position(rng: random.Random, text: str) -> int:
    """A place in ``text``, at a word's or a line's edge half the time."""
    if not text:
        return 0
    edges = [m.start() for m in re.finditer(r"(?<=\s)|(?=\s)|$", text)]
    if edges and rng.random() < 0.5:
        return rng.choice(edges)
    return rng.randint(0, len(text))


def _short(text: str, limit: int = 24) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
