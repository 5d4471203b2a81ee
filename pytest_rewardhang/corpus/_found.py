"""``--reward-hang-save DIR``: inputs that ran past their deadline, as corpus files to commit.

``--reward-hang-corpus DIR`` replays them, so a hang found once stays a regression case.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ._format import FORMAT_VERSION

if TYPE_CHECKING:
    from ._cases import Case

_SLUG = re.compile(r"[^a-z0-9]+")


def slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-") or "x"


def family_name(family: str, scorer_id: str) -> str:
    """Its own family, so replaying it never shadows the family it was found in."""
    return f"found-{slug(family)}-{slug(scorer_id)}"


def write(
    folder: Path, case: Case, text: str, *, scorer_id: str, kind: str, deadline: float
) -> Path:
    """Write ``text``, which ran past ``deadline`` as ``case``, as a corpus file; return its path.

    ``scorer_id`` and ``kind`` are the scorer's: a ``code`` scorer's input is written as a program,
    any other as a TOML case.
    """
    family = family_name(case.family, scorer_id)
    folder.mkdir(parents=True, exist_ok=True)
    today = datetime.date.today().isoformat()
    provenance = (
        f"found by pytest --reward-hang-check on {today}: {scorer_id} ran past its "
        f"{deadline:g} s deadline on case {case.id} ({len(text)} chars)"
    )
    if kind == "code":
        path = folder / f"{family}.py"
        header = (
            f"# family: {family}\n"
            f"# attacks: {case.description}\n"
            "# expected: a correct harness kills the program at its deadline and scores 0\n"
            f"# provenance: {provenance}\n"
        )
        path.write_text(header + text, encoding="utf-8")
        return path
    path = folder / f"{family}.toml"
    path.write_text(_toml(family, case, text, provenance), encoding="utf-8")
    return path


def write_case(path: Path, case: Case, text: str, scorer_id: str, why: str) -> None:
    """Write ``text`` as ``case`` to the corpus file ``path``, ``why`` saying what it is."""
    family = family_name(case.family, scorer_id)
    today = datetime.date.today().isoformat()
    provenance = f"found by pytest --reward-hang-check on {today}: {why}"
    path.write_text(_toml(family, case, text, provenance), encoding="utf-8")


def _toml(family: str, case: Case, text: str, provenance: str) -> str:
    formula = case.formula
    lines = [
        f"# {provenance}",
        f"corpus_version = {FORMAT_VERSION}",
        f"family = {toml_string(family)}",
        f"description = {toml_string('regression: ' + case.description)}",
        "",
        "[[case]]",
        f"name = {toml_string(slug(case.id))}",
    ]
    surrogates = any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    if surrogates:
        lines.append("codepoints = true")
    if formula is not None and formula.expand(len(text)) == text and not formula.alphabet:
        lines += [
            f"prefix = {toml_string(formula.prefix, surrogates)}",
            "units = [" + ", ".join(toml_string(unit, surrogates) for unit in formula.units) + "]",
            f"suffix = {toml_string(formula.suffix, surrogates)}",
            f"sizes = [{len(text)}]",
        ]
    else:
        lines.append(f"response = {toml_string(text, surrogates)}")
    if case.ground_truth is not None:
        lines.append(f"ground_truth = {toml_string(case.ground_truth, surrogates)}")
    lines += [
        f"description = {toml_string(case.description)}",
        f"provenance = {toml_string(provenance)}",
    ]
    return "\n".join(lines) + "\n"


def toml_string(text: str, codepoints: bool = False) -> str:
    """A TOML basic string; lone surrogates (which TOML cannot hold) as ``<U+XXXX>``."""
    out = []
    for char in text:
        point = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif 0xD800 <= point <= 0xDFFF and codepoints:
            out.append(f"<U+{point:04X}>")
        elif point < 0x20 or point == 0x7F:
            out.append(f"\\u{point:04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
