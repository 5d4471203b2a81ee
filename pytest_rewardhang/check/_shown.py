"""What text a scorer controls may be printed as: its errors, its stack's file names, its output.

In code RL a scorer's inputs are written by the policy being trained, and what it raises or
where it hangs can carry them: an exception's first line, a file name ``compile`` was given.
Printed as they are, they act on whatever reads the output. A terminal obeys escape sequences
(cursor moves that hide the failures above and print a green line); GitHub Actions runs a line
that starts with ``::`` after its indentation (``::add-mask::``, ``::error file=...``,
``::stop-commands::``) or holds ``##[`` as a workflow command; a lone surrogate is not UTF-8,
and pytest then prints a whole failure on one line of escapes, or a JSON parser refuses the
report. :func:`shown` makes each of these visible instead; :func:`first_line` also bounds the
length (a 2 MiB message on each of 574 cases made 1.2 GB of log and of JUnit XML).
"""

from __future__ import annotations

import re

#: C0 controls but tab and newline, DEL, C1 controls, lone surrogates.
_UNSHOWN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
#: A workflow command: ``::`` starting a line after any whitespace (the runner trims Unicode's
#: too: a no-break space, U+2028), or ``##[`` anywhere.
_COMMAND = re.compile(r"^([^\S\n]*)::|##\[", re.MULTILINE)
#: The most of a scorer's one-line message a report repeats per case.
LINE_LIMIT = 300


def shown(text: str) -> str:
    """``text`` with every control character and lone surrogate written as an escape
    (``\\x1b``, ``\\ud800``), and every workflow command broken (``\\::``, ``##\\[``)."""
    text = _UNSHOWN.sub(_escaped, text)
    return _COMMAND.sub(lambda m: f"{m[1]}\\::" if m[1] is not None else "##\\[", text)


def first_line(text: str) -> str:
    """The first line of ``text`` (a scorer's error), :func:`shown`, at most about
    :data:`LINE_LIMIT` characters."""
    line = shown(text.split("\n", 1)[0])  # then cut: an escape is longer than what it shows
    if len(line) > LINE_LIMIT:
        line = f"{line[:LINE_LIMIT]}... ({len(line) - LINE_LIMIT} more characters)"
    return line


def strict(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate written as an escape (``\\ud800``), which
    JSON's ``\\ud800`` is not to a strict parser. Other characters are left to the encoder."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _escaped(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
