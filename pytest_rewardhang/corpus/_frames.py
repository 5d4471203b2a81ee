"""Payloads inside the scorer's own structure: the example's frame, with a family's text as its
answer.

A real scorer gates on its format before it does the costly work: it returns 0 unless the
response holds ``</think>`` (rllm's and slime's deepscaler reward, TRL's
``reasoning_accuracy_reward``), ``<answer>`` tags, a ``\\boxed{}``, a ``####`` line or a JSON
field. A case that replaces the whole response never passes the gate, so the hang behind it is
never reached. Here the example's response keeps its frame and the family's payload goes where
its answer was; and each string the scorer's source tests a response for (``_harvest``'s
markers) makes one more frame, the example framed by that string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ._cases import TRUTH_CHARS, TRUTHS, Case

#: Frames from the scorer's markers, after the example's own: each costs a case per ground
#: truth shape in every family.
MAX_MARKERS = 3
MAX_FRAMES = 1 + MAX_MARKERS
_BOXED = "\\boxed{"
_TAG_PAIR = re.compile(r"<([A-Za-z_][\w\-]*)>(.*?)</\1>", re.DOTALL)
_HASHES = re.compile(r"^####[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_CLOSING = re.compile(r"</([A-Za-z_][\w\-]*)>")
_OPENING = re.compile(r"<([A-Za-z_][\w\-]*)>")


@dataclass(frozen=True)
class Frame:
    """A response with a hole: ``head + payload + tail``."""

    head: str
    tail: str
    #: Where the payload sits, for the case's description: which gate it passes.
    where: str
    #: Inside a JSON string: the payload is written escaped, so the JSON still parses.
    escaped: bool = False

    def wrap(self, payload: str) -> str:
        inner = json.dumps(payload)[1:-1] if self.escaped else payload
        return self.head + inner + self.tail


def _balanced_end(text: str, start: int) -> int | None:
    """The index of the ``}`` closing the brace opened just before ``start``, or None."""
    depth = 1
    for index in range(start, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def boxed_answer(text: str) -> str | None:
    """What the text's last closed ``\\boxed{...}`` holds, or None."""
    start = text.rfind(_BOXED)
    while start >= 0:
        end = _balanced_end(text, start + len(_BOXED))
        if end is not None:
            return text[start + len(_BOXED) : end]
        start = text.rfind(_BOXED, 0, start)
    return None


def answer_frame(response: str, truth: str | None) -> Frame | None:
    """The example's response with a hole where its answer is, or None where none is found.

    In order: the last closed ``\\boxed{}``; the last tag pair holding the truth (or named
    like an answer); a JSON object's field holding the truth; a ``####`` line; the last place
    the truth is written.
    """
    start = response.rfind(_BOXED)
    if start >= 0:
        end = _balanced_end(response, start + len(_BOXED))
        if end is not None:
            inner = start + len(_BOXED)
            return Frame(response[:inner], response[end:], "in the example's \\boxed{}")
    for match in reversed(list(_TAG_PAIR.finditer(response))):
        if (truth and truth in match.group(2)) or "answer" in match.group(1).lower():
            return Frame(
                response[: match.start(2)],
                response[match.end(2) :],
                f"in the example's <{match.group(1)}> tags",
            )
    json_frame = _json_frame(response, truth)
    if json_frame is not None:
        return json_frame
    hashes = list(_HASHES.finditer(response))
    if hashes:
        last = hashes[-1]
        return Frame(response[: last.start(1)], response[last.end(1) :], "on a '####' line")
    if truth:
        at = response.rfind(truth)
        if at >= 0:
            return Frame(
                response[:at], response[at + len(truth) :], "where the example's answer was"
            )
    return None


def _json_frame(response: str, truth: str | None) -> Frame | None:
    """A JSON object's string field (the one holding the truth, else the last) as the hole."""
    body = response.strip()
    fenced = re.search(r"```(?:json)?\s*\n(.*?)```", response, re.DOTALL)
    if fenced is not None:
        body = fenced.group(1).strip()
    if not body.startswith("{"):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    fields = [(k, v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str)]
    if not fields:
        return None
    key, old = next(((k, v) for k, v in fields if truth and truth in v), fields[-1])
    at_key = response.find(json.dumps(key))
    at = response.find(json.dumps(old), at_key + len(json.dumps(key)))
    if at_key < 0 or at < 0:
        return None
    inner = at + 1
    return Frame(
        response[:inner],
        response[inner + len(json.dumps(old)) - 2 :],
        f"in the example's JSON field {key!r}",
        escaped=True,
    )


def frames(
    response: str, truth: str | None, markers: Sequence[str], fields: Sequence[str] = ()
) -> list[Frame]:
    """The example's own frame, then, where the markers hold a closing tag ``</x>`` and an
    opening ``<y>``, both (``<x>`` example ``</x><y>`` answer ``</y>``), then one per marker
    the response lacks, up to :data:`MAX_MARKERS` frames besides the example's (the first of
    ``fields``, the keys a scorer that parses JSON reads, makes a JSON object first): a closing tag
    ``</x>`` after a ``<x>...</x>`` block holding the example, an opening tag ``<x>`` around the
    answer's frame, any other marker on a line of its own after the example, each before the
    example's frame again."""
    own = answer_frame(response, truth)
    found = [own] if own is not None else []
    head, tail = (own.head, own.tail) if own is not None else (response + "\n", "")
    missing = [m for m in dict.fromkeys(markers) if m not in response]
    think = next((m[2:-1] for m in missing if _CLOSING.fullmatch(m)), None)
    answer = next((m[1:-1] for m in missing if _OPENING.fullmatch(m) and m[1:-1] != think), None)
    if think is not None and answer is not None:
        # DeepSeek-R1's format, which TRL's format reward and many a scorer require whole:
        # the example as the reasoning, then the answer's frame inside the other tag.
        found.append(
            Frame(
                f"<{think}>\n{response}\n</{think}>\n<{answer}>\n{head}",
                f"{tail}\n</{answer}>",
                f"inside <{think}>...</{think}> then <{answer}>...</{answer}>, tags the scorer "
                "looks for",
            )
        )
    if fields and not response.lstrip().startswith("{"):
        # A scorer that parses the response as JSON and reads a field: the example as the
        # field's text, the payload where its answer was.
        key = json.dumps(fields[0])
        found.append(
            Frame(
                f'{{{key}: "{json.dumps(head)[1:-1]}',
                f'{json.dumps(tail)[1:-1]}"}}',
                f"in a JSON object's field {fields[0]!r}, which the scorer reads",
                escaped=True,
            )
        )
    made = len(found) - (own is not None)
    for marker in missing[: MAX_MARKERS - made]:
        closing, opening = _CLOSING.fullmatch(marker), _OPENING.fullmatch(marker)
        shown = f"a string the scorer looks for ({marker!r})"
        if closing is not None:
            block = f"<{closing.group(1)}>\n{response}\n{marker}\n"
            found.append(Frame(block + head, tail, f"after {shown}"))
        elif opening is not None:
            close = f"</{opening.group(1)}>"
            found.append(Frame(marker + head, tail + close, f"inside {shown}"))
        else:
            found.append(Frame(f"{response}\n{marker}\n{head}", tail, f"after {shown}"))
    return found


def payload(text: str) -> str:
    """What a family's response gives as its answer: its last ``\\boxed{}``'s content, else
    the whole text (a run of unclosed ``\\boxed{`` stays whole)."""
    inner = boxed_answer(text)
    return inner if inner else text


def framed_variants(
    cases: Sequence[Case], found: Sequence[Frame], *, with_truths: bool
) -> list[Case]:
    """The family's response (its longest case up to :data:`TRUTH_CHARS`, as the ground-truth
    variants take) as the answer of each frame; where the scorer takes a ground truth, under
    each shape of :data:`TRUTHS` (the response gives none of them: the payload is its answer)."""
    if not cases or not found:
        return []
    within = [c for c in cases if len(c.text) <= TRUTH_CHARS]
    base = (
        max(within, key=lambda c: len(c.text)) if within else min(cases, key=lambda c: len(c.text))
    )
    answer = payload(base.text)
    variants = []
    for index, frame in enumerate(found):
        text = frame.wrap(answer)
        described = f"{base.description}, {frame.where}"
        if not with_truths:
            variants.append(
                Case(
                    f"{base.id}-frame{index}",
                    base.family,
                    text,
                    described,
                    base.ground_truth,
                    provenance=base.provenance,
                )
            )
            continue
        for number, (shape, given, _) in enumerate(TRUTHS):
            variants.append(
                Case(
                    f"{base.id}-frame{index}-truth{number}",
                    base.family,
                    text,
                    f"{described}; a ground truth of {shape}",
                    given,
                    provenance=base.provenance,
                )
            )
    return variants
