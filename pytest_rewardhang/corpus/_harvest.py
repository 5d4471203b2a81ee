"""A scorer's own vocabulary: the strings and regexes it looks for, turned into attacks.

Generic degenerate text misses most regex hangs: a pattern only backtracks on the literals it
matches. The string literals of the scorer's source and the patterns it compiles while scoring
its example become the repeated units of extra cases, and every regex that backtracks
super-linearly is attacked directly with ``prefix + pump * n + suffix`` built from its structure
(``_redos``). A pattern is kept with its flags, written inline (``(?s)...``), because ``.`` and
``$`` decide what the attack must be.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

from pytest_rewardhang.guard._spec import load_callable

from . import _format, _redos
from ._format import Formula

MAX_UNITS = 10
MAX_ATTACKS = 6
_MAX_LITERAL = 40
_ATTACKS_PER_PATTERN = 3
#: Patterns analysed to order them (a library may compile hundreds at import).
_MAX_RANKED = 200
_INLINE_FLAGS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.VERBOSE, "x"))
_RE_FUNCTIONS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn"}
_RE_FUNCTIONS |= {"split"}
#: Ends a pumped run so the match has to fail, after the engine tried every split.
ATTACK_SUFFIX = "!\x00"


@dataclass
class Vocabulary:
    #: Patterns the scorer compiled (at import and while scoring its example).
    patterns: list[str] = field(default_factory=list)
    #: String constants of the scorer's own source files.
    literals: list[str] = field(default_factory=list)
    #: The strings its source tests a response for (``"</think>" in text``, ``.split("####")``,
    #: a name bound to one), then tag-like literals (``"<answer>"``): the gates a response must
    #: pass to reach the rest of the scorer, first seen first.
    markers: list[str] = field(default_factory=list)
    #: The keys its source reads (``data["answer"]``, ``.get("answer")``) in a file that parses
    #: JSON: a response that is not that JSON object never reaches the rest.
    fields: list[str] = field(default_factory=list)


def collect(spec: str, rootdir: str, example: dict[str, Any]) -> Vocabulary:
    """Import the scorer and score its example, recording every regex (run in a child).

    Patterns come out worst first: those that backtrack super-linearly, the scorer's own
    before a library's, then the rest in the order they were seen.
    """
    root = str(Path(rootdir).resolve())
    package = str(_format.top_package_dir())  # our own machinery, wherever it is installed
    compiled: dict[tuple[str, bool], None] = {}  # seen once, whatever the calls
    original = re._compile  # type: ignore[attr-defined]

    owners: dict[str, bool] = {}  # re.search calls _compile every time: resolve each file once

    def own(file: str) -> bool:
        if file not in owners:
            resolved = str(Path(file).resolve())
            owners[file] = (
                resolved.startswith(root)
                and not resolved.startswith(package)
                and not any(p in resolved for p in ("site-packages", ".venv", "dist-packages"))
            )
        return owners[file]

    def recording(pattern: Any, flags: Any) -> Any:
        if isinstance(pattern, str):
            frame = sys._getframe(1)
            while frame.f_back is not None and frame.f_code.co_filename == re.__file__:
                frame = frame.f_back
            compiled[with_flags(pattern, flags), own(frame.f_code.co_filename)] = None
        return original(pattern, flags)

    re._compile = recording  # type: ignore[attr-defined]
    try:
        fn = load_callable(spec, Path(rootdir))
        # The example's own failure is reported by the check itself.
        with contextlib.suppress(Exception):
            value = fn(**example)
            if inspect.isawaitable(value):  # an async scorer compiles its regexes when awaited
                asyncio.run(_awaited(value))
    finally:
        re._compile = original  # type: ignore[attr-defined]
    literals: list[str] = []
    written: list[str] = []
    trees: list[ast.AST] = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py") or not own(file):
            continue
        literals += source_literals(Path(file))
        written += source_patterns(Path(file))
        tree = _parsed(Path(file))
        if tree is not None:
            trees.append(tree)
    seen = [*compiled, *((p, True) for p in written)]
    # Tags a format regex requires (``^<think>\n.*?\n</think>\n<answer>``) gate as much.
    pieces = [piece for pattern in rank_patterns(seen) for piece in literal_pieces(pattern)]
    tags = [tag for text in [*literals, *pieces] for tag in _TAG.findall(text)]
    markers = source_markers(trees) + tags
    return Vocabulary(
        rank_patterns(seen),
        list(dict.fromkeys(literals)),
        list(dict.fromkeys(markers)),
        json_fields(trees),
    )


#: A markup tag, opening or closing: ``<think>``, ``</answer>``, ``<|im_end|>`` is not one.
_TAG = re.compile(r"</?[A-Za-z_][\w\-]*>")
#: String methods whose first argument is what the response is searched for.
_SEARCHES = {"split", "rsplit", "partition", "rpartition", "find", "rfind", "index", "rindex"}
_SEARCHES |= {"startswith", "endswith", "count", "removeprefix", "removesuffix"}


def _parsed(path: Path) -> ast.AST | None:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return None


def source_markers(trees: list[ast.AST]) -> list[str]:
    """The strings the source tests a text for, in the order written: the left of ``in`` and
    ``not in``, the first argument of ``split``, ``find``, ``startswith``... A name is resolved
    through the string constants assigned to it in any of ``trees`` (rllm keeps
    ``THOUGHT_DELIMITER_END = "</think>"`` in a module of its own)."""
    constants: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        constants.setdefault(target.id, node.value.value)

    def text(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    found: list[tuple[int, int, str]] = []
    for tree in trees:
        for node in ast.walk(tree):
            searched: ast.expr | None = None
            if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
                searched = node.left
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _SEARCHES
                and node.args
            ):
                searched = node.args[0]
            value = text(searched) if searched is not None else None
            if value is not None and len(value.strip()) >= 2 and len(value) <= _MAX_LITERAL:
                found.append((id(tree), getattr(node, "lineno", 0), value))
    order = {id(tree): i for i, tree in enumerate(trees)}
    return [value for _, _, value in sorted(found, key=lambda f: (order[f[0]], f[1]))]


def json_fields(trees: list[ast.AST]) -> list[str]:
    """The keys read by subscript or ``.get`` in the files that call ``json.loads`` (or
    ``loads`` from json), in the order written: the fields a JSON-answer scorer gates on."""
    found: list[str] = []
    for tree in trees:
        parses = any(
            (
                isinstance(node, ast.Attribute)
                and node.attr == "loads"
                and isinstance(node.value, ast.Name)
                and node.value.id == "json"
            )
            or (
                isinstance(node, ast.ImportFrom)
                and node.module == "json"
                and any(alias.name == "loads" for alias in node.names)
            )
            for node in ast.walk(tree)
        )
        if not parses:
            continue
        for node in ast.walk(tree):
            key: ast.expr | None = None
            if isinstance(node, ast.Subscript):
                key = node.slice
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
            ):
                key = node.args[0]
            if (
                isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and key.value.isidentifier()
            ):
                found.append(key.value)
    return list(dict.fromkeys(found))


async def _awaited(value: Any) -> Any:
    return await value


def with_flags(pattern: str, flags: Any) -> str:
    """The pattern with the flags that change what it matches written inline."""
    try:
        value = int(flags)
    except (TypeError, ValueError):
        return pattern
    inline = "".join(letter for flag, letter in _INLINE_FLAGS if value & flag)
    return f"(?{inline}){pattern}" if inline else pattern


def rank_patterns(seen: list[tuple[str, bool]]) -> list[str]:
    """Distinct patterns, super-linear first (the scorer's own before a library's)."""
    own: dict[str, bool] = {}
    for pattern, mine in seen:
        own[pattern] = own.get(pattern, False) or mine
    order = list(own)

    def key(item: tuple[int, str]) -> tuple[float, bool, int]:
        index, pattern = item
        if index >= _MAX_RANKED:
            return (0.0, True, index)
        degree = _redos.analyse(pattern).degree("search")
        return (-min(degree, 1e9) if degree >= 2 else 0.0, not own[pattern], index)

    return [pattern for _, pattern in sorted(enumerate(order), key=key)]


def source_patterns(path: Path) -> list[str]:
    """Constant patterns passed to ``re.compile``/``re.search``/... in a source file, with their
    constant flags: the regexes the example did not reach."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return []
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _RE_FUNCTIONS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("re", "regex")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            continue
        flags = [k.value for k in node.keywords if k.arg == "flags"]
        position = 1 if node.func.attr == "compile" else 2
        if len(node.args) > position:
            flags.append(node.args[position])
        found.append(with_flags(node.args[0].value, _constant_flags(flags[0]) if flags else 0))
    return found


def _constant_flags(node: ast.expr) -> int:
    """``re.S | re.M`` and the like; 0 for anything that is not spelled out."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _constant_flags(node.left) | _constant_flags(node.right)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        flag = getattr(re, node.attr, None)
        return int(flag) if isinstance(flag, re.RegexFlag) else 0
    return 0


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
    """``prefix + pump * n + suffix`` for each super-linear ambiguity of the pattern, worst first.

    The structure decides (``_redos``): nested or overlapping repeats, exponential first, then
    by polynomial degree, under match and search semantics. A pattern the analysis cannot read
    (too large) falls back to the older guess: an unbounded repeat inside another, or two in
    one sequence whose bodies both match the pump.
    """
    analysis = _redos.analyse(pattern)
    if not analysis.skipped:
        found = [Formula(f.prefix, (f.pump,), f.suffix) for f in analysis.attacks()]
        # The worst few: the check keeps MAX_ATTACKS over all patterns, in their order.
        return found[:_ATTACKS_PER_PATTERN]
    return _guessed_attacks(pattern)


def _guessed_attacks(pattern: str) -> list[Formula]:
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
