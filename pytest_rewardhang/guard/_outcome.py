"""The typed result of one guarded call, how it is built, and the evidence its status is decided
from (stack dumps; the rest is read by ``_decode``)."""

from __future__ import annotations

import enum
import os
import re
import signal as _signal
import sysconfig
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple


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

    CGROUP: they ran in a cgroup of their own, which the guard kills whole (``cgroup.kill``):
    no fork, ``setsid`` or ``prctl`` gets a process out of it. PID_NAMESPACE: they ran in a PID
    namespace of their own, whose init the guard kills: the kernel then kills every process in
    it, whatever each did to escape. SUBREAPER: the guarded process adopted its orphans and
    killed what it found, which a call can defeat by turning the subreaper off (``prctl``) and
    double-forking. NONE: no process was forked (the in-process fallbacks), or nothing kept
    track.
    """

    CGROUP = "cgroup"
    PID_NAMESPACE = "pid-namespace"
    SUBREAPER = "subreaper"
    NONE = "none"


class Confinement(enum.StrEnum):
    """One limit a forked call ran under (:attr:`Outcome.confined` holds those that applied).

    Each applies where the kernel permits it and the call asked for it; where one asked for
    cannot, the guard warns once saying what is missing.
    """

    #: At most ``max_processes`` tasks (processes and threads) in the call's cgroup, all of its
    #: descendants together: a fork bomb's forks fail.
    PIDS_MAX = "pids-max"
    #: The memory charged to the call's cgroup, all of its descendants and what they leave in
    #: tmpfs together, is bounded by ``memory_mb``: the kernel's OOM killer ends the call.
    MEMORY_MAX = "memory-max"
    #: ``TMPDIR`` (and :mod:`tempfile`) pointed at a fresh folder, removed after the call with
    #: whatever it holds.
    PRIVATE_TMP = "private-tmp"
    #: ``/dev/shm`` is a tmpfs of the call's own (a mount namespace), gone with the call.
    PRIVATE_SHM = "private-shm"
    #: A network namespace of the call's own, loopback only (``network=False``).
    NO_NETWORK = "no-network"
    #: A caller running as root ran the call as a user of its own (a uid no other guarded
    #: process holds while it runs: see docs/threat-model.md), without capabilities, groups or
    #: a way back (``PR_SET_NO_NEW_PRIVS``): it cannot signal, trace, read or re-limit the
    #: caller, a pool's zygote or workers, or any other guarded process
    #: (``unprivileged=True``).
    UNPRIVILEGED = "unprivileged"
    #: An IPC namespace of the call's own (an isolated item's own, a warm worker's own): the
    #: SysV shared memory, semaphores and message queues it makes are gone with it, and it
    #: sees nobody else's.
    PRIVATE_IPC = "private-ipc"
    #: With ``unprivileged=True``: every mount the call sees is read-only but its own tmpfs
    #: (``/dev/shm``), which ``/tmp`` and ``/var/tmp`` are too, and its ``/proc`` lists its own
    #: processes alone: it can leave nothing anywhere that outlives it or that another process
    #: reads, meet one at a socket's path, or read another's command line.
    SEALED = "sealed"


#: No confinement applied: the in-process fallbacks, and a pool's items.
UNCONFINED: frozenset[Confinement] = frozenset()


class NotStarted(enum.StrEnum):
    """Why an item never reached its scorer (an ERROR's :attr:`Outcome.not_started`).

    The adapters score such a sample the default instead of raising: the scorer never saw it.
    """

    #: Its arguments would not pickle in the caller (a lock, a lambda, an open file).
    UNPICKLABLE = "unpicklable"
    #: They would not unpickle in the worker (a class the worker cannot import).
    UNREADABLE = "unreadable"


#: What an item's error says for each :class:`NotStarted`, for people (callers read the field).
UNPICKLABLE_ITEM = "the item could not be pickled"
UNREADABLE_ITEMS = "the items could not be unpickled in the worker"
#: The standard library's folders; ``site-packages`` below them is not the standard library.
_STDLIB_DIRS = tuple({sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib")})
#: This package: the guard's and the check's frames are machinery around the call.
_MACHINERY_DIR = str(Path(__file__).resolve().parents[1]) + os.sep
#: Frames in these are where a call was, not the line to fix: the standard library, installed
#: packages and this package's own machinery.
_LIBRARY_DIRS = tuple(
    {
        *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")),
        # The whole package, not just guard/: the check's frames are machinery too.
        _MACHINERY_DIR,
    }
)
#: The dump is the call's to write: no part of a pattern may cross a line, so that each line is
#: scanned once and the parse is linear in the dump (``\s*`` at each of a run of blank lines
#: rescanned the rest of the run: 400 KB of them took 6 s).
_FRAME = re.compile(
    r'^[ \t]*File "(?P<file>[^"\n]*)", line (?P<line>\d+) in (?P<func>\S+)', re.MULTILINE
)
#: faulthandler writes this line in place of a thread's frames past its 100th (MAX_FRAME_DEPTH).
_TRUNCATED = re.compile(r"^[ \t]*\.\.\.[ \t]*$", re.MULTILINE)

#: ``(file, line, function)`` of one stack frame.
Frame = tuple[str, int, str]


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread of a faulthandler dump."""

    #: Innermost first, as faulthandler writes them.
    frames: tuple[Frame, ...]
    #: The thread that took the dump signal (the main thread: not necessarily the stuck one).
    current: bool
    #: faulthandler keeps a thread's innermost 100 frames: the outer ones, where the call
    #: started, are missing (deep recursion).
    truncated: bool
    #: The dump ends inside this thread: the process was killed while faulthandler wrote it
    #: (the dump signal goes out shortly before the kill; a starved process can miss that
    #: window), so its outer frames are missing.
    cut: bool = False


#: The outermost frame of a thread whose stack was dumped whole: a script or ``-c`` code, runpy,
#: or a ``threading`` thread's bootstrap.
_STARTS = ("<module>", "_run_module_as_main", "_bootstrap")


def parse_stack(stack: str | None) -> list[ThreadStack]:
    """Each thread of a faulthandler dump that has Python frames, in the dump's order."""
    threads = []
    for block in (stack or "").split("\n\n"):
        frames = tuple((m["file"], int(m["line"]), m["func"]) for m in _FRAME.finditer(block))
        if frames:
            threads.append(
                ThreadStack(frames, "Current thread" in block, bool(_TRUNCATED.search(block)))
            )
    # faulthandler writes the threads newest first and ends with the thread that took the
    # signal (the main thread): a dump without it, or whose last thread does not reach where a
    # thread starts, was cut short.
    if threads and not threads[-1].truncated:
        last = threads[-1]
        whole = "Current thread" in (stack or "") and last.frames[-1][2] in _STARTS
        if not whole:
            threads[-1] = ThreadStack(last.frames, last.current, last.truncated, cut=True)
    return threads


def is_library(file: str) -> bool:
    """The standard library, an installed package, or this package's machinery."""
    return (
        file.startswith(_LIBRARY_DIRS)
        or "site-packages" in file
        or "dist-packages" in file
        or file.startswith("<frozen ")
    )


def is_stdlib(file: str) -> bool:
    """The standard library (frozen modules included), not the packages installed beside it."""
    if file.startswith("<frozen "):
        return True
    installed = "site-packages" in file or "dist-packages" in file
    return file.startswith(_STDLIB_DIRS) and not installed


def is_machinery(file: str) -> bool:
    """This package's own frames: the guard and the check around the call."""
    return file.startswith(_MACHINERY_DIR)


def package_root(file: str) -> str:
    """The outermost package folder holding ``file`` (``__init__.py`` on the way up), or
    ``file`` itself for a module outside any package: where one project's code ends."""
    folder = Path(file).parent
    top = None
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        top = folder
        folder = folder.parent
    return str(top) + os.sep if top is not None else file


def under(file: str, roots: tuple[str, ...]) -> bool:
    """``file`` is one of ``roots`` or inside one (a root ending in a separator is a folder)."""
    return any(file == root or (root.endswith(os.sep) and file.startswith(root)) for root in roots)


@dataclass(frozen=True, slots=True)
class Stuck:
    """Where a timed-out call was, read from the dump of the thread that ran it."""

    #: The frames of the call's own code, innermost first.
    own: tuple[Frame, ...] = ()
    #: The innermost frame of that thread, wherever it is (the standard library, a C call's
    #: caller, a package).
    innermost: Frame | None = None
    #: That thread's stack was cut at faulthandler's 100 frames: outer frames (possibly all
    #: of the call's own) are missing.
    truncated: bool = False
    #: The dump itself ends inside that thread (see :attr:`ThreadStack.cut`): outer frames are
    #: missing.
    cut: bool = False
    #: The outermost frame of the call, the callable it was given, when the dump reaches it.
    entry: Frame | None = None

    @property
    def at(self) -> Frame | None:
        """The innermost frame of the call's own code, else the innermost frame."""
        return self.own[0] if self.own else self.innermost


def find_stuck(stack: str | None, own: Callable[[str], bool] | None = None) -> Stuck:
    """Where the call in a faulthandler dump was stuck.

    The thread that ran the call is the one whose frames below this package's machinery
    (the guard's call, the check's thread) reach code outside the standard library, or one cut
    at 100 frames; not the main thread waiting for it in ``threading``. ``own(file)`` says
    which files are the call's own code; by default, the package (or lone module) of the
    callable's file, and any file that is neither the standard library nor an installed package.
    """
    best: tuple[tuple[bool, bool, bool], Stuck] | None = None
    for thread in parse_stack(stack):
        frames, bounded = _call_frames(thread.frames)
        if not frames:
            continue
        entry = next((f for f in reversed(frames) if not is_stdlib(f[0])), None)
        entry = entry if bounded else None
        mine = own or _own_by_entry(entry)
        found = Stuck(
            own=tuple(f for f in frames if mine(f[0])),
            innermost=frames[0],
            truncated=thread.truncated,
            cut=thread.cut,
            entry=entry,
        )
        ran_the_call = entry is not None or ((thread.truncated or thread.cut) and not bounded)
        rank = (ran_the_call, bool(found.own), thread.current)
        if best is None or rank > best[0]:
            best = (rank, found)
    if best is not None:
        return best[1]
    # No Python frame inside the machinery: the callable is C code (a builtin, a partial of
    # one). Its caller's line, the first frame outside the guard that is not a library's
    # (``run``'s child carries its caller's stack), says which call that was.
    threads = sorted(parse_stack(stack), key=lambda thread: not thread.current)
    if not threads:
        return Stuck()
    frames = threads[0].frames
    caller = next((f for f in frames if not is_library(f[0])), frames[0])
    return Stuck(own=(caller,) if caller is not frames[0] else (), innermost=frames[0])


def _call_frames(frames: tuple[Frame, ...]) -> tuple[tuple[Frame, ...], bool]:
    """The frames inside the innermost machinery frame, and whether one was found.

    Outside it are the guard's and the check's own frames, and, in ``run``'s forked child, the
    caller's whole stack (a script, ``<frozen runpy>``): none of them is where the call is.
    """
    for index, (file, _, _) in enumerate(frames):
        if is_machinery(file):
            return frames[:index], True
    return frames, False


def _own_by_entry(entry: Frame | None) -> Callable[[str], bool]:
    roots = (package_root(entry[0]),) if entry is not None else ()

    def own(file: str) -> bool:
        return under(file, roots) or not (is_library(file) or file.startswith("<"))

    return own


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
    #: Bytes of output past the bound, read and thrown away (``output`` ends by saying so).
    output_dropped: int = 0
    #: Why the item never reached its scorer; None when it did (or may have).
    not_started: NotStarted | None = None
    #: The pool closed, or failed, before it answered the item (an ERROR; ``error`` says
    #: why): the outcome is the pool's, not the item's own.
    pool_ended: bool = False
    #: The limits the call ran under (see :class:`Confinement`).
    confined: frozenset[Confinement] = UNCONFINED

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def stuck_at(self) -> Frame | None:
        """``(file, line, function)`` where the call was stuck: the innermost frame of the
        callable's own code (its package, wherever installed, and any file outside the standard
        library and installed packages) in the thread that ran it; else that thread's innermost
        frame. :func:`find_stuck` tells the two apart."""
        return find_stuck(self.stack).at

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

    def to_exception(self) -> BaseException:
        """What :func:`~pytest_rewardhang.guard.guarded` raises for this ERROR: the call's own
        exception, the child's traceback added as a note, when it came back as an object (see
        :func:`~pytest_rewardhang.guard.run`) and is an :class:`Exception`; else
        :class:`CallFailed` holding the error text (never ``SystemExit`` or
        ``KeyboardInterrupt``, which would stop or unwind the caller)."""
        exc = self.exception
        if exc is None or not isinstance(exc, Exception):
            return CallFailed(self.error)
        if self.error:
            exc.add_note("Traceback in the guarded child:\n" + self.error.split("\n\n", 1)[-1])
        return exc


class CallFailed(Exception):
    """A guarded call raised an exception that could not be brought back as itself."""


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


class _Unfrozen:
    """Outcome's very slots, without the frozen ``__setattr__``: see :func:`ok_outcome`."""

    __slots__ = Outcome.__slots__  # the same names in the same order: the same layout

    status: Status
    value: Any
    error: str | None
    exception: BaseException | None
    wall_s: float
    cpu_s: float
    max_rss_mb: float
    stack: str | None
    signal: int | None
    exit_code: int | None
    output: str
    leaked: int
    budget: float | None
    mechanism: Mechanism
    containment: Containment
    output_dropped: int
    not_started: NotStarted | None
    pool_ended: bool
    confined: frozenset[Confinement]


_new = object.__new__


def ok_outcome(
    value: Any,
    wall_s: float,
    cpu_s: float,
    max_rss_mb: float,
    budget: float | None,
    mechanism: Mechanism,
    containment: Containment,
    confined: frozenset[Confinement] = UNCONFINED,
) -> Outcome:
    """``Outcome(Status.OK, value, wall_s=..., ...)``, every other field at its default.

    What a pool answers for each quick item, so it is built at the speed of plain attribute
    stores: the frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for each of
    its 18 fields (4 µs, as long as the caller's whole share of a fast item should be). Its
    slots are filled on a twin class of the same layout, which then becomes an Outcome by
    ``__class__`` assignment (Python allows it between classes whose slots are the same): the
    same object either way, which a test holds field by field, in equality, hash, repr and
    pickle.
    """
    return _built(
        Status.OK,
        value,
        None,
        None,
        None,
        wall_s,
        cpu_s,
        max_rss_mb,
        "",
        0,
        budget,
        mechanism,
        containment,
        0,
        confined,
    )


def _built(
    status: Status,
    value: Any,
    error: str | None,
    exception: BaseException | None,
    not_started: NotStarted | None,
    wall_s: float,
    cpu_s: float,
    max_rss_mb: float,
    output: str,
    leaked: int,
    budget: float | None,
    mechanism: Mechanism,
    containment: Containment,
    output_dropped: int,
    confined: frozenset[Confinement],
) -> Outcome:
    """An answered call's :class:`Outcome`, its slots filled on the twin class (see
    :func:`ok_outcome`); the fields no answer has (a stack, a signal, an exit code, the pool's
    end) at their defaults."""
    outcome: Any = _new(_Unfrozen)
    outcome.status = status
    outcome.value = value
    outcome.error = error
    outcome.exception = exception
    outcome.wall_s = wall_s
    outcome.cpu_s = cpu_s
    outcome.max_rss_mb = max_rss_mb
    outcome.stack = None
    outcome.signal = None
    outcome.exit_code = None
    outcome.output = output
    outcome.leaked = leaked
    outcome.budget = budget
    outcome.mechanism = mechanism
    outcome.containment = containment
    outcome.output_dropped = output_dropped
    outcome.not_started = not_started
    outcome.pool_ended = False
    outcome.confined = confined
    outcome.__class__ = Outcome
    made: Outcome = outcome
    return made


# --- the outcome of a forked call, from what the caller read of it ---------------------------


class Answer(NamedTuple):
    """What a call's process answered, as ``_decode`` read it: the outcome's own fields."""

    status: Status
    value: Any = None
    error: str | None = None
    exception: BaseException | None = None
    not_started: NotStarted | None = None


def common_fields(
    wall: float,
    cpu: float,
    rss_kib: float,
    output: str,
    output_dropped: int,
    budget: float | None,
    containment: Containment,
) -> dict[str, Any]:
    """The fields every forked call's :class:`Outcome` has, whatever its status."""
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "max_rss_mb": rss_kib / 1024,
        "output": output,
        "output_dropped": output_dropped,
        "budget": budget,
        "mechanism": Mechanism.FORK,
        "containment": containment,
    }


def answered(answer: Answer, leaked: int, common: dict[str, Any]) -> Outcome:
    """The :class:`Outcome` of a call whose process answered; ``common`` from
    :func:`common_fields` (and ``confined``, where set).

    Built as :func:`ok_outcome` builds one (:func:`_built`): each
    ``run()`` and each pool answer that is not a bare float makes one, and the frozen
    ``__init__`` took longer than the decoding of the answer. Every field is stored, those a
    call's answer never has at their defaults.
    """
    return _built(
        *answer,
        common["wall_s"],
        common["cpu_s"],
        common["max_rss_mb"],
        common["output"],
        leaked,
        common["budget"],
        common["mechanism"],
        common["containment"],
        common["output_dropped"],
        common.get("confined", UNCONFINED),
    )
