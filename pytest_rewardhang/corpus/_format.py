"""Corpus files: response families as TOML formulas, pathological programs as ``.py`` files.

The format is documented in ``corpora/README.md``. Every file is validated when it is loaded and
a bad one is refused with ``file:line: what is wrong``: ``tomllib`` reports no positions for
values it parsed fine, so the line of an offending key or ``[[case]]`` table is found by
scanning the text.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import re
import stat
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The format version every response file declares (``corpus_version = 1``).
FORMAT_VERSION = 1
#: A doubling ladder, so growth fits see every factor of two a policy's response may grow by.
DEFAULT_SIZES: tuple[int | str, ...] = (1024, 2048, 4096, 8192, 16384, 32768, 65536, "max")
RESPONSE_KINDS = ("math", "text")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*\Z")  # \Z: "$" lets a final newline through
_CODEPOINT = re.compile(r"<U\+([0-9A-Fa-f]{1,6})>")
_TOP_KEYS = {"corpus_version", "family", "description", "kinds", "case"}
_CASE_KEYS = {
    "name",
    "prefix",
    "units",
    "suffix",
    "alphabet",
    "sizes",
    "ground_truth",
    "description",
    "provenance",
    "response",
    "response_file",
    "codepoints",
}
_PROGRAM_KEYS = ("family", "attacks", "expected", "provenance")
_HEADER = re.compile(r"^#\s*([a-z_]+):\s*(.*?)\s*$")


class CorpusError(Exception):
    """A corpus file that cannot be used; the message is ``file:line: what is wrong``."""


@dataclass(frozen=True)
class Formula:
    """A degenerate response: ``prefix + units (each repeated to its share) + suffix``."""

    prefix: str
    units: tuple[str, ...]
    suffix: str
    #: Instead of repeated units: seeded random characters of this alphabet.
    alphabet: str = ""

    def expand(self, size: int, seed: int = 0) -> str:
        room = max(size - len(self.prefix) - len(self.suffix), 0)
        if self.alphabet:
            rng = random.Random(seed)  # noqa: S311 - reproducible inputs, not secrets
            # Random bytes mapped onto the alphabet in C: a character at a time in Python was
            # most of a run's start.
            table = {i: self.alphabet[i % len(self.alphabet)] for i in range(256)}
            body = rng.randbytes(room).decode("latin-1").translate(table)
        else:
            shares = [room // len(self.units)] * len(self.units)
            shares[-1] += room - sum(shares)
            body = "".join(
                (unit * (share // len(unit) + 1))[:share]
                for unit, share in zip(self.units, shares, strict=True)
            )
        return self.prefix + body + self.suffix


@dataclass(frozen=True)
class ResponseCase:
    name: str | None
    description: str
    provenance: str
    ground_truth: str | None
    formula: Formula | None = None
    sizes: tuple[int | str, ...] = DEFAULT_SIZES
    response: str | None = None


@dataclass(frozen=True)
class ResponseFamily:
    family: str
    description: str
    kinds: tuple[str, ...]
    cases: tuple[ResponseCase, ...]
    path: Path


@dataclass(frozen=True)
class Program:
    family: str
    name: str
    attacks: str
    expected: str
    provenance: str
    text: str
    path: Path


@dataclass
class Corpus:
    """Everything loaded, later directories shadowing earlier ones family by family."""

    responses: dict[str, ResponseFamily] = field(default_factory=dict)
    programs: dict[str, list[Program]] = field(default_factory=dict)
    #: ``(file, family)`` of what each loaded directory shadowed, for the header line.
    shadowed: list[tuple[str, str]] = field(default_factory=list)
    digest: str = ""

    @property
    def version(self) -> str:
        """Changes whenever any loaded corpus file does: baselines compare it."""
        return f"{FORMAT_VERSION}:{self.digest[:12]}"

    def families(self) -> set[str]:
        return set(self.responses) | set(self.programs)


def top_package_dir() -> Path:
    top = sys.modules[__name__.partition(".")[0]]
    return Path(top.__file__ or "").resolve().parent


def bundled_dir() -> Path:
    """``corpora/`` inside the wheel, or at the repository root in a source checkout."""
    package = top_package_dir()
    for candidate in (package / "corpora", package.parent / "corpora"):
        if candidate.is_dir():
            return candidate
    raise CorpusError(f"{package}: the bundled corpora are missing from this installation")


#: The most a file a user names for a case, or a scorer's example, may hold: past any response
#: a scorer is fed (the largest generated one is at most 4 MiB characters).
MAX_FILE_BYTES = 64 * 2**20


def read_regular(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """``path``'s bytes, where it is a regular file of at most ``limit`` bytes; else an
    OSError whose ``strerror`` says why. A FIFO or a device (``/dev/zero``) is refused before
    any read, which would wait for a writer or never end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once
    with os.fdopen(fd, "rb") as f:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if found.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes")
        return f.read()


def load(extra_dirs: Sequence[Path] = ()) -> Corpus:
    corpus = Corpus()
    digest = hashlib.sha256()
    for directory in (bundled_dir(), *extra_dirs):
        if not directory.is_dir():
            raise CorpusError(f"{directory}: no such corpus directory")
        responses: dict[str, ResponseFamily] = {}
        programs: dict[str, list[Program]] = {}
        for path in sorted(directory.rglob("*")):
            if path.suffix not in (".toml", ".py") or not path.is_file():
                continue
            raw = path.read_bytes()
            digest.update(path.name.encode() + b"\0" + raw)
            if path.suffix == ".toml":
                family = load_response_file(path, raw)
                if family.family in responses:
                    raise CorpusError(
                        f"{path}:{_line_of(_text(path, raw), None, 'family')}: family "
                        f"{family.family!r} is already defined by {responses[family.family].path}"
                    )
                responses[family.family] = family
            elif path.name != "__init__.py":
                program = load_program_file(path, raw)
                programs.setdefault(program.family, []).append(program)
        for name, response_family in responses.items():
            if name in corpus.responses:
                corpus.shadowed.append((str(response_family.path), name))
            corpus.responses[name] = response_family
        for name, found in programs.items():
            if name in corpus.programs:
                corpus.shadowed.append((str(found[0].path.parent), name))
            corpus.programs[name] = sorted(found, key=lambda p: p.name)
    corpus.digest = digest.hexdigest()
    return corpus


def _text(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise CorpusError(f"{path}:{line}: not UTF-8 text") from None


def load_response_file(path: Path, raw: bytes | None = None) -> ResponseFamily:
    text = _text(path, path.read_bytes() if raw is None else raw)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = match.group(1) if match else "1"
        what = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        raise CorpusError(f"{path}:{line}: not valid TOML: {what}") from None

    def fail(case: int | None, key: str | None, what: str) -> CorpusError:
        return CorpusError(f"{path}:{_line_of(text, case, key)}: {what}")

    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise fail(
            None, unknown[0], f"unknown key {unknown[0]!r}; known: {', '.join(sorted(_TOP_KEYS))}"
        )
    version = data.get("corpus_version")
    if version != FORMAT_VERSION:
        raise fail(
            None,
            "corpus_version" if "corpus_version" in data else None,
            f"corpus_version must be {FORMAT_VERSION}, got {version!r}",
        )
    family = _string(data, "family", None, fail, required=True)
    if not _NAME.match(family):
        raise fail(
            None, "family", f"family {family!r}: use lowercase letters, digits, '-', '_', '.'"
        )
    description = _string(data, "description", None, fail, required=True)
    kinds_raw = data.get("kinds", list(RESPONSE_KINDS))
    if not (isinstance(kinds_raw, list) and kinds_raw and set(kinds_raw) <= set(RESPONSE_KINDS)):
        raise fail(None, "kinds", f"kinds must be a non-empty list of {', '.join(RESPONSE_KINDS)}")
    tables = data.get("case")
    if not (isinstance(tables, list) and tables and all(isinstance(t, dict) for t in tables)):
        raise fail(None, "case", "expected one or more [[case]] tables")
    cases = [_case(table, index, path, fail) for index, table in enumerate(tables)]
    names = [case.name for case in cases]
    for index, name in enumerate(names):
        if name in names[:index]:
            what = f"duplicate case name {name!r}" if name else "only one case may omit name"
            raise fail(index, "name", what)
    return ResponseFamily(family, description, tuple(kinds_raw), tuple(cases), path)


def _case(table: dict[str, Any], index: int, path: Path, fail: Any) -> ResponseCase:
    unknown = sorted(set(table) - _CASE_KEYS)
    if unknown:
        raise fail(
            index,
            unknown[0],
            f"unknown case key {unknown[0]!r}; known: {', '.join(sorted(_CASE_KEYS))}",
        )
    codepoints = table.get("codepoints", False)
    if not isinstance(codepoints, bool):
        raise fail(index, "codepoints", "codepoints must be true or false")

    def string(key: str, required: bool = False, default: str = "") -> str:
        value = _string(table, key, index, fail, required=required, default=default)
        return _CODEPOINT.sub(lambda m: _chr(m, index, key, fail), value) if codepoints else value

    name = string("name") or None
    if name is not None and not _NAME.match(name):
        raise fail(
            index, "name", f"case name {name!r}: use lowercase letters, digits, '-', '_', '.'"
        )
    description = string("description", required=True)
    provenance = string("provenance", required=True)
    truth = string("ground_truth") if "ground_truth" in table else None
    literal_keys = [key for key in ("response", "response_file") if key in table]
    formula_keys = [key for key in ("units", "alphabet") if key in table]
    if len(literal_keys) + len(formula_keys) != 1:
        raise fail(
            index,
            None,
            "a case needs exactly one of units (or alphabet), response and response_file",
        )
    if literal_keys:
        for key in ("prefix", "suffix", "sizes"):
            if key in table:
                raise fail(index, key, f"{key} belongs to a formula, not a literal response")
        if name is None:
            raise fail(index, None, "a literal response needs a name")
        if "response" in table:
            response = string("response", required=True)
        else:
            relative = string("response_file", required=True)
            target = path.parent / relative
            try:
                response = read_regular(target).decode("utf-8", errors="surrogateescape")
            except OSError as exc:
                raise fail(
                    index, "response_file", f"cannot read {relative}: {exc.strerror}"
                ) from None
        return ResponseCase(name, description, provenance, truth, response=response)
    if "units" in table:
        units = table["units"]
        if not (isinstance(units, list) and units and all(isinstance(u, str) and u for u in units)):
            raise fail(index, "units", "units must be a list of one or more non-empty strings")
        if codepoints:
            units = [_CODEPOINT.sub(lambda m: _chr(m, index, "units", fail), u) for u in units]
        alphabet = ""
    else:
        alphabet = string("alphabet", required=True)
        if not alphabet:
            raise fail(index, "alphabet", "alphabet must not be empty")
        units = [alphabet]
    sizes = table.get("sizes", list(DEFAULT_SIZES))
    if not (
        isinstance(sizes, list)
        and sizes
        and all(
            (isinstance(s, int) and not isinstance(s, bool) and s > 0) or s == "max" for s in sizes
        )
    ):
        raise fail(index, "sizes", 'sizes must be a list of positive whole numbers or "max"')
    formula = Formula(string("prefix"), tuple(units), string("suffix"), alphabet)
    return ResponseCase(name, description, provenance, truth, formula, tuple(sizes))


def _chr(match: re.Match[str], index: int, key: str, fail: Any) -> str:
    point = int(match.group(1), 16)
    if point > 0x10FFFF:
        raise fail(index, key, f"{match.group(0)} is beyond U+10FFFF")
    return chr(point)


def _string(
    table: dict[str, Any],
    key: str,
    index: int | None,
    fail: Any,
    required: bool = False,
    default: str = "",
) -> str:
    if key not in table:
        if required:
            raise fail(index, None, f"missing required key {key!r}")
        return default
    value = table[key]
    if not isinstance(value, str):
        raise fail(index, key, f"{key} must be a string, got {type(value).__name__}")
    return value


def _line_of(text: str, case: int | None, key: str | None) -> int:
    """The 1-based line of ``key`` at the top level or in the ``case``-th ``[[case]]`` table."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if re.match(r"^\s*\[", line)]
    case_headers = [i for i in headers if re.match(r"^\s*\[\[\s*case\s*\]\]", lines[i])]
    if case is None:
        start, end = 0, headers[0] if headers else len(lines)
        if key == "case":
            return case_headers[0] + 1 if case_headers else 1
    elif case < len(case_headers):
        start = case_headers[case]
        end = next((i for i in headers if i > start), len(lines))
    else:
        return 1
    if key is not None:
        pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
        for i in range(start, end):
            if pattern.match(lines[i]):
                return i + 1
    return start + 1


def load_program_file(path: Path, raw: bytes | None = None) -> Program:
    text = _text(path, path.read_bytes() if raw is None else raw)
    header: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("#"):
            break
        match = _HEADER.match(line)
        if match is None:
            continue  # free comment lines are allowed in the header
        key, value = match.groups()
        if key not in _PROGRAM_KEYS:
            raise CorpusError(
                f"{path}:{number}: unknown header key {key!r}; known: {', '.join(_PROGRAM_KEYS)}"
            )
        header[key] = value
    for key in ("family", "attacks", "expected"):
        if not header.get(key):
            raise CorpusError(f"{path}:1: the header lacks '# {key}: ...'")
    if not _NAME.match(header["family"]):
        raise CorpusError(
            f"{path}:1: family {header['family']!r}: use lowercase letters, digits, '-'"
        )
    try:
        compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise CorpusError(f"{path}:{exc.lineno or 1}: not valid Python: {exc.msg}") from None
    name = path.stem.replace("_", "-")
    if not _NAME.match(name):  # a case's id: printed, and the name of its saved file
        raise CorpusError(
            f"{path}:1: file name {path.name!r}: use lowercase letters, digits, '_', '-', '.'"
        )
    return Program(
        header["family"],
        name,
        header["attacks"],
        header["expected"],
        header.get("provenance", ""),
        text,
        path,
    )


def ladder(sizes: Iterable[int | str], max_chars: int) -> list[int]:
    """The sizes a formula is expanded to: ``max`` is ``max_chars``, nothing beyond it."""
    chosen = {max_chars if size == "max" else int(size) for size in sizes}
    return sorted(size for size in chosen if size <= max_chars)
