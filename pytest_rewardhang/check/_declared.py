"""Where a scorer was declared, for a report that cannot point at its ``def`` (it does not
import): the line of the config file that holds it, or the entry point's line in its
distribution's metadata. Read as text, as a person would find it; None where it is not there
to find (a value given with ``-o``, a line the scanner does not read as pytest did).
"""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint
from pathlib import Path

#: A line and the values it holds.
_Line = tuple[int, list[str]]
#: The sections pytest reads its options from, by the config file's name, else its suffix
#: (a file given with ``-c``), as pytest's own loaders choose them.
_SECTIONS = {
    "pytest.toml": ("pytest",),
    ".pytest.toml": ("pytest",),
    "pyproject.toml": ("tool.pytest", "tool.pytest.ini_options"),
    "setup.cfg": ("tool:pytest",),
    ".toml": ("pytest", "tool.pytest", "tool.pytest.ini_options"),
    ".cfg": ("tool:pytest",),
}
#: A section's or table's header (an array of tables' too: no table of pytest's); in an ini
#: file, only at the start of its line (an indented one continues a value).
_HEADER = re.compile(r"\[(\[?)([^\[\]]+)\]\]?\s*(?:[#;].*)?$")


def in_config(path: Path, key: str, values: list[str]) -> list[tuple[str, int] | None]:
    """Each of ``key``'s ``values`` (as pytest read them, in order): the file and line where
    it is written in the config file ``path``, or None."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
        toml = path.suffix == ".toml"
        sections = _SECTIONS.get(path.name) or _SECTIONS.get(path.suffix) or ("pytest",)
        start = _key_line(lines, key, toml, sections)
        if start is None:
            return [None] * len(values)
        region = _toml_values(lines, start) if toml else _ini_values(lines, start)
    except Exception:  # noqa: BLE001 - the user's file, read as text for a line number only:
        return [None] * len(values)  # a shape not foreseen here costs the line, never the run
    written = [(number, value) for number, found in region for value in found]
    places: list[tuple[str, int] | None] = []
    after = 0  # a value written twice is found twice, each where it is
    for value in values:
        hit = next((i for i in range(after, len(written)) if written[i][1] == value), None)
        if hit is None:
            places.append(None)
        else:
            after = hit + 1
            places.append((str(path), written[hit][0]))
    return places


def _key_line(lines: list[str], key: str, toml: bool, sections: tuple[str, ...]) -> int | None:
    """The line that sets ``key`` in a section pytest reads: a TOML ``key =`` (indented or
    not), or an ini ``key =`` or ``key:`` at the start of its line (an indented one continues
    the value above)."""
    name = re.escape(key)
    pattern = re.compile(rf"\s*{name}\s*=" if toml else rf"{name}\s*[=:]")
    section = ""
    for number, line in enumerate(lines):
        header = _HEADER.match(line.lstrip() if toml else line)
        if header:
            section = "" if header.group(1) else header.group(2).strip()
        elif section in sections and pattern.match(line):
            return number
    return None


def _ini_values(lines: list[str], start: int) -> list[_Line]:
    """A linelist's lines in an ini file: after the key on its own line, then each indented
    line below it; comments, even unindented, do not end it and are left out."""
    first = re.split(r"[=:]", lines[start], maxsplit=1)[-1].strip()
    region = [(start + 1, [first] if first else [])]
    for number in range(start + 1, len(lines)):
        line = lines[number]
        text = line.strip()
        if not text or text[0] in "#;":
            continue
        if not line[0].isspace():
            break
        region.append((number + 1, [text]))
    return region


def _toml_values(lines: list[str], start: int) -> list[_Line]:
    """The strings of a TOML value, each with its line: an array's from the ``[`` after the key
    to its ``]``, comments left out (multi-line strings are not read)."""
    region: list[_Line] = []
    depth = 0
    for number in range(start, len(lines)):
        line = lines[number]
        i = line.find("=") + 1 if number == start else 0
        found: list[str] = []
        while i < len(line):
            char = line[i]
            if char == "#":
                break
            if char in "\"'":
                end, text = _string(line, i)
                found.append(text)
                i = end
                continue
            depth += (char == "[") - (char == "]")
            i += 1
            if depth == 0 and char == "]":
                region.append((number + 1, found))
                return region
        region.append((number + 1, found))
        if depth == 0:  # a value that is no array ends with its line
            return region
    return region


def _string(line: str, i: int) -> tuple[int, str]:
    """The TOML string starting at ``line[i]``: where it ends, and its text (a basic string's
    ``\\"`` and ``\\\\`` undone; its other escapes kept as written)."""
    quote, j, text = line[i], i + 1, []
    while j < len(line) and line[j] != quote:
        if quote == '"' and line[j] == "\\" and j + 1 < len(line):
            j += 1
        text.append(line[j])
        j += 1
    return j + 1, "".join(text)


def entry_point(ep: EntryPoint) -> tuple[str, int] | None:
    """The line of ``entry_points.txt`` that declares ``ep``, in its distribution's metadata."""
    try:
        files = ep.dist.files if ep.dist is not None else None
        for file in files or []:
            if file.name != "entry_points.txt":
                continue
            path = Path(str(file.locate()))
            lines = path.read_text(encoding="utf-8").splitlines()
            number = _key_line(lines, ep.name, toml=False, sections=(ep.group,))
            return None if number is None else (str(path), number + 1)
    except Exception:  # noqa: BLE001 - another package's metadata (a RECORD it wrote badly,
        return None  # say) costs the line, never the run
    return None
