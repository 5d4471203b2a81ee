"""The hang-inducing inputs of a run, expanded from the corpus files (see ``_format``).

Each response family's formulas are expanded along a size ladder up to ``max_chars``; code
families are programs that defeat in-process timeouts. Cases of a family come smallest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import _format
from ._format import Corpus, Formula


@dataclass(frozen=True)
class Case:
    id: str
    family: str
    #: For math/text scorers the whole response; for code scorers the program.
    text: str
    description: str
    #: Passed to the scorer as its ground truth, where the case has one.
    ground_truth: str | None = None
    #: The formula the text was expanded from (None for literals and programs): growth is fit
    #: over the cases of one formula, and a saved hang is shrunk along it.
    formula: Formula | None = None
    formula_id: str | None = None
    provenance: str = ""


@cache
def load_corpus(extra_dirs: tuple[Path, ...] = ()) -> Corpus:
    return _format.load(extra_dirs)


def response_cases(corpus: Corpus, kind: str, max_chars: int, seed: int) -> list[Case]:
    cases: list[Case] = []
    for family in corpus.responses.values():
        if kind not in family.kinds:
            continue
        found: list[Case] = []
        for case in family.cases:
            description = case.description
            if case.response is not None:
                text = case.response[:max_chars]
                found.append(
                    Case(
                        f"{family.family}-{case.name}",
                        family.family,
                        text,
                        description,
                        case.ground_truth,
                        provenance=case.provenance,
                    )
                )
                continue
            assert case.formula is not None
            stem = f"{family.family}-{case.name}" if case.name else family.family
            for size in _format.ladder(case.sizes, max_chars):
                if size < len(case.formula.prefix) + len(case.formula.suffix):
                    continue
                found.append(
                    Case(
                        f"{stem}-{size}",
                        family.family,
                        case.formula.expand(size, seed),
                        description,
                        case.ground_truth,
                        case.formula,
                        stem,
                        case.provenance,
                    )
                )
        cases += sorted(found, key=lambda c: len(c.text))
    return cases


def code_cases(corpus: Corpus) -> list[Case]:
    return [
        Case(
            f"{family}-{program.name}",
            family,
            program.text,
            program.attacks,
            provenance=program.provenance,
        )
        for family, programs in corpus.programs.items()
        for program in programs
    ]


def cases_for(
    kind: str,
    max_chars: int,
    seed: int,
    corpus: Corpus | None = None,
    families: Iterable[str] | None = None,
) -> list[Case]:
    corpus = corpus or load_corpus()
    cases = code_cases(corpus) if kind == "code" else response_cases(corpus, kind, max_chars, seed)
    if families is not None:
        chosen = set(families)
        cases = [case for case in cases if case.family in chosen]
    return cases


#: The shapes a dataset's answer takes, each as ``(shape, a truth the response is made to give,
#: one it does not give)``: scorers branch on the answer (an integer takes a string compare, a
#: fraction or an expression goes through sympy), so a hang can need a truth of one shape.
TRUTHS = (
    ("an integer", "42", "17"),
    ("a fraction", "\\frac{3}{4}", "\\frac{5}{8}"),
    ("a decimal", "0.75", "2.5"),
    ("a LaTeX expression", "2\\sqrt{3} + \\pi", "x^{2} + 1"),
    ("text", "Paris", "blue whale"),
    ("a list", "[1, 2, 3]", "(4, 5, 6)"),
)
#: The most characters a family's ground-truth variants run at: a truth-dependent step is slow
#: on a short input already, and growing the input is the ladder's job.
TRUTH_CHARS = 4096


def truth_variants(cases: Sequence[Case]) -> list[Case]:
    """One response of the family run with each ground truth of :data:`TRUTHS`.

    The response is the family's longest case up to :data:`TRUTH_CHARS` (its shortest if none
    is that short); for the truth it gives, it ends with ``\\boxed{truth}``. Twelve cases a
    family, not a ladder each: they carry no formula, so they stay out of growth fits.
    """
    if not cases:
        return []
    within = [c for c in cases if len(c.text) <= TRUTH_CHARS]
    base = (
        max(within, key=lambda c: len(c.text)) if within else min(cases, key=lambda c: len(c.text))
    )
    variants = []
    for number, (shape, given, other) in enumerate(TRUTHS):
        for truth, gives in ((given, True), (other, False)):
            text = f"{base.text}\nThe final answer is \\boxed{{{truth}}}." if gives else base.text
            which = "gives" if gives else "does not give"
            variants.append(
                Case(
                    f"{base.id}-truth{number}-{'given' if gives else 'other'}",
                    base.family,
                    text,
                    f"{base.description}; a ground truth of {shape} the response {which}",
                    truth,
                    provenance=base.provenance,
                )
            )
    return variants


#: A reference as long as a summary's or a translation's: text metrics used as rewards (ROUGE-L,
#: TER, BLEU) cost as the reference times the response, which no short ground truth shows.
_SENTENCE = "The committee reviewed the quarterly report and approved the revised budget. "


def long_reference(chars: int = TRUTH_CHARS) -> str:
    return (_SENTENCE * (chars // len(_SENTENCE) + 1))[:chars]


def _edited(text: str) -> str:
    """``text`` with every fifth word changed: a near match, the costliest pair for an edit
    distance (TER) or an alignment."""
    words = text.split(" ")
    return " ".join(w if i % 5 else f"x{w[::-1]}" for i, w in enumerate(words))


def long_reference_variants(cases: Sequence[Case], *, reference_alone: bool = True) -> list[Case]:
    """Cases for a scorer that takes a ground truth: a response and a reference both
    :data:`TRUTH_CHARS` characters long, one the other with every fifth word changed; and, with
    ``reference_alone``, before it, the family's response (as the ground-truth variants take
    it) against a reference that long, and after it the pair with the response's blocks of
    words in reverse order (:func:`_shifted`), then the family's longest response against that
    reference. What the reference alone costs is the same whatever the response, and the
    other cases add no more in another family: one family of a run carries them
    (``_checker.plan``), not every one."""
    if not cases:
        return []
    within = [c for c in cases if len(c.text) <= TRUTH_CHARS]
    base = (
        max(within, key=lambda c: len(c.text)) if within else min(cases, key=lambda c: len(c.text))
    )
    if not reference_alone:
        return [_pair(base)]
    variants = [_with_long_reference(base, "long-reference"), _pair(base), _pair(base, True)]
    longest = max(cases, key=lambda c: len(c.text))
    if len(longest.text) > TRUTH_CHARS:
        # A policy's degenerate response against a dataset's reference of a usual length: a
        # metric that aligns the two (ROUGE-L) costs as their product.
        variants.append(_with_long_reference(longest, "against-long-reference"))
    return variants


#: The words a block of :func:`_shifted` moves.
SHIFT_WORDS = 10


def _with_long_reference(case: Case, suffix: str) -> Case:
    """``case``'s response against a reference of :data:`TRUTH_CHARS` characters."""
    return Case(
        f"{case.id}-{suffix}",
        case.family,
        case.text,
        f"{case.description}; a reference of {TRUTH_CHARS} characters",
        long_reference(),
        provenance=case.provenance,
    )


def _pair(base: Case, shifted: bool = False) -> Case:
    """``base``'s response lengthened to :data:`TRUTH_CHARS`, against a reference as long: the
    reference with every fifth word changed, or, ``shifted``, the response with its blocks
    reordered."""
    pair = (base.text + " " + long_reference())[:TRUTH_CHARS]
    if shifted:
        suffix, text, truth = "-shifted", _shifted(pair), pair
        how = f", its blocks of {SHIFT_WORDS} words in reverse order; its reference the words"
        how += " in order"
    else:
        suffix, text, truth = "", pair, _edited(pair)
        how = "; its reference as long, every fifth word changed"
    return Case(
        f"{base.id}-long-pair{suffix}",
        base.family,
        text,
        f"{base.description}, lengthened to {TRUTH_CHARS} characters{how}",
        truth,
        provenance=base.provenance,
    )


def _shifted(text: str) -> str:
    """``text``'s blocks of :data:`SHIFT_WORDS` words in reverse order: the pair an edit rate
    with shifts (TER) searches longest, each block a shift (sacrebleu's: 16 s at 4 KiB, over a
    minute at 2,000 words in another order)."""
    words = text.split(" ")
    blocks = [words[i : i + SHIFT_WORDS] for i in range(0, len(words), SHIFT_WORDS)]
    return " ".join(word for block in reversed(blocks) for word in block)


def families(cases: Sequence[Case]) -> list[str]:
    return list(dict.fromkeys(case.family for case in cases))
