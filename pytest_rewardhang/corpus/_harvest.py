"""A scorer's own vocabulary: the strings and regexes it looks for, turned into attacks.

Generic degenerate text misses most regex hangs: a pattern only backtracks on the literals it
matches. The string literals of the scorer's source and the patterns it compiles while scoring
its example become the repeated units of extra cases, and every regex with overlapping
unbounded repeats is attacked directly with ``prefix + pump * n + suffix``.
"""

from __future__ import annotations

import ast
import contextlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

from pytest_rewardhang.guard._spec import load_callable

from . import _format
from ._format import Formula

MAX_UNITS = 10
MAX_ATTACKS = 6
_MAX_LITERAL = 40
#: Ends a pumped run so the match has to fail, after the engine tried every split.
ATTACK_SUFFIX = "!\x00"


@dataclass
class Vocabulary:
    #: Patterns the scorer compiled (at import and while scoring its example).
    patterns: list[str] = field(default_factory=list)
    #: String constants of the scorer's own source files.
    literals: list[str] = field(default_factory=list)


def collect(spec: str, rootdir: str, example: dict[str, Any]) -> Vocabulary:
    """Import the scorer and score its example, recording every regex (run in a child)."""
    patterns: list[str] = []
    original = re._compile  # type: ignore[attr-defined]

    def recording(pattern: Any, flags: Any) -> Any:
        if isinstance(pattern, str):
            patterns.append(pattern)
        return original(pattern, flags)

    re._compile = recording  # type: ignore[attr-defined]
    try:
        fn = load_callable(spec, Path(rootdir))
        # The example's own failure is reported by the check itself.
        with contextlib.suppress(Exception):
            fn(**example)
    finally:
        re._compile = original  # type: ignore[attr-defined]
    literals: list[str] = []
    package = str(_format.top_package_dir())  # our own machinery, wherever it is installed
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        resolved = str(Path(file).resolve())
        if not resolved.startswith(str(Path(rootdir).resolve())) or resolved.startswith(package):
            continue
        if any(part in resolved for part in ("site-packages", ".venv", "dist-packages")):
            continue
        literals += source_literals(Path(resolved))
    return Vocabulary(list(dict.fromkeys(patterns)), list(dict.fromkeys(literals)))


def source_literals(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return []
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and 0 < len(node.value) <= _MAX_LITERAL
    ]


def units(vocabulary: Vocabulary) -> list[str]:
    """Repeated units, most promising first: regex literal pieces, then marker-like literals."""
    pieces: list[str] = []
    for pattern in vocabulary.patterns:
        pieces += literal_pieces(pattern)
    markers = [s for s in vocabulary.literals if not s.isidentifier() and s.strip()]
    words = [s for s in vocabulary.literals if s.isidentifier()]
    chosen = [p for p in dict.fromkeys([*pieces, *markers, *words]) if p]
    return chosen[:MAX_UNITS]


def literal_pieces(pattern: str) -> list[str]:
    """Runs of literal characters in a regex: ``r'.*answer is (.*)'`` gives ``'answer is '``."""
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return []
    pieces: list[str] = []

    def walk(items: Any) -> None:
        run = ""
        for op, av in items:
            if op is sre.LITERAL:
                run += chr(av)
                continue
            if run:
                pieces.append(run)
                run = ""
            for sub in _children(op, av):
                walk(sub)
        if run:
            pieces.append(run)

    walk(parsed)
    return pieces


def attacks(pattern: str) -> list[Formula]:
    """``prefix + pump * n + suffix`` for each unbounded repeat that can backtrack super-linearly.

    Dangerous: an unbounded repeat inside another, or two unbounded repeats in one sequence
    whose bodies both match the pump (``.*A.*B``, ``(x+x+)+``, ``(qz)*(qz)*X``).
    """
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return []
    found: list[Formula] = []

    def visit(items: list[tuple[Any, Any]], prefix: str, top: bool) -> None:
        repeats = [i for i, (op, av) in enumerate(items) if _unbounded(op, av)]
        for index in repeats:
            op, av = items[index]
            body = list(av[2])
            pump = sample(body)
            nested = any(_has_unbounded(sub) for sub in _children(op, av))
            overlapping = any(other != index and _matches(items[other], pump) for other in repeats)
            # An unanchored search restarts a leading ``.*X`` at every offset: quadratic.
            leading = top and index == 0
            if pump and (nested or overlapping or leading):
                head = prefix + sample(items[:index])
                found.append(Formula(head, (pump,), ATTACK_SUFFIX))
        for index, (op, av) in enumerate(items):
            for sub in _children(op, av):
                visit(list(sub), prefix + sample(items[:index]), False)

    visit(list(parsed), "", True)
    unique = {f.units: f for f in reversed(found)}
    return list(reversed(unique.values()))[:MAX_ATTACKS]


def _unbounded(op: Any, av: Any) -> bool:
    return op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[1] is sre.MAXREPEAT


def _has_unbounded(items: Any) -> bool:
    return any(
        _unbounded(op, av) or any(_has_unbounded(s) for s in _children(op, av)) for op, av in items
    )


def _children(op: Any, av: Any) -> list[Any]:
    if op is sre.SUBPATTERN:
        return [av[-1]]
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        return [av[2]]
    if op is sre.BRANCH:
        return list(av[1])
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        return [av[1]]
    return []


def _matches(item: tuple[Any, Any], text: str) -> bool:
    _, av = item
    try:
        return re.fullmatch(f"(?:{_unparse(av[2])})+", text) is not None
    except (re.error, ValueError, TypeError, RecursionError):
        return False


def _unparse(items: Any) -> str:
    """A pattern for the sample's sake: literal runs exact, anything else as one character class."""
    return "".join(re.escape(c) for c in sample(list(items))) or "(?:)"


def sample(items: list[tuple[Any, Any]]) -> str:
    """A short string the items match (best effort: enough to pump a repeat)."""
    out = []
    for op, av in items:
        if op is sre.LITERAL:
            out.append(chr(av))
        elif op is sre.NOT_LITERAL:
            out.append("a" if av != ord("a") else "b")
        elif op is sre.ANY:
            out.append("a")
        elif op is sre.IN:
            out.append(_class_char(av))
        elif op is sre.BRANCH:
            out.append(sample(list(av[1][0])))
        elif op is sre.SUBPATTERN:
            out.append(sample(list(av[-1])))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            out.append(sample(list(av[2])) * max(av[0], 1 if av[1] is sre.MAXREPEAT else 0))
    return "".join(out)


def _class_char(av: list[tuple[Any, Any]]) -> str:
    negate = any(op is sre.NEGATE for op, _ in av)
    candidates = "a0 !x"
    for char in candidates:
        inside = re.fullmatch(sre_class(av), char) is not None
        if inside != negate or (negate and not inside):
            return char
    return "a"


def sre_class(av: list[tuple[Any, Any]]) -> str:
    parts = []
    for op, value in av:
        if op is sre.LITERAL:
            parts.append(re.escape(chr(value)))
        elif op is sre.RANGE:
            parts.append(f"{re.escape(chr(value[0]))}-{re.escape(chr(value[1]))}")
        elif op is sre.CATEGORY:
            parts.append(_CATEGORIES.get(value, ""))
    return f"[{''.join(parts)}]" if parts else "[^\\s\\S]"


_CATEGORIES = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}
