"""Where scorers come from: ini lines, ``--reward-hang-scorer``, ``@scorer``, entry points, hooks.

Nothing here imports a scorer: the controller only reads specs (and, for ``@scorer``, the source
text), so a heavy or broken scorer module can only ever hurt the worker that imports it.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pytest_rewardhang.corpus._format import read_regular
from pytest_rewardhang.guard._spec import SpecError, is_file_target, split_spec

from . import _declared
from ._options import STYLES, context_list, positive_mib, positive_seconds

KINDS = ("math", "text", "code")
_KEYS = (
    "kind",
    "deadline",
    "example",
    "response",
    "id",
    "expect",
    "memory_mb",
    "contexts",
    "style",
)
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


class ScorerConfigError(Exception):
    """A scorer declaration that cannot be used; the message names where it was declared."""


@dataclass(frozen=True)
class ScorerSpec:
    """One reward function to check, and how."""

    spec: str
    id: str
    kind: str = "math"
    deadline: float | None = None
    example: Path | None = None
    response: str | None = None
    expect_hang: bool = False
    memory_mb: float | None = None
    declared_in: str = ""
    #: ``contexts=main,thread,loop``: where it is called (None: the run's setting or default).
    contexts: tuple[str, ...] | None = None
    #: ``style=NAME``: the call style, instead of reading it from the signature.
    style: str | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)
    #: Where a report points when the scorer's own ``def`` cannot be found (it does not
    #: import): the file and line of its declaration, or the option that declares it and which
    #: of the option's values it is, from 1.
    declared_at: tuple[str, int] | None = field(default=None, compare=False)


def parse_line(line: str, declared_in: str, rootdir: Path) -> ScorerSpec:
    """``SPEC [key=value ...]`` as written in an ini line or on the command line."""
    if not isinstance(line, str):  # a TOML list of lists, a hook's odd result
        raise ScorerConfigError(f"{declared_in}: a scorer line is a string, not {line!r}")
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ScorerConfigError(f"{declared_in}: {line!r}: {exc}") from None
    if not words:
        raise ScorerConfigError(f"{declared_in}: empty scorer line")
    keys: dict[str, str] = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise ScorerConfigError(f"{declared_in}: {line!r}: expected key=value, got {word!r}")
        keys[key] = value
    return build(words[0], keys, declared_in, rootdir)


def build(spec: str, keys: dict[str, Any], declared_in: str, rootdir: Path) -> ScorerSpec:
    where = f"{declared_in}: {spec!r}"
    try:
        target, attr = split_spec(spec)
    except SpecError as exc:
        raise ScorerConfigError(f"{declared_in}: {exc}") from None
    unknown = sorted(set(keys) - set(_KEYS))
    if unknown:
        raise ScorerConfigError(
            f"{where}: unknown key {', '.join(unknown)}; known keys: {', '.join(_KEYS)}"
        )
    kind = str(keys.get("kind", "math"))
    if kind not in KINDS:
        raise ScorerConfigError(f"{where}: kind={kind!r}; choose from {', '.join(KINDS)}")
    deadline = memory = contexts = None
    try:
        if "contexts" in keys:
            raw = keys["contexts"]
            contexts = context_list(",".join(raw) if isinstance(raw, list | tuple) else str(raw))
        if "deadline" in keys:
            deadline = positive_seconds(str(keys["deadline"]))
        if "memory_mb" in keys:
            memory = positive_mib(str(keys["memory_mb"]))
    except ValueError as exc:
        raise ScorerConfigError(f"{where}: {exc}") from None
    style = keys.get("style")
    if style is not None and style not in STYLES:
        raise ScorerConfigError(f"{where}: style={style!r}; choose from {', '.join(STYLES)}")
    expect = keys.get("expect")
    if expect not in (None, "hang"):
        raise ScorerConfigError(f"{where}: expect={expect!r}; the only expectation is expect=hang")
    example = None
    if keys.get("example"):
        example = Path(str(keys["example"]))
        example = example if example.is_absolute() else rootdir / example
    default_id = Path(target).stem if is_file_target(target) else target.rsplit(".", 1)[-1]
    scorer_id = str(keys.get("id") or f"{default_id}.{attr}")
    return ScorerSpec(
        spec=spec,
        # Names a folder of saved cases: "." and ".." would be the folder above it.
        id=_ID_UNSAFE.sub("_", scorer_id).lstrip(".") or "_",
        kind=kind,
        deadline=deadline,
        example=example,
        response=keys.get("response"),
        expect_hang=expect == "hang",
        memory_mb=memory,
        declared_in=declared_in,
        contexts=contexts,
        style=style,
    )


def decorated(rootdir: Path, ignore: Iterable[str] = ()) -> Iterator[ScorerSpec]:
    """``@scorer(...)``-decorated functions below ``rootdir``, found by reading source only."""
    skip = {".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", *ignore}
    for folder, dirs, files in os.walk(rootdir):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = Path(folder, name)
            try:  # a FIFO named *.py is passed over: reading it would wait for a writer
                source = read_regular(path, sys.maxsize)
            except OSError:
                continue
            if b"scorer(" in source and b"rewardhang" in source:
                yield from _decorated_in(path, source, rootdir)


def _decorated_in(path: Path, source: bytes, rootdir: Path) -> Iterator[ScorerSpec]:
    try:
        tree = ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        # The last two: nested past the parser's depth, or its memory.
        # It names the decorator, so it may register a scorer: skipping it would leave that
        # scorer unchecked and the run green.
        line = getattr(exc, "lineno", None)
        where = f"{path.relative_to(rootdir).as_posix()}" + (f":{line}" if line else "")
        raise ScorerConfigError(
            f"{where}: cannot read this file for @pytest_rewardhang.scorer functions: "
            f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}"
        ) from None
    relative = path.relative_to(rootdir).as_posix()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and _is_scorer_decorator(deco.func)):
                continue
            where = f"{relative}:{deco.lineno}"
            keys: dict[str, Any] = {}
            for kw in deco.keywords:
                try:
                    keys[str(kw.arg)] = ast.literal_eval(kw.value)
                except ValueError:
                    raise ScorerConfigError(
                        f"{where}: @scorer({kw.arg}=...) must be a literal value"
                    ) from None
            spec = build(f"{relative}:{node.name}", keys, where, rootdir)
            example = _near(path, keys.get("example"), spec.example)
            yield replace(spec, example=example, declared_at=(str(path), deco.lineno))


def _near(path: Path, raw: object, default: Path | None) -> Path | None:
    """An example path in a decorator is relative to the scorer's file."""
    if isinstance(raw, str) and not Path(raw).is_absolute():
        return path.parent / raw
    return default


def _is_scorer_decorator(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "scorer"
    return isinstance(func, ast.Attribute) and func.attr == "scorer"


def from_entry_points(rootdir: Path) -> Iterator[ScorerSpec]:
    for ep in entry_points(group="pytest_rewardhang.scorers"):
        spec = build(ep.value, {"id": ep.name}, f"entry point {ep.name!r}", rootdir)
        yield replace(spec, declared_at=_declared.entry_point(ep))
