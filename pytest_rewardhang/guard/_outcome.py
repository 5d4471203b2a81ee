"""The typed result of one guarded call, and the evidence its status is decided from."""

from __future__ import annotations

import enum
import re
import signal as _signal
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class Status(enum.StrEnum):
    """What happened to a guarded call, decided from evidence, never guessed."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    MEMORY = "memory"


class Mechanism(enum.StrEnum):
    """How the deadline was enforced; anything but FORK is weaker and says so."""

    FORK = "fork"
    ALARM = "alarm"
    UNBOUNDED = "unbounded"


class Containment(enum.StrEnum):
    """What kept the call's descendants from outliving it.

    PID_NAMESPACE: they ran in a PID namespace of their own, whose init the guard kills: the
    kernel then kills every process in it, whatever each did to escape. SUBREAPER: the guarded
    process adopted its orphans and killed what it found, which a call can defeat by turning
    the subreaper off (``prctl``) and double-forking. NONE: no process was forked (the
    in-process fallbacks), or nothing kept track.
    """

    PID_NAMESPACE = "pid-namespace"
    SUBREAPER = "subreaper"
    NONE = "none"


#: Frames in these are where a call was, not the line to fix: the standard library, installed
#: packages and this package's own machinery.
_LIBRARY_DIRS = tuple(
    {
        *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")),
        # The whole package, not just guard/: the check's frames are machinery too.
        str(Path(__file__).resolve().parents[1]),
    }
)
_FRAME = re.compile(
    r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>\S+)', re.MULTILINE
)

#: ``(file, line, function)`` of one stack frame.
Frame = tuple[str, int, str]


def thread_stacks(stack: str | None, *, current_first: bool = False) -> list[list[Frame]]:
    """Each thread's frames, innermost first, from a faulthandler dump, in its order."""
    blocks = [block for block in (stack or "").split("\n\n") if block.strip()]
    if current_first:
        blocks.sort(key=lambda block: "Current thread" not in block)
    stacks = [
        [(m["file"], int(m["line"]), m["func"]) for m in _FRAME.finditer(block)] for block in blocks
    ]
    return [frames for frames in stacks if frames]


def is_library(file: str) -> bool:
    """The standard library, an installed package, or this package's machinery."""
    return file.startswith(_LIBRARY_DIRS) or "site-packages" in file or "dist-packages" in file


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one call run by :func:`pytest_rewardhang.guard.run`."""

    status: Status
    value: Any = None
    #: ``"TypeName: message"`` followed by the child's formatted traceback.
    error: str | None = None
    #: The exception itself when it survived pickling, so callers can re-raise it.
    exception: BaseException | None = None
    wall_s: float = 0.0
    #: User plus system CPU time of the call's process (NaN when it could not be read).
    cpu_s: float = 0.0
    #: Peak resident size of the call's process, pages shared with the caller included.
    max_rss_mb: float = 0.0
    #: On timeout: faulthandler's dump of every thread at the deadline, most recent call first.
    stack: str | None = None
    #: On crashed: the signal number that ended the process, if one did.
    signal: int | None = None
    #: On crashed: the exit code, when the process exited without delivering a result.
    exit_code: int | None = None
    #: What the call wrote to stdout and stderr, cut to a bound.
    output: str = ""
    #: Descendant processes still alive when the call ended; the guard killed them all.
    leaked: int = 0
    budget: float | None = None
    mechanism: Mechanism = Mechanism.FORK
    #: What kept the call's descendants from outliving it.
    containment: Containment = Containment.NONE

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def stuck_at(self) -> Frame | None:
        """``(file, line, function)`` where the call was stuck: the innermost frame of the
        caller's own code, past the standard library and installed packages it was inside."""
        stacks = thread_stacks(self.stack, current_first=True)
        if not stacks:
            return None
        return next((f for f in stacks[0] if not is_library(f[0])), stacks[0][0])

    def describe(self) -> str:
        """One line naming the cause, for logs and failure messages."""
        if self.status is Status.OK:
            return f"ok in {self.wall_s:.3f} s"
        if self.status is Status.TIMEOUT:
            text = (
                f"timeout: still running at the {self.budget:g} s budget (cpu {self.cpu_s:.2f} s)"
            )
            where = self.stuck_at
            if where is not None:
                text += f", stuck at {where[0]}:{where[1]} in {where[2]}"
            return text
        if self.status is Status.CRASHED:
            if self.signal is not None:
                return f"crashed: killed by {_signal_name(self.signal)}"
            return f"crashed: exited with code {self.exit_code} without returning a result"
        first = (self.error or "").splitlines()[0] if self.error else str(self.status)
        return f"{self.status}: {first}"


def raised(exc: BaseException) -> tuple[Status, str]:
    """Status and error text of a call that raised ``exc``: its own lines, then its traceback.

    MEMORY when a MemoryError is anywhere in its chain of causes, else ERROR.
    """
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    text += "\n\n" + "".join(traceback.format_exception(exc))
    return (Status.MEMORY if _caused_by_memory(exc) else Status.ERROR), text


def _caused_by_memory(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 32:
        if isinstance(exc, MemoryError):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
